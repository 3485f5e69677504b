"""AttnLens probe agent: runs in the target interpreter, speaks JSON lines on stdio.

Launched by the host as ``[python, "-u", "/path/to/agent_main.py"]``.  Standalone:
the standard library only at import time, never ``import attnlens``.

Protocol: one JSON object per line.

* request   ``{"id": int, "method": str, "params": {...}}``
* response  ``{"id": int, "result": ...}`` or
            ``{"id": int, "error": {"type": str, "message": str, "traceback": str}}``

Requests are handled in order; the host may pipeline several (a batch) and
applies a timeout to each.  A crash, hang or OOM is handled by the host, which
kills the process group and restarts the agent lazily.

The protocol channel is protected: the real stdout fd is duplicated for
protocol use, then fd 1 and ``sys.stdout`` are pointed at stderr, so a print
from a kernel, a C library or Python code cannot corrupt the stream.

Methods: ``ping``, ``warmup``, ``env``, ``introspect``, ``probe``, ``families``,
``shutdown``.
"""

from __future__ import annotations

import faulthandler
import importlib
import importlib.util
import json
import math
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = "_attnlens_agent"
PROTOCOL_VERSION = 1


def _protect_stdio():
    """Private dups of the real stdin/stdout for the protocol.

    fd 1 and ``sys.stdout`` then point at stderr (prints from kernels, C
    libraries or Python code cannot corrupt the stream) and fd 0 at /dev/null
    (code that reads stdin cannot swallow requests).  ``os.dup`` makes
    non-inheritable descriptors, so child processes never see the protocol.
    """
    proto_out = os.dup(1)
    proto_in = os.dup(0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = open(os.devnull, "r")
    out = os.fdopen(proto_out, "w", buffering=1, encoding="utf-8", errors="replace")
    inp = os.fdopen(proto_in, "r", encoding="utf-8", errors="replace")
    return inp, out


def _load_private_package():
    # The script's own directory is sys.path[0]: remove it, so that our
    # modules never shadow a user's ``probes``/``introspect`` module.
    while sys.path and os.path.abspath(sys.path[0] or ".") == HERE:
        sys.path.pop(0)
    if PKG in sys.modules:
        return sys.modules[PKG]
    spec = importlib.util.spec_from_file_location(PKG, os.path.join(HERE, "__init__.py"),
                                                  submodule_search_locations=[HERE])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[PKG] = mod
    spec.loader.exec_module(mod)
    return mod


def _sanitize(v):
    """JSON without NaN/Infinity (not valid JSON for other readers): non-finite floats become strings."""
    if isinstance(v, float):
        if math.isfinite(v):
            return v
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, dict):
        return {str(k): _sanitize(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_sanitize(x) for x in v]
    if v is None or isinstance(v, (str, int, bool)):
        return v
    try:
        return _sanitize(v.item())  # numpy / torch scalars
    except Exception:  # noqa: BLE001
        return repr(v)[:500]


class Agent:
    def __init__(self, out):
        self.out = out
        self.started = time.time()
        self.handled = 0
        self.stop = False

    # -- methods -------------------------------------------------------------
    def m_ping(self, params):
        return {
            "pid": os.getpid(),
            "pgid": os.getpgid(0),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "protocol": PROTOCOL_VERSION,
            "agent_file": os.path.abspath(__file__),
            "uptime_s": round(time.time() - self.started, 3),
            "handled": self.handled,
            "torch_imported": "torch" in sys.modules,
            "triton_imported": "triton" in sys.modules,
            "triton_interpret": os.environ.get("TRITON_INTERPRET"),
            "echo": params.get("echo"),
        }

    def m_warmup(self, params):
        t0 = time.time()
        res = {}
        for name in params.get("modules") or ["torch"]:
            try:
                importlib.import_module(name)
                res[name] = "ok"
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                res[name] = f"{type(e).__name__}: {e}"
        return {"imports": res, "elapsed_s": round(time.time() - t0, 3)}

    def m_env(self, params):
        envinfo = importlib.import_module(PKG + ".envinfo")
        return envinfo.collect()

    def m_introspect(self, params):
        mod = importlib.import_module(PKG + ".introspect")
        return mod.introspect(params)

    def m_families(self, params):
        probes = importlib.import_module(PKG + ".probes")
        return probes.catalog()

    def m_probe(self, params):
        probes = importlib.import_module(PKG + ".probes")
        return probes.run_probe(params)

    def m_shutdown(self, params):
        self.stop = True
        return {"bye": True}

    # -- loop ----------------------------------------------------------------
    def send(self, obj):
        line = json.dumps(_sanitize(obj), separators=(",", ":"), allow_nan=False)
        self.out.write(line + "\n")
        self.out.flush()

    def handle(self, req):
        rid = req.get("id") if isinstance(req, dict) else None
        method = req.get("method") if isinstance(req, dict) else None
        params = (req.get("params") if isinstance(req, dict) else None) or {}
        fn = getattr(self, "m_" + str(method), None) if method else None
        if fn is None:
            self.send({"id": rid, "error": {"type": "MethodNotFound", "message": f"unknown method {method!r}",
                                            "traceback": ""}})
            return
        try:
            result = fn(params)
        except BaseException as e:  # noqa: BLE001 - every failure is reported, the agent survives
            if isinstance(e, KeyboardInterrupt):
                raise
            self.send({"id": rid, "error": {"type": type(e).__name__, "message": str(e)[:4000],
                                            "traceback": traceback.format_exc()[-8000:]}})
            return
        finally:
            self.handled += 1
            sys.stderr.flush()
        self.send({"id": rid, "result": result})

    def serve(self, stdin):
        while True:
            line = stdin.readline()
            if not line:
                return
            line = line.strip()
            if not line:
                continue
            try:
                req = json.loads(line)
            except ValueError as e:
                self.send({"id": None, "error": {"type": "ProtocolError", "message": f"bad request line: {e}",
                                                 "traceback": ""}})
                continue
            self.handle(req)
            if self.stop:
                return


def main():
    inp, out = _protect_stdio()
    faulthandler.enable(file=sys.stderr, all_threads=True)
    _load_private_package()
    agent = Agent(out)
    try:
        agent.serve(inp)
    except SystemExit:
        pass
    finally:
        try:
            out.flush()
        except Exception:  # noqa: BLE001
            pass


if __name__ == "__main__":
    main()
