"""Host API for runtime introspection of final targets (answers come from the agent).

``introspect(python, "ns::op")`` -> schema per overload, dispatch keys with file:line,
providers; ``introspect(python, "pkg.mod:kernel")`` -> Triton parameters/constexprs or
a Python signature/source/docstring; ``kind="extension"`` -> file, sha256, mechanism.

The answer is the agent's dict (``status``: ok | import_error | not_found) or, when the
agent itself failed, ``{"status": "crashed" | "timeout" | "error", "message": ...}``:
never an exception, so a hover can show whatever came back.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Mapping

from .agent import AgentPool, AgentReply, default_pool

KINDS = ("auto", "python", "torch_op", "triton_kernel", "extension")


def _params(symbol: str, kind: str, module: str | None, load_library: str | None, load: bool) -> dict:
    if kind not in KINDS:
        raise ValueError(f"unknown introspection kind {kind!r}; one of {', '.join(KINDS)}")
    if not symbol or any(c in symbol for c in "\n\r\0"):
        raise ValueError("invalid symbol")
    p: dict = {"symbol": symbol, "kind": kind}
    if module:
        p["module"] = module
    if load_library:
        p["load_library"] = load_library
    if load:
        p["load"] = True
    return p


def _answer(rep: AgentReply) -> dict:
    if rep.ok and isinstance(rep.result, dict):
        return rep.result
    d = {"status": rep.status if rep.status != "ok" else "error", "message": rep.message}
    if rep.error:
        d["error"] = rep.error
    if rep.stderr_tail:
        d["stderr_tail"] = rep.stderr_tail[-4000:]
    return d


def introspect(python: str, symbol: str, kind: str = "auto", *, module: str | None = None,
               load_library: str | None = None, load: bool = False, env: Mapping[str, str | None] | None = None,
               pool: AgentPool | None = None, timeout: float = 120.0) -> dict:
    agent = (pool or default_pool()).get(python, env)
    return _answer(agent.request("introspect", _params(symbol, kind, module, load_library, load), timeout=timeout))


def introspect_many(python: str, queries: list[dict], *, env: Mapping[str, str | None] | None = None,
                    pool: AgentPool | None = None, timeout: float = 120.0) -> list[dict]:
    """Several queries in one pipelined batch (each: symbol, kind, module, load_library, load)."""
    calls = [("introspect", _params(q["symbol"], q.get("kind", "auto"), q.get("module"), q.get("load_library"),
                                    bool(q.get("load")))) for q in queries]
    agent = (pool or default_pool()).get(python, env)
    return [_answer(r) for r in agent.batch(calls, timeout=timeout)]


async def introspect_async(*args, **kwargs) -> dict:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(introspect, *args, **kwargs))
