"""Call hierarchy over chains, and the background index of workspace call sites.

Mixed into :class:`~attnlens.lsp.analysis.Analysis`; worker thread only.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Iterator

from .. import model as M
from .records import CallRec, CallSiteIndex, DefRef, Item

log = logging.getLogger(__name__)


class CallsMixin:
    # -- call hierarchy --------------------------------------------------------
    def item_for_def(self, d: DefRef) -> Item:
        detail = d.detail or ("class" if d.kind == "class" else d.module)
        return Item(d.name, d.kind, detail, d.path, d.line, d.col, d.end_col, d.deco_line, d.end_line,
                    {"t": "def", "module": d.module, "qual": d.qual, "path": d.path})

    def item_for_final(self, chain: M.Chain) -> Item:
        """The item of a chain's one final target (a leaf; for a fork, the dispatcher)."""
        return self.item_for_leaf(chain, chain.final)

    def item_for_leaf(self, chain: M.Chain, f: M.Final, reachable: bool | None = True,
                      conditions: list[str] | None = None) -> Item:
        """The item of one leaf of ``chain``'s tree; a dead leaf says so in its detail."""
        it = self._leaf_item(chain, f)
        if reachable is False:
            cond = f" (if {' and '.join(conditions)})" if conditions else ""
            it.detail = f"DEAD on this platform{cond}: {it.detail}".rstrip(": ")
            it.data = dict(it.data, dead=True)
        elif reachable is None and conditions:
            it.detail = f"decided at run time (if {' and '.join(conditions)}): {it.detail}".rstrip(": ")
        return it

    def items_for_leaves(self, chain: M.Chain) -> list[Item]:
        """One item per leaf of the tree (dead leaves marked, never left out)."""
        return [self.item_for_leaf(chain, lf.final, lf.reachable, lf.conditions) for lf in chain.leaves()]

    def _leaf_item(self, chain: M.Chain, f: M.Final) -> Item:
        if f.fork is not None and f.fork.path and f.fork.line:
            d = self.defref_at_line(f.fork.path, f.fork.line)
            if d is not None:
                return self.item_for_def(d)
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
            f = r.chain.final
            if f.fork is not None:
                # the dispatcher when it is a definition (its outgoing calls are the branches), else the leaves
                if f.fork.path and f.fork.line and self.defref_at_line(f.fork.path, f.fork.line) is not None:
                    return [self.item_for_final(r.chain)]
                items, seen = [], set()
                for lf in r.chain.leaves():
                    if lf.final.kind == M.UNRESOLVED:
                        continue
                    it = self.item_for_leaf(r.chain, lf.final, lf.reachable, lf.conditions)
                    if it.key() not in seen:
                        seen.add(it.key())
                        items.append(it)
                if items:
                    return items
            else:
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
                for it in self.items_for_leaves(chain):
                    spans = groups.setdefault(it.key(), (it, []))[1]
                    if (cs.fline, cs.fcol, cs.fend_col) not in spans:
                        spans.append((cs.fline, cs.fcol, cs.fend_col))
        elif data.get("t") == "final" and data.get("kind") == M.TORCH_OP:
            chain = self.ws.trace_symbol(data["symbol"])
            regs = [r for lf in chain.leaves() if lf.final.kind == M.TORCH_OP for r in lf.final.registrations]
            for r in regs:
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


def _record(path: str, cs, chain: M.Chain) -> CallRec:
    """The call site with every hop, branch and leaf of its tree (dead branches included:
    incoming calls list them too)."""
    f = chain.final
    single = chain.leaves()
    if len(single) == 1:
        f = single[0].final
    hops: list[M.Hop] = []
    points: list[tuple] = []
    finals: list[M.Final] = []
    stack = [chain]
    while stack:
        c = stack.pop()
        hops.extend(c.hops)
        if c.final.fork is None:
            finals.append(c.final)
            continue
        fk = c.final.fork
        if fk.path and fk.line:
            points.append((fk.path, fk.line))
        for b in fk.branches:
            if b.path and b.line:
                points.append((b.path, b.line))
            stack.append(b.chain)
    call = chain.hops[0] if chain.hops else None
    waypoints = [(h.path, h.line) for h in hops if h.path and h is not call] + points
    waypoints += [(lf.path, lf.line) for lf in finals if lf.path and lf.line]
    marks = frozenset(h.symbol for h in hops if h.kind in ("torch_op", "not_installed")) | {f.symbol}
    marks |= {lf.symbol for lf in finals}
    return CallRec(path, cs.line, cs.fline, cs.fcol, cs.fend_col, cs.func, cs.scope, f.kind, f.symbol, f.path,
                   f.line, tuple(dict.fromkeys(waypoints)), marks)
