"""Probe catalog and runner (host side).

The family definitions live with the agent (``attnlens/agent/probes/*.py``),
because they run in the target interpreter; importing them here reads their
metadata only (they import torch inside ``run``).

:func:`run_probe` resolves the device (``auto`` asks the stored environment
record whether the target has a GPU), sets ``TRITON_INTERPRET=1`` in the
agent's environment when the probe runs on the CPU (or when asked), sends one
``probe`` request with a timeout, and turns whatever comes back (result,
import error, error, crash, timeout) into an :class:`EvidenceRecord` written
atomically to the cache.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Mapping

from ..cache import Cache
from . import environment as envmod
from . import evidence as ev
from .agent import AgentPool, default_pool
from .catalog import FAMILY_ALIASES, canonical_family, families, family_names, get_family  # noqa: F401 - re-exported

DEFAULT_TIMEOUT_S = 300.0


def _parse_device(device: str | None) -> str:
    d = (device or "auto").strip().lower()
    return d or "auto"


def _truthy(v) -> bool | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return v
    return str(v).lower() in ("1", "true", "yes", "on")


def run_probe(python: str, family: str, target: str, device: str = "auto", cache: Cache | None = None,
              timeout: float = DEFAULT_TIMEOUT_S, *, options: Mapping[str, Any] | None = None,
              env: Mapping[str, str | None] | None = None, pool: AgentPool | None = None,
              module: str | None = None, load_library: str | None = None,
              env_refresh: bool = False) -> ev.EvidenceRecord:
    """Run one probe family on ``target`` in the interpreter ``python``; return (and store) the evidence."""
    family = canonical_family(family)
    if family not in family_names():
        raise ValueError(f"unknown probe family {family!r}; known: {', '.join(family_names())}")
    if not target or any(c in target for c in "\n\r\0"):
        raise ValueError("invalid target symbol")
    cache = cache if cache is not None else Cache(None)
    pool = pool or default_pool()
    opts = dict(options or {})
    user_env = dict(env or {})
    t0 = time.monotonic()
    created, stamp = ev.utc_stamp()

    # environment record of the plain interpreter (reused from the cache while unchanged)
    env_short: dict = {}
    env_error = None
    record = None
    try:
        record, changed, prev = envmod.load_or_collect(python, cache, refresh=env_refresh, env=user_env, pool=pool)
        env_short = envmod.short(record)
        if changed:
            env_short["changed_from"] = prev
    except envmod.EnvironmentError_ as e:
        env_error = str(e)

    dev = _parse_device(device)
    if dev == "auto":
        has_gpu = bool(((record or {}).get("gpu") or {}).get("count"))
        dev = "cuda" if has_gpu else "cpu"
    interpret = _truthy(opts.pop("interpret", None))
    if interpret is None:
        interpret = dev == "cpu"
    agent_env = dict(user_env)
    # set or remove explicitly: a TRITON_INTERPRET=1 left in the user's shell must not turn a GPU probe
    # into an interpreter run (the agent inherits our environment otherwise)
    agent_env["TRITON_INTERPRET"] = "1" if interpret else None
    params = {"family": family, "target": target, "device": dev, "options": opts}
    if module:
        params["module"] = module
    if load_library:
        params["load_library"] = load_library

    def make(verdict: str, message: str = "", **kw) -> ev.EvidenceRecord:
        rid = ev.new_id(family, target, stamp, [dev, opts, verdict])
        rec = ev.EvidenceRecord(
            id=rid, family=family, target=target, verdict=verdict, created=created, message=message,
            device=kw.pop("device", dev), interpret=bool(interpret), options=opts,
            elapsed_s=round(time.monotonic() - t0, 3), python=str(python), environment=env_short, **kw)
        if env_error:
            rec.details["environment_error"] = env_error
        if cache.enabled:
            ev.write(cache, rec)
        return rec

    agent = pool.get(python, agent_env)
    rep = agent.request("probe", params, timeout=timeout)
    if rep.status in ("timeout", "crashed"):
        return make(rep.status, rep.message, details={"stderr_tail": rep.stderr_tail[-4000:],
                                                      "returncode": rep.returncode, "signal": rep.signal,
                                                      "agent_elapsed_s": round(rep.elapsed_s, 3)})
    if rep.status != "ok":
        err = rep.error or {}
        return make("error", rep.message or "agent error",
                    details={"error": err, "stderr_tail": agent.stderr_tail(30)})
    res = rep.result or {}
    verdict = res.get("verdict") or "error"
    if verdict not in ev.VERDICTS:
        verdict = "error"
    details: dict = {"agent_elapsed_s": round(rep.elapsed_s, 3)}
    if res.get("import_error"):
        details["import_error"] = res["import_error"]
    for k in ("device_name", "torch"):
        if res.get(k):
            details[k] = res[k]
    return make(verdict, res.get("message", ""), provider=res.get("provider") or {}, cases=res.get("cases") or [],
                device=res.get("device") or dev, convention=res.get("convention") or "", details=details)


async def run_probe_async(*args, **kwargs) -> ev.EvidenceRecord:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(run_probe, *args, **kwargs))


def target_spec(symbol: str) -> str:
    """The probe agent's target spelling of a resolved symbol: ``ns::op`` for torch ops (also
    ``torch.ops.ns.op``), ``pkg.mod:attr`` for Python callables; ``ns::op`` / ``mod:attr`` unchanged."""
    if "::" in symbol or ":" in symbol:
        return symbol
    if symbol.startswith("torch.ops."):
        parts = symbol.split(".")
        return f"{parts[2]}::{parts[3]}" if len(parts) >= 4 else symbol
    mod, _, attr = symbol.rpartition(".")
    return f"{mod}:{attr}" if mod else symbol
