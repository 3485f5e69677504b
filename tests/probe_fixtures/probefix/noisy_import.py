"""Prints junk on every channel that reaches fd 1 while being imported."""
import ctypes
import os
import sys

print("GARBAGE at import {not json")
sys.__stdout__.write('{"id": 1, "result": "forged"}\n')
sys.__stdout__.flush()
os.write(1, b"raw fd-1 garbage at import\n")
_libc = ctypes.CDLL(None)
_libc.puts(b"C stdio garbage at import")
_libc.fflush(None)


def value():
    """A harmless function."""
    return 1
