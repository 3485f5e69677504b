"""Quick-fix code actions: upgrade findings with a mechanical fix (``attnlens.upgrade.fixes``).

For each diagnostic of the request's context whose rule has a quick fix (AL108/AL111/AL112/
AL120 from the rules, AL302/AL303/AL304/AL308 from drift), the fix is computed on the
buffer's current text and offered as a code action of kind ``quickfix`` with a
``WorkspaceEdit`` (versioned when the client takes ``documentChanges``), attached to that
diagnostic. Nothing is written by the server: the editor applies the edit when the user
picks it. A diagnostic whose finding no longer matches the buffer (its id's text part
differs: the code changed since it was computed) gets a disabled action that says so.
libcst is imported only here, when such a diagnostic is in the request.
"""

from __future__ import annotations

import logging

from lsprotocol import types as T

from ...rules import ids as IDS
from ..analysis import Analysis

log = logging.getLogger("attnlens.lsp")

FIX_SOURCES = ("attnlens", "attnlens-drift")


def _fixable(d: T.Diagnostic) -> bool:
    if d.source not in FIX_SOURCES or not isinstance(d.data, dict) or not isinstance(d.data.get("id"), str):
        return False  # the cheap tests first: most diagnostics of a request are not ours
    from ...upgrade.fixes import FIX_RULES

    return str(d.code) in FIX_RULES


def _finding(d: T.Diagnostic, path: str) -> dict:
    """The finding behind a diagnostic: its ``data`` carries the id and everything a fix needs."""
    return {"id": d.data["id"], "rule": str(d.code), "path": path, "line": d.range.start.line + 1,
            "end_line": d.range.end.line + 1, "message": d.message, "data": d.data}


def text_edit(ls, a: Analysis, path: str, old: str, new: str) -> T.TextEdit:
    """One edit replacing the changed lines only (the rest of the buffer is not touched)."""
    p_lines, q_lines = old.split("\n"), new.split("\n")
    p = 0
    while p < min(len(p_lines), len(q_lines)) and p_lines[p] == q_lines[p]:
        p += 1
    s = 0
    while s < min(len(p_lines), len(q_lines)) - p and p_lines[-1 - s] == q_lines[-1 - s]:
        s += 1
    conv = ls.positions(a)
    if s >= 1:
        rng = conv.range(path, p + 1, 0, len(p_lines) - s + 1, 0)
        repl = "".join(x + "\n" for x in q_lines[p:len(q_lines) - s])
    else:
        rng = conv.range(path, p + 1, 0, len(p_lines), len(p_lines[-1]))
        repl = "\n".join(q_lines[p:])
    return T.TextEdit(range=rng, new_text=repl)


def _workspace_edit(ls, a: Analysis, path: str, uri: str, old: str, new: str) -> T.WorkspaceEdit:
    edit = text_edit(ls, a, path, old, new)
    version = ls.doc_version(uri)
    if version is not None and _document_changes(ls):
        return T.WorkspaceEdit(document_changes=[T.TextDocumentEdit(
            text_document=T.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=[edit])])
    return T.WorkspaceEdit(changes={uri: [edit]})


def _document_changes(ls) -> bool:
    """Does the client take versioned ``documentChanges`` (then a stale buffer rejects the edit)?"""
    try:
        ws = getattr(ls.client_capabilities, "workspace", None)
        we = getattr(ws, "workspace_edit", None) if ws is not None else None
        return bool(getattr(we, "document_changes", False))
    except Exception:  # noqa: BLE001
        return False


def _disabled(title: str, reason: str, d: T.Diagnostic) -> T.CodeAction:
    return T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, diagnostics=[d],
                        disabled=T.CodeActionDisabled(reason=reason))


def fix_actions(a: Analysis, ls, path: str, uri: str, rng: T.Range, diags: list[T.Diagnostic]) -> list[T.CodeAction]:
    """Quick-fix actions for the fixable diagnostics among ``diags`` (worker thread)."""
    wanted = [d for d in diags or [] if _fixable(d)]
    if not wanted:
        return []
    from ...upgrade import fixes as FX
    from ...upgrade.drift import memoised_report

    rep = memoised_report(a.ws)  # the report the drift diagnostics came from (never computed here)
    text = a.ws.index.source_text(path) or ""
    lines = text.splitlines()
    out: list[T.CodeAction] = []
    seen = set()
    for d in wanted:
        cur = _finding(d, path)
        parts = IDS.split(cur["id"])
        now = IDS.make_id(cur["rule"], "", IDS.span_text(lines, cur["line"], cur["end_line"]))
        if parts is None or now[-4:] != parts[2]:
            # the buffer's lines under the diagnostic are not those the finding was computed on
            out.append(_disabled("Quick fix: the code changed since this finding was computed",
                                 "The finding's target text changed since it was computed; save or wait for the "
                                 "diagnostics to refresh, then review the fix again.", d))
            continue
        fid = cur["id"]
        try:
            offer = FX.offer_for(a.ws, cur, rep)
        except Exception:  # noqa: BLE001 - an action request must never fail the editor
            log.warning("fix offer failed for %s", fid, exc_info=True)
            offer = None
        if offer is None or offer.key in seen:
            continue
        seen.add(offer.key)
        try:
            new = FX.apply(offer, text)
        except FX.FixError as e:
            out.append(_disabled(offer.title, str(e), d))
            continue
        out.append(T.CodeAction(title=offer.title, kind=T.CodeActionKind.QuickFix, diagnostics=[d],
                                edit=_workspace_edit(ls, a, path, uri, text, new), is_preferred=True,
                                data={"finding": fid, "kind": offer.kind}))
    return out
