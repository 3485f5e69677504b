"""The reverse call index: which workspace call sites reach a definition, a symbol or a C++ function.

Pure core (no LSP types). Every candidate call site of every workspace module is traced once
(:meth:`Resolver.trace_call`) into a :class:`CallRec`: where the call is, every place its tree passes
through (hops, fork and branch points, leaves) and the symbols it meets. Reverse maps from
``(path, line)`` points and from symbols to records answer "who calls this" with a few dictionary
lookups, instead of a scan of every record or a re-trace of the workspace.

**Kept current incrementally.** When the index generation moves (an edited buffer, a changed file),
:meth:`CallIndex.sync` reads which files changed (``Index.changed_since``) and, per changed workspace
module ``B``:

1. *Moves lines.* The text the records were traced against (a snapshot per module) and the new text
   share a prefix and a suffix of lines; the lines between are the *edited region*. Every point of
   every record in ``B`` after the region moves by the line delta, so answers stay line-exact before
   anything is traced again.
2. *Decides what is stale.* The edited region grows to the outermost function (else class) spans it
   touches, in the old and the new text. If ``B``'s :func:`outside_facts` are unchanged (what a trace
   of a call elsewhere can read of ``B`` without a hop in it: module-level names, classes with bases
   and members, function signatures and returns, attribute patches, module-level and registration
   calls; no positions), only the records with a point (their call, a hop, a branch, a leaf) in the
   region are stale, and the call sites inside the new region are new: those are traced again
   (*urgent*). A statement typed in a method body re-traces the calls of that method and the call
   sites whose trees go through it: a few traces.
3. Otherwise (a new class, function or import; a signature; a 5,000-line paste; a deleted file; an
   installed module changed; the index lost count), ``B`` and the records through it are urgent and
   every other workspace module is traced again in the *background*: a new subclass, registration or
   patch can change trees that never touched ``B``.

:meth:`step` traces for a time budget, resumable at any call site, and stops early when ``cancel``
returns true (a request is waiting); a trace cut short by ``cancel`` is dropped and done again in a
later step. Queries answer from the records as they are. :attr:`urgent_left` is 0 when no record is
known to be stale (then the answers equal a full scan's for every edit whose outside facts are
unchanged); :attr:`complete` when nothing is queued at all (then they equal it after any edit).

A trace that ran out of its time budget (``budget_s``, 0.25 s in the server) is traced again without
one once nothing else is queued, so that a complete index does not depend on the machine's load: then
it equals a full scan (``tests/test_callindex.py`` checks it after edits of every kind, unbudgeted).
"""

from __future__ import annotations

import collections
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from . import model as M
from .pyindex import Stopped

log = logging.getLogger(__name__)

ALL = None  # work item: every call site of the module


@dataclass(frozen=True)
class CallRec:
    """One traced workspace call site."""

    path: str
    line: int
    fline: int  # the callee expression's span (where the call is shown)
    fcol: int
    fend_col: int
    func: str
    scope: str  # qualname of the enclosing function ('' at module level)
    final_kind: str
    final_symbol: str
    final_path: str | None
    final_line: int | None
    waypoints: tuple  # (path, line) of every hop after the call itself, fork and branch points, leaves
    marks: frozenset  # torch op / not-installed / final symbols met on the way
    deps: frozenset = frozenset()  # real paths of the files this record's answer depends on

    @property
    def key(self) -> tuple:
        return (self.fline, self.fcol, self.func)


def call_key(cs) -> tuple:
    """A call site's identity within its module's summary: where its callee starts, and its text."""
    return (cs.fline, cs.fcol, cs.func)


def record(path: str, cs, chain: M.Chain, module_paths: Callable[[str], Iterable[str]] | None = None,
           realpath: Callable[[str], str] = os.path.realpath) -> CallRec:
    """The record of call site ``cs`` of the module at ``path`` whose tree is ``chain``.

    ``module_paths(symbol)``: paths of the workspace modules a hop symbol names (a lookup there that
    found nothing still depends on them); ``realpath``: the index's memoised ``Index.realpath``."""
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
    marks = frozenset(h.symbol for h in hops if h.kind in (M.HopKind.TORCH_OP, M.HopKind.NOT_INSTALLED)) | {f.symbol}
    marks |= {lf.symbol for lf in finals}
    deps = {path} | {p for p, _ in waypoints} | {h.path for h in hops if h.path}
    for lf in finals + [f]:
        if lf.path:
            deps.add(lf.path)
        for r in lf.registrations:
            deps.update(p for p in (r.path, r.function_path) if p)
    if module_paths is not None:
        for sym in {h.symbol for h in hops} | {lf.symbol for lf in finals}:
            deps.update(module_paths(sym))
    return CallRec(path, cs.line, cs.fline, cs.fcol, cs.fend_col, cs.func, cs.scope, f.kind, f.symbol, f.path,
                   f.line, tuple(dict.fromkeys(waypoints)), marks, frozenset(realpath(p) for p in deps))


# -- what other modules can see of a module ------------------------------------------------------
def _g(guards) -> tuple:
    return tuple(g[:2] for g in guards)  # (kind, text): the line is left out


def _decos(ds) -> tuple:
    return tuple((d.func, d.is_call, d.str_args, d.arg_texts, d.kw_texts) for d in ds)


def _binds(bs) -> tuple:
    return tuple((b.kind, b.target, b.attr, b.level, _g(b.guards), b.alternatives, b.str_args, b.scope) for b in bs)


def outside_facts(s) -> tuple:
    """What a trace of a call in *another* module can read of summary ``s`` without leaving a hop in it,
    with every position left out: an edit that keeps these equal (a statement typed in a function body,
    lines moved) can change only the records that pass through the edited lines."""
    bindings = tuple(sorted((n, _binds(bs)) for n, bs in s.bindings.items()))
    classes = tuple(sorted(
        (q, c.name, c.bases, _decos(c.decorators), tuple(sorted(c.methods.items())),
         tuple(sorted((n, _binds([b])) for n, b in c.attrs.items())),
         tuple(sorted((n, _binds([b])) for n, b in c.inst_attrs.items())),
         tuple(fl[:3] for fl in c.fields), c.is_dataclass, tuple(sorted(c.reassigned)))
        for q, c in s.classes.items()))
    hooks = {ap.value for ap in s.attr_patches}  # functions installed as hooks: the names they read count
    functions = tuple(sorted(
        (q, f.name, tuple((p.name, p.kind, p.has_default, p.annotation) for p in f.params), _decos(f.decorators),
         f.class_name, f.is_async, f.inner_defs, f.wraps, f.returns, tuple((a[0], _g(a[1])) for a in f.return_alts),
         f.returns_names, repr(f.returns_const), f.dummy, f.names_read if q in hooks else ())
        for q, f in s.functions.items()))
    calls = collections.Counter(
        (cs.func, cs.scope, cs.str_args, cs.arg_texts, cs.kw_texts, cs.launch, _g(cs.guards))
        for cs in s.calls if not cs.scope or "regist" in cs.func)
    patches = tuple((ap.target, ap.value, _g(ap.guards)) for ap in s.attr_patches)
    return (bindings, classes, functions, tuple(sorted(calls.items(), key=repr)), patches, s.all_exports,
            s.has_getattr, s.error is None)


@dataclass
class Snapshot:
    """A module's text as its records (and the records pointing into it) were traced, and its spans."""

    lines: list  # the text's lines (with their line breaks)
    spans: list  # (first line, last line, is_function) of every def and class, decorators included
    facts: tuple


def snapshot(text: str, summary) -> Snapshot:
    spans = [(f.deco_line, f.end_line, True) for f in summary.functions.values()]
    spans += [(c.deco_line, c.end_line, False) for c in summary.classes.values()]
    return Snapshot(text.splitlines(True), spans, outside_facts(summary))


def edited_region(old: list, new: list) -> tuple[int, int, int] | None:
    """(first, last, delta): old lines ``first..last`` (1-based; ``last = first - 1`` for a pure
    insertion) were replaced; the lines after move by ``delta``. None when the texts are equal."""
    if old == new:
        return None
    n, m = len(old), len(new)
    p = 0
    while p < n and p < m and old[p] == new[p]:
        p += 1
    s = 0
    while s < n - p and s < m - p and old[n - 1 - s] == new[m - 1 - s]:
        s += 1
    return p + 1, n - s, m - n


def grow(lo: int, hi: int, spans: list) -> tuple[int, int]:
    """The lines ``lo..hi`` grown to the outermost function spans they touch (a class span where no
    function holds them): the code whose analysis can read the edited lines."""
    while True:
        nlo, nhi = lo, hi
        for a, b, is_func in spans:
            if a <= hi and lo <= b and (is_func or not any(fa <= lo and hi <= fb for fa, fb, f in spans if f)):
                nlo, nhi = min(nlo, a), max(nhi, b)
        if (nlo, nhi) == (lo, hi):
            return lo, hi
        lo, hi = nlo, nhi


def stale_lines(old: Snapshot, new: Snapshot, lo: int, hi: int, delta: int) -> tuple[int, int]:
    """The old lines whose code can differ after the edit of old lines ``lo..hi`` (lines after move by
    ``delta``): the edited lines grown to the definitions holding them, before and after the edit (an
    insertion counts the line after it). Old line L < lo is new line L; L > hi is new line L + delta."""
    a, b = lo, max(lo, hi)
    while True:
        a2, b2 = grow(a, b, old.spans)
        c, d = grow(a2, max(a2, b2 + delta), new.spans)
        a3, b3 = min(a2, c), max(b2, d - delta)
        if (a3, b3) == (a, b):
            return a, b
        a, b = a3, b3


# -- the index -----------------------------------------------------------------------------------
class CallIndex:
    """Records of every workspace call site, with reverse maps; see the module docstring.

    ``index``: the :class:`~attnlens.index.Index`; ``resolver``: traces call sites (``trace_call``);
    ``budget_s``: the time budget of one trace (None: unbounded)."""

    def __init__(self, index, resolver, budget_s: float | None = 0.25):
        self.index = index
        self.resolver = resolver
        self.budget_s = budget_s
        self.generation = -1  # the index generation the queue was last brought up to
        self.by_path: dict[str, dict[tuple, CallRec]] = {}  # caller path -> call key -> record
        self._snaps: dict[str, Snapshot] = {}  # real path -> the text every record's lines there refer to
        self._name_of: dict[str, str] = {}  # caller path -> module name
        self._dependents: dict[str, dict[CallRec, None]] = collections.defaultdict(dict)  # real path -> records
        self._points: dict[str, dict[int, set[CallRec]]] = collections.defaultdict(dict)  # waypoints
        self._finals: dict[str, dict[int, set[CallRec]]] = collections.defaultdict(dict)  # final points
        self._marks: dict[str, set[CallRec]] = collections.defaultdict(set)
        self._urgent: dict[str, set | None] = {}  # module name -> call keys to trace again (ALL: every one)
        self._background: dict[str, None] = {}  # module names to trace again after a change of outside facts
        # records whose trace ran out of its time budget: traced again without one once nothing else is
        # queued (in steps that stop when a request waits), so the answers do not depend on the load
        self._partial: dict[str, set] = {}  # module name -> call keys
        # (name, summary sha, keys, call sites left, records, queue: "urgent" | "background" | "partial")
        self._current: tuple | None = None
        self.traces = 0  # call sites traced so far (all steps)
        self.full_builds = 0  # times every module was queued

    # -- state ---------------------------------------------------------------------
    @property
    def urgent_left(self) -> int:
        """Modules with records known to be stale (or not traced yet)."""
        self.sync()
        return len(self._urgent) + (1 if self._current is not None and self._current[5] == "urgent" else 0)

    @property
    def complete(self) -> bool:
        self.sync()
        return not self._urgent and not self._background and not self._partial and self._current is None

    def untraced(self) -> int:
        """Workspace modules never traced yet (an answer now would miss their callers)."""
        by_path = self.by_path
        return sum(1 for p in self.index.ws_files.values() if p not in by_path)

    def unsummarised_changes(self) -> list[str]:
        """Changed workspace modules whose new summary nobody has built yet: bringing the index up to date
        would build them first (a 5,000-line paste: a few hundred milliseconds)."""
        index = self.index
        if index.generation == self.generation:
            return []
        changed = index.changed_since(self.generation) if self.generation >= 0 else None
        if changed is None:
            return sorted(n for n in index.ws_files if not index.is_loaded(n))
        by_real = {index.realpath(p): n for n, p in index.ws_files.items()}
        return sorted(n for r in changed if (n := by_real.get(r)) is not None and not index.is_loaded(n))

    def module_name(self, path: str) -> str | None:
        """The module name of a caller path with records."""
        return self._name_of.get(path)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_path.values())

    def sync(self) -> None:
        """Bring the records' lines and the queue up to the index's generation (cheap when nothing
        changed: the first call after an edit reads the edited module's new summary)."""
        index = self.index
        gen = index.generation
        if gen == self.generation:
            return
        changed = index.changed_since(self.generation) if self.generation >= 0 else None
        self.generation = gen
        cur = self._current
        if cur is not None:  # its records so far were traced against the old texts: that module again
            self._current = None
            if cur[5] == "background":
                self._background[cur[0]] = None
            elif cur[5] == "partial":
                self._partial.setdefault(cur[0], set()).update(cur[2])
            else:
                keys = self._urgent.get(cur[0], set())
                self._urgent[cur[0]] = ALL if cur[2] is ALL or keys is ALL else keys | cur[2]
        names = index.ws_files
        gone = [p for p, n in self._name_of.items() if names.get(n) != p]
        for p in gone:
            self._remove_module(p)
        if changed is None:
            self._snaps.clear()
            self._queue_all({})
            return
        by_real = {index.realpath(p): n for n, p in names.items()}
        urgent: dict[str, set | None] = {}
        global_change = bool(gone)
        for real in sorted(changed):
            name = by_real.get(real)
            mod = index.module(name) if name is not None else None
            if mod is None:
                # not a workspace module: an importable (installed) one can change any tree, and so can a
                # C++ file (the op registrations); another Python file (a script, a test outside the
                # packages) only the trees that went through it
                if name is not None or not real.endswith(".py") or index.module_for_path(real) is not None:
                    global_change = True
                self._stale(urgent, self._dependents.get(real, ()))
                continue
            if not self._changed_module(real, name, mod, urgent):
                global_change = True
        if global_change:
            self._queue_all(urgent)
        else:
            self._queue(urgent)

    def _changed_module(self, real: str, name: str, mod, urgent: dict) -> bool:
        """Move the lines of the records in the changed module ``mod`` and queue what is stale; False
        when its outside facts changed (or cannot be compared)."""
        old = self._snaps.get(real)
        text = self.index.source_text(mod.path) or ""
        new = snapshot(text, mod.summary)
        self._snaps[real] = new
        if old is None:
            urgent[name] = ALL
            self._stale(urgent, self._dependents.get(real, ()))
            return False
        region = edited_region(old.lines, new.lines)
        if region is None:
            return old.facts == new.facts
        lo, hi, delta = region
        glo, ghi = stale_lines(old, new, lo, hi, delta)
        stale = self._move_lines(mod.path, glo, ghi, delta)
        if old.facts != new.facts:
            urgent[name] = ALL
            self._stale(urgent, stale)
            return False
        self._stale(urgent, stale)
        from .registry import is_candidate

        new_keys = {call_key(cs) for cs in mod.summary.calls
                    if glo <= cs.fline <= ghi + delta and is_candidate(cs)}
        if new_keys and urgent.get(name, set()) is not ALL:
            urgent.setdefault(name, set()).update(new_keys)
        return True

    def _stale(self, urgent: dict, recs: Iterable[CallRec]) -> None:
        for r in recs:
            n = self._name_of.get(r.path)
            if n is None:
                continue
            keys = urgent.get(n, set())
            if keys is not ALL:
                keys.add(r.key)
                urgent[n] = keys

    def _move_lines(self, path: str, lo: int, hi: int, delta: int) -> list[CallRec]:
        """Move the points at ``path`` after line ``hi`` by ``delta``; return the records with a point (or
        their call) in ``lo..hi``, moved too (their lines there kept as they were, they are stale).

        A stale call of ``path`` (in ``lo..hi``) whose key a moved call now has (a deleted region: the
        calls after it move onto its lines) is dropped: its call is gone, and the new text's calls there
        are traced again anyway."""
        touched: set[CallRec] = set(self.by_path.get(path, {}).values())
        for table in (self._points.get(path), self._finals.get(path)):
            if table:
                for ln in [ln for ln in table if ln >= lo]:
                    touched.update(table[ln])

        def mv(p, ln):
            return ln + delta if p == path and ln is not None and ln > hi else ln

        def inside(p, ln):
            return p == path and ln is not None and lo <= ln <= hi

        moves: list[tuple[CallRec, CallRec, bool]] = []  # (record, moved, stale)
        for r in touched:
            is_stale = (inside(r.path, r.fline) or inside(r.final_path, r.final_line)
                        or any(inside(p, ln) for p, ln in r.waypoints))
            moved = r
            if delta:
                moved = replace(r, line=mv(r.path, r.line), fline=mv(r.path, r.fline),
                                final_line=mv(r.final_path, r.final_line),
                                waypoints=tuple(dict.fromkeys((p, mv(p, ln)) for p, ln in r.waypoints)))
            moves.append((r, moved, is_stale))
        if not delta:
            return [m for _r, m, st in moves if st]
        for r, moved, _st in moves:  # every touched record out of the maps first: keys may be taken over
            self._unlink(r)
            recs = self.by_path.get(r.path)
            if recs is not None and recs.get(r.key) is r:
                del recs[r.key]
        partial = self._partial.get(self._name_of.get(path, ""), set())
        stale = []
        # the calls that moved (never in the region) take their keys first; then the rest, where free
        for r, moved, is_stale in sorted(moves, key=lambda t: t[0].path != path or t[0].fline <= hi):
            recs = self.by_path.get(r.path)
            if recs is not None:
                if moved.key in recs:
                    continue  # a stale call of ``path`` on a moved call's line: dropped
                recs[moved.key] = moved
                if r.key != moved.key and r.key in partial:
                    partial.discard(r.key)
                    partial.add(moved.key)
            self._link(moved)
            if is_stale:
                stale.append(moved)
        return stale

    def _queue(self, urgent: dict) -> None:
        for name, keys in urgent.items():
            have = self._urgent.get(name, set())
            if have is ALL or keys is ALL:
                self._urgent[name] = ALL
            else:
                self._urgent[name] = have | keys
            if keys is ALL:
                self._background.pop(name, None)

    def _queue_all(self, urgent: dict) -> None:
        """``urgent`` first, then every other workspace module in the background."""
        self.full_builds += 1
        self._queue(urgent)
        for name in sorted(self.index.ws_files):
            if name in self._urgent and self._urgent[name] is ALL:
                continue
            if self.by_path.get(self.index.ws_files[name]) is None:
                self._urgent[name] = ALL  # nothing traced there yet: nothing to answer from
            else:
                self._background[name] = None

    # -- tracing ---------------------------------------------------------------------
    def step(self, budget_s: float = 0.02, cancel: Callable[[], bool] | None = None, urgent_only: bool = False) -> bool:
        """Trace call sites for about ``budget_s``; True when nothing is left (of the urgent part, with
        ``urgent_only``). Stops early when ``cancel()`` turns true."""
        from .registry import is_candidate

        if cancel is not None and cancel():
            return False  # a request is already waiting: not even the sync
        self.sync()
        deadline = time.perf_counter() + budget_s
        stopped = [False]

        def stop() -> bool:
            if not stopped[0] and cancel is not None and cancel():
                stopped[0] = True
            return stopped[0]

        while True:
            if self._current is None and not self._next(urgent_only):
                return True
            if time.perf_counter() >= deadline or stop():
                return False
            name, sha, keys, todo, recs, queue = self._current
            budget = None if queue == "partial" else self.budget_s
            mod = self.index.module(name)
            if mod is None or mod.summary.sha != sha:  # changed under us (sync normally sees it first)
                self._current = None
                self._urgent[name] = ALL
                continue
            while todo:
                if time.perf_counter() >= deadline or stop():
                    return False
                cs = todo[-1]
                if is_candidate(cs):
                    # a summary inside the trace gives way too (only there: taking the next module off the queue must not stop)
                    before, self.index.build_should_stop = self.index.build_should_stop, stop
                    try:
                        chain = self.resolver.trace_call(mod, cs, budget, cancel=stop)
                    except Stopped:
                        return False  # a request is waiting: this site again next time
                    except Exception:  # noqa: BLE001 - e.g. RecursionError in the resolver: that site only
                        log.debug("tracing %s:%s failed", mod.path, cs.line, exc_info=True)
                        chain = None
                    finally:
                        self.index.build_should_stop = before
                    if stopped[0]:
                        return False  # cut short: this site again next time
                    self.traces += 1
                    if chain is not None:
                        recs[call_key(cs)] = record(mod.path, cs, chain, self._module_paths, self.index.realpath)
                        self._note_partial(name, call_key(cs), chain.partial and budget is not None)
                todo.pop()
            self._install(name, mod, keys, recs)
            self._current = None

    def _next(self, urgent_only: bool) -> bool:
        """Start the next module of the queue; False when there is none."""
        while True:
            queue = "urgent"
            if self._urgent:
                name = next(iter(self._urgent))
                keys = self._urgent.pop(name)
                if keys is ALL:
                    self._background.pop(name, None)
            elif self._background and not urgent_only:
                name = next(iter(self._background))
                del self._background[name]
                keys, queue = ALL, "background"
            elif self._partial and not urgent_only:
                name = next(iter(self._partial))
                keys, queue = self._partial.pop(name), "partial"
            else:
                return False
            mod = self.index.module(name)
            if mod is None:  # unreadable: traced, with no call sites
                path = self.index.ws_files.get(name)
                if path is not None:
                    self._remove_module(path)
                    self.by_path[path] = {}
                    self._name_of[path] = name
                continue
            calls = mod.summary.calls
            if keys is not ALL:
                calls = [cs for cs in calls if call_key(cs) in keys]
            self._current = (name, mod.summary.sha, keys, list(reversed(calls)), {}, queue)
            return True

    def _note_partial(self, name: str, key: tuple, partial: bool) -> None:
        if partial:
            self._partial.setdefault(name, set()).add(key)
        elif name in self._partial:
            self._partial[name].discard(key)
            if not self._partial[name]:
                del self._partial[name]

    def _module_paths(self, symbol: str) -> list[str]:
        """The workspace modules (and their packages) a dotted symbol names: resolving it read them."""
        names = self.index.ws_files
        parts = symbol.split(".")
        return [p for k in range(1, len(parts) + 1) if (p := names.get(".".join(parts[:k]))) is not None]

    def _install(self, name: str, mod, keys, recs: dict) -> None:
        path = mod.path
        real = self.index.realpath(path)
        if real not in self._snaps:
            self._snaps[real] = snapshot(self.index.source_text(path) or "", mod.summary)
        old = self.by_path.setdefault(path, {})
        self._name_of[path] = name
        for k in (list(old) if keys is ALL else keys):
            r = old.pop(k, None)
            if r is not None:
                self._unlink(r)
        for k in sorted(recs):
            r = recs[k]
            old[k] = r
            self._link(r)
            for p, _ln in r.waypoints:
                rp = self.index.realpath(p)
                if rp not in self._snaps and self.index.is_workspace_path(p):
                    m = self.index.module_for_path(p)
                    if m is not None:
                        self._snaps[rp] = snapshot(self.index.source_text(p) or "", m.summary)

    def _link(self, r: CallRec) -> None:
        for dep in r.deps:
            self._dependents[dep][r] = None
        for p, ln in r.waypoints:
            self._points[p].setdefault(ln, set()).add(r)
        if r.final_path and r.final_line is not None:
            self._finals[r.final_path].setdefault(r.final_line, set()).add(r)
        for s in r.marks:
            self._marks[s].add(r)

    def _unlink(self, r: CallRec) -> None:
        for dep in r.deps:
            d = self._dependents.get(dep)
            if d is not None:
                d.pop(r, None)
                if not d:
                    del self._dependents[dep]
        for p, ln in r.waypoints:
            _discard(self._points, p, ln, r)
        if r.final_path and r.final_line is not None:
            _discard(self._finals, r.final_path, r.final_line, r)
        for s in r.marks:
            m = self._marks.get(s)
            if m is not None:
                m.discard(r)
                if not m:
                    del self._marks[s]

    def _remove_module(self, path: str) -> None:
        for r in (self.by_path.pop(path, None) or {}).values():
            self._unlink(r)
        name = self._name_of.pop(path, None)
        if name is not None:
            self._partial.pop(name, None)

    # -- queries ---------------------------------------------------------------------
    def calls_into(self, path: str, first_line: int, last_line: int) -> list[CallRec]:
        """Records whose tree passes through lines ``first_line..last_line`` of ``path`` (a definition),
        except the calls inside that span (a function's own recursion)."""
        out: set[CallRec] = set()
        for table in (self._points.get(path), self._finals.get(path)):
            if not table:
                continue
            if len(table) < last_line - first_line + 1:
                lines = [ln for ln in table if first_line <= ln <= last_line]
            else:
                lines = [ln for ln in range(first_line, last_line + 1) if ln in table]
            for ln in lines:
                out.update(table[ln])
        return _ordered(r for r in out if not (r.path == path and first_line <= r.line <= last_line))

    def calls_meeting(self, symbol: str) -> list[CallRec]:
        """Records whose tree meets ``symbol`` (a torch op, a not-installed name, a final target)."""
        return _ordered(self._marks.get(symbol, ()))

    def calls_through(self, path: str, line: int) -> list[CallRec]:
        """Records with a hop, branch or leaf at exactly ``(path, line)`` (a C++ function bound to an op)."""
        return _ordered((self._points.get(path) or {}).get(line, ()))

    def records(self) -> list[CallRec]:
        return _ordered(r for recs in self.by_path.values() for r in recs.values())


def _discard(table: dict, path: str, line: int, rec: CallRec) -> None:
    by_line = table.get(path)
    if by_line is None:
        return
    s = by_line.get(line)
    if s is not None:
        s.discard(rec)
        if not s:
            del by_line[line]
    if not by_line:
        del table[path]


def _ordered(recs: Iterable[CallRec]) -> list[CallRec]:
    return sorted(recs, key=lambda r: (r.path, r.fline, r.fcol, r.line, r.func))
