"""One cell on one node: start the existing probe agent in the node's target interpreter.

:func:`run_cell` is what a Ray task runs (in a Ray worker on the pinned node) and what the local
runner calls in-process. It does not import Ray. It returns plain data: the evidence record, the
node's environment record and where it ran. Agents are kept in a per-process pool (a Ray
worker runs many cells), so torch is imported once per (interpreter, environment) there.
"""

from __future__ import annotations

import os
import socket
import sys
import time

_POOL = None


def _pool():
    global _POOL
    from ..runtime.agent import AgentPool

    if _POOL is None or _POOL.closed:
        _POOL = AgentPool()
    return _POOL


def run_cell(spec: dict, pool=None) -> dict:
    """``spec``: family, target, options, device, module, load_library, timeout, env, python (None:
    this process's interpreter), pin_devices (keep the CUDA_VISIBLE_DEVICES Ray assigned)."""
    from ..cache import Cache
    from ..runtime import environment as envmod
    from ..runtime import probes as probemod

    t0 = time.monotonic()
    python = spec.get("python") or sys.executable
    if os.sep not in python:  # a bare name (python3) is looked up on this node's PATH
        import shutil

        python = shutil.which(python) or python
    env = dict(spec.get("env") or {})
    if spec.get("pin_devices"):
        # Ray sets CUDA_VISIBLE_DEVICES per task; a reused agent must not keep another task's GPU
        for k in ("CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
            if k in os.environ and k not in env:
                env[k] = os.environ[k]
    pool = pool or _pool()
    cache = Cache(None)  # the driver stores records in its workspace cache
    rec = probemod.run_probe(python, spec["family"], spec["target"], spec.get("device") or "auto", cache,
                             float(spec.get("timeout") or probemod.DEFAULT_TIMEOUT_S),
                             options=spec.get("options") or {}, env=env, pool=pool, module=spec.get("module"),
                             load_library=spec.get("load_library"))
    record = None
    env_error = None
    try:
        record, _, _ = envmod.load_or_collect(python, cache, env=env, pool=pool)
    except envmod.EnvironmentError_ as e:
        env_error = str(e)
    return {
        "evidence": rec.to_dict(),
        "environment": record,
        "environment_error": env_error,
        "node": {"hostname": socket.gethostname(), "pid": os.getpid(), "worker_python": sys.executable,
                 "python": python, "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
        "elapsed_s": round(time.monotonic() - t0, 3),
    }
