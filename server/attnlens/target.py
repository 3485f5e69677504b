"""Facts about the *target* interpreter (the user's MetaX/CUDA Python).

The server never imports analysed code. It runs the target Python once, with
an argv list and a timeout, to read ``sys.path`` and its version, and caches
the answer keyed by the interpreter's real path, its mtime and the
environment variables that change ``sys.path``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .cache import Cache

_PROBE = (
    "import sys, json, sysconfig\n"
    "print(json.dumps({'path': [p for p in sys.path if p],"
    " 'version': '%d.%d.%d' % sys.version_info[:3],"
    " 'executable': sys.executable, 'prefix': sys.prefix,"
    " 'purelib': sysconfig.get_paths().get('purelib'),"
    " 'ext_suffixes': __import__('importlib.machinery').machinery.EXTENSION_SUFFIXES,"
    " 'stdlib': sorted(getattr(sys, 'stdlib_module_names', ())) or sorted(sys.builtin_module_names)}))\n"
)


class TargetError(Exception):
    """The target interpreter is missing, broken or too slow to answer."""


@dataclass
class TargetInfo:
    python: str
    sys_path: list[str]
    version: str = ""
    prefix: str = ""
    purelib: str = ""
    ext_suffixes: list[str] = field(default_factory=lambda: [".so"])
    error: str | None = None
    stdlib: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "python": self.python, "sys_path": self.sys_path, "version": self.version,
            "prefix": self.prefix, "purelib": self.purelib, "ext_suffixes": self.ext_suffixes,
            "stdlib": self.stdlib,
        }


def default_python() -> str:
    """The target interpreter when none is given: $VIRTUAL_ENV, else python3 on PATH."""
    venv = os.environ.get("VIRTUAL_ENV")
    if venv:
        cand = Path(venv) / "bin" / "python"
        if cand.exists():
            return str(cand)
    found = shutil.which("python3") or shutil.which("python")
    return found or sys.executable


def resolve_python(python: str | None) -> str:
    """An absolute interpreter path: a bare name (``python3``) is looked up on PATH."""
    if not python:
        return default_python()
    python = os.path.expanduser(python)
    if os.sep not in python:
        found = shutil.which(python)
        return found or python
    return os.path.abspath(python)


def _key(python: str) -> str:
    real = os.path.realpath(python)
    try:
        st = os.stat(real)
        stamp = f"{st.st_mtime_ns}:{st.st_size}"
    except OSError:
        stamp = "missing"
    venv_cfg = Path(python).parent.parent / "pyvenv.cfg"
    try:
        stamp += f":{venv_cfg.stat().st_mtime_ns}"
    except OSError:
        pass
    env = os.environ.get("PYTHONPATH", "") + "|" + os.environ.get("PYTHONHOME", "")
    h = hashlib.sha256(f"{python}|{real}|{stamp}|{env}".encode()).hexdigest()[:20]
    return f"py-{h}"


def read_target(python: str | None, cache: Cache | None = None, timeout: float = 20.0) -> TargetInfo:
    """sys.path and version of the target interpreter (cached). Raises TargetError."""
    python = resolve_python(python)
    key = _key(python)
    if cache is not None:
        data = cache.load_json("target", f"{key}.json")
        if isinstance(data, dict) and isinstance(data.get("sys_path"), list):
            return TargetInfo(
                python=python, sys_path=data["sys_path"], version=data.get("version", ""),
                prefix=data.get("prefix", ""), purelib=data.get("purelib", ""),
                ext_suffixes=data.get("ext_suffixes") or [".so"], stdlib=data.get("stdlib") or [],
            )
    if not (os.path.exists(python) or shutil.which(python)):
        raise TargetError(f"target interpreter not found: {python}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    try:
        proc = subprocess.Popen(
            [python, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.path.sep,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True,  # its own group: killed whole on timeout
        )
    except OSError as e:
        raise TargetError(f"cannot run target interpreter {python}: {e}") from None
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        raise TargetError(f"target interpreter {python} did not answer within {timeout:.0f} s") from None
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    if out.returncode != 0:
        tail = out.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise TargetError(f"target interpreter {python} failed (exit {out.returncode}): {tail[0]}")
    try:
        data = json.loads(out.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TargetError(f"target interpreter {python} printed something unexpected") from None
    info = TargetInfo(
        python=python, sys_path=[p for p in data["path"] if os.path.isabs(p)], version=data.get("version", ""),
        prefix=data.get("prefix", ""), purelib=data.get("purelib") or "", ext_suffixes=data.get("ext_suffixes") or [".so"],
        stdlib=data.get("stdlib") or [],
    )
    if cache is not None:
        cache.store_json("target", f"{key}.json", info.to_json())
    return info


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the interpreter and everything it started (a sitecustomize may spawn children)."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        try:
            proc.kill()
        except OSError:
            pass
    try:
        proc.communicate(timeout=5)
    except (subprocess.TimeoutExpired, OSError, ValueError):
        pass
