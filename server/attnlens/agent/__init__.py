"""The probe agent: code that runs in the *target* interpreter.

Everything in this folder must stay importable with the standard library
alone: the target interpreter (the user's MetaX or CUDA Python, where torch
and the kernels live) may not have ``attnlens`` installed.  The host starts
``agent_main.py`` by file path (``[python, "-u", AGENT_MAIN]``); the agent
then loads its sibling modules under the private package name
``_attnlens_agent`` so that nothing here can shadow (or be shadowed by) a
user module called ``probes`` or ``introspect``.

torch and triton are imported lazily, inside request handling only.
"""

from __future__ import annotations

import os

AGENT_DIR = os.path.dirname(os.path.abspath(__file__))
AGENT_MAIN = os.path.join(AGENT_DIR, "agent_main.py")
PROTOCOL_VERSION = 1
