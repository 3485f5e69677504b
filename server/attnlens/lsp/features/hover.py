"""textDocument/hover: the chain behind a name or call, from cache, within a budget."""

from __future__ import annotations

import logging

from lsprotocol import types as T

from ... import model as M
from ...envflags import platform_defaults
from ...render import leaf_paths
from ..analysis import Analysis
from ..convert import path_to_uri, uri_to_path
from ..hover import HoverContext, final_python_function, render, signature_of
from ..kernels import class_kernels
from ..server import AttnLensServer
from ..worker import IDLE

log = logging.getLogger("attnlens.lsp")

_NOTHING = object()  # cached "nothing to show here"


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_HOVER)
    async def hover(params: T.HoverParams) -> T.Hover | None:
        uri = params.text_document.uri
        path = uri_to_path(uri)
        if path is None:
            return None
        pos = params.position
        key = (uri, ls.doc_version(uri), ls.epoch, pos.line, pos.character)
        hit = ls.hover_cache.get(key)
        if hit is not None:
            return None if hit is _NOTHING else hit
        budget = ls.settings.hover_budget_ms / 1000.0
        result = await ls.call(compute, ls, path, pos, budget)
        if result is None:
            ls.hover_cache.put(key, _NOTHING)
            return None
        h, partial, cacheable = result
        if partial:
            # finish the chain in the background: the next hover is complete
            ls.spawn(ls.call(compute, ls, path, pos, None, priority=IDLE))
        elif cacheable:
            ls.hover_cache.put(key, h)
        return h


def compute(a: Analysis, ls: AttnLensServer, path: str, pos: T.Position, budget_s: float | None):
    """(Hover, partial, cacheable) for a position, or None (worker thread)."""
    conv = ls.positions(a)
    line, col = conv.to_core(path, pos)
    ctx = HoverContext(a, path, line, col, max_kernels=ls.settings.max_hover_kernels,
                       defaults=platform_defaults(a.ws.resolver))
    if ls.settings.hover_copy_link:
        ctx.copy_args = {"uri": path_to_uri(path), "line": pos.line, "character": pos.character}
    try:
        d = a.def_at(path, line, col)
        if d is not None:
            ctx.definition, ctx.symbol = d, d.dotted
            rng = conv.range(path, d.line, d.col, d.line, d.end_col)
            if d.kind != "class":
                # the same door as `attnlens trace` on a `def`: Workspace.trace_symbol
                ctx.chain = a.ws.trace_symbol(d.dotted, budget_s=budget_s)
            elif a.role_of(d.dotted) is None:
                ck = class_kernels(a, d, budget_s)
                ctx.class_kernels = ck
                if ck is None:
                    ctx.cacheable = False
        else:
            res = a.resolve(path, line, col, budget_s)
            if res is None:
                return None
            t = res.target
            ctx.chain = res.chain
            leaves = leaf_paths(res.chain)
            if len(leaves) == 1 and leaves[0].final.kind == M.PYTHON_CLASS:
                ctx.symbol = leaves[0].final.symbol
            rng = conv.range(path, t.line, t.col, t.line, t.end_col)
        if ctx.chain is not None and ctx.relevant():
            fp = final_python_function(a, ctx.chain)
            ctx.signature = signature_of(a, *fp) if fp else None
    except Exception as e:  # noqa: BLE001 - show the failure where the user looks
        log.warning("hover at %s:%s:%s failed", path, line, col, exc_info=True)
        text = f"AttnLens could not resolve this position: `{type(e).__name__}: {str(e)[:200]}`"
        return _hover(ls, text, None), False, False
    text = render(ctx)
    if text is None:
        return None
    partial = bool(ctx.chain is not None and ctx.chain.partial)
    return _hover(ls, text, rng), partial, ctx.cacheable


def _hover(ls: AttnLensServer, text: str, rng: T.Range | None) -> T.Hover:
    kind = T.MarkupKind.Markdown if ls.caps.markdown_hover else T.MarkupKind.PlainText
    return T.Hover(contents=T.MarkupContent(kind=kind, value=text), range=rng)
