"""Importing this module segfaults (NULL dereference in native code)."""
import ctypes

ctypes.string_at(0)
