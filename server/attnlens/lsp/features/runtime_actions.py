"""Runtime evidence in the editor: probe code actions, evidence and drift in hovers,
probe and drift diagnostics (each under its own ``source`` so they replace only their own).

* ``textDocument/codeAction``: on a call whose chain reaches a probe-able callable
  (matched against the probe families' upstream callables and the contracts' ``probe``
  field), offer "Run probe <family> on <callee>". Nothing runs until the user picks
  it: the action only carries an ``attnlens.runProbe`` command.
* Hover sections: the latest evidence for the chain's final target (verdict, cases,
  environment hash and summary, date) and the upstream drift note, when an old
  version is configured.
* Diagnostics: a probe run started from an action publishes its verdict on that line
  (source ``attnlens-probe``); drift findings of the configured old version appear
  with source ``attnlens-drift``.
* ``attnlens.probeMatrix``: a probe campaign across hosts (``attnlens probe matrix``), run
  as a subprocess on explicit request only; the server itself never imports Ray. Returns
  the matrix and the evidence records (each with its host), which the editor's "Probe runs"
  view groups by host.
"""

from __future__ import annotations

from ...runtime.probes import target_spec

import functools
import logging
import os
import re
from typing import Any

from lsprotocol import types as T

from ... import model as M
from ..analysis import Analysis
from ..answers import Action, Diag
from ..convert import uri_to_path
from ..hover import HoverContext
from ..request import Request, View
from ..server import AttnLensServer
from . import diagnostics

log = logging.getLogger("attnlens.lsp")

PROBE_SOURCE = "attnlens-probe"


# ----------------------------------------------------------------------------- families


@functools.lru_cache(maxsize=1)
def _family_names() -> tuple:
    """(family, {callable names}) of every probe family: a static catalog, read once."""
    try:
        from ...runtime import probes

        fams = probes.families()
    except Exception:  # noqa: BLE001 - runtime part optional
        return ()
    return tuple((f["name"], frozenset(n for n in (_names_of(u) for u in f.get("upstream", [])) if n)) for f in fams)


_SEG = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names_of(entry: str) -> str | None:
    """The callable's last name in a family's upstream entry ('torch.ops._C.x' -> 'x')."""
    parts = _SEG.findall(entry.replace("::", "."))
    return parts[-1] if parts else None


def probe_target(chain: M.Chain) -> str | None:
    """What the agent should import for this chain's final target."""
    f = chain.final
    if f.kind == M.TORCH_OP:
        return f.symbol  # ns::op
    if f.kind in (M.PYTHON_FUNCTION, M.TRITON_KERNEL, M.EXTENSION_FUNCTION) and f.symbol:
        mod, _, attr = f.symbol.rpartition(".")
        return f"{mod}:{attr}" if mod else f.symbol
    if f.kind == M.NOT_INSTALLED:
        # the import names what would run on the user's machine (e.g. the vendor flash_attn)
        for h in reversed(chain.hops):
            if h.kind == M.HopKind.NOT_INSTALLED and "." in h.symbol:
                mod, _, attr = h.symbol.rpartition(".")
                return f"{mod}:{attr}"
        return None
    return None




def probe_candidates(chain: M.Chain) -> list[tuple[str, str]]:
    """(family, target) pairs: families whose callables appear on this chain, each with the
    callable to probe (the final target when it matches, else the deepest matching hop)."""
    out: list[tuple[str, str]] = []
    final_name = chain.final.symbol.replace("::", ".").rpartition(".")[2]
    final_target = probe_target(chain)
    for name, wanted in _family_names():
        target = None
        if final_name in wanted and final_target:
            target = final_target
        else:
            for h in reversed(chain.hops):
                if h.symbol and "." in h.symbol.replace("::", ".") and h.symbol.replace("::", ".").rpartition(".")[2] in wanted:
                    target = target_spec(h.symbol)
                    break
        if target:
            out.append((name, target))
    for fam in _contract_probes(chain):
        if final_target and all(f != fam for f, _ in out):
            out.append((fam, final_target))
    return out


def probe_requires(chain: M.Chain | None, target: str) -> dict:
    """What the run needs, from the chain (for the pre-flight check): ``{"requires": {...}}``, plus
    ``module`` (an installed extension that registers the op, imported before the target). The target
    may be a wrapper on the way: the run still ends in the chain's leaf, so its needs count too."""
    from ...runtime.preflight import requires_from_final, target_package

    pkg = target_package(target)
    f = chain.single_leaf() if chain is not None else None
    if f is None:
        return {"requires": {"package": pkg}} if pkg else {}
    providers = [p.split(" (", 1)[0] for p in f.providers] if f.kind == M.TORCH_OP else []
    if f.kind == M.NOT_INSTALLED and f.package and f.package != pkg:
        providers = [f.package]
    keys = [r.dispatch_key for r in f.registrations if r.kind in ("cpp_impl", "python")]
    out: dict = {"requires": requires_from_final(f.kind, package=pkg, dispatch_keys=keys, providers=providers)}
    installed = [p.split(" (", 1)[0] for p in f.providers if " (installed at " in p] if f.kind == M.TORCH_OP else []
    if installed:
        out["module"] = installed[0]
    return out


def families_for(chain: M.Chain) -> list[str]:
    return [f for f, _ in probe_candidates(chain)]


def _contract_probes(chain: M.Chain) -> list[str]:
    try:
        from ...rules import contracts as C  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - rules part optional
        return []
    finder = getattr(C, "probes_for_symbol", None)
    if finder is None:
        return []
    try:
        return list(finder(chain.final.symbol) or [])
    except Exception:  # noqa: BLE001
        return []


# ----------------------------------------------------------------------------- probe verdicts


def record_probe(ls: AttnLensServer, spec: dict, result: Any) -> None:
    """After ``attnlens.runProbe``: publish the verdict on the line it was started from (kept in the server's
    ``probe_diagnostics``)."""
    uri = spec.get("uri") if isinstance(spec, dict) else None
    if not isinstance(uri, str):
        ls.hover_cache.clear()
        return
    line = spec.get("line")
    line = line if isinstance(line, int) and line >= 0 else 0
    d = result if isinstance(result, dict) else {}
    verdict = str(d.get("verdict", "error"))
    cases = d.get("cases") or []
    passed = sum(1 for c in cases if isinstance(c, dict) and c.get("passed"))
    env = d.get("environment") or {}
    env_hash = env.get("hash", "?") if isinstance(env, dict) else "?"
    sev = T.DiagnosticSeverity.Information if verdict == "pass" else T.DiagnosticSeverity.Warning
    msg = (f"probe {d.get('family', spec.get('family'))} on {d.get('target', spec.get('target'))}: "
           f"{verdict.upper()} ({passed}/{len(cases)} cases) [env {env_hash}]")
    why = d.get("reason") or d.get("message")
    if why and verdict != "pass":
        msg += f": {str(why)[:200]}"
    diag = T.Diagnostic(
        range=T.Range(T.Position(line, 0), T.Position(line, 10_000)),
        message=msg, severity=sev, source=PROBE_SOURCE, code=f"probe.{d.get('family', spec.get('family'))}",
        data={"evidence": d.get("id"), "verdict": verdict},
    )
    kept = [x for x in ls.probe_diagnostics.get(uri, []) if x.range.start.line != line]
    ls.probe_diagnostics[uri] = kept + [diag]
    ls.hover_cache.clear()
    if ls.caps.pull_diagnostics:
        diagnostics.refresh_all(ls)
    else:
        ls.spawn(diagnostics.publish(ls, uri))


# ----------------------------------------------------------------------------- hover sections


def _evidence_section(ctx: HoverContext) -> str | None:
    chain = ctx.chain
    if chain is None:
        return None
    target = probe_target(chain)
    if target is None:
        return None
    try:
        from ...runtime import evidence as ev
    except Exception:  # noqa: BLE001
        return None
    cache = ctx.analysis.q.cache
    rec = None
    for t in {target, target.replace(":", ".")}:
        try:
            rec = ev.latest_for_target(cache, t)
        except Exception:  # noqa: BLE001
            rec = None
        if rec is not None:
            break
    if rec is None:
        fams = families_for(chain)
        if not fams:
            return None
        return (f"**Probe evidence**: none yet for `{target}`. Probe families that can decide it: "
                + ", ".join(f"`{f}`" for f in fams) + " (code action *Run probe*).")
    d = rec.to_dict() if hasattr(rec, "to_dict") else dict(rec)
    cases = d.get("cases") or []
    passed = sum(1 for c in cases if isinstance(c, dict) and c.get("passed"))
    env = d.get("environment") or {}
    summary = env.get("summary", "") if isinstance(env, dict) else ""
    return (f"**Probe evidence** `{d.get('family')}` on `{d.get('target')}`: **{str(d.get('verdict', '?')).upper()}** "
            f"({passed}/{len(cases)} cases), {d.get('created', '')}\n\n"
            f"environment `{env.get('hash', '?') if isinstance(env, dict) else '?'}`: {summary}")


def _drift_section(ctx: HoverContext) -> str | None:
    try:
        from ...upgrade.drift import hover_note  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return None
    symbol = ctx.symbol
    if symbol is None and ctx.chain is not None and ctx.chain.final.kind in (M.PYTHON_FUNCTION, M.PYTHON_CLASS):
        symbol = ctx.chain.final.symbol
    if not symbol:
        return None
    try:
        note = hover_note(ctx.analysis.ws, symbol)
    except Exception:  # noqa: BLE001
        return None
    return f"**Upstream drift**: {note}" if note else None


# ----------------------------------------------------------------------------- code actions


def code_actions(a: Analysis, req: Request, diags) -> list[Action]:
    """The code actions at the start of the request's range (``req``: taken there) for its diagnostics (plain
    :class:`~attnlens.lsp.answers.Diag`, in the request's order): probes to run, quick fixes (worker thread)."""
    conv = req.positions(a)
    path, uri = req.path, req.uri
    line, col = req.core_position(conv)
    out: list[Action] = []
    seen = set()
    chain = None
    try:
        r = a.resolve(path, line, col, 0.5)
        chain = r.chain if r is not None else None
    except Exception:  # noqa: BLE001 - an action request must never fail the editor
        chain = None
    wanted: list[tuple[str, str]] = []
    if chain is not None:
        wanted.extend(probe_candidates(chain))
    for d in diags or []:
        data = d.data if isinstance(d.data, dict) else {}
        fam = data.get("probe") or data.get("probe_family")
        if isinstance(fam, dict):
            fam = fam.get("family") or fam.get("name")
        if isinstance(fam, str):
            try:
                from ...runtime.probes import canonical_family

                fam = canonical_family(fam)
            except Exception:  # noqa: BLE001
                pass
        tgt = data.get("probe_target") or data.get("target")
        if isinstance(fam, str) and fam:
            if not isinstance(tgt, str) and chain is not None:
                tgt = probe_target(chain)
            if isinstance(tgt, str) and tgt:
                wanted.append((fam, tgt))
    for fam, target in wanted:
        if (fam, target) in seen:
            continue
        seen.add((fam, target))
        spec = {"family": fam, "target": target, "uri": uri, "line": req.line, "character": req.character}
        spec.update(probe_requires(chain, target))
        title = f"Run probe {fam} on {target}"
        out.append(Action(title, command=(title, "attnlens.runProbe", [spec])))
    try:
        from .fixes import FixDocument, fix_actions

        out.extend(fix_actions(a, FixDocument.of(req), path, diags, req.caps.resolve_edits))
    except Exception:  # noqa: BLE001 - an action request must never fail the editor
        log.warning("quick fixes failed on %s", path, exc_info=True)
    return out


# ----------------------------------------------------------------------------- probe matrix

PROBE_MATRIX = "attnlens.probeMatrix"
MATRIX_TIMEOUT_S = 3600.0


def _arg_str(v: Any, what: str) -> str:
    if not isinstance(v, str) or not v or any(c in v for c in "\0\n\r"):
        raise ValueError(f"{PROBE_MATRIX}: {what} must be a one-line string")
    return v


def matrix_argv(spec: dict, context: dict) -> list[str]:
    """The ``attnlens probe matrix`` command line for an editor request (argv only, never a shell).

    ``spec``: ``campaign`` (a TOML file), ``fromCheck`` (paths), ``probes`` ([{family, target}]),
    ``hosts`` (``--host`` specs), ``rayAddress``, ``runner`` (ray|local), ``device``, ``resume``."""
    import sys

    if not isinstance(spec, dict):
        raise ValueError(f"{PROBE_MATRIX} takes one object argument")
    argv = [sys.executable, "-m", "attnlens.cli", "probe", "matrix"]
    if spec.get("campaign") is not None:
        argv.append(_arg_str(spec["campaign"], "campaign"))
    for p in spec.get("probes") or []:
        if not isinstance(p, dict):
            raise ValueError(f"{PROBE_MATRIX}: probes are {{family, target}} objects")
        argv += ["--probe", f"{_arg_str(p.get('family'), 'family')}={_arg_str(p.get('target'), 'target')}"]
    paths = spec.get("fromCheck")
    if paths:
        if not isinstance(paths, list):
            raise ValueError(f"{PROBE_MATRIX}: fromCheck is a list of paths")
        argv += ["--from-check", *[_arg_str(x, "fromCheck path") for x in paths]]
    for h in spec.get("hosts") or []:
        argv += ["--host", _arg_str(h, "host")]
    if spec.get("rayAddress"):
        argv += ["--ray-address", _arg_str(spec["rayAddress"], "rayAddress")]
    runner = spec.get("runner") or "ray"
    if runner not in ("ray", "local"):
        raise ValueError(f"{PROBE_MATRIX}: runner is ray or local")
    argv += ["--runner", runner]
    if spec.get("device"):
        argv += ["--device", _arg_str(spec["device"], "device")]
    if spec.get("resume"):
        argv.append("--resume")
    if context.get("python"):
        argv += ["--python", str(context["python"])]
    argv += ["--root", str(context["root"]), "--format", "json"]
    if context.get("cache_root"):
        argv += ["--cache-dir", str(context["cache_root"])]
    else:
        argv.append("--no-cache")
    return argv


def _matrix_context(a: Analysis) -> dict:
    cache = a.q.cache
    return {"python": a.q.target.python, "root": str(a.q.root),
            "cache_root": str(cache.folder.parent) if cache.enabled else None, "cache": cache}


async def run_matrix(spec: dict, context: dict, timeout: float = MATRIX_TIMEOUT_S) -> dict:
    import asyncio
    import json

    argv = matrix_argv(spec, context)
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                stdin=asyncio.subprocess.DEVNULL, cwd=context["root"],
                                                start_new_session=True)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass
        await proc.wait()
        raise ValueError(f"{PROBE_MATRIX}: no result after {timeout:g} s (campaign killed; --resume continues it)")
    try:
        matrix = json.loads(out.decode("utf-8", "replace"))
    except ValueError:
        raise ValueError(f"{PROBE_MATRIX}: exit {proc.returncode}: {err.decode('utf-8', 'replace')[-1500:]}") from None
    if isinstance(matrix, dict) and matrix.get("error"):
        raise ValueError(f"{PROBE_MATRIX}: {matrix['error']}")
    records = []
    cache = context.get("cache")
    if cache is not None and getattr(cache, "enabled", False):
        from ...runtime import evidence as ev

        for r in matrix.get("rows") or []:
            if r.get("case") != "(verdict)":
                continue
            for h in (r.get("hosts") or {}).values():
                rid = h.get("evidence_id")
                rec = ev.read(cache, rid) if isinstance(rid, str) else None
                if rec is not None:
                    records.append(rec.to_dict())
    return {"matrix": matrix, "records": records, "exitCode": proc.returncode,
            "log": err.decode("utf-8", "replace")[-4000:]}


def register(ls: AttnLensServer) -> None:
    ls.hover_sections.register("evidence", _evidence_section, order=60)
    ls.hover_sections.register("drift", _drift_section, order=70)

    @ls.feature(T.TEXT_DOCUMENT_CODE_ACTION, T.CodeActionOptions(code_action_kinds=[T.CodeActionKind.QuickFix],
                                                                 resolve_provider=True))
    async def code_action(params: T.CodeActionParams) -> list[T.CodeAction] | None:
        uri = params.text_document.uri
        path = uri_to_path(uri)
        if path is None or not path.endswith(".py"):
            return None
        req = ls.request(uri, params.range.start)  # the version and the client's capabilities: read here
        diags = list(params.context.diagnostics or [])
        got = await ls.call(code_actions, req, tuple(Diag.from_lsp(d, path) for d in diags))
        return [x.to_lsp(diags) for x in got] if got else None

    @ls.feature(T.CODE_ACTION_RESOLVE)
    async def code_action_resolve(action: T.CodeAction) -> T.CodeAction:
        """The edit of a quick fix, computed when the user picks it (``fixes.resolve_fix``)."""
        data = action.data if isinstance(action.data, dict) else {}
        path = uri_to_path(data["uri"]) if isinstance(data.get("fix"), dict) and isinstance(data.get("uri"), str) else None
        if path is None:
            return action  # a probe action (a command) or not ours: nothing to fill in
        from .fixes import FixDocument, resolve_fix

        uri = data["uri"]
        doc = FixDocument(uri, ls.doc_version(uri), ls.caps.document_changes, ls.encoding)  # loop thread
        got = await ls.call(resolve_fix, doc, action.title, data, path)
        if got is None:
            return action
        edit, why = got
        if edit is not None:
            action.edit = edit.to_lsp()
        if why:
            ls.window_show_message(T.ShowMessageParams(type=T.MessageType.Warning, message=f"AttnLens: {why}"))
        return action

    @ls.command(PROBE_MATRIX)
    async def probe_matrix(*args: Any) -> dict:
        from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidParams

        spec = args[0] if args and isinstance(args[0], dict) else {}
        context = await ls.call(_matrix_context)
        if context is None:
            raise JsonRpcInternalError(f"{PROBE_MATRIX}: no workspace is analysed")
        try:
            return await run_matrix(spec, context)
        except ValueError as e:
            raise JsonRpcInvalidParams(str(e)) from None
