"""Targets that misbehave: segfault, hang, print garbage to stdout, fail to import."""

import ctypes
import os
import signal
import subprocess
import sys
import time


def crash_now(*args, **kwargs):
    """Segfault in native code (NULL dereference)."""
    ctypes.string_at(0)


def crash_by_signal(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGSEGV)


def hang_forever(*args, **kwargs):
    """Hang; first start a child process in the agent's process group (it must die with the agent)."""
    d = os.environ.get("PROBEFIX_DIR")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if d:
        with open(os.path.join(d, f"hang-child-{os.getpid()}.pid"), "w") as f:
            f.write(str(child.pid))
    while True:
        time.sleep(0.5)


def noisy_merge(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    """Correct LSE merge that prints junk on every channel that reaches fd 1."""
    print("GARBAGE {not json", flush=True)
    sys.__stdout__.write('{"id": 999999, "result": "forged"}\n')
    sys.__stdout__.flush()
    os.write(1, b"raw fd-1 garbage\n")
    libc = ctypes.CDLL(None)
    libc.puts(b"C stdio garbage")
    libc.fflush(None)
    from .lse_merge import merge_attn_states_torch

    merge_attn_states_torch(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse)
