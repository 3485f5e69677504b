"""workspace/symbol (backends, impls, builders, Triton kernels, torch ops, defs) and documentSymbol."""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types as T

from ..analysis import Analysis, match_symbols
from ..convert import Span, path_to_uri, uri_to_path
from ..request import View
from ..server import AttnLensServer

SYMBOL_KINDS = {
    "class": T.SymbolKind.Class, "method": T.SymbolKind.Method, "function": T.SymbolKind.Function,
    "triton": T.SymbolKind.Function, "backend": T.SymbolKind.Class, "op": T.SymbolKind.Operator,
}
MAX_RESULTS = 200


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.WORKSPACE_SYMBOL)
    async def workspace_symbol(params: T.WorkspaceSymbolParams) -> list[T.SymbolInformation] | None:
        got = await ls.call(_workspace_symbols, ls.view(), params.query)
        return [x.to_lsp() for x in got] if got is not None else None

    @ls.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
    async def document_symbol(params: T.DocumentSymbolParams):
        path = uri_to_path(params.text_document.uri)
        if path is None:
            return None
        got = await ls.call(_document_symbols, ls.view(), path, params.text_document.uri)
        return [x.to_lsp() for x in got] if got is not None else None


@dataclass(frozen=True)
class SymbolInfo:
    """A flat symbol (``SymbolInformation``) as plain data (``kind``: lsprotocol's enum value)."""

    name: str
    kind: T.SymbolKind
    uri: str
    span: Span
    container: str | None

    def to_lsp(self) -> T.SymbolInformation:
        return T.SymbolInformation(name=self.name, kind=self.kind,
                                   location=T.Location(self.uri, self.span.range()), container_name=self.container)


@dataclass(frozen=True)
class Outline:
    """A hierarchical document symbol (``DocumentSymbol``) as plain data."""

    name: str
    kind: T.SymbolKind
    detail: str | None
    span: Span
    selection: Span
    children: tuple["Outline", ...]

    def to_lsp(self) -> T.DocumentSymbol:
        return T.DocumentSymbol(name=self.name, kind=self.kind, detail=self.detail,
                                range=self.span.range(), selection_range=self.selection.range(),
                                children=[c.to_lsp() for c in self.children] or None)


def _workspace_symbols(a: Analysis, view: View, query: str) -> list[SymbolInfo]:
    conv = view.positions(a)
    out = []
    syms = a.symbols()
    if view.settings.installed_symbols:  # Triton kernels and torch ops of site-packages (vllm, ...)
        from ..installed import installed_kernels

        syms = syms + installed_kernels(a)
    for s in match_symbols(syms, query, MAX_RESULTS):
        container = f"{s.container} — {s.detail}" if s.detail else s.container
        span = conv.location_span(s.path, s.line, s.col)
        out.append(SymbolInfo(s.name, SYMBOL_KINDS.get(s.kind, T.SymbolKind.Variable), path_to_uri(span.path), span,
                              container or None))
    return out


def _document_symbols(a: Analysis, view: View, path: str, uri: str) -> list[SymbolInfo] | list[Outline]:
    """The outline of ``path``: a tree when the client takes hierarchical symbols, else flat (each located in
    ``uri``, the client's)."""
    conv = view.positions(a)
    roots = a.outline(path)

    def kind(d):
        return {"class": T.SymbolKind.Class, "method": T.SymbolKind.Method}.get(d.kind, T.SymbolKind.Function)

    if view.caps.hierarchical_symbols:
        def node(d, children) -> Outline:
            return Outline(d.name, kind(d), d.detail or None, conv.line_span(path, d.deco_line, d.end_line),
                           conv.span(path, d.line, d.col, d.line, d.end_col), tuple(node(*c) for c in children))

        return [node(*r) for r in roots]
    flat: list[SymbolInfo] = []

    def walk(d, children, container):
        flat.append(SymbolInfo(d.name, kind(d), uri, conv.line_span(path, d.deco_line, d.end_line), container))
        for c in children:
            walk(*c, d.name)

    for r in roots:
        walk(*r, None)
    return flat
