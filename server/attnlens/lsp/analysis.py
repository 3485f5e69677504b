"""What the LSP features ask of the analysis core, with the server's caches.

Everything in this module runs on the worker thread (see ``worker.py``) and
returns plain data: core types (``Chain``, ``BackendEntry``) or the small
records below, with 1-based lines and code point columns. No lsprotocol
types here: the features convert at the edge.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Iterator

from .. import model as M
from ..workspace import Target, Workspace
from .convert import name_span, split_lines

log = logging.getLogger(__name__)

TRITON_DECORATORS = ("triton.jit", "jit", "triton.autotune", "triton.heuristics", "autotune", "heuristics")


class LRU(OrderedDict):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):  # type: ignore[override]
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass(frozen=True)
class DefRef:
    """A class or function definition of an analysed module."""

    kind: str  # function | method | class | triton
    module: str
    qual: str
    name: str
    path: str
    line: int  # the def/class line
    col: int  # name start (code points)
    end_col: int
    deco_line: int
    end_line: int
    detail: str = ""

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qual}"


@dataclass
class Resolved:
    target: Target
    chain: M.Chain


@dataclass(frozen=True)
class Sym:
    """One workspace symbol."""

    name: str
    kind: str  # class | method | function | triton | backend | op
    container: str
    path: str
    line: int
    col: int = 0
    detail: str = ""


@dataclass
class Item:
    """A call hierarchy node: a definition, or the final target of a chain."""

    name: str
    kind: str  # function | method | class | triton | torch_op | cpp | module | not_installed | dummy | ...
    detail: str
    path: str
    line: int
    col: int
    end_col: int
    first_line: int  # full range start (decorators included)
    end_line: int
    data: dict

    def key(self) -> tuple:
        return (self.path, self.line, self.name)


@dataclass
class CallRec:
    """One traced workspace call site, kept for incoming-call queries."""

    path: str
    line: int
    fline: int
    fcol: int
    fend_col: int
    func: str
    scope: str
    final_kind: str
    final_symbol: str
    final_path: str | None
    final_line: int | None
    waypoints: tuple  # (path, line) of every hop after the call itself
    marks: frozenset  # torch op / final symbols met on the way


@dataclass
class CallSiteIndex:
    generation: int = -1
    complete: bool = False
    by_path: dict = field(default_factory=dict)  # path -> [CallRec]
    pending: list = field(default_factory=list)  # module names still to trace


def is_triton(decorators) -> bool:
    return any(d.func in TRITON_DECORATORS or d.func.startswith("triton.") for d in decorators)


class Analysis:
    """The server's view of one :class:`Workspace` (worker thread only)."""

    def __init__(self, ws: Workspace, index_budget_s: float = 0.25):
        self.ws = ws
        self._chains: LRU = LRU(4096)
        self._lines: LRU = LRU(64)
        self._backends: tuple[int, list] | None = None
        self._roles: tuple[int, dict] | None = None
        self._symbols: tuple[int, list[Sym]] | None = None
        self.callsites = CallSiteIndex()
        self._next_callsites: CallSiteIndex | None = None
        self.index_budget_s = index_budget_s

    # -- basics ----------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self.ws.index.generation

    def lines(self, path: str) -> list[str]:
        key = (path, self.generation)
        got = self._lines.get(key)
        if got is None:
            got = split_lines(self.ws.index.source_text(path) or "")
            self._lines.put(key, got)
        return got

    def line_text(self, path: str, line: int) -> str:
        lines = self.lines(path)
        return lines[line - 1] if 0 < line <= len(lines) else ""

    def module(self, path: str):
        return self.ws.index.module_for_path(path)

    # -- positions -------------------------------------------------------------
    def resolve(self, path: str, line: int, col: int, budget_s: float | None = None) -> Resolved | None:
        """The target under (line, col) and its chain, from the chain cache when possible."""
        t = self.ws.target_at(path, line, col)
        if t is None:
            return None
        call = (t.call.line, t.call.col) if t.call is not None else None
        key = (path, self.generation, t.line, t.col, t.end_col, t.text, call)
        chain = self._chains.get(key)
        if chain is None or (chain.partial and budget_s is None):
            chain = self.ws.trace_target(t, budget_s)
            self._chains.put(key, chain)
        return Resolved(t, chain)

    def def_at(self, path: str, line: int, col: int) -> DefRef | None:
        """The class/function whose *name* is at (line, col)."""
        mod = self.module(path)
        if mod is None:
            return None
        s = mod.summary
        for q, c in s.classes.items():
            if c.line == line:
                d = self._defref(mod, q, c, "class")
                if d.col <= col <= d.end_col:
                    return d
        for q, f in s.functions.items():
            if f.line == line:
                d = self._defref(mod, q, f, self._func_kind(f))
                if d.col <= col <= d.end_col:
                    return d
        return None

    def enclosing_def(self, path: str, line: int) -> DefRef | None:
        mod = self.module(path)
        if mod is None:
            return None
        q = mod.summary.scope_at(line)
        if q and q in mod.summary.functions:
            f = mod.summary.functions[q]
            return self._defref(mod, q, f, self._func_kind(f))
        return None

    def defref(self, module: str, qual: str) -> DefRef | None:
        mod = self.ws.index.module(module)
        if mod is None:
            return None
        s = mod.summary
        if qual in s.classes:
            return self._defref(mod, qual, s.classes[qual], "class")
        if qual in s.functions:
            f = s.functions[qual]
            return self._defref(mod, qual, f, self._func_kind(f))
        return None

    def defref_at_line(self, path: str, line: int) -> DefRef | None:
        """The definition whose def/class line (or decorator span) holds ``line``."""
        mod = self.module(path)
        if mod is None:
            return None
        s = mod.summary
        for q, f in s.functions.items():
            if f.deco_line <= line <= f.line:
                return self._defref(mod, q, f, self._func_kind(f))
        for q, c in s.classes.items():
            if c.deco_line <= line <= c.line:
                return self._defref(mod, q, c, "class")
        return None

    @staticmethod
    def _func_kind(f) -> str:
        if is_triton(f.decorators):
            return "triton"
        return "method" if f.class_name else "function"

    def _defref(self, mod, q: str, info, kind: str) -> DefRef:
        start, end = name_span(self.line_text(mod.path, info.line), info.name, info.col)
        detail = "Triton kernel" if kind == "triton" else ""
        role = self.role_of(f"{mod.name}.{q}") if kind == "class" else None
        if role is not None:
            detail = role[2]
        return DefRef(kind, mod.name, q, info.name, mod.path, info.line, start, end, info.deco_line, info.end_line, detail)

    # -- backends --------------------------------------------------------------
    def backends(self, allow_stale: bool = False) -> list:
        gen = self.generation
        if self._backends is not None and (self._backends[0] == gen or allow_stale):
            return self._backends[1]
        entries = self.ws.backends(with_call_sites=True, include_custom_ops=True)
        self._backends = (gen, entries)
        return entries

    def backends_fresh(self) -> bool:
        return self._backends is not None and self._backends[0] == self.generation

    def role_of(self, dotted: str) -> tuple[Any, str, str] | None:
        """(entry, role, label) when ``dotted`` is a backend class or one of its parts.

        Uses the backends already computed (possibly for an older generation)
        so that outlines and symbols never trigger the registry walk.
        """
        if self._backends is None:
            return None
        if self._roles is None or self._roles[0] != self._backends[0]:
            roles: dict = {}
            for e in self._backends[1]:
                label = f"{e.kind} backend {e.name}" if e.kind != "custom_op" else f"CustomOp {e.name}"
                roles.setdefault(e.cls, (e, "backend", label))
                for role, ref in (("impl", e.impl), ("builder", e.builder), ("metadata", e.metadata)):
                    if ref is not None and ref.cls:
                        roles.setdefault(ref.cls, (e, role, f"{role} of {e.name}"))
            self._roles = (self._backends[0], roles)
        return self._roles[1].get(dotted)

    # -- symbols ---------------------------------------------------------------
    def symbols(self) -> list[Sym]:
        gen = self.generation
        if self._symbols is not None and self._symbols[0] == gen:
            return self._symbols[1]
        out: list[Sym] = []
        for mod in self.ws.index.workspace_modules():
            s = mod.summary
            for q, c in s.classes.items():
                role = self.role_of(f"{mod.name}.{q}")
                out.append(Sym(c.name, "class", _container(mod.name, q), mod.path, c.line, c.col, role[2] if role else ""))
            for q, f in s.functions.items():
                kind = self._func_kind(f)
                out.append(Sym(f.name, kind, _container(mod.name, q), mod.path, f.line, f.col,
                               "Triton kernel" if kind == "triton" else ""))
            out.extend(self._python_ops(mod))
        for e in (self._backends[1] if self._backends else []):
            if e.path and e.line:
                out.append(Sym(e.name, "backend", e.cls, e.path, e.line, 0, f"{e.kind} backend"))
        out.extend(self._cpp_ops())
        self._symbols = (gen, out)
        return out

    def _python_ops(self, mod) -> list[Sym]:
        out = []
        s = mod.summary
        for cs in s.calls:
            if cs.func.rpartition(".")[2] == "direct_register_custom_op":
                name = next((v for k, v in cs.kw_texts if k == "op_name"), None)
                name = _literal(name) or (cs.str_args[0] if cs.str_args and cs.str_args[0] else None)
                if name:
                    out.append(Sym(f"vllm::{name}", "op", "torch op (direct_register_custom_op)", mod.path, cs.line, cs.col))
        for f in s.functions.values():
            for d in f.decorators:
                if d.func.endswith("library.custom_op") and d.str_args and d.str_args[0]:
                    out.append(Sym(d.str_args[0], "op", "torch op (torch.library.custom_op)", mod.path, f.line, f.col))
        return out

    def _cpp_ops(self) -> list[Sym]:
        ops = getattr(self.ws.resolver, "ops", None)
        cpp = getattr(ops, "cpp", None)
        if cpp is None:
            return []
        try:
            idx = cpp()
            names = idx.ops() if hasattr(idx, "ops") else []
        except Exception:  # noqa: BLE001 - the C++ index is optional
            log.debug("C++ index unavailable", exc_info=True)
            return []
        out = []
        for op in names:
            try:
                info = idx.op(op)
            except Exception:  # noqa: BLE001
                continue
            where = (info.defs or info.impls) if info is not None else None
            if where:
                w = where[0]
                out.append(Sym(op, "op", "torch op (C++)", w.path, w.line, 0, getattr(info, "schema", None) or ""))
        return out

    def outline(self, path: str) -> list[tuple[DefRef, list]]:
        """Classes/functions of a file as a tree: [(DefRef, children)]."""
        mod = self.module(path)
        if mod is None:
            return []
        s = mod.summary
        nodes: dict[str, tuple[DefRef, list]] = {}
        for q, c in s.classes.items():
            nodes[q] = (self._defref(mod, q, c, "class"), [])
        for q, f in s.functions.items():
            nodes[q] = (self._defref(mod, q, f, self._func_kind(f)), [])
        roots = []
        for q in sorted(nodes, key=lambda k: (nodes[k][0].deco_line, k)):
            parent = q.rpartition(".")[0]
            # nested functions have qualnames like "f.<locals>.g" in some summaries
            parent = parent.replace(".<locals>", "")
            while parent and parent not in nodes:
                parent = parent.rpartition(".")[0]
            (nodes[parent][1] if parent else roots).append(nodes[q])
        return roots

    # -- call hierarchy --------------------------------------------------------
    def item_for_def(self, d: DefRef) -> Item:
        detail = d.detail or ("class" if d.kind == "class" else d.module)
        return Item(d.name, d.kind, detail, d.path, d.line, d.col, d.end_col, d.deco_line, d.end_line,
                    {"t": "def", "module": d.module, "qual": d.qual, "path": d.path})

    def item_for_final(self, chain: M.Chain) -> Item:
        f = chain.final
        if f.path and f.line and f.kind in (M.PYTHON_FUNCTION, M.PYTHON_CLASS, M.TRITON_KERNEL, M.DUMMY):
            d = self.defref_at_line(f.path, f.line)
            if d is not None:
                it = self.item_for_def(d)
                if f.kind == M.DUMMY:
                    it.kind, it.detail = "dummy", f"DUMMY: {f.reason or ''}".strip()
                return it
        short = f.symbol.rpartition(".")[2] if f.kind != M.TORCH_OP else f.symbol
        call = chain.hops[0] if chain.hops else None
        path = f.path or (call.path if call else "")
        line = f.line or (call.line if call else 1)
        col = 0 if f.path else (call.col if call else 0)
        detail = {M.NOT_INSTALLED: f"not installed: {f.reason or f.symbol}", M.UNRESOLVED: f"unresolved: {f.reason or ''}",
                  M.TORCH_OP: f.schema or "torch op",
                  M.EXTENSION_FUNCTION: f"native extension {f.package or ''}"}.get(f.kind, f.kind)
        return Item(short or "?", f.kind, detail, path, line, col, col, line, line,
                    {"t": "final", "kind": f.kind, "symbol": f.symbol, "path": f.path, "line": f.line})

    def prepare(self, path: str, line: int, col: int, budget_s: float | None = None) -> list[Item]:
        d = self.def_at(path, line, col)
        if d is not None:
            return [self.item_for_def(d)]
        r = self.resolve(path, line, col, budget_s)
        if r is not None and r.chain.final.kind != M.UNRESOLVED:
            return [self.item_for_final(r.chain)]
        d = self.enclosing_def(path, line)
        return [self.item_for_def(d)] if d is not None else []

    def _kernel_calls(self, mod, quals: list[str]) -> Iterator[tuple[Any, M.Chain]]:
        from ..registry import Registry

        reg = Registry(self.ws.resolver)
        for q in quals:
            for cs in mod.summary.calls_in(q):
                try:
                    res = reg.kernel_call(mod, cs)
                except Exception:  # noqa: BLE001 - one bad site must not hide the others
                    log.warning("tracing %s:%s failed", mod.path, cs.line, exc_info=True)
                    continue
                if res is not None:
                    yield cs, res.chain

    def outgoing(self, data: dict) -> list[tuple[Item, list[tuple[int, int, int]]]]:
        groups: dict[tuple, tuple[Item, list]] = {}
        if data.get("t") == "def":
            mod = self.ws.index.module(data["module"])
            if mod is None:
                return []
            s = mod.summary
            q = data["qual"]
            if q in s.classes:
                quals = list(s.classes[q].methods.values())
            else:
                quals = [q]
            for fq in list(quals):
                f = s.functions.get(fq)
                quals.extend(f.inner_defs if f else ())
            for cs, chain in self._kernel_calls(mod, quals):
                it = self.item_for_final(chain)
                groups.setdefault(it.key(), (it, []))[1].append((cs.fline, cs.fcol, cs.fend_col))
        elif data.get("t") == "final" and data.get("kind") == M.TORCH_OP:
            chain = self.ws.resolver.trace_value(self.ws.resolver.resolve_symbol(data["symbol"]))
            for r in chain.final.registrations:
                if r.function_path and r.function_line:
                    it = Item(r.function or "?", "cpp", f"{r.kind} {r.dispatch_key or ''}".strip(), r.function_path,
                              r.function_line, 0, 0, r.function_line, r.function_line,
                              {"t": "cpp", "path": r.function_path, "line": r.function_line})
                    groups.setdefault(it.key(), (it, []))[1].append((data.get("line") or r.line, 0, 0))
        return list(groups.values())

    def incoming(self, data: dict) -> list[tuple[Item, list[tuple[int, int, int]]]]:
        self.ensure_callsites()
        groups: dict[tuple, tuple[Item, list]] = {}
        match = self._matcher(data)
        if match is None:
            return []
        for recs in self.callsites.by_path.values():
            for rec in recs:
                if match(rec):
                    caller = self._caller_item(rec)
                    groups.setdefault(caller.key(), (caller, []))[1].append((rec.fline, rec.fcol, rec.fend_col))
        if data.get("t") == "def":
            role = self.role_of(f"{data['module']}.{data['qual']}")
            if role is not None and role[1] in ("backend",):
                for reg in role[0].registered_at:
                    mod = self.module(reg["path"])
                    if mod is None:
                        continue
                    caller = self._scope_item(mod, mod.summary.scope_at(reg["line"]))
                    text = self.line_text(reg["path"], reg["line"])
                    start = len(text) - len(text.lstrip())
                    groups.setdefault(caller.key(), (caller, []))[1].append((reg["line"], start, len(text)))
        return list(groups.values())

    def _matcher(self, data: dict):
        if data.get("t") == "def":
            d = self.defref(data["module"], data["qual"])
            if d is None:
                return None
            lo, hi, p = d.deco_line, d.end_line, d.path

            def inside(path, line):
                return path == p and line is not None and lo <= line <= hi

            return lambda rec: not inside(rec.path, rec.line) and (
                inside(rec.final_path, rec.final_line) or any(inside(wp, wl) for wp, wl in rec.waypoints))
        if data.get("t") == "final":
            sym = data.get("symbol")
            kind = data.get("kind")
            if kind == M.UNRESOLVED or not sym:
                return None
            return lambda rec: sym in rec.marks or (rec.final_kind == kind and rec.final_symbol == sym)
        if data.get("t") == "cpp":
            p, line = data.get("path"), data.get("line")
            return lambda rec: (p, line) in rec.waypoints
        return None

    def _scope_item(self, mod, scope: str) -> Item:
        if scope:
            d = self.defref(mod.name, scope)
            if d is not None:
                return self.item_for_def(d)
        n = len(self.lines(mod.path)) or 1
        return Item(mod.name, "module", mod.path, mod.path, 1, 0, 0, 1, n, {"t": "module", "module": mod.name, "path": mod.path})

    def _caller_item(self, rec: CallRec) -> Item:
        mod = self.module(rec.path)
        return self._scope_item(mod, rec.scope) if mod is not None else Item(
            os.path.basename(rec.path), "module", rec.path, rec.path, 1, 0, 0, 1, 1, {"t": "module", "path": rec.path})

    # -- the call site index (background) --------------------------------------
    def callsites_step(self, budget_s: float = 0.02) -> tuple[int, int] | None:
        """Trace workspace call sites for about ``budget_s``; (done, total) modules, or None when complete.

        Resumable at any call site, so one step never holds the worker much
        longer than its budget (plus one trace, itself budgeted).
        """
        from ..registry import is_candidate

        gen = self.generation
        nxt = self._next_callsites
        if nxt is None or nxt.generation != gen:
            if self.callsites.generation == gen and self.callsites.complete:
                return None
            nxt = self._next_callsites = CallSiteIndex(gen, False, {}, sorted(self.ws.index.ws_files))
        total = len(self.ws.index.ws_files)
        deadline = time.perf_counter() + budget_s
        while nxt.pending and time.perf_counter() < deadline:
            name, start = nxt.pending[-1] if isinstance(nxt.pending[-1], tuple) else (nxt.pending[-1], 0)
            mod = self.ws.index.module(name)
            if mod is None:
                nxt.pending.pop()
                continue
            recs = nxt.by_path.setdefault(mod.path, [])
            calls = mod.summary.calls
            i = start
            while i < len(calls) and time.perf_counter() < deadline:
                cs = calls[i]
                i += 1
                if not is_candidate(cs):
                    continue
                try:
                    chain = self.ws.resolver.trace_call(mod, cs, self.index_budget_s)
                except Exception:  # noqa: BLE001 - e.g. RecursionError in the resolver
                    log.debug("tracing %s:%s failed", mod.path, cs.line, exc_info=True)
                    continue
                recs.append(_record(mod.path, cs, chain))
            if i >= len(calls):
                nxt.pending.pop()
            else:
                nxt.pending[-1] = (name, i)
        if nxt.pending:
            return total - len(nxt.pending), total
        nxt.complete = True
        self.callsites = nxt
        self._next_callsites = None
        return None

    def ensure_callsites(self) -> None:
        while self.callsites_step(1.0) is not None:
            pass

    # -- indexing (background, in small steps) --------------------------------
    def indexing_steps(self) -> Iterator[tuple[str, int]]:
        """Warm everything requests need; yields (message, percentage) per step."""
        names = sorted(self.ws.index.ws_files)
        n = len(names) or 1
        chunk = 16
        for i in range(0, len(names), chunk):
            for name in names[i:i + chunk]:
                self.ws.index.module(name)
            yield f"{min(i + chunk, n)}/{n} modules", int(60 * min(i + chunk, n) / n)
        try:
            self.ws.resolver.profile.summary()
        except Exception:  # noqa: BLE001
            log.warning("platform profile failed", exc_info=True)
        yield "platform profile", 65
        cpp = getattr(getattr(self.ws.resolver, "ops", None), "cpp", None)
        if cpp is not None:
            try:
                cpp()
            except Exception:  # noqa: BLE001
                log.warning("C++ index failed", exc_info=True)
        yield "C++ registrations", 75
        try:
            self.backends()
        except Exception:  # noqa: BLE001
            log.warning("backend registry failed", exc_info=True)
        yield "backends", 90
        self.symbols()
        yield "symbols", 100
        self.ws.index.flush()

    # -- status ----------------------------------------------------------------
    def status(self) -> dict:
        ws = self.ws
        try:
            platform = ws.resolver.profile.summary()
        except Exception as e:  # noqa: BLE001
            platform = {"error": f"{type(e).__name__}: {e}"}
        return {
            "root": str(ws.root),
            "targetPython": ws.target.python,
            "targetError": ws.target_error,
            "indexedModules": len(ws.index.ws_files),
            "generation": self.generation,
            "platform": platform,
            "backends": len(self._backends[1]) if self._backends else None,
            "callSitesIndexed": sum(len(v) for v in self.callsites.by_path.values()) if self.callsites.complete else None,
        }


def _container(module: str, qual: str) -> str:
    parent = qual.rpartition(".")[0]
    return f"{module}.{parent}" if parent else module


def _literal(text: str | None) -> str | None:
    if not text or len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    return text[1:-1]


def _record(path: str, cs, chain: M.Chain) -> CallRec:
    f = chain.final
    waypoints = tuple((h.path, h.line) for h in chain.hops[1:] if h.path)
    marks = frozenset(h.symbol for h in chain.hops if h.kind in ("torch_op", "not_installed")) | {f.symbol}
    return CallRec(path, cs.line, cs.fline, cs.fcol, cs.fend_col, cs.func, cs.scope, f.kind, f.symbol, f.path,
                   f.line, waypoints, marks)


def match_symbols(symbols: list[Sym], query: str, limit: int = 200) -> list[Sym]:
    """Rank symbols for a workspace/symbol query: exact, prefix, substring, subsequence."""
    q = query.strip().lower()
    if not q:
        return symbols[:limit]
    scored = []
    for s in symbols:
        name = s.name.lower()
        if name == q:
            rank = 0
        elif name.startswith(q):
            rank = 1
        elif q in name:
            rank = 2
        elif q in f"{s.container}.{s.name}".lower():
            rank = 3
        elif _subsequence(q, name):
            rank = 4
        else:
            continue
        # kernels and backends first among equals: they are what this tool is about
        kind_rank = {"backend": 0, "op": 1, "triton": 1}.get(s.kind, 2)
        scored.append((rank, kind_rank, len(s.name), s.name, s))
    scored.sort(key=lambda t: t[:4])
    return [t[4] for t in scored[:limit]]


def _subsequence(q: str, name: str) -> bool:
    it = iter(name)
    return all(ch in it for ch in q)
