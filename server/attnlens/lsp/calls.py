"""Call hierarchy over chains; incoming calls from the reverse call index (``Query.call_index``).

Mixed into :class:`~attnlens.lsp.analysis.Analysis`; worker thread only.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Iterator

from .. import model as M
from .records import DefRef, Item

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
                      conditions: list[str] | None = None, at_call: bool = False) -> Item:
        """The item of one leaf of ``chain``'s tree; a dead leaf says so in its detail (``at_call``: the call being
        followed decided it, not the platform)."""
        it = self._leaf_item(chain, f)
        if reachable is False:
            cond = f" (if {M.and_joined(conditions)})" if conditions else ""
            it.detail = f"{'not taken at this call' if at_call else 'DEAD on this platform'}{cond}: {it.detail}".rstrip(": ")
            it.data = dict(it.data, dead=True)
        elif reachable is None and conditions:
            it.detail = f"decided at run time (if {M.and_joined(conditions)}): {it.detail}".rstrip(": ")
        return it

    def items_for_leaves(self, chain: M.Chain) -> list[Item]:
        """One item per leaf of the tree (dead leaves marked, never left out)."""
        return [self.item_for_leaf(chain, lf.final, lf.reachable, lf.conditions, lf.dead_at_call) for lf in chain.leaves()]

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
        trace = self.q.kernel_tracer()
        for q in quals:
            for cs in mod.summary.calls_in(q):
                try:
                    res = trace(mod, cs)
                except Exception:  # noqa: BLE001 - one bad site must not hide the others
                    log.warning("tracing %s:%s failed", mod.path, cs.line, exc_info=True)
                    continue
                if res is not None:
                    yield cs, res.chain

    def outgoing(self, data: dict) -> list[tuple[Item, list[tuple[int, int, int]]]]:
        groups: dict[tuple, tuple[Item, list]] = {}
        if data.get("t") == "def":
            mod = self.q.module(data["module"])
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
            chain = self.q.trace_symbol(data["symbol"])
            regs = [r for lf in chain.leaves() if lf.final.kind == M.TORCH_OP for r in lf.final.registrations]
            for r in regs:
                if r.function_path and r.function_line:
                    it = Item(r.function or "?", "cpp", f"{r.kind} {r.dispatch_key or ''}".strip(), r.function_path,
                              r.function_line, 0, 0, r.function_line, r.function_line,
                              {"t": "cpp", "path": r.function_path, "line": r.function_line})
                    groups.setdefault(it.key(), (it, []))[1].append((data.get("line") or r.line, 0, 0))
        return list(groups.values())

    def incoming(self, data: dict) -> list[tuple[Item, list[tuple[int, int, int]]]]:
        """Callers of the item: from the reverse call index as it is (see :meth:`calls_request_step`),
        plus the registry registrations of a backend class. Groups sorted by caller, spans by position."""
        groups: dict[tuple, tuple[Item, list]] = {}
        for rec in self._incoming_records(data):
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
        out = sorted(groups.values(), key=lambda g: (g[0].path, g[0].line, g[0].name))
        for _it, spans in out:
            spans.sort()
        return out

    def _incoming_records(self, data: dict) -> list:
        """The call index's records that reach the item: a definition (through its lines), a final
        target (its symbol met on the way) or a C++ function (a hop at its line)."""
        ci = self.calls
        if data.get("t") == "def":
            d = self.defref(data["module"], data["qual"])
            return ci.calls_into(d.path, d.deco_line, d.end_line) if d is not None else []
        if data.get("t") == "final":
            sym = data.get("symbol")
            if data.get("kind") == M.UNRESOLVED or not isinstance(sym, str) or not sym:
                return []
            return ci.calls_meeting(sym)
        if data.get("t") == "cpp":
            p, line = data.get("path"), data.get("line")
            return ci.calls_through(p, line) if isinstance(p, str) and isinstance(line, int) else []
        return []

    def _scope_item(self, mod, scope: str) -> Item:
        if scope:
            d = self.defref(mod.name, scope)
            if d is not None:
                return self.item_for_def(d)
        n = self.line_count(mod.path) or 1
        return Item(mod.name, "module", mod.path, mod.path, 1, 0, 0, 1, n, {"t": "module", "module": mod.name, "path": mod.path})

    def _caller_item(self, rec) -> Item:
        """The caller of a call index record (``callindex.CallRec``)."""
        name = self.calls.module_name(rec.path)
        if name is not None and not self.q.is_loaded(name):
            # an edited buffer nobody has summarised yet: the caller named from the record (its
            # function, at the call), instead of building the summary (a pasted buffer: 0.3-2 s)
            short = rec.scope.rpartition(".")[2] or name
            return Item(short, "method" if "." in rec.scope else "function" if rec.scope else "module", name,
                        rec.path, rec.fline, rec.fcol, rec.fend_col, rec.fline, rec.fline,
                        {"t": "def", "module": name, "qual": rec.scope, "path": rec.path} if rec.scope else
                        {"t": "module", "module": name, "path": rec.path})
        mod = self.module(rec.path)
        return self._scope_item(mod, rec.scope) if mod is not None else Item(
            os.path.basename(rec.path), "module", rec.path, rec.path, 1, 0, 0, 1, 1, {"t": "module", "path": rec.path})

    # -- the reverse call index (core: ``callindex.CallIndex``) ---------------------------
    def calls_step(self, budget_s: float = 0.02, cancel=None, urgent_only: bool = False) -> bool:
        """Bring the call index up to date for about ``budget_s``; True when nothing (urgent) is left."""
        return self.calls.step(budget_s, cancel, urgent_only)

    def calls_request_step(self, budget_s: float, wait_s: float = 0.0, cancel=None) -> tuple[bool, bool]:
        """One step of what an incoming-calls request waits for: (must wait, answer now).

        It must wait while some workspace module was never traced (an answer would miss its callers):
        ``budget_s`` of tracing per step. Once every module was traced, it answers from the records as
        they are (their lines moved to the edited text) after at most ``wait_s`` of the urgent catch-up,
        and never pays for the summary of an edited buffer nobody has read yet."""
        ci = self.calls
        if ci.untraced() == 0 and ci.unsummarised_changes():
            return False, True
        ci.sync()
        must = ci.untraced() > 0
        if not ci.urgent_left or not (must or wait_s > 0):
            return must, not must
        deadline = time.perf_counter() + (budget_s if must else wait_s)

        def stop() -> bool:  # a trace still running at the deadline is dropped: the background does it
            return bool(cancel is not None and cancel()) or (not must and time.perf_counter() > deadline)

        ci.step(budget_s if must else wait_s, stop, urgent_only=True)
        must = ci.untraced() > 0
        return must, not must
