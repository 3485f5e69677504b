"""Quick-fix code actions: upgrade findings with a mechanical fix (``attnlens.upgrade.fixes``).

For each diagnostic of the request's context whose rule has a quick fix (AL108/AL111/AL112/
AL120 from the rules, AL302/AL303/AL304/AL308 from drift), the fix is computed on the
buffer's current text and offered as a code action of kind ``quickfix`` with a
``WorkspaceEdit`` (versioned when the client takes ``documentChanges``), attached to that
diagnostic. Nothing is written by the server: the editor applies the edit when the user
picks it. A diagnostic whose finding no longer matches the buffer (its id's text part
differs: the code changed since it was computed) gets a disabled action that says so.

**Two steps** when the client resolves code actions (``codeAction/resolve`` with ``edit`` among its
``resolveSupport`` properties, as VS Code does): the light-bulb request returns the actions with
their titles only (the offer: plain analysis, memoised, well under a millisecond once warm), and the
edit is computed with libcst when the user picks one (:func:`resolve_fix`: the finding is checked
against the buffer again). A client that does not resolve gets the edit in the first answer.
libcst is imported only when an edit is computed.
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


def _disabled(title: str, reason: str, d: T.Diagnostic | None) -> T.CodeAction:
    return T.CodeAction(title=title, kind=T.CodeActionKind.QuickFix, diagnostics=[d] if d is not None else None,
                        disabled=T.CodeActionDisabled(reason=reason))


def resolves_edits(ls) -> bool:
    """Does the client fill in a code action's ``edit`` through ``codeAction/resolve``?"""
    try:
        ca = ls.client_capabilities.text_document.code_action
        return "edit" in (ca.resolve_support.properties or [])
    except AttributeError:  # any part missing: no
        return False


STALE_TITLE = "Quick fix: the code changed since this finding was computed"
STALE_REASON = ("The finding's target text changed since it was computed; save or wait for the "
                "diagnostics to refresh, then review the fix again.")


def _current_offer(a: Analysis, cur: dict, text: str, rep):
    """(offer or None, stale): the fix of finding ``cur`` on the buffer's ``text`` (the text at the
    analysis' generation: memoised per generation)."""
    from ...upgrade import fixes as FX

    key = (cur["id"], cur["rule"], cur["line"], cur["end_line"], cur["path"], a.generation, id(rep))
    hit = a.fix_offers.get(key)
    if hit is not None:
        return hit
    parts = IDS.split(cur["id"])
    now = IDS.make_id(cur["rule"], "", IDS.span_text(text.splitlines(), cur["line"], cur["end_line"]))
    if parts is None or now[-4:] != parts[2]:
        got = (None, True)  # the buffer's lines under the diagnostic are not those the finding was computed on
    else:
        try:
            got = (FX.offer_for(a.ws, cur, rep), False)
        except Exception:  # noqa: BLE001 - an action request must never fail the editor
            log.warning("fix offer failed for %s", cur["id"], exc_info=True)
            got = (None, False)
    a.fix_offers.put(key, got)
    return got


def fixable_diagnostics(diags) -> list[T.Diagnostic]:
    return [d for d in diags or [] if _fixable(d)]


def warm_offers(a: Analysis, path: str, diags: list[T.Diagnostic]) -> None:
    """Compute (and memoise) the offers of the fixable diagnostics just published for ``path``, so that
    the light-bulb request finds them (worker thread, background priority; no libcst)."""
    if not diags:
        return
    from ...upgrade.drift import memoised_report

    rep = memoised_report(a.ws)
    text = a.q.source_text(path) or ""
    for d in diags:
        _current_offer(a, _finding(d, path), text, rep)


def fix_actions(a: Analysis, ls, path: str, uri: str, rng: T.Range, diags: list[T.Diagnostic]) -> list[T.CodeAction]:
    """Quick-fix actions for the fixable diagnostics among ``diags`` (worker thread); without their
    edits when the client resolves them (:func:`resolve_fix`)."""
    wanted = [d for d in diags or [] if _fixable(d)]
    if not wanted:
        return []
    from ...upgrade.drift import memoised_report

    rep = memoised_report(a.ws)  # the report the drift diagnostics came from (never computed here)
    text = a.q.source_text(path) or ""
    lazy = resolves_edits(ls)
    out: list[T.CodeAction] = []
    seen = set()
    for d in wanted:
        cur = _finding(d, path)
        offer, stale = _current_offer(a, cur, text, rep)
        if stale:
            out.append(_disabled(STALE_TITLE, STALE_REASON, d))
            continue
        if offer is None or offer.key in seen:
            continue
        seen.add(offer.key)
        data = {"finding": cur["id"], "kind": offer.kind}
        if lazy:
            data.update(fix={k: cur[k] for k in ("id", "rule", "line", "end_line", "message", "data")}, uri=uri)
            out.append(T.CodeAction(title=offer.title, kind=T.CodeActionKind.QuickFix, diagnostics=[d],
                                    is_preferred=True, data=data))
            continue
        action = _with_edit(a, ls, path, uri, text, offer, d, data)
        out.append(action)
    return out


def _with_edit(a: Analysis, ls, path: str, uri: str, text: str, offer, d, data: dict) -> T.CodeAction:
    from ...upgrade import fixes as FX

    try:
        new = FX.apply(offer, text)
    except FX.FixError as e:
        return _disabled(offer.title, str(e), d)
    return T.CodeAction(title=offer.title, kind=T.CodeActionKind.QuickFix, diagnostics=[d],
                        edit=_workspace_edit(ls, a, path, uri, text, new), is_preferred=True, data=data)


def resolve_fix(a: Analysis, ls, action: T.CodeAction, path: str) -> tuple[T.CodeAction, str | None]:
    """``codeAction/resolve`` of an action from :func:`fix_actions`: (the action, with its edit when
    the fix still applies to the buffer; else the reason it has none, for the user)."""
    from ...upgrade.drift import memoised_report

    data = action.data
    uri = data["uri"]
    cur = dict(data["fix"], path=path)
    text = a.q.source_text(path) or ""
    offer, stale = _current_offer(a, cur, text, memoised_report(a.ws))
    if stale:
        return action, STALE_REASON
    if offer is None:
        return action, "This fix no longer applies: the finding is gone or upstream changed; refresh the diagnostics."
    if offer.title != action.title:
        return action, f"The fix changed since it was offered: now \"{offer.title}\"; ask for the quick fixes again."
    done = _with_edit(a, ls, path, uri, text, offer, action.diagnostics[0] if action.diagnostics else None,
                      {k: v for k, v in data.items() if k not in ("fix", "uri")})
    if done.edit is None:
        return action, done.disabled.reason if done.disabled else "The fix could not be computed."
    action.edit = done.edit
    return action, None
