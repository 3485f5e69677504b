"""workspace/executeCommand: the custom API the VS Code extension builds on.

Command ids and argument shapes are documented in docs/editors.md; they are
declared once here (``COMMANDS``) and once on the client side.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import uuid
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams

from ..analysis import Analysis
from ..request import Request
from ..server import AttnLensServer, optional_features

log = logging.getLogger("attnlens.lsp")

BACKENDS = "attnlens.backends"
TRACE = "attnlens.trace"
STATUS = "attnlens.status"
RESTART_INDEX = "attnlens.restartIndex"
RUN_PROBE = "attnlens.runProbe"
ENVIRONMENT = "attnlens.environment"
INVENTORY = "attnlens.inventory"
COMMANDS = (BACKENDS, TRACE, STATUS, RESTART_INDEX, RUN_PROBE, ENVIRONMENT, INVENTORY)


def register(ls: AttnLensServer) -> None:
    @ls.command(BACKENDS)
    async def backends(*args: Any) -> list[dict]:
        return await ls.call(lambda a: [e.to_json() for e in a.backends()]) or []

    @ls.command(TRACE)
    async def trace(*args: Any) -> dict | None:
        if len(args) != 3 or not isinstance(args[0], str) or not all(isinstance(x, int) for x in args[1:]):
            raise JsonRpcInvalidParams(f"{TRACE} takes [uri, line, character] (0-based, LSP position encoding)")
        uri, line, char = args
        req = ls.request(uri, T.Position(line, char))
        if req is None:
            raise JsonRpcInvalidParams(f"{TRACE}: not a file URI: {uri}")
        return await ls.call(_trace, req)

    @ls.command(STATUS)
    async def status(*args: Any) -> dict:
        st = await ls.call(Analysis.status) or {"root": None, "targetPython": ls.settings.target_python,
                                                  "targetError": None, "indexedModules": 0, "generation": 0,
                                                  "platform": None}
        from ... import __version__

        st["serverVersion"] = __version__
        st["features"] = optional_features()
        return st

    @ls.command(RESTART_INDEX)
    async def restart_index(*args: Any) -> dict:
        from .lifecycle import start_workspace

        await start_workspace(ls)
        return {"restarted": True, "root": str(ls.analysis.q.root) if ls.analysis else None}

    @ls.command(RUN_PROBE)
    async def run_probe(*args: Any) -> Any:
        probes = _optional("attnlens.runtime.probes", RUN_PROBE)
        spec = args[0] if args and isinstance(args[0], dict) else {}
        context = await ls.call(_context)
        if context is None:
            raise JsonRpcInternalError(f"{RUN_PROBE}: no workspace is analysed")
        # a probe runs a subprocess for seconds or minutes: off the analysis thread
        try:
            result = await asyncio.to_thread(run_requested_probe, probes, spec, context)
        except (TypeError, ValueError) as e:
            raise JsonRpcInvalidParams(f"{RUN_PROBE}: {e}") from None
        try:
            from .runtime_actions import record_probe

            record_probe(ls, spec, result)
        except Exception:  # noqa: BLE001 - publishing the verdict is best effort
            log.warning("cannot publish the probe verdict", exc_info=True)
        return result

    @ls.command(ENVIRONMENT)
    async def environment(*args: Any) -> Any:
        env = _optional("attnlens.runtime.environment", ENVIRONMENT)
        context = await ls.call(_context)
        if context is None:
            raise JsonRpcInternalError(f"{ENVIRONMENT}: no workspace is analysed")
        refresh = bool(args and isinstance(args[0], dict) and args[0].get("refresh"))
        got = await asyncio.to_thread(env.load_or_collect, context["python"], context["cache"], refresh)
        if isinstance(got, (tuple, list)) and len(got) == 3:
            record, changed, previous = got
            if isinstance(record, dict):
                record = dict(record)
                try:
                    record.setdefault("summary", env.summary(record))
                except Exception:  # noqa: BLE001 - the summary is cosmetic
                    pass
            return {"record": record, "changed": changed, "previousHash": previous,
                    "summary": record.get("summary") if isinstance(record, dict) else None}
        return _to_json(got)

    @ls.command(INVENTORY)
    async def inventory(*args: Any) -> Any:
        spec = args[0] if args and isinstance(args[0], dict) else {}
        scope = spec.get("scope")
        if scope is not None and not (isinstance(scope, list) and all(isinstance(x, str) for x in scope)):
            raise JsonRpcInvalidParams(f"{INVENTORY}: scope must be a list of glob strings")
        fmt = spec.get("format", "md")
        if fmt not in ("md", "json"):
            raise JsonRpcInvalidParams(f"{INVENTORY}: format must be md or json")
        inv = _optional("attnlens.upgrade.inventory", INVENTORY)
        token = str(uuid.uuid4())
        reporter = _Progress(ls, token, "AttnLens inventory")
        await reporter.begin()
        try:
            got = await ls.call(_inventory, inv, scope, fmt)
        finally:
            reporter.end()
        if got is None:
            raise JsonRpcInternalError(f"{INVENTORY}: no workspace is analysed")
        return got


def run_requested_probe(probes, spec: dict, context: dict) -> dict:
    """``attnlens.runProbe`` with ``{family, target, device?, requires?, module?, force?, ...}`` (thread).

    The family may be spelled the older way (``varlen_attention``). Unless ``force``, a pre-flight check
    against the target's environment record comes first: a probe that cannot succeed there is not run,
    and the answer says why and what to do (``verdict: not_run``, ``reason``, ``next``). Every answer
    carries ``reason``, one line for the notification and the Probe runs row."""
    from ...runtime import environment as envmod
    from ...runtime.evidence import reason_line
    from ...runtime.preflight import check

    for key in ("family", "target"):
        if not isinstance(spec.get(key), str) or not spec[key].strip():
            raise ValueError(f"{key} must be a non-empty string")
        if any(c in spec[key] for c in "\n\r\0"):
            raise ValueError(f"{key} must be one line without NUL characters")
    spec = {**spec, "family": probes.canonical_family(spec["family"].strip()), "target": spec["target"].strip()}
    if spec["family"] not in probes.family_names():
        raise ValueError(f"unknown probe family {spec['family']!r}; known: {', '.join(probes.family_names())}")
    if not spec.get("force"):
        record, env_error = None, None
        try:
            record = envmod.load_or_collect(context["python"], context["cache"])[0]
        except envmod.EnvironmentError_ as e:
            env_error = str(e)
        pf = check(record, spec["family"], spec["target"], spec.get("requires"), env_error=env_error,
                   device=spec.get("device"))
        if not pf.ok:
            return {"family": spec["family"], "target": spec["target"], "verdict": "not_run", "reason": pf.reason,
                    "next": pf.next_step, "preflight": pf.to_json(),
                    "environment": envmod.short(record) if record else {}, "cases": []}
    result = _to_json(_call_with(probes.run_probe, spec, context))
    if isinstance(result, dict):
        result["reason"] = reason_line(result)
    return result


def _inventory(a: Analysis, inv, scope, fmt: str) -> dict:
    built = inv.build_inventory(a.ws, globs=scope or None)
    if fmt == "json":
        return built.to_json()
    return {"markdown": inv.to_markdown(built), "files": len(getattr(built, "files", []) or [])}


class _Progress:
    """Work-done progress for a long command, when the client supports it."""

    def __init__(self, ls: AttnLensServer, token: str, title: str):
        self.ls, self.token, self.title, self.on = ls, token, title, False

    async def begin(self) -> None:
        if not getattr(self.ls.caps, "work_done_progress", False):
            return
        try:
            await self.ls.work_done_progress.create_async(self.token)
            self.ls.work_done_progress.begin(self.token, T.WorkDoneProgressBegin(title=self.title, cancellable=False))
            self.on = True
        except Exception:  # noqa: BLE001 - progress is cosmetic
            self.on = False

    def end(self) -> None:
        if self.on:
            try:
                self.ls.work_done_progress.end(self.token, T.WorkDoneProgressEnd(message="done"))
            except Exception:  # noqa: BLE001
                pass


def _trace(a: Analysis, req: Request) -> dict | None:
    line, col = req.core_position(req.positions(a))
    r = a.resolve(req.path, line, col, None)
    return r.chain.to_json() if r is not None else None


def _optional(module: str, command: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise JsonRpcInternalError(f"{command} is not available: {module} is not installed in this server ({e})") from None


def _context(a: Analysis) -> dict:
    """Plain values a runtime call may need (never the analysis objects: other thread)."""
    return {"python": a.q.target.python, "cache": a.q.cache, "root": str(a.q.root)}


def _call_with(fn, spec: dict, context: dict):
    """Call ``fn`` with the keys of ``spec`` it accepts, plus the context values it asks for."""
    params = inspect.signature(fn).parameters
    kwargs = {k: v for k, v in spec.items() if k in params}
    for k, v in context.items():
        if k in params and k not in kwargs:
            kwargs[k] = v
    return fn(**kwargs)


def _to_json(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if hasattr(value, "to_json"):
        out = value.to_json()
        return out if not isinstance(out, str) else json.loads(out)
    if isinstance(value, list):
        return [_to_json(v) for v in value]
    return value
