"""textDocument/hover: the chain behind a name or call, from cache, within a budget.

The worker function (:func:`compute`) gets a frozen :class:`~attnlens.lsp.request.Request` and returns a
:class:`HoverAnswer` (plain data); the handler makes the ``Hover`` (:func:`to_hover`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lsprotocol import types as T

from ... import model as M
from ...render import leaf_paths
from ..analysis import Analysis
from ..convert import Span, path_to_uri
from ..hover import HoverContext, final_python_function, render, signature_of
from ..kernels import class_kernels
from ..request import Request
from ..server import AttnLensServer
from ..worker import IDLE

log = logging.getLogger("attnlens.lsp")

_NOTHING = object()  # cached "nothing to show here"


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_HOVER)
    async def hover(params: T.HoverParams) -> T.Hover | None:
        uri = params.text_document.uri
        pos = params.position
        key = (uri, ls.doc_version(uri), ls.epoch, pos.line, pos.character)
        hit = ls.hover_cache.get(key)  # the hot path: an answer from the loop thread, nothing else built
        if hit is not None:
            return None if hit is _NOTHING else hit
        req = ls.request(uri, pos)
        if req is None:
            return None
        budget = req.settings.hover_budget_ms / 1000.0
        answer = await ls.call(compute, req, budget)
        if answer is None:
            ls.hover_cache.put(key, _NOTHING)
            return None
        h = to_hover(answer, req.markdown)
        if answer.partial:
            # finish the chain in the background: the next hover is complete
            ls.spawn(ls.call(compute, req, None, priority=IDLE))
        elif answer.cacheable:
            ls.hover_cache.put(key, h)
        return h


@dataclass(frozen=True)
class HoverAnswer:
    """What the worker answers for a hover: Markdown, the span it covers, and how to keep it."""

    text: str
    span: Span | None
    partial: bool = False  # a partial chain: finished in the background
    cacheable: bool = True


def compute(a: Analysis, req: Request, budget_s: float | None) -> HoverAnswer | None:
    """The hover at the request's position, or None (worker thread: reads only ``req`` and the analysis)."""
    conv = req.positions(a)
    path = req.path
    line, col = req.core_position(conv)
    ctx = HoverContext(a, path, line, col, max_kernels=req.settings.max_hover_kernels,
                       defaults=a.q.platform_defaults(), sections=req.hover_sections)
    if req.settings.hover_copy_link:
        ctx.copy_args = {"uri": path_to_uri(path), "line": req.line, "character": req.character}
    try:
        d = a.def_at(path, line, col)
        if d is not None:
            ctx.definition, ctx.symbol = d, d.dotted
            span = conv.span(path, d.line, d.col, d.line, d.end_col)
            if d.kind != "class":
                # the same door as `attnlens trace` on a `def`: Query.trace_symbol
                ctx.chain = a.q.trace_symbol(d.dotted, budget_s=budget_s)
            elif a.role_of(d.dotted) is None:
                ck = class_kernels(a, d, budget_s)
                ctx.class_kernels = ck
                if ck is None:
                    ctx.cacheable = False
        else:
            res = a.resolve(path, line, col, budget_s)
            if res is None:
                return None
            ref = res.ref
            ctx.chain = res.chain
            leaves = leaf_paths(res.chain)
            if len(leaves) == 1 and leaves[0].final.kind == M.PYTHON_CLASS:
                ctx.symbol = leaves[0].final.symbol
            span = conv.span(path, ref.line, ref.col, ref.line, ref.end_col)
        if ctx.chain is not None and ctx.relevant():
            fp = final_python_function(a, ctx.chain)
            ctx.signature = signature_of(a, *fp) if fp else None
    except Exception as e:  # noqa: BLE001 - show the failure where the user looks
        log.warning("hover at %s:%s:%s failed", path, line, col, exc_info=True)
        text = f"AttnLens could not resolve this position: `{type(e).__name__}: {str(e)[:200]}`"
        return HoverAnswer(text, None, False, False)
    text = render(ctx)
    if text is None:
        return None
    # a provisional chain (marked with the never-selected set of before the last edits) is answered again in the
    # background as well, once the set is checked: the next hover there is the checked one
    partial = bool(ctx.chain is not None and (ctx.chain.partial or ctx.chain.provisional))
    return HoverAnswer(text, span, partial, ctx.cacheable)


def to_hover(answer: HoverAnswer, markdown: bool) -> T.Hover:
    """The lsprotocol hover of an answer (the edge, on the loop thread)."""
    kind = T.MarkupKind.Markdown if markdown else T.MarkupKind.PlainText
    return T.Hover(contents=T.MarkupContent(kind=kind, value=answer.text),
                   range=answer.span.range() if answer.span is not None else None)
