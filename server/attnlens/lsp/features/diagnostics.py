"""Rule diagnostics: a small adapter over ``attnlens.rules.engine`` (optional).

Push (``textDocument/publishDiagnostics``) after open/change, debounced per
file with superseded runs cancelled, for clients without pull support; pull
(``textDocument/diagnostic``) for clients that have it, with
``result_id = "<version>:<generation>"`` and "unchanged" reports. When the
rules engine is not importable nothing is published and pulls answer empty.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from lsprotocol import types as T

from ..analysis import Analysis
from ..answers import Diag, Related, to_lsp_all
from ..convert import path_to_uri, uri_to_path
from ..request import View
from ..server import AttnLensServer
from ..worker import IDLE
from .file_diagnostics import extra_diagnostics

if TYPE_CHECKING:
    from ...rules.api import Finding

log = logging.getLogger("attnlens.lsp")

SOURCE = "attnlens"
SYNTAX_ERROR = "syntax-error"  # the code of a syntax error's diagnostic
SEVERITY = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
            "info": T.DiagnosticSeverity.Information, "information": T.DiagnosticSeverity.Information,
            "hint": T.DiagnosticSeverity.Hint}


def engine():
    """The rules engine module (``check_module``, ``prepare_module``) or None when it is not installed."""
    try:
        from ...rules import engine as rules_engine  # type: ignore[import-not-found]
    except Exception:  # noqa: BLE001 - optional feature, may be mid-development
        return None
    return rules_engine


def register(ls: AttnLensServer) -> None:
    @ls.command(CHECK_WORKSPACE)
    async def _check_workspace(*args: Any) -> dict:
        return await check_workspace(ls)

    @ls.feature(T.TEXT_DOCUMENT_DIAGNOSTIC, T.DiagnosticOptions(identifier=SOURCE, inter_file_dependencies=True,
                                                                 workspace_diagnostics=False))
    async def diagnostic(params: T.DocumentDiagnosticParams) -> T.DocumentDiagnosticReport:
        uri = params.text_document.uri
        path = uri_to_path(uri)
        version = ls.doc_version(uri)
        gen = await ls.call(lambda a: a.generation)
        result_id = f"{version}:{gen}"
        if params.previous_result_id == result_id:
            return T.RelatedUnchangedDocumentDiagnosticReport(result_id=result_id)
        items = [] if path is None or not ls.settings.diagnostics else (
            await call_check(ls, check, ls.view(), path, probe_verdicts(ls, uri)) or [])
        warm_fixes(ls, path, items)
        return T.RelatedFullDocumentDiagnosticReport(items=to_lsp_all(items), result_id=result_id)


def check(a: Analysis, view: View, path: str, probe: tuple[Diag, ...] = ()) -> list[Diag]:
    """Every source's diagnostics of ``path``: syntax errors, rules, probe verdicts (``probe``: the file's,
    taken on the loop thread by :func:`probe_verdicts`), upstream drift (worker thread; plain data: the
    handler makes the lsprotocol objects, :func:`~attnlens.lsp.answers.to_lsp_all`)."""
    out = syntax_diagnostics(a, view, path)
    out.extend(_rule_diagnostics(a, view, path))
    try:
        out.extend(extra_diagnostics(a, view, path, probe))
    except Exception:  # noqa: BLE001 - extra sources are optional
        log.warning("extra diagnostics failed on %s", path, exc_info=True)
    a.q.trim_memos()  # (a hundred open files' checks grew the server by 60 MB of memos)
    return out


async def call_check(ls: AttnLensServer, fn, *args: Any, **kw: Any) -> Any:
    """``ls.call(fn, *args)`` for a job that runs the rules (:func:`check`), asked again each time the engine
    stopped between two checks because a request was waiting (``rules.Interrupted``): the request runs
    first, and the next attempt goes on with the next check. A 2,000-line buffer's check no longer makes a
    hover wait for all of it."""
    rules = engine()
    while True:
        try:
            return await ls.call(fn, *args, **kw)
        except Exception as e:  # noqa: BLE001 - only the engine's interruption is retried
            if rules is None or not isinstance(e, rules.Interrupted):
                raise


def probe_verdicts(ls: AttnLensServer, uri: str | None) -> tuple[Diag, ...]:
    """The probe verdicts published on ``uri`` (the server's ``probe_diagnostics``, kept by
    ``runtime_actions.record_probe``) as plain diagnostics: loop thread, before the hop to :func:`check`."""
    return tuple(Diag.from_lsp(d) for d in ls.probe_diagnostics.get(uri or "", []))


def syntax_diagnostics(a: Analysis, view: View, path: str) -> list[Diag]:
    """The syntax errors of the analysed text (``ModuleSummary.syntax_errors``): the rest of the
    file is still analysed (``pyrecover``), so its other diagnostics stay."""
    mod = a.module(path) if path.endswith(".py") else None
    if mod is None or not mod.summary.syntax_errors:
        return []
    conv = view.positions(a)
    return [Diag(conv.span(path, i.line, i.col, i.end_line, i.end_col), f"SyntaxError: {i.message}",
                 T.DiagnosticSeverity.Error, SOURCE, SYNTAX_ERROR)
            for i in mod.summary.syntax_errors]


def _rule_diagnostics(a: Analysis, view: View, path: str) -> list[Diag]:
    rules = engine()
    if rules is None or not path.endswith(".py"):
        return []
    conv = view.positions(a)
    out = []
    try:
        # stops between two checks when a request waits (``a.cancel``: the worker's should_yield); the
        # caller asks again (:func:`call_check`) and the engine goes on with the next check
        findings = rules.check_module(a.ws, path, should_stop=a.cancel) or []
    except rules.Interrupted:
        raise
    except Exception as e:  # noqa: BLE001 - a rules bug must not take the server down
        key = f"{type(e).__name__}: {e}"
        if key not in a.reported_errors:  # once each, per workspace
            a.reported_errors.add(key)
            log.error("rules engine failed on %s: %s", path, key, exc_info=True)
        return []
    for f in findings:
        try:
            out.append(to_diagnostic(conv, path, f))
            dead = dead_code_hint(conv, path, f)
            if dead is not None:
                out.append(dead)
        except Exception:  # noqa: BLE001 - one malformed finding must not hide the rest
            log.warning("cannot convert finding %r", f, exc_info=True)
    return out


def dead_code_hint(conv, path: str, f: "Finding") -> Diag | None:
    """Code a finding proves never runs on this platform (``data["dead_lines"]``): a hint with the
    ``Unnecessary`` tag, which editors render greyed out, like unreachable code."""
    span = (f.data or {}).get("dead_lines")
    if not span or len(span) != 2:
        return None
    first, last = int(span[0]), int(span[1])
    return Diag(conv.line_span(path, first, last),
                f"Never runs on this platform ({f.rule}: line {f.line}).",
                T.DiagnosticSeverity.Hint, SOURCE, f.rule, tags=(T.DiagnosticTag.Unnecessary,))


def to_diagnostic(conv, path: str, f: "Finding") -> Diag:
    """A rule finding as a plain diagnostic (``.to_lsp()`` makes the lsprotocol one)."""
    line = int(f.line or 1)
    col = int(f.col or 0)
    end_line = int(f.end_line or line)
    end_col = int(f.end_col) if f.end_col is not None else len(conv.line_text(path, end_line))
    code = f.rule
    related = []
    for r in f.related or ():
        try:
            rp = str(r.get("path") or path)
            rl = int(r.get("line", 1) or 1)
            related.append(Related(path_to_uri(rp), conv.span(rp, rl, int(r.get("col", 0) or 0),
                                                              int(r.get("end_line") or rl), r.get("end_col")),
                                   str(r.get("message", ""))))
        except Exception:  # noqa: BLE001 - a related location that cannot be converted is dropped, not the finding
            log.debug("cannot convert related location %r", r, exc_info=True)
    return Diag(
        conv.span(path, line, col, end_line, end_col),
        str(f.message),
        SEVERITY.get(str(f.severity).lower(), T.DiagnosticSeverity.Warning),
        SOURCE,
        code,
        href=rule_href(code),
        related=tuple(related) or None,
        tags=(T.DiagnosticTag.Unnecessary,) if f.unnecessary else None,
        data=f.data,
    )


def rule_href(code: Any) -> str | None:
    """The docs/rules.md anchor of a rule id (``codeDescription``), or None for an unknown id."""
    rules = engine()
    r = rules.RULES.get(str(code)) if rules is not None and code else None
    if r is None:
        return None
    from ...rules.sarif import docs_base

    return f"{docs_base()}#{r.anchor}"


PREPARE_AFTER_S = 0.1  # quiet time after a keystroke before the edited buffer is prepared


def schedule(ls: AttnLensServer, uri: str) -> None:
    """After an edit: prepare the buffer's analysis once typing pauses (``PREPARE_AFTER_S``), then
    recompute and publish its diagnostics when the debounce ends (push clients; pull clients ask
    themselves and find the buffer prepared)."""
    if not ls.settings.diagnostics or engine() is None:
        return
    debounce = ls.settings.diagnostics_debounce_ms / 1000.0
    if debounce > PREPARE_AFTER_S:
        ls.debouncer.schedule(("prepare", uri), PREPARE_AFTER_S, lambda: prepare(ls, uri))
    if ls.caps.pull_diagnostics:
        return
    ls.debouncer.schedule(("diagnostics", uri), debounce, lambda: publish(ls, uri))


async def prepare(ls: AttnLensServer, uri: str) -> None:
    """The edited buffer's findings, computed once typing pauses (``PREPARE_AFTER_S``) while the
    diagnostics debounce still runs; the publish at its end finds them memoised for this index
    generation (``rules.prepare_module``). Worker thread, background priority without the idle
    back-off (the pause was already waited for): a request that arrives meanwhile goes first."""
    path = uri_to_path(uri)
    rules = engine()
    if path is None or not path.endswith(".py") or rules is None:
        return

    def job(a):
        try:
            rules.prepare_module(a.ws, path, should_stop=a.cancel)  # stops between checks when a request waits
        except rules.Interrupted:
            return False
        except Exception:  # noqa: BLE001 - the check itself reports problems
            log.debug("preparing %s failed", path, exc_info=True)
        return True

    version = ls.doc_version(uri)
    # after each stop, again behind the requests that made it stop, while the buffer is the one prepared
    while await ls.call(job, priority=IDLE, backoff=False) is False and ls.doc_version(uri) == version:
        pass


async def publish(ls: AttnLensServer, uri: str) -> None:
    path = uri_to_path(uri)
    if path is None:
        return
    version = ls.doc_version(uri)
    t0 = time.perf_counter()
    started: list[float] = []

    def timed(a, *args):
        started.append(time.perf_counter())
        return check(a, *args)

    # the debounce already waited for a quiet moment: run ahead of background indexing
    items = await call_check(ls, timed, ls.view(), path, probe_verdicts(ls, uri))
    if log.isEnabledFor(logging.DEBUG) and started:
        t1 = time.perf_counter()
        log.debug("diagnostics %s v%s: %.1f ms (%.1f ms waiting for the worker)", os.path.basename(path), version,
                  (t1 - t0) * 1000, (started[0] - t0) * 1000)
    if items is None or ls.doc_version(uri) != version:
        return  # superseded by a newer edit: its own run publishes
    ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=to_lsp_all(items),
                                                                    version=version))
    warm_fixes(ls, path, items)


def warm_fixes(ls: AttnLensServer, path: str | None, items: list[Diag]) -> None:
    """In the background: the quick-fix offers of the diagnostics just sent (``fixes.warm_offers``)."""
    from .fixes import fixable_diagnostics, warm_offers

    wanted = fixable_diagnostics(items) if path is not None else []
    if wanted:
        ls.spawn(ls.call(warm_offers, path, wanted, priority=IDLE))


def forget(ls: AttnLensServer, uri: str) -> None:
    ls.debouncer.cancel(("prepare", uri))
    ls.debouncer.cancel(("diagnostics", uri))
    if engine() is None:
        return
    if uri in ls.workspace_checked_uris:
        # the workspace check published this file: keep its findings in the Problems panel, now for the
        # text on disk (the closed buffer's edits are gone)
        asyncio.ensure_future(_publish_from_disk(ls, uri))
    elif not ls.caps.pull_diagnostics:
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=[]))


CHECK_WORKSPACE = "attnlens.checkWorkspace"


async def _publish_from_disk(ls: AttnLensServer, uri: str) -> None:
    path = uri_to_path(uri)
    if path is None:
        return
    items = await call_check(ls, check, ls.view(), path, probe_verdicts(ls, uri), priority=IDLE)
    if items is not None and ls.doc_version(uri) is None:
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=to_lsp_all(items)))


async def check_workspace(ls: AttnLensServer) -> dict:
    """Every workspace file's findings published to the client (the Problems panel keeps them while the
    files are closed). Each file is checked as its own background job, so hovers and other requests go
    first; open buffers are left to their own (debounced) diagnostics."""
    rules = engine()
    if rules is None:
        return {"files": 0, "findings": 0, "error": "the rules engine is not available"}
    files = await ls.call(lambda a: sorted(p for p in a.q.workspace_files() if p.endswith(".py")), priority=IDLE) or []
    done = ls.workspace_checked_uris
    n_findings = 0
    t0 = time.perf_counter()
    for path in files:
        uri = path_to_uri(path)
        if ls.doc_version(uri) is not None:
            continue  # open: its buffer's diagnostics are current
        items = await call_check(ls, check, ls.view(), path, probe_verdicts(ls, uri), priority=IDLE)
        if items is None:
            continue
        done.add(uri)
        n_findings += len(items)
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=uri, diagnostics=to_lsp_all(items)))
    return {"files": len(files), "findings": n_findings, "seconds": round(time.perf_counter() - t0, 3)}


def refresh_all(ls: AttnLensServer) -> None:
    """After a project-wide change: re-pull (refresh) or re-publish every open file."""
    if engine() is None or not ls.settings.diagnostics:
        return
    if ls.caps.pull_diagnostics:
        if ls.caps.diagnostic_refresh:
            ls.spawn(ls.workspace_diagnostic_refresh_async(None))
        return
    for uri in list(ls.open_docs.values()):
        schedule(ls, uri)
