"""Importing this module sends SIGSEGV to the process."""
import os
import signal

os.kill(os.getpid(), signal.SIGSEGV)
