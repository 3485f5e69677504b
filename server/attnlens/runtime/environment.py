"""Environment records: what the target interpreter runs on, hashed.

The record is collected by the agent's ``env`` method (inside the target
interpreter: GPU model and count, CUDA/MACA runtime and driver versions from
the loaded libraries, torch version/git/ABI, triton version and target,
package versions and locations, filtered environment variables) and stored in
the cache as ``env/<python-key>.json``.

Its identity hash covers every field except the volatile ones (collection time,
duration).  :func:`load_or_collect` reuses the stored record while a cheap
fingerprint of the interpreter (executable, ``sys.path`` folders, package
metadata files, relevant environment variables, driver version files) is
unchanged, and otherwise collects a new one and says whether the hash changed.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Mapping

from ..cache import Cache
from .agent import AgentPool, AgentProcess, merged_env

VOLATILE = {"collected_at", "collect_s", "hash", "fingerprint"}
# nested fields that describe the moment, not the environment (mx-smi's screen shows temperatures and usage)
VOLATILE_PATHS = [("maca", "mx_smi", "head")]
FINGERPRINT_ENV = ("PYTHONPATH", "PYTHONHOME", "LD_LIBRARY_PATH", "LD_PRELOAD", "MACA_PATH", "CUDA_HOME",
                   "CUDA_VISIBLE_DEVICES", "MACA_VISIBLE_DEVICES", "TRITON_INTERPRET", "VIRTUAL_ENV", "PATH",
                   "USE_PRECOMPILED_KERNEL")
DEFAULT_MAX_AGE_S = 24 * 3600
_MEMO: dict = {}  # python_key -> stored document, used when the cache is disabled


class EnvironmentError_(RuntimeError):
    """The environment record could not be collected (agent failed to start, crashed...)."""

    def __init__(self, message: str, reply: dict | None = None):
        super().__init__(message)
        self.reply = reply or {}


def python_key(python: str, env: Mapping[str, str | None] | None = None) -> str:
    """A cache-safe key for an interpreter path (+ environment overrides, if any)."""
    p = os.path.abspath(os.path.expanduser(str(python)))
    h = hashlib.sha256(p.encode())
    if env:
        h.update(json.dumps(sorted((str(k), v) for k, v in env.items()), default=str).encode())
    parts = [x for x in Path(p).parts if x not in ("/", "bin")]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", "-".join(parts[-2:]))[:48].strip("._-") or "python"
    return f"{name}-{h.hexdigest()[:12]}"


def identity(record: dict) -> dict:
    out = {k: v for k, v in record.items() if k not in VOLATILE}
    for path in VOLATILE_PATHS:
        parent = out
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent, dict) else None
            if parent is None:
                break
        if isinstance(parent, dict) and path[-1] in parent:
            # copy the branch before dropping the field, so the record itself is left intact
            node = out
            for key in path[:-1]:
                node[key] = dict(node[key])
                node = node[key]
            node.pop(path[-1], None)
    return out


def identity_hash(record: dict) -> str:
    data = json.dumps(identity(record), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(data.encode()).hexdigest()[:16]


def _stat_sig(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size]


def fingerprint(python: str, record: dict | None, env: Mapping[str, str | None] | None = None) -> str:
    """Cheap signature of the interpreter's environment, computed without starting it."""
    items: list[Any] = []
    p = os.path.abspath(os.path.expanduser(str(python)))
    items.append(["python", p, _stat_sig(p), _stat_sig(os.path.realpath(p))])
    menv = merged_env(env)
    items.append(["env", [(k, menv.get(k)) for k in FINGERPRINT_ENV]])
    if record:
        for d in record.get("sys_path") or []:
            items.append(["path", d, _stat_sig(d)])
        for name, pk in sorted((record.get("packages") or {}).items()):
            dist = pk.get("dist_path")
            if dist:
                items.append(["dist", name, _stat_sig(dist), _stat_sig(os.path.join(dist, "METADATA"))])
        maca = (record.get("maca") or {}).get("version_file")
        if maca:
            items.append(["maca", _stat_sig(maca)])
    for f in ("/proc/driver/nvidia/version",):
        try:
            with open(f) as fh:
                items.append([f, fh.readline().strip()])
        except OSError:
            pass
    return hashlib.sha256(json.dumps(items, default=str).encode()).hexdigest()[:16]


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def collect(python: str, env: Mapping[str, str | None] | None = None, *, pool: AgentPool | None = None,
            timeout: float = 120.0) -> dict:
    """Collect a fresh record in a fresh agent; adds ``hash``.  Raises EnvironmentError_ on failure.

    The record is taken in a pristine process that is closed right after: an agent that
    has run probes has extension libraries loaded and more runtime libraries mapped,
    which would make the record (and its hash) depend on the agent's history.  ``pool``
    only lends its settings (agent path, working folder).
    """
    agent = AgentProcess(python, env, agent_path=getattr(pool, "agent_path", None), cwd=getattr(pool, "cwd", None))
    try:
        rep = agent.request("env", {}, timeout=timeout)
    finally:
        agent.close()
    if not rep.ok:
        raise EnvironmentError_(f"could not collect the environment of {python}: {rep.message}", rep.to_dict())
    record = dict(rep.result or {})
    record["hash"] = identity_hash(record)
    return record


def load_or_collect(python: str, cache: Cache, refresh: bool = False, *,
                    env: Mapping[str, str | None] | None = None, pool: AgentPool | None = None,
                    timeout: float = 120.0, max_age_s: float | None = DEFAULT_MAX_AGE_S):
    """Return ``(record, changed, previous_hash)``.

    The stored record is reused while the interpreter's fingerprint is unchanged
    (and it is younger than ``max_age_s``); otherwise a new record is collected
    and stored.  ``changed`` is True when a stored record existed and its hash
    differs from the new one; ``previous_hash`` is the stored hash (or None).
    """
    key = python_key(python, env)
    name = f"{key}.json"
    # a disabled cache still remembers records for the life of this process
    stored = cache.load_json("env", name) if cache.enabled else _MEMO.get(key)
    if not (isinstance(stored, dict) and isinstance(stored.get("record"), dict) and stored.get("hash")):
        stored = None
    prev_hash = stored["hash"] if stored else None
    if stored and not refresh:
        fresh = max_age_s is None or (time.time() - float(stored.get("stored_ts", 0))) <= max_age_s
        if fresh and stored.get("fingerprint") == fingerprint(python, stored["record"], env):
            rec = dict(stored["record"])
            rec["hash"] = prev_hash
            return rec, False, prev_hash
    record = collect(python, env, pool=pool, timeout=timeout)
    changed = prev_hash is not None and prev_hash != record["hash"]
    history = list((stored or {}).get("history") or [])
    if prev_hash != record["hash"]:
        history.append({"hash": record["hash"], "at": _now_iso()})
    doc = {
        "python": os.path.abspath(os.path.expanduser(str(python))),
        "env_overrides": dict(env or {}),
        "hash": record["hash"],
        "previous_hash": prev_hash if changed else (stored or {}).get("previous_hash"),
        "changed_at": _now_iso() if changed else (stored or {}).get("changed_at"),
        "fingerprint": fingerprint(python, record, env),
        "stored_ts": time.time(),
        "stored_at": _now_iso(),
        "history": history[-10:],
        "record": record,
    }
    if cache.enabled:
        cache.store_json("env", name, doc)
    else:
        _MEMO[key] = doc
    return record, changed, prev_hash


def stored_document(python: str, cache: Cache, env: Mapping[str, str | None] | None = None) -> dict | None:
    """The stored document (record, hash, previous hash, history) without collecting anything."""
    if not cache.enabled:
        return _MEMO.get(python_key(python, env))
    doc = cache.load_json("env", f"{python_key(python, env)}.json")
    return doc if isinstance(doc, dict) and isinstance(doc.get("record"), dict) else None


def stored(python: str, cache: Cache, env: Mapping[str, str | None] | None = None) -> dict | None:
    """The stored record (with its ``hash``), or None; never starts an agent."""
    doc = stored_document(python, cache, env)
    if not doc:
        return None
    rec = dict(doc["record"])
    rec["hash"] = doc.get("hash")
    return rec


def status(python: str, cache: Cache, env: Mapping[str, str | None] | None = None) -> dict:
    """What a server status line shows, from the stored record only (never starts an agent)."""
    doc = stored_document(python, cache, env)
    if not doc:
        return {"known": False, "python": python, "summary": "environment not recorded yet (attnlens env)"}
    rec = dict(doc["record"])
    rec["hash"] = doc.get("hash")
    return {"known": True, "python": python, "hash": doc.get("hash"), "summary": summary(rec),
            "stored_at": doc.get("stored_at"), "previous_hash": doc.get("previous_hash"),
            "changed_at": doc.get("changed_at"),
            "stale": doc.get("fingerprint") != fingerprint(python, doc["record"], env)}


def summary(record: dict) -> str:
    """One line for hovers and the server status."""
    t = record.get("torch") or {}
    tr = record.get("triton") or {}
    gpu = record.get("gpu") or {}
    parts = []
    if t.get("error"):
        parts.append(f"torch not importable ({t['error'][:80]})")
    else:
        rt = []
        if t.get("cuda"):
            rt.append(f"CUDA {t['cuda']}")
        if t.get("hip"):
            rt.append(f"HIP {t['hip']}")
        abi = "cxx11 ABI" if t.get("cxx11_abi") else ("pre-cxx11 ABI" if t.get("cxx11_abi") is False else "")
        extra = ", ".join(x for x in rt + [abi] if x)
        parts.append(f"torch {t.get('version')}" + (f" ({extra})" if extra else ""))
    if gpu.get("count"):
        parts.append(f"{gpu['count']}x {', '.join(gpu.get('models') or ['GPU'])}")
    else:
        parts.append("no GPU")
    maca = (record.get("maca") or {}).get("version")
    if maca:
        parts.append(f"MACA {maca}")
    drv = ((record.get("runtime") or {}).get("cuda_driver") or {}).get("value")
    if drv:
        parts.append(f"driver API {drv // 1000}.{(drv % 1000) // 10}")
    if tr.get("present") and tr.get("version"):
        tgt = tr.get("target") or {}
        where = "interpreter" if tr.get("interpret") else (f"{tgt.get('backend')} {tgt.get('arch')}" if tgt else
                                                           "no driver")
        parts.append(f"triton {tr['version']} ({where})")
    pk = record.get("packages") or {}
    for n in ["vllm"] + [k for k, e in pk.items() if e.get("vllm_plugin")] + ["flash_attn", "flash-attn"]:
        if n in pk and pk[n].get("version"):
            parts.append(f"{n} {pk[n]['version']}")
    py = (record.get("python") or {}).get("version")
    if py:
        parts.append(f"python {py}")
    h = record.get("hash")
    return ", ".join(parts) + (f" [env {h[:8]}]" if h else "")


def short(record: dict) -> dict:
    """The few fields copied into every evidence record."""
    t = record.get("torch") or {}
    pk = record.get("packages") or {}
    return {
        "hash": record.get("hash"),
        "summary": summary(record),
        "python": (record.get("python") or {}).get("executable"),
        "torch": t.get("version"),
        "torch_git": t.get("git_version"),
        "cuda": t.get("cuda"),
        "hip": t.get("hip"),
        "gpu": record.get("gpu"),
        "triton": (record.get("triton") or {}).get("version"),
        "packages": {k: v.get("version") for k, v in pk.items() if v.get("version")},
    }
