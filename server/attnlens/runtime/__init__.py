"""Runtime evidence: the probe agent host, environment records, probes, evidence.

The server process never imports torch or triton.  Everything that needs them
runs in a probe agent (``attnlens/agent/agent_main.py``) started in the target
interpreter; see :mod:`attnlens.runtime.agent`.
"""
