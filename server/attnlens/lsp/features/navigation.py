"""textDocument/definition and textDocument/implementation over chains.

definition: the Python ``def`` the name is finally bound to, through imports,
aliases and re-exports (never an import line on the way: next to Pylance, an
import line only adds a second result to every F12); one per distinct def when
the leaves of a tree are bound to different functions. No Python def: the import
of a package that is not installed, or the schema of a torch op called directly.
implementation: the code that finally runs: one location per leaf of the
chain's tree that can run on this platform (live or decided at run time); for
a torch op, the C++ functions its registrations bind; for a not-installed
leaf, the import statement that binds it. When every leaf is dead, the dead
leaves' locations (better than nothing: the code the call would reach).

The worker functions get a frozen :class:`~attnlens.lsp.request.Request` and return
:class:`~attnlens.lsp.convert.Span` lists (plain data); the handlers make the ``Location`` objects.
"""

from __future__ import annotations

from lsprotocol import types as T

from ... import model as M
from ...render import leaf_paths
from ..analysis import Analysis, DefRef
from ..convert import Span, name_span
from ..hover import HoverContext
from ..request import Request
from ..server import AttnLensServer

NAV_BUDGET_S = 5.0


NAV_HINT = "*Go to Implementation* (Ctrl+F12): the kernel · *Go to Definition* (F12): the Python `def`"


def _nav_hint(ctx: HoverContext) -> str | None:
    """One hint line under a hover whose chain reaches a kernel that can run here."""
    ch = ctx.chain
    if ch is None or not any(lf.final.kind in M.KERNEL_KINDS for lf in ch.live_leaves()):
        return None
    return NAV_HINT


def register(ls: AttnLensServer) -> None:
    ls.hover_sections.register("navigation", _nav_hint, order=950)

    @ls.feature(T.TEXT_DOCUMENT_DEFINITION)
    async def definition(params: T.DefinitionParams) -> list[T.Location] | None:
        req = ls.request(params.text_document.uri, params.position)
        if req is None:
            return None
        return to_locations(await ls.call(_definition, req))

    @ls.feature(T.TEXT_DOCUMENT_IMPLEMENTATION)
    async def implementation(params: T.ImplementationParams) -> list[T.Location] | None:
        req = ls.request(params.text_document.uri, params.position)
        if req is None:
            return None
        return to_locations(await ls.call(_implementation, req))


def to_locations(spans: list[Span] | None) -> list[T.Location] | None:
    """The lsprotocol locations of a worker's answer (the edge)."""
    return [s.location() for s in spans] if spans else None


def _definition(a: Analysis, req: Request) -> list[Span] | None:
    conv = req.positions(a)
    path = req.path
    line, col = req.core_position(conv)
    d = a.def_at(path, line, col)
    if d is not None:
        return [conv.location_span(d.path, d.line, d.col, d.end_col)]
    r = a.resolve(path, line, col, NAV_BUDGET_S)
    if r is None:
        return None
    return _spans(a, conv, definition_targets(a, r.chain))


def _spans(a: Analysis, conv, targets: list) -> list[Span] | None:
    """Where definition / implementation targets are: a def's name, the bound name in an import
    statement, or a (path, line)."""
    out = []
    for t in targets:
        if isinstance(t, DefRef):
            out.append(conv.location_span(t.path, t.line, t.col, t.end_col))
        elif isinstance(t, M.Hop):
            ln, c0, c1 = _name_in_statement(a, t)
            out.append(conv.location_span(t.path, ln, c0, c1))
        else:
            out.append(conv.location_span(t[0], t[1]))
    return out or None


def _python_defs(a: Analysis, lp) -> list[DefRef]:
    """The Python defs a leaf's path goes through, in order: bodies that make a call on the way, the
    ``def`` hops, and the final function (or Triton kernel) itself."""
    out: list[DefRef] = []

    def add(d: DefRef | None) -> None:
        if d is not None and (not out or (out[-1].path, out[-1].line) != (d.path, d.line)):
            out.append(d)

    for i, h in enumerate(lp.hops):
        if not (h.path and h.line and h.path.endswith(".py")):
            continue
        if h.kind in (M.HopKind.CALL, M.HopKind.WRAPPER, M.HopKind.AUTOGRAD_APPLY, M.HopKind.TRITON_LAUNCH) and i > 0:  # hop 0: the call at the cursor
            add(a.enclosing_def(h.path, h.line))
        elif h.kind == M.HopKind.DEFINITION:
            add(a.defref_at_line(h.path, h.line))
    f = lp.final
    if f.kind in (M.PYTHON_FUNCTION, M.TRITON_KERNEL, M.PYTHON_CLASS, M.DUMMY) and f.path and f.line \
            and f.path.endswith(".py"):
        add(a.defref_at_line(f.path, f.line) or DefRef("function", "", f.symbol, f.symbol, f.path, f.line, 0, 0,
                                                        f.line, f.line))
    return out


def definition_targets(a: Analysis, chain: M.Chain) -> list:
    """Go to Definition targets of a chain (DefRefs, import hops or (path, line)): per leaf that can run,
    the first Python def its path reaches (the function the name is bound to, whatever imports, aliases
    and re-exports lie between); without one, the import of the missing package, or the op's schema."""
    paths = leaf_paths(chain)
    live = [lp for lp in paths if lp.leaf.reachable is not False] or paths
    out: list = []
    for lp in live:
        defs = _python_defs(a, lp)
        f = lp.final
        if defs:
            out.append(defs[0])
        elif f.kind == M.NOT_INSTALLED and lp.binding_import() is not None:
            out.append(lp.binding_import())
        elif f.kind == M.TORCH_OP:
            out.extend((r.path, r.line) for r in f.registrations
                       if r.kind in ("cpp_def", "python_def") and r.path and r.line)
    unique: dict = {}
    for t in out:
        unique.setdefault((t.path, t.line) if isinstance(t, (DefRef, M.Hop)) else tuple(t), t)
    return list(unique.values())


IMPORT_HOPS = (M.HopKind.IMPORT, M.HopKind.CONDITIONAL_IMPORT, M.HopKind.LAZY_IMPORT, M.HopKind.REEXPORT, M.HopKind.ALIAS)


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


def _implementation(a: Analysis, req: Request) -> list[Span] | None:
    conv = req.positions(a)
    path = req.path
    line, col = req.core_position(conv)
    d = a.def_at(path, line, col)
    if d is not None:
        chain = a.q.trace_symbol(d.dotted, budget_s=NAV_BUDGET_S)  # the same door as `attnlens trace`
    else:
        res = a.resolve(path, line, col, NAV_BUDGET_S)
        if res is None:
            return None
        chain = res.chain
    return _spans(a, conv, leaf_locations(chain))
