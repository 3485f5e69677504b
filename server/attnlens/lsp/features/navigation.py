"""textDocument/definition and textDocument/implementation over chains.

definition: where the name is bound or defined, i.e. the first hop after the
call that sits somewhere else (an import, an alias, the def).
implementation: the code that finally runs: one location per leaf of the
chain's tree that can run on this platform (live or decided at run time); for
a torch op, the C++ functions its registrations bind; for a not-installed
leaf, the import statement that binds it. When every leaf is dead, the dead
leaves' locations (better than nothing: the code the call would reach).
"""

from __future__ import annotations

from lsprotocol import types as T

from ... import model as M
from ...render import leaf_paths
from ..analysis import Analysis
from ..convert import name_span, uri_to_path
from ..server import AttnLensServer

NAV_BUDGET_S = 5.0


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_DEFINITION)
    async def definition(params: T.DefinitionParams) -> list[T.Location] | None:
        path = uri_to_path(params.text_document.uri)
        if path is None:
            return None
        return await ls.call(_definition, ls, path, params.position)

    @ls.feature(T.TEXT_DOCUMENT_IMPLEMENTATION)
    async def implementation(params: T.ImplementationParams) -> list[T.Location] | None:
        path = uri_to_path(params.text_document.uri)
        if path is None:
            return None
        return await ls.call(_implementation, ls, path, params.position)


def _definition(a: Analysis, ls: AttnLensServer, path: str, pos: T.Position):
    conv = ls.positions(a)
    line, col = conv.to_core(path, pos)
    d = a.def_at(path, line, col)
    if d is not None:
        return [conv.location(d.path, d.line, d.col, d.end_col)]
    r = a.resolve(path, line, col, NAV_BUDGET_S)
    if r is None:
        return None
    hops = r.chain.hops
    call = hops[0] if hops else None
    for h in hops[1:]:
        if h.path and h.line and (call is None or (h.path, h.line) != (call.path, call.line)):
            line, col, end = _name_in_statement(a, h)
            return [conv.location(h.path, line, col, end)]
    f = r.chain.final
    if f.fork is not None and f.fork.path and f.fork.line:
        return [conv.location(f.fork.path, f.fork.line)]
    if f.path and f.line:
        return [conv.location(f.path, f.line)]
    return None


IMPORT_HOPS = ("import", "conditional_import", "lazy_import", "reexport", "alias")


def _name_in_statement(a: Analysis, h: M.Hop) -> tuple[int, int, int]:
    """The bound name inside the (possibly multi-line) statement a hop points at."""
    if h.kind in IMPORT_HOPS:
        name = h.symbol.rpartition(".")[2]
        for ln in range(h.line, h.line + 40):
            text = a.line_text(h.path, ln)
            begin = 0
            if ln == h.line:
                begin = h.col
                if text.lstrip().startswith("from ") and " import " in text:
                    begin = max(begin, text.index(" import ") + len(" import "))
            start, end = name_span(text, name, begin)
            if end > start:
                return ln, start, end
            if ln > h.line and ")" in text or (ln == h.line and "(" not in text and not text.rstrip().endswith("\\")):
                break
    return h.line, h.col, h.col


def leaf_locations(chain: M.Chain) -> list[M.Hop | tuple[str, int]]:
    """Implementation targets of a chain (tree): per leaf that can run, where its code is.

    A not-installed leaf has no code here: its target is the import statement hop that binds
    it (a :class:`model.Hop`, so the caller can land on the bound name). Without any leaf that
    can run, the dead leaves' targets.
    """
    paths = leaf_paths(chain)
    live = [lp for lp in paths if lp.leaf.reachable is not False] or paths
    out: list = []
    seen: set = set()
    for lp in live:
        f = lp.final
        if f.kind == M.NOT_INSTALLED:
            h = lp.binding_import()
            targets = [h] if h is not None else final_locations(f)
        else:
            targets = final_locations(f)
        for t in targets:
            key = (t.path, t.line) if isinstance(t, M.Hop) else t
            if key not in seen:
                seen.add(key)
                out.append(t)
    return out


def final_locations(final: M.Final) -> list[tuple[str, int]]:
    """Where the final target's code is: C++ functions of an op, else the def."""
    out: list[tuple[str, int]] = []
    if final.kind == M.TORCH_OP:
        for reg in final.registrations:
            if reg.function_path and reg.function_line and (reg.function_path, reg.function_line) not in out:
                out.append((reg.function_path, reg.function_line))
    if not out and final.path and final.line:
        out.append((final.path, final.line))
    return out


def _implementation(a: Analysis, ls: AttnLensServer, path: str, pos: T.Position):
    conv = ls.positions(a)
    line, col = conv.to_core(path, pos)
    d = a.def_at(path, line, col)
    if d is not None:
        chain = a.ws.trace_symbol(d.dotted, budget_s=NAV_BUDGET_S)  # the same door as `attnlens trace`
    else:
        res = a.resolve(path, line, col, NAV_BUDGET_S)
        if res is None:
            return None
        chain = res.chain
    locs = []
    for t in leaf_locations(chain):
        if isinstance(t, M.Hop):
            ln, c0, c1 = _name_in_statement(a, t)
            locs.append(conv.location(t.path, ln, c0, c1))
        else:
            locs.append(conv.location(t[0], t[1]))
    return locs or None
