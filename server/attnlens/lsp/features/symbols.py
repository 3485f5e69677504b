"""workspace/symbol (backends, impls, builders, Triton kernels, torch ops, defs) and documentSymbol."""

from __future__ import annotations

from lsprotocol import types as T

from ..analysis import Analysis, match_symbols
from ..convert import uri_to_path
from ..server import AttnLensServer

SYMBOL_KINDS = {
    "class": T.SymbolKind.Class, "method": T.SymbolKind.Method, "function": T.SymbolKind.Function,
    "triton": T.SymbolKind.Function, "backend": T.SymbolKind.Class, "op": T.SymbolKind.Operator,
}
MAX_RESULTS = 200


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.WORKSPACE_SYMBOL)
    async def workspace_symbol(params: T.WorkspaceSymbolParams) -> list[T.SymbolInformation] | None:
        return await ls.call(_workspace_symbols, ls, params.query)

    @ls.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    async def document_symbol(params: T.DocumentSymbolParams):
        path = uri_to_path(params.text_document.uri)
        if path is None:
            return None
        return await ls.call(_document_symbols, ls, path, params.text_document.uri)


def _workspace_symbols(a: Analysis, ls: AttnLensServer, query: str):
    conv = ls.positions(a)
    out = []
    syms = a.symbols()
    if ls.settings.installed_symbols:  # Triton kernels and torch ops of site-packages (vllm, ...)
        from ..installed import installed_kernels

        syms = syms + installed_kernels(a)
    for s in match_symbols(syms, query, MAX_RESULTS):
        container = f"{s.container} — {s.detail}" if s.detail else s.container
        out.append(T.SymbolInformation(
            name=s.name, kind=SYMBOL_KINDS.get(s.kind, T.SymbolKind.Variable),
            location=conv.location(s.path, s.line, s.col), container_name=container or None))
    return out


def _document_symbols(a: Analysis, ls: AttnLensServer, path: str, uri: str):
    conv = ls.positions(a)
    roots = a.outline(path)

    def kind(d):
        return {"class": T.SymbolKind.Class, "method": T.SymbolKind.Method}.get(d.kind, T.SymbolKind.Function)

    if ls.caps.hierarchical_symbols:
        def node(d, children):
            return T.DocumentSymbol(
                name=d.name, kind=kind(d), detail=d.detail or None,
                range=conv.line_range(path, d.deco_line, d.end_line),
                selection_range=conv.range(path, d.line, d.col, d.line, d.end_col),
                children=[node(*c) for c in children] or None)

        return [node(*r) for r in roots]
    flat = []

    def walk(d, children, container):
        flat.append(T.SymbolInformation(name=d.name, kind=kind(d), container_name=container,
                                        location=T.Location(uri, conv.line_range(path, d.deco_line, d.end_line))))
        for c in children:
            walk(*c, d.name)

    for r in roots:
        walk(*r, None)
    return flat
