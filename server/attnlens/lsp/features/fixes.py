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

The worker functions read the loop thread's state only through a :class:`FixDocument` (the document's URI
and version, the client's ``documentChanges`` capability, the position encoding) taken before the hop, and
answer plain :class:`~attnlens.lsp.answers.Action` / :class:`~attnlens.lsp.answers.FileEdit` records; the
handlers (``runtime_actions.register``) make the lsprotocol objects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...rules import ids as IDS
from ..analysis import Analysis
from ..answers import Action, Diag, FileEdit
from ..convert import UTF16, Positions, Span

log = logging.getLogger("attnlens.lsp")

FIX_SOURCES = ("attnlens", "attnlens-drift")


@dataclass(frozen=True)
class FixDocument:
    """What a quick fix's edit needs of the loop thread: the document's URI and version (None: not open), whether
    the client takes versioned ``documentChanges``, and the position encoding. Taken before the worker hop."""

    uri: str
    version: int | None
    document_changes: bool
    encoding: str = UTF16

    @classmethod
    def of(cls, req) -> "FixDocument":
        """From a :class:`~attnlens.lsp.request.Request` (its ``caps``)."""
        return cls(req.uri, req.version, req.caps.document_changes, req.encoding)

    def positions(self, a) -> Positions:
        return Positions(a.line_text, self.encoding)


def _fixable(d: Diag) -> bool:
    if d.source not in FIX_SOURCES or not isinstance(d.data, dict) or not isinstance(d.data.get("id"), str):
        return False  # the cheap tests first: most diagnostics of a request are not ours
    from ...upgrade.fixes import FIX_RULES

    return str(d.code) in FIX_RULES


def _finding(d: Diag, path: str) -> dict:
    """The finding behind a diagnostic: its ``data`` carries the id and everything a fix needs."""
    return {"id": d.data["id"], "rule": str(d.code), "path": path, "line": d.span.line + 1,
            "end_line": d.span.end_line + 1, "message": d.message, "data": d.data}


def text_edit(conv, path: str, old: str, new: str) -> tuple[Span, str]:
    """One edit replacing the changed lines only (the rest of the buffer is not touched): (its range, its text)."""
    p_lines, q_lines = old.split("\n"), new.split("\n")
    p = 0
    while p < min(len(p_lines), len(q_lines)) and p_lines[p] == q_lines[p]:
        p += 1
    s = 0
    while s < min(len(p_lines), len(q_lines)) - p and p_lines[-1 - s] == q_lines[-1 - s]:
        s += 1
    if s >= 1:
        rng = conv.span(path, p + 1, 0, len(p_lines) - s + 1, 0)
        repl = "".join(x + "\n" for x in q_lines[p:len(q_lines) - s])
    else:
        rng = conv.span(path, p + 1, 0, len(p_lines), len(p_lines[-1]))
        repl = "\n".join(q_lines[p:])
    return rng, repl


def _workspace_edit(conv, doc: FixDocument, path: str, old: str, new: str) -> FileEdit:
    """The edit of ``doc``: versioned when the document is open and the client takes ``documentChanges``
    (both read on the loop thread, in ``doc``)."""
    rng, repl = text_edit(conv, path, old, new)
    version = doc.version if doc.version is not None and doc.document_changes else None
    return FileEdit(doc.uri, rng, repl, version)


def _disabled(title: str, reason: str, d: int | None) -> Action:
    return Action(title, diagnostic=d, disabled=reason)


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


def fixable_diagnostics(diags) -> list[Diag]:
    return [d for d in diags or [] if _fixable(d)]


def warm_offers(a: Analysis, path: str, diags: list[Diag]) -> None:
    """Compute (and memoise) the offers of the fixable diagnostics just published for ``path``, so that
    the light-bulb request finds them (worker thread, background priority; no libcst)."""
    if not diags:
        return
    from ...upgrade.drift import memoised_report

    rep = memoised_report(a.ws)
    text = a.q.source_text(path) or ""
    for d in diags:
        _current_offer(a, _finding(d, path), text, rep)


def fix_actions(a: Analysis, doc: FixDocument, path: str, diags, lazy: bool) -> list[Action]:
    """Quick-fix actions for the fixable diagnostics among ``diags`` (plain :class:`Diag`; each action names its
    diagnostic by index), worker thread; without their edits when the client resolves them (``lazy``,
    :func:`resolve_fix`)."""
    wanted = [(i, d) for i, d in enumerate(diags or []) if _fixable(d)]
    if not wanted:
        return []
    from ...upgrade.drift import memoised_report

    rep = memoised_report(a.ws)  # the report the drift diagnostics came from (never computed here)
    text = a.q.source_text(path) or ""
    out: list[Action] = []
    seen = set()
    for i, d in wanted:
        cur = _finding(d, path)
        offer, stale = _current_offer(a, cur, text, rep)
        if stale:
            out.append(_disabled(STALE_TITLE, STALE_REASON, i))
            continue
        if offer is None or offer.key in seen:
            continue
        seen.add(offer.key)
        data = {"finding": cur["id"], "kind": offer.kind}
        if lazy:
            data.update(fix={k: cur[k] for k in ("id", "rule", "line", "end_line", "message", "data")}, uri=doc.uri)
            out.append(Action(offer.title, diagnostic=i, is_preferred=True, data=data))
            continue
        out.append(_with_edit(a, doc, path, text, offer, i, data))
    return out


def _with_edit(a: Analysis, doc: FixDocument, path: str, text: str, offer, d: int | None, data: dict) -> Action:
    from ...upgrade import fixes as FX

    try:
        new = FX.apply(offer, text)
    except FX.FixError as e:
        return _disabled(offer.title, str(e), d)
    return Action(offer.title, diagnostic=d, edit=_workspace_edit(doc.positions(a), doc, path, text, new),
                  is_preferred=True, data=data)


def resolve_fix(a: Analysis, doc: FixDocument, title: str, data: dict, path: str) -> tuple[FileEdit | None, str | None]:
    """``codeAction/resolve`` of an action from :func:`fix_actions` (its ``title`` and ``data``; ``doc``: its
    ``data["uri"]`` as the loop thread saw it): (the edit when the fix still applies to the buffer, else None
    and the reason it has none, for the user)."""
    from ...upgrade.drift import memoised_report

    cur = dict(data["fix"], path=path)
    text = a.q.source_text(path) or ""
    offer, stale = _current_offer(a, cur, text, memoised_report(a.ws))
    if stale:
        return None, STALE_REASON
    if offer is None:
        return None, "This fix no longer applies: the finding is gone or upstream changed; refresh the diagnostics."
    if offer.title != title:
        return None, f"The fix changed since it was offered: now \"{offer.title}\"; ask for the quick fixes again."
    done = _with_edit(a, doc, path, text, offer, None, {k: v for k, v in data.items() if k not in ("fix", "uri")})
    if done.edit is None:
        return None, done.disabled if done.disabled is not None else "The fix could not be computed."
    return done.edit, None
