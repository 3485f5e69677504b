"""What the LSP features ask of the analysis core, with the server's caches.

The questions go through the workspace's :class:`~attnlens.query.Query` (``self.q``), the one door
into the core. Everything here runs on the worker thread (see ``worker.py``) and returns
plain data: core types (``Chain``, ``BackendEntry``) or the records of
``records.py``, with 1-based lines and code point columns. No lsprotocol
types: the features convert at the edge. Call hierarchy (``calls.py``) and
the symbol table (``symbol_table.py``) are mixed in. An :class:`Analysis` also holds the
server's per-workspace state that lives on the worker thread (kernel call sites in progress,
the installed-kernel symbols, the rules errors already logged): nothing of it is a module global.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Iterator

from ..gcpolicy import freeze_young
from ..query import Query
from ..workspace import Workspace
from .calls import CallsMixin
from .convert import line_spans, name_span
from .records import LRU, DefRef, Item, Resolved, Sym  # noqa: F401 - re-exported
from .symbol_table import SymbolsMixin, match_symbols  # noqa: F401 - re-exported

STEP_BUDGET_S = 0.05  # background indexing: the work done between two yields
REFRESH_STEP_S = 0.02  # the refresh after edits (the user is typing: smaller steps)

log = logging.getLogger(__name__)


# summaries a server keeps in memory (a batch keeps ``Index.SUMMARY_KEEP_MAX``, 800): upstream vLLM opened as the
# workspace with 100 files open, the server's peak 321 -> 286 MB with the resolver's memos trimmed between two
# files' work (docs/performance.md, twenty-sixth session); the real vLLM-MetaX checkout's server loads ~550
SERVER_SUMMARIES = 500


class Analysis(CallsMixin, SymbolsMixin):
    """The server's view of one :class:`Workspace` (worker thread only)."""

    def __init__(self, ws: Workspace, index_budget_s: float = 0.25):
        self.ws = ws  # only handed to the rules, upgrade and runtime entry points (they take a workspace)
        self.q = ws.query  # every question of the core
        self.q.serve_long(SERVER_SUMMARIES)
        self._chains: LRU = LRU(4096)
        self._lines: LRU = LRU(128)  # path -> (generation, text, its lines' spans)
        self._backends: tuple[int, list] | None = None
        self._roles: tuple[int, dict] | None = None
        self._symbols: tuple[int, list[Sym]] | None = None
        self._sym_parts: dict = {}  # module name -> [(class dotted or None, Sym)]: symbol_table.symbol_steps
        self._sym_parts_gen: int | None = None  # the generation _sym_parts are up to date with
        self.fix_offers: LRU = LRU(256)  # (finding id, path, generation, drift report) -> quick-fix offer (fixes.py)
        self.index_budget_s = index_budget_s
        self.calls = self.q.call_index(index_budget_s)  # incoming calls (calls.py)
        # "has the running request given up?" (the server sets Worker.should_yield): a cancelled hover's
        # trace stops at its next check instead of holding the analysis thread for its whole budget
        self.cancel: Callable[[], bool] | None = None
        self.callsites_on_demand = False  # set by callsites_deferred: the index waits for a request
        # per-workspace state of the features (worker thread), formerly module globals
        self.site_progress: dict = {}  # path -> kernels._Progress: the file's kernel call sites, a few at a time
        self.last_sites: dict = {}  # path -> the file's last complete kernel call sites (kernels.provisional_sites)
        self.installed_symbols: dict = {}  # package folders -> kernel symbols of installed packages (installed.py)
        self.reported_errors: set[str] = set()  # rules engine errors already logged (once each)

    # -- basics ----------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self.q.generation

    def _spans(self, path: str) -> tuple[str, Any]:
        """``path``'s current text and its lines' spans (``convert.line_spans``), kept while that text stays the
        same object (the index keeps a file's text while its stamp holds, a buffer's until it changes): a
        workspace-symbol request after an edit split every file of its 200 results again (100-380 ms on the
        real checkout, not yielding). Spans, not the lines as strings: those were 18 MB of a server on upstream
        vLLM (the texts themselves are the index's)."""
        gen = self.generation
        hit = self._lines.get(path)
        if hit is not None and hit[0] == gen:
            return hit[1], hit[2]  # (no stat of the file for each position a request converts)
        text = self.q.source_text(path) or ""
        got = hit[2] if hit is not None and hit[1] is text else line_spans(text)
        self._lines.put(path, (gen, text, got))
        return text, got

    def line_count(self, path: str) -> int:
        """How many lines ``path``'s current text has, as LSP counts them."""
        return len(self._spans(path)[1]) // 2

    def line_text(self, path: str, line: int) -> str:
        text, spans = self._spans(path)
        return text[spans[2 * line - 2]:spans[2 * line - 1]] if 0 < line <= len(spans) // 2 else ""

    def module(self, path: str):
        return self.q.module_for_path(path)

    # -- positions -------------------------------------------------------------
    def resolve(self, path: str, line: int, col: int, budget_s: float | None = None) -> Resolved | None:
        """The call or name under (line, col) and its chain, from the chain cache when possible."""
        ref = self.q.ref_at(path, line, col)
        if ref is None:
            return None
        call = (ref.call.line, ref.call.col) if ref.call is not None else None
        key = (path, self.generation, ref.line, ref.col, ref.end_col, ref.text, call)
        chain = self._chains.get(key)
        if chain is None or (chain.partial and budget_s is None):
            chain = self.q.trace_ref(ref, budget_s, self.cancel)
            # never keep a cancelled one, nor one marked with a never-selected set not checked since the edits
            if not (chain.partial and self.cancel is not None and self.cancel()) and not chain.provisional:
                self._chains.put(key, chain)
        return Resolved(ref, chain)

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
        mod = self.q.module(module)
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
        if Query.triton_kernel_decorated(f.decorators):  # the core's Triton names (one implementation)
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
        entries = self.q.backends(with_call_sites=True, include_custom_ops=True)
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
    # -- indexing (background, in small steps) --------------------------------
    def indexing_steps(self) -> Iterator[tuple[str, int]]:
        """Warm everything requests need; yields (message, percentage) per step. Each step holds
        the one analysis thread for about ``STEP_BUDGET_S``: a request or a diagnostics run that
        arrives meanwhile waits at most that long."""
        n = len(self.q.workspace_module_names()) or 1
        # every module's symbols (Query.scan_module: on a small workspace its summary kept for the requests; on a
        # large one read and dropped: the summaries a request needs are then read from the cache folder)
        for i in self.symbol_steps(STEP_BUDGET_S):
            freeze_young()  # summaries live as long as the index: keep full collections off them
            yield f"{i}/{n} modules", int(60 * i / n)
        freeze_young()
        yield f"{n}/{n} modules", 60
        self.q.stop_prefetch()  # the summary helper, if one runs: every module is read
        try:
            self.q.platform_summary()
        except Exception:  # noqa: BLE001
            log.warning("platform profile failed", exc_info=True)
        yield "platform profile", 65
        try:
            for done in self.q.cpp_warm_steps(STEP_BUDGET_S):  # a few files per step
                yield f"C++ files: {done}", 70
        except Exception:  # noqa: BLE001
            log.warning("C++ index failed", exc_info=True)
        yield "C++ registrations", 75
        try:
            for n in self.q.registry_warm_steps(STEP_BUDGET_S):  # call-site chains a few at a time
                yield f"backends: {n}, tracing their call sites", 80
            self.backends()
            self.q.never_selected()  # reachability follows selection: ready before the hovers need it
        except Exception:  # noqa: BLE001
            log.warning("backend registry failed", exc_info=True)
        yield "backends", 90
        self.symbols()
        yield "symbols", 100
        self.q.flush()

    def refresh_steps(self) -> Iterator[int]:
        """After edits: the backends' call-site chains traced again, about ``REFRESH_STEP_S`` per step (the
        chains land in the resolver's site memo; a following :meth:`backends` assembles them), then the
        never-selected set checked again (requests meanwhile were answered with the one of before the edits:
        ``Workspace.never_selected(provisional=True)``), the edited buffers' summaries one per step."""
        if not self.backends_fresh():
            yield from self.q.registry_warm_steps(REFRESH_STEP_S)
        yield from self.q.never_selected_steps()

    def callsites_deferred(self, max_modules: int) -> bool:
        """Leave the call-site index to the first request that needs it (incoming calls) when the
        workspace has more than ``max_modules`` modules."""
        self.callsites_on_demand = len(self.q.workspace_files()) > max_modules
        return self.callsites_on_demand

    # -- status ----------------------------------------------------------------
    def status(self) -> dict:
        q = self.q
        q.check_never_selected()  # first: after the status, no request answers with the set of before the edits
        try:
            platform = q.platform_summary()
        except Exception as e:  # noqa: BLE001
            platform = {"error": f"{type(e).__name__}: {e}"}
        return {
            "root": str(q.root),
            "targetPython": q.target.python,
            "targetError": q.target_error,
            "indexedModules": len(q.workspace_files()),
            "generation": self.generation,
            "platform": platform,
            "backends": len(self._backends[1]) if self._backends else None,
            # "pending" right after edits: requests then answer with the never-selected set of before them
            "neverSelected": "checked" if q.never_selected_checked() else "pending",
            "callSitesIndexed": len(self.calls) if self.calls.complete else None,
            "summaries": q.summary_stats(),
            "callSitesIndex": ("complete" if self.calls.complete else
                               "on demand" if self.callsites_on_demand and not self.calls.by_path else
                               "building" if not self.calls.by_path else "updating"),
        }
