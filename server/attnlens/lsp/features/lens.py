"""Code lens, inlay hints, the Kernels grouping and Copy as Markdown.

- code lens over backend classes (the whole backend's kernels) and over the methods of a backend's
  classes (impl, builder, metadata, the backend itself, CustomOp replacements) that reach kernels:
  ``4 kernels · 2 not installed · 1 dummy``; a click peeks at the kernels (client command
  ``attnlens.showKernels``);
- inlay hints after each kernel call: ``→ cache_kernels.cu:828`` (a link to the kernel),
  ``→ not installed``, ``→ dummy``, ``→ not taken here``; the tooltip is the hover's verdict;
- ``attnlens.kernels``: per backend, its distinct final targets with the call sites that reach each
  (the VS Code tree's Kernels grouping);
- ``attnlens.markdown`` ``[uri, line, character]``: the whole tree at a position as Markdown (the
  hover's Copy as Markdown link; links relative to the workspace).

Code lens and hints come from the per-file kernel call sites of :mod:`..kernels` (the chains the
resolver's site memo keeps, the same as ``attnlens sites``), computed a few sites per worker job, so
a hover is never queued behind a whole file. Settings ``codeLens`` and ``inlayHints`` turn them off
(the client is asked to refresh when they change).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcInvalidParams

from ... import model as M
from ...render import chain_markdown, verdict_markdown, verdicts
from ..analysis import Analysis
from ..convert import Span, link, path_to_uri, uri_to_path
from ..kernels import (backend_summary, complete_sites, count, current_sites, file_sites, group_targets,
                       provisional_sites, sites_in)
from ..request import Request, View
from ..server import AttnLensServer

log = logging.getLogger("attnlens.lsp")

KERNELS = "attnlens.kernels"
MARKDOWN = "attnlens.markdown"
SHOW_KERNELS = "attnlens.showKernels"  # client command: peek at locations
STEP_S = 0.03  # one worker job computes the sites of a file for about this long
MAX_STEPS = 400


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_CODE_LENS, T.CodeLensOptions(resolve_provider=False))
    async def code_lens(params: T.CodeLensParams) -> list[T.CodeLens] | None:
        path = uri_to_path(params.text_document.uri)
        if path is None or not ls.settings.code_lens or not await sites_ready(ls, path):
            return None
        got = await ls.call(lenses, ls.view(), path)
        if got is None:
            return None
        if got.registry_pending:  # the registry is not there yet (indexing): backend lenses come with it
            ls.spawn(_refresh_after_registry(ls))
        return [x.to_lsp() for x in got.lenses]

    @ls.feature(T.TEXT_DOCUMENT_INLAY_HINT, T.InlayHintOptions(resolve_provider=True))
    async def inlay_hint(params: T.InlayHintParams) -> list[T.InlayHint] | None:
        path = uri_to_path(params.text_document.uri)
        if path is None or not ls.settings.inlay_hints or not await sites_ready(ls, path):
            return None
        rng = params.range
        got = await ls.call(hints, ls.view(), path, rng.start.line + 1, rng.end.line + 1)
        return [x.to_lsp() for x in got] if got is not None else None

    @ls.feature(T.INLAY_HINT_RESOLVE)
    async def inlay_hint_resolve(hint: T.InlayHint) -> T.InlayHint:
        data = hint.data if isinstance(hint.data, dict) else None
        if data is None or not isinstance(data.get("path"), str):
            return hint
        tip = await ls.call(hint_tooltip, data["path"], data.get("line"), data.get("col"), data.get("end"))
        if tip and isinstance(hint.label, list) and hint.label:
            hint.label[0].tooltip = T.MarkupContent(T.MarkupKind.Markdown, tip)
        return hint

    @ls.command(KERNELS)
    async def kernels(*args: Any) -> list[dict]:
        return await ls.call(kernels_json) or []

    @ls.command(MARKDOWN)
    async def markdown(*args: Any) -> dict:
        arg = args[0] if len(args) == 1 and isinstance(args[0], dict) else None
        if arg is not None:
            args = (arg.get("uri"), arg.get("line"), arg.get("character"))
        if len(args) != 3 or not isinstance(args[0], str) or not all(isinstance(x, int) for x in args[1:]):
            raise JsonRpcInvalidParams(f"{MARKDOWN} takes [uri, line, character] or [{{uri, line, character}}] "
                                       "(0-based, LSP position encoding)")
        req = ls.request(args[0], T.Position(args[1], args[2]))
        if req is None:
            raise JsonRpcInvalidParams(f"{MARKDOWN}: not a file URI: {args[0]}")
        got = await ls.call(markdown_at, req)
        return got or {"markdown": None, "error": "nothing kernel-related at this position"}

    ls.settings_listeners.append(lambda old, new: _settings_changed(ls, old, new))


async def sites_ready(ls: AttnLensServer, path: str) -> bool:
    """Make the kernel call sites of ``path`` available. The first time, they are computed in short worker jobs
    (requests queued meanwhile go first); after an edit, the answer uses the last complete sites moved to where
    their calls are now, the file is traced again in the background when the user pauses, and the client is
    asked to refresh its lenses and hints when that is done."""
    for _ in range(MAX_STEPS):
        state = await ls.call(_step, path)
        if state is None:  # no workspace
            return False
        if state != "pending":
            if state == "provisional" and path not in ls.retracing:
                ls.retracing.add(path)
                ls.spawn(_finish(ls, path))
            return True
    return False


def _step(a: Analysis, path: str) -> str:
    """One short job: "done", or "provisional" (the last complete sites stand in: no tracing on the request
    path after an edit), or "pending" (never complete: keep stepping)."""
    if provisional_sites(a, path) is not None and complete_sites(a, path) is None:
        return "provisional"
    if file_sites(a, path, STEP_S) is not None:
        return "done"
    return "pending"


async def _finish(ls: AttnLensServer, path: str) -> None:
    try:
        for _ in range(MAX_STEPS):
            done = await ls.idle(lambda a: file_sites(a, path, STEP_S) is not None)
            if done is None or done:
                break
    finally:
        ls.retracing.discard(path)
    caps = ls.client_capabilities.workspace if ls.client_capabilities else None
    if caps and caps.code_lens and caps.code_lens.refresh_support and ls.settings.code_lens:
        await _quiet(ls.workspace_code_lens_refresh_async(None))
    if caps and caps.inlay_hint and caps.inlay_hint.refresh_support and ls.settings.inlay_hints:
        await _quiet(ls.workspace_inlay_hint_refresh_async(None))


def _settings_changed(ls: AttnLensServer, old, new) -> None:
    caps = ls.client_capabilities.workspace if ls.client_capabilities else None
    if old.code_lens != new.code_lens and caps and caps.code_lens and caps.code_lens.refresh_support:
        ls.spawn(_quiet(ls.workspace_code_lens_refresh_async(None)))
    if old.inlay_hints != new.inlay_hints and caps and caps.inlay_hint and caps.inlay_hint.refresh_support:
        ls.spawn(_quiet(ls.workspace_inlay_hint_refresh_async(None)))


async def _quiet(coro) -> None:
    try:
        await asyncio.wait_for(coro, 5)
    except Exception:  # noqa: BLE001 - a client that cannot refresh asks again on the next edit
        log.debug("refresh request failed", exc_info=True)


# -- code lens ----------------------------------------------------------------------------------


def _target_locations(targets) -> list[dict]:
    return [{"uri": path_to_uri(t.name.path), "line": max((t.name.line or 1) - 1, 0)}
            for t in targets if t.reachable is not False and t.name.path]


@dataclass(frozen=True)
class Lens:
    """A code lens as plain data: its range and the ``attnlens.showKernels`` command's title and arguments."""

    span: Span
    title: str
    arguments: list

    def to_lsp(self) -> T.CodeLens:
        return T.CodeLens(range=self.span.range(), command=T.Command(title=self.title, command=SHOW_KERNELS,
                                                                     arguments=self.arguments))


@dataclass(frozen=True)
class Lenses:
    """The code lens of a file; ``registry_pending``: the registry is not there yet (the handler asks for a
    refresh when it is)."""

    lenses: tuple[Lens, ...]
    registry_pending: bool = False


def _lens(conv, path: str, uri: str, line: int, name: str, col: int, targets) -> Lens | None:
    c = count(targets)
    if not c:
        return None
    span = conv.span(path, line, col, line, col + len(name))
    return Lens(span, c.words(), [uri, {"line": span.line, "character": span.character}, _target_locations(targets)])


def lenses(a: Analysis, view: View, path: str) -> Lenses:
    """Backend classes: the whole backend's kernels; methods of a backend's classes: their own (worker thread)."""
    mod = a.module(path)
    if mod is None:
        return Lenses(())
    sites = current_sites(a, path)
    conv = view.positions(a)
    uri = path_to_uri(path)
    out = []
    for q, c in mod.summary.classes.items():
        role = a.role_of(f"{mod.name}.{q}")
        if role is None:
            continue
        col = a.line_text(path, c.line).find(c.name, c.col)
        if role[1] == "backend":
            out.append(_lens(conv, path, uri, c.line, c.name, max(col, 0), group_targets(role[0].call_sites)))
        for fq in c.methods.values():
            f = mod.summary.functions.get(fq)
            mine = sites_in(sites, fq)
            if f is None or not mine:
                continue
            fcol = a.line_text(path, f.line).find(f.name, f.col)
            out.append(_lens(conv, path, uri, f.line, f.name, max(fcol, 0), group_targets(mine)))
    return Lenses(tuple(x for x in out if x is not None), a._backends is None)


async def _refresh_after_registry(ls: AttnLensServer) -> None:
    await ls.idle(lambda a: a.backends())
    caps = ls.client_capabilities.workspace if ls.client_capabilities else None
    if caps and caps.code_lens and caps.code_lens.refresh_support:
        await _quiet(ls.workspace_code_lens_refresh_async(None))


# -- inlay hints --------------------------------------------------------------------------------


def hint_label(chain: M.Chain) -> tuple[str, tuple[str, int] | None]:
    """``→ cache_kernels.cu:828`` / ``→ not installed`` / ``→ dummy`` / ``→ not taken here`` and the location
    the label links to (None: no link); ``("", None)``: no hint (nothing resolved to show)."""
    live, dead = verdicts(chain)
    if not live:
        return ("→ not taken here", None) if dead else ("", None)
    shown = [v for v in live if v.final.kind != M.UNRESOLVED]
    if not shown:
        return "", None
    if len(shown) > 2:
        return f"→ {len(shown)} targets", None
    words = []
    for v in shown:
        nm = v.name
        if v.final.kind == M.NOT_INSTALLED:
            words.append("not installed")
        elif v.final.kind == M.DUMMY:
            words.append("dummy")
        elif nm.path and nm.line:
            words.append(f"{os.path.basename(nm.path)}:{nm.line}")
        else:
            words.append(nm.short)
    only = shown[0].name if len(shown) == 1 else None  # (a missing package: the import that names it)
    target = (only.path, only.line) if only is not None and only.path and only.line else None
    return "→ " + " | ".join(dict.fromkeys(words)), target


@dataclass(frozen=True)
class Hint:
    """An inlay hint as plain data: where it goes, its label, where the label links to, and the call site it
    follows (``data``, for ``inlayHint/resolve``)."""

    line: int
    character: int
    label: str
    target: Span | None
    data: dict

    def to_lsp(self) -> T.InlayHint:
        part = T.InlayHintLabelPart(self.label, location=self.target.location() if self.target is not None else None)
        return T.InlayHint(position=T.Position(self.line, self.character), label=[part], padding_left=True,
                           data=self.data)


def hints(a: Analysis, view: View, path: str, first_line: int, last_line: int) -> list[Hint]:
    """The hints of the call sites ending in the range; the tooltip (the hover's verdict) comes with
    inlayHint/resolve, when the user points at one."""
    conv = view.positions(a)
    out = []
    for s in current_sites(a, path):
        if not (first_line <= s.end_line <= last_line):
            continue
        label, target = hint_label(s.chain)
        if not label:
            continue
        out.append(Hint(*conv.point(path, s.end_line, s.end_col), label,
                        conv.location_span(target[0], target[1]) if target else None,
                        {"path": path, "line": s.line, "col": s.col, "end": [s.end_line, s.end_col]}))
    return out


def hint_tooltip(a: Analysis, path: str, line: int | None, col: int | None, end=None) -> str | None:
    """The verdict of the call site a hint follows (Markdown), or None when it is gone. ``end`` tells apart two
    sites that start together (`get_group().send(x)` and `get_group()`)."""
    for s in current_sites(a, path):
        if (s.line, s.col) == (line, col) and (not end or [s.end_line, s.end_col] == list(end)):
            return "  \n".join(verdict_markdown(s.chain, link, a.q.platform_defaults()))
    return None


# -- commands -----------------------------------------------------------------------------------


def kernels_json(a: Analysis) -> list[dict]:
    """Per backend: its distinct final targets (name, kind, where, how it stands here) and their call sites."""
    out = []
    for e in a.backends():
        targets = group_targets(e.call_sites)
        out.append({"name": e.name, "kind": e.kind, "class": e.cls, "counts": count(targets).words(),
                    "targets": [t.to_json() for t in targets]})
    return out


def markdown_at(a: Analysis, req: Request) -> dict | None:
    """The whole tree at a position (or a backend's summary on its class) as Markdown for pasting."""
    path = req.path
    line, col = req.core_position(req.positions(a))
    root = str(a.q.root)

    def rel(p: str, ln: int) -> str:
        r = os.path.relpath(p, root) if p.startswith(root + os.sep) else p.split("site-packages" + os.sep)[-1]
        return f"{r}#L{ln}"

    d = a.def_at(path, line, col)
    if d is None:  # anywhere on a class line (the backends view knows a class's line, not its column)
        d = next((x for x in [a.defref_at_line(path, line)] if x is not None and x.kind == "class"), None)
    chain = None
    if d is not None and d.kind == "class":
        role = a.role_of(d.dotted)
        if role is None:
            return None
        return {"markdown": backend_summary(a, role, rel, max_targets=1000), "title": d.name}
    if d is not None:
        chain = a.q.trace_symbol(d.dotted)
    else:
        r = a.resolve(path, line, col, None)
        chain = r.chain if r is not None else None
    if chain is None:
        return None
    where = f"{os.path.basename(path)}:{line}"
    title = f"### AttnLens: `{a.line_text(path, line).strip()[:80]}` ({where})"
    return {"markdown": chain_markdown(chain, title=title, link=rel, defaults=a.q.platform_defaults()),
            "title": where}
