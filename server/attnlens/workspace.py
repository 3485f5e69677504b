"""One analysed workspace: index + resolver + registry, their per-workspace memos, and position lookups.

The questions the CLI, the language server, the rules and the upgrade code ask go through its
:attr:`Workspace.query` (:class:`attnlens.query.Query`, one per workspace): outside the core, nothing
reads the index or the resolver off a workspace (``tests/test_architecture.py``). No LSP types here:
lines are 1-based, columns are 0-based code points.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import model as M
from .cache import Cache
from .index import Index, Module
from .pyindex import CallSite, Stopped, summarize
from .resolver import Resolver
from .target import TargetError, TargetInfo, read_target
from .walk import ValKind, Walk


@dataclass
class CallRef:
    """The call or name reference under a position: what a trace at that position follows (``call``: the
    call site when the position is on one; else ``text``, the dotted name up to the segment under it)."""

    module: Module
    scope: str
    text: str  # dotted text up to the segment under the cursor
    line: int
    col: int
    end_col: int
    call: CallSite | None = None


class Workspace:
    """One analysed plugin checkout: its root, target interpreter (``target``), cache, :class:`Index` and
    resolver, and the workspace-wide answers built on them (``backends``, ``kernel_sites``,
    ``never_selected``, ``trace_at`` / ``trace_ref`` / ``trace_symbol``, ``def_at``, ``ref_at``).

    Everything outside the core asks these questions through ``ws.query`` (:class:`attnlens.query.Query`,
    the one door); ``Workspace`` itself is the core's object that owns the state (per-workspace memos live
    here or on its index, ``Query.state``), so two workspaces in one process share nothing.
    """

    def __init__(self, root: str | Path, python: str | None = None, cache_dir: str | Path | None = None,
                 use_cache: bool = True, target: TargetInfo | None = None):
        self.root = Path(os.path.realpath(root))
        self.cache = Cache.for_workspace(self.root, Path(cache_dir) if cache_dir else None) if use_cache else Cache(None)
        self.target_error: str | None = None
        if target is None:
            try:
                target = read_target(python, self.cache)
            except TargetError as e:
                self.target_error = str(e)
                target = TargetInfo(python=python or "", sys_path=[], error=str(e))
        self.target = target  # the target interpreter (the only meaning of "target" here)
        self.subject = None  # the review subject (upgrade.subjects) a snapshot workspace was built for
        self.index = Index(self.root, target, self.cache)
        self.resolver = Resolver(self.index)
        self.resolver.backend_impls = self._backend_impls
        self.resolver.oot_replacements = self.oot_replacements
        self.resolver.enum_overrides = self._enum_overrides
        self._oot_memo: tuple | None = None
        self._overrides_memo: tuple | None = None
        self._impls_memo: tuple | None = None
        self._never_memo: tuple | None = None
        self._never_stale = False  # the last never_selected(provisional=True) answered an unchecked set
        self._impls_busy = False
        self._refs: dict[tuple, list] = {}
        self._backends_memo = None
        self._backends_carry: dict = {}  # flags -> (registry inputs, entries, observed reads, modules taken by summary): reused across generations
        self.allow_fork = False  # forked prefetch workers: only in single-threaded CLI processes
        self._query = None
        # the per-workspace state of the code above the core (the rules engine, the drift report, ...), by
        # owner: it lives as long as this workspace and no other sees it (``Query.state``)
        self.attached: dict[str, dict] = {}

    @property
    def query(self):
        """The questions this workspace answers (:class:`attnlens.query.Query`): one per workspace."""
        if self._query is None:
            from .query import Query

            self._query = Query(self)
        return self._query

    # -- registry ------------------------------------------------------------
    def backends(self, with_call_sites: bool = True, include_custom_ops: bool = False):
        """Registry entries; memoised in memory per index generation and on disk per input fingerprint.

        The on-disk entry is keyed by the workspace fingerprint (every workspace file's
        stamp and the open overlays) and records the stamps of every installed module and
        C++ file it read, so any change upstream or in csrc/ invalidates it.
        """
        from .registry import Registry

        key = (self.index.generation, with_call_sites, include_custom_ops)
        if self._backends_memo is not None and self._backends_memo[0] == key:
            return self._backends_memo[1]
        flags = (with_call_sites, include_custom_ops)
        carry = self._backends_carry.get(flags)
        if carry is not None and not with_call_sites and carry[0] == self._registry_inputs(carry[3])[0]:
            # an edit the registry cannot see (text typed in a body): the entries stand; dependency recorders
            # (the rules engine's) see the reads they were computed from
            self.index.replay(carry[2])
            self._backends_memo = (key, carry[1])
            return carry[1]
        name = f"backends-{self.index.fingerprint()}-{_code_stamp()}-{int(with_call_sites)}{int(include_custom_ops)}"
        cached = None if self.index.has_overlays() else self.cache.load_pickle("derived", name)
        if cached is not None and _deps_fresh(cached[0]):
            entries = cached[1]
        else:
            with self.index.observe() as obs:
                entries = Registry(self.resolver).entries(with_call_sites, include_custom_ops=include_custom_ops)
            if not self.index.has_overlays():
                self.cache.store_pickle("derived", name, (self._dependency_stamps(), entries))
            if not with_call_sites:
                inputs, summarised = self._registry_inputs()
                self._backends_carry[flags] = (inputs, entries, obs, summarised)
        self._backends_memo = (key, entries)
        return entries

    def _registry_inputs(self, summarised: frozenset | None = None) -> tuple:
        """What the registry's entries (without call sites) can depend on, cheaply comparable across index
        generations: installed code and non-Python files (``Index.outside_generation``), the workspace's
        modules and, per module, what other modules can see of it (``callindex.outside_facts``: classes
        with bases and members, signatures and returns, registrations, patches) with the lines of its
        definitions and registration calls (entries carry lines); a module that holds a backend selector
        (``get_attn_backend_cls``, a prefill-backend selector) by its whole content, since a selector's
        body is evaluated. Returns (inputs, the modules taken by summary): a module not summarised yet (a large
        workspace before its indexing ends) stands by its text, so any change of it counts (summarising every
        module here made the first hover on upstream vLLM wait); ``summarised`` (of an earlier call) makes the
        same choice per module, so that inputs compare like with like."""
        idx = self.index
        sigs = []
        if summarised is None:
            summarised = frozenset(n for n in idx.ws_files if idx.is_loaded(n))
        for name in sorted(idx.ws_files):
            if name not in summarised:
                path = idx.ws_files[name]
                sigs.append((name, idx.per_text(path, "registry.text_digest", _text_digest)))
                continue
            m = idx.peek(name)  # bookkeeping: not a read of the analysis
            if m is None:
                sigs.append((name, None))
                continue
            sigs.append((name, _registry_signature(m.summary, idx.source_text(m.path) or "")))
        return (idx.outside_generation, tuple(sigs)), summarised

    def oot_replacements(self) -> dict:
        """register_oot registrations by name, memoised per index generation."""
        gen = self.index.generation
        if self._oot_memo is not None and self._oot_memo[0] == gen:
            return self._oot_memo[1]
        from .customops import collect

        self._oot_memo = (gen, {})  # re-entrant calls while collecting see none
        regs = {}
        try:
            for reg in collect(self.resolver):
                regs.setdefault(reg.name, reg)
        except RecursionError:
            regs = {}
        self._oot_memo = (gen, regs)
        return regs

    def _enum_overrides(self) -> dict:
        """{(enum class name, member): (class path, path, line)} of the plugin's backend registrations (the last
        one listed wins, as the one imported last does in vLLM); memoised per index generation. Read from the
        registration calls alone, so that the registry's own selection sees them; re-entrant calls see none."""
        gen = self.index.generation
        if self._overrides_memo is not None and self._overrides_memo[0] == gen:
            return self._overrides_memo[1]
        from .registry import Registry

        self._overrides_memo = (gen, {})
        out = {}
        for e in Registry(self.resolver).scan_registrations().values():
            if not e.enum or not e.registered_at or "." not in e.enum:
                continue
            ename, _, member = e.enum.rpartition(".")
            reg = e.registered_at[-1]
            out[(ename.rpartition(".")[2], member)] = (e.cls, reg["path"], reg["line"])
        self._overrides_memo = (gen, out)
        return out

    def _backend_impls(self) -> list:
        """(backend name, impl class Val, is MLA) for every registered or selectable attention backend;
        memoised per index generation (the resolver asks while binding `self.impl` of layers)."""
        gen = self.index.generation
        if self._impls_memo is not None and self._impls_memo[0] == gen:
            return self._impls_memo[1]
        if self._impls_busy:
            return []
        self._impls_busy = True
        try:
            out = []
            seen = set()
            for e in self.backends(with_call_sites=False):
                if e.kind != "attention" or e.impl is None or not e.impl.cls or e.impl.cls in seen or not e.loads:
                    continue  # (a backend whose module cannot be imported is never selected)
                v = self.resolver.resolve_symbol(e.impl.cls)
                if v.kind != ValKind.CLASS or v.module is None:
                    continue
                seen.add(e.impl.cls)
                # an MLA impl derives from vLLM's MLA impl bases (`MLAAttentionImpl`, `SparseMLAAttentionImpl`);
                # a base the installed vLLM lacks still names itself in the class statement
                names = [b.qual.rpartition(".")[2] for b in self.resolver.mro(v.module, v.qual)]
                names += [t.rpartition(".")[2] for b in self.resolver.mro(v.module, v.qual) if b.cls for t in b.cls.bases]
                is_mla = any(n.endswith("MLAAttentionImpl") for n in names)
                out.append((e.name, v, is_mla))
        finally:
            self._impls_busy = False
        self._impls_memo = (gen, out)
        return out

    def kernel_sites(self, paths: list[str] | None = None):
        """Every kernel call site in workspace modules under ``paths`` (default: all)."""
        return list(self._iter_kernel_sites(paths))

    def _iter_kernel_sites(self, paths: list[str] | None):
        from .registry import Registry

        reg = Registry(self.resolver)
        never = self.never_selected()
        # only the modules under ``paths`` are summarised for their sites (all of them were: `sites
        # vllm/v1/attention` on upstream vLLM summarised its 2,234 modules for 120 of them)
        mods = self.index.workspace_modules() if not paths else self.index.modules_named(self.index.names_under(paths))
        for i, mod in enumerate(mods):
            if i and not i % self.SITES_MEMO_MODULES:
                self.resolver.clear_memos()
            yield from self._module_sites(reg, mod, never)

    # a sites run over this many modules shares them with a forked helper (upstream vLLM: 2,234); below it one
    # process (the halves are fixed so that a run never depends on timing; answers no longer depend on what
    # was traced before either: docs/resolver.md, "context read past a memo's key")
    SITES_SPLIT_MIN_MODULES = int(os.environ.get("ATTNLENS_SITES_SPLIT_MIN_MODULES") or 1000)
    # a sites run empties the resolver's memos after this many modules (in each process): upstream vLLM's peak
    # 467 -> 348 MB for 1.5 s more (every 100: 309 MB, 5.7 s more); the output is byte-identical. 200 since the
    # twenty-fourth session: with 800 summaries kept, 294 -> 279 MB for ~1 s more (docs/performance.md)
    SITES_MEMO_MODULES = max(1, int(os.environ.get("ATTNLENS_SITES_MEMO_MODULES") or 200))

    def kernel_site_records(self, paths: list[str] | None, render) -> Iterator:
        """``render(site)`` of every site :meth:`kernel_sites` gives, in its order, as they are made (no site or
        record is kept here: upstream vLLM's JSON records are 100 MB); in a CLI process on two cores and at
        least ``SITES_SPLIT_MIN_MODULES`` modules to read, a forked helper traces the second half of the modules
        by bytes, and the first to finish takes the other's last modules (:func:`attnlens.forksplit.iter_split`: ``render`` must give a picklable
        value). Upstream vLLM as the workspace: 22,968 sites of 2,234 modules."""
        from . import forksplit
        from .cache import flush_all
        from .registry import Registry

        idx = self.index
        names = self._site_module_names(paths)
        if not self._splits(len(names)):
            # (_iter_kernel_sites walks workspace_modules, whose position the summary worker stops at)
            for s in self._iter_kernel_sites(paths):
                yield render(s)
            return
        never = self.never_selected()  # (before the fork: both processes start from it)
        reg = Registry(self.resolver, keep_chains=False)

        done = [0]  # modules traced by this process (each process empties its own memos)

        def one(i: int) -> list:
            mod = idx.module(names[i])
            if mod is None:
                return []
            if done[0] and not done[0] % self.SITES_MEMO_MODULES:
                self.resolver.clear_memos()
            done[0] += 1
            return [render(s) for s in self._module_sites(reg, mod, never)]

        weights = []  # the halves by bytes of source (what the traces of a module cost grows with)
        for n in names:
            try:
                weights.append(float(os.path.getsize(idx.ws_files[n])))
            except OSError:
                weights.append(0.0)
        # (the helper's records wait in the cache folder, in an unnamed file, until they are read)
        for part in forksplit.iter_split(len(names), one, idx.cache.folder, idx.after_fork_in_child, weights=weights,
                                         helper_done=flush_all):
            yield from part

    def _site_module_names(self, paths: list[str] | None) -> list[str]:
        return sorted(self.index.ws_files) if not paths else self.index.names_under(paths)

    def sites_split(self, paths: list[str] | None) -> bool:
        """Will :meth:`kernel_site_records` share the modules with a forked helper (then a summary worker would
        only compete with the two)?"""
        return self._splits(len(self._site_module_names(paths)))

    def _splits(self, n_modules: int) -> bool:
        from .forksplit import cores

        idx = self.index
        return bool(self.allow_fork and idx.allow_fork and idx.cache.enabled and n_modules >= self.SITES_SPLIT_MIN_MODULES
                    and cores() >= 2)

    def _module_sites(self, reg, mod: Module, never: dict):
        """The kernel call sites of one module (:meth:`kernel_sites`)."""
        from .registry import CallSiteResult

        for cs in mod.summary.calls:
            try:
                res = reg.kernel_call(mod, cs)
            except Exception as e:  # noqa: BLE001 - one site's failure never loses the others
                res = _failed_site(mod, cs, e)
            if res is None:
                continue
            chain = self.mark_selection(mod, cs.line, res.chain, never)
            if chain is not res.chain:
                res = CallSiteResult(res.path, res.line, res.col, res.call, res.scope, chain)
            yield res

    @staticmethod
    def _selection_facts(mod: Module, wanted: dict) -> tuple:
        """What of a module can change which backends are never selected: its classes and their bases,
        what it imports, its registration calls and what its selector/part methods return."""
        summ = mod.summary
        classes = tuple(sorted((q, c.bases) for q, c in summ.classes.items()))
        imports = tuple(sorted((n, b.target or "", b.attr or "") for n, bs in summ.bindings.items() for b in bs
                               if b.kind in ("from", "import")))
        regs = tuple((cs.func, cs.arg_texts, cs.kw_texts) for cs in summ.calls if "register" in cs.func)
        # what they return and under which guards, not on which line (a line typed above keeps the facts)
        rets = tuple((q, tuple((t, tuple(g[:2] for g in gs)) for t, gs, _line in f.return_alts))
                     for q, f in summ.functions.items() if f.name in ("get_attn_backend_cls", "get_impl_cls", "get_builder_cls"))
        # which of the names other workspace modules import from it it defines (``wanted``: module -> names):
        # whether their imports load (a backend whose module cannot be imported is never selected)
        asked = wanted.get(mod.name, ())
        names = tuple(sorted(n for n in asked if n in summ.bindings or n in summ.functions or n in summ.classes))
        return classes, imports, regs, rets, names

    def _imported_names(self, mods, out: dict) -> set:
        """Add to ``out`` (module -> names) the names ``mods`` import from other modules (``from m import
        x``); the modules whose names grew."""
        grew = set()
        for m in mods:
            for bs in m.summary.bindings.values():
                for b in bs:
                    if b.kind == "from" and b.attr:
                        target = self.resolver.abs_module(m, b.target or "", b.level)
                        if target:
                            names = out.setdefault(target, set())
                            if b.attr not in names:
                                names.add(b.attr)
                                grew.add(target)
        return grew

    def _record_selection_facts(self, memo: tuple) -> tuple:
        """``memo`` with the selection facts of every workspace module loaded so far. Facts are kept only of
        loaded modules (summarising every module for them made the first hover on upstream vLLM, 2,234
        modules, wait 16 s); a module loaded since is recorded on the next call that finds more modules
        loaded, with its text of then: it did not change since the memo was last valid (else that call
        would have recomputed). A changed module without recorded facts recomputes the set (conservative)."""
        gen, out, facts, decided, wanted, names, n_loaded = memo
        n = self.index.loaded_count()
        if n == n_loaded:
            return memo
        new = [m for m in self.index.loaded_modules() if m.workspace and m.name not in names]
        grew = self._imported_names(new, wanted)
        again = [m for m in (self.index.module(t) for t in grew if t in names) if m is not None]
        for m in new + again:
            facts[os.path.realpath(m.path)] = self._selection_facts(m, wanted)
            names.add(m.name)
        return gen, out, facts, decided, wanted, names, n

    def _never_still_valid(self, memo: tuple) -> bool:
        """Did the edits since ``memo`` leave every fact the never-selected set depends on as it was? (An
        edit on the hover path then does not recompute the registry.) Whether other code uses a backend class
        that nothing registers or selects is asked again (``_used_elsewhere``, memoised per file text): its
        own module mentions it, and a text match there made every edit of such a module recompute (40-470 ms
        on the real checkout's first request after each keystroke)."""
        changed = self.index.changed_since(memo[0])
        if changed is None:
            return False
        facts, decided, wanted = memo[2], memo[3], memo[4]
        for real in changed:
            mod = self.index.module_for_path(real)
            if mod is None or facts.get(real) != self._selection_facts(mod, wanted):
                return False
        if changed:
            for (name, q), used in decided.items():
                mod = self.index.module(name)
                if mod is None or self._used_elsewhere(mod, q) != used:
                    return False
        return True

    def _used_elsewhere(self, mod: Module, q: str) -> bool:
        """Does other code refer to class ``q`` of ``mod``: another workspace module that mentions its name
        (an import, a use), a class that derives from it, or a function of its module that is not one of
        its own methods? (Conservative: a mention counts.)"""
        rx = rb"\b" + q.encode() + rb"\b"
        if any(m.name != mod.name for m in self.index.workspace_modules_matching(rx)):
            return True
        return self._used_in_own_module(mod, q)

    @staticmethod
    def _used_in_own_module(mod: Module, q: str) -> bool:
        """A class of ``mod`` deriving from class ``q`` of it, or a function of ``mod`` that reads ``q`` and is
        not one of its methods."""
        summ = mod.summary
        if any(b.rpartition(".")[2] == q for c in summ.classes.values() for b in c.bases):
            return True
        return any(q in f.names_read for f in summ.functions.values() if (f.class_name or "").split(".")[0] != q)

    def never_selected(self, provisional: bool = False) -> dict:
        """(module, class) -> why, for workspace attention-backend classes (and their impl / builder / metadata
        classes) that no registration names and no selector return can reach: their code is dead on this
        platform. Empty when the selector could not be read (then nothing can be ruled out).

        ``provisional``: after edits, when telling whether the set still stands would wait for the summary of
        an edited module or for the set to be computed again, answer the set of before the edits (and set
        ``_never_stale``) instead: an editor's request does not wait behind a 5,000-line paste in another
        buffer. The server checks the set again in the background (``Analysis.refresh_steps``)."""
        gen = self.index.generation
        memo = self._never_memo
        self._never_stale = False
        if memo is not None and memo[0] != gen:
            if provisional:
                # checked only when that costs nothing more than text scans (every edited module summarised)
                changed = self.index.changed_since(memo[0])
                if changed is None or not all(self.index.summary_ready(p) for p in changed) \
                        or not self._never_still_valid(memo):
                    self._never_stale = True
                    return memo[1]
            elif not self._never_still_valid(memo):
                return self._recompute_never_selected(gen, memo)
        if memo is not None:
            self._never_memo = self._record_selection_facts((gen, *memo[1:]))
            return memo[1]
        return self._recompute_never_selected(gen, None)

    def _recompute_never_selected(self, gen: int, before) -> dict:
        """:meth:`_compute_never_selected`; the memo of ``before`` is put back when the computation stops."""
        self._never_memo = (gen, {}, {}, {}, {}, set(), -1)  # while it is computed
        try:
            return self._compute_never_selected(gen)
        except BaseException:  # stopped for a request (``Stopped``) or failed: not an empty set for this generation
            if self._never_memo is not None and self._never_memo[0] == gen and self._never_memo[-1] == -1:
                self._never_memo = before
            raise

    def never_selected_checked(self) -> bool:
        """Is the never-selected set checked for the index as it is now (no request can get a provisional answer)?"""
        memo = self._never_memo
        return memo is not None and memo[0] == self.index.generation

    def never_selected_steps(self):
        """:meth:`never_selected` checked again after edits, in steps: the summaries of the modules edited since
        it was last checked one per step, then the check (and the set computed again if it must be). A step
        stopped for a request (``Stopped``) is done again in the next one."""
        memo = self._never_memo
        if memo is not None and memo[0] != self.index.generation:
            for path in sorted(self.index.changed_since(memo[0]) or ()):
                while True:
                    try:
                        self.index.module_for_path(path)
                        break
                    except Stopped:
                        yield 0
                yield 0
        while True:
            try:
                self.never_selected()
                return
            except Stopped:
                yield 0

    def _compute_never_selected(self, gen: int) -> dict:
        decided: dict = {}  # (module, class) -> used elsewhere? for the classes nothing registers or selects
        entries = self.backends(with_call_sites=False)
        if any(e.cls == "?" for e in entries):
            return {}
        broken = {e.cls: e.error for e in entries if e.kind == "attention" and not e.loads}
        live = {e.cls for e in entries if e.kind != "attention" or e.loads and (e.registered_at or e.selected)}
        live |= {ref.cls for e in entries for ref in (e.impl, e.builder, e.metadata)
                 if ref is not None and ref.cls and e.cls in live}
        out = {}
        for m in self.index.workspace_modules_matching(rb"AttentionBackend"):
            for q, c in m.summary.classes.items():
                dotted = f"{m.name}.{q}"
                if "." in q or dotted in live:
                    continue
                mro = self.resolver.mro(m, q)
                if not any(b.qual == "AttentionBackend" and b.module is not None and not b.module.workspace for b in mro[1:]):
                    continue
                if dotted in broken:
                    why = f"{q} cannot be imported with the installed vLLM (see `attnlens backends`)"
                    # nothing in that module runs: it cannot be imported (its helper classes and functions too)
                    if (m.name, "") not in out:
                        from .registry import Registry

                        first = (Registry(self.resolver).broken_imports(m) or ["an import fails"])[0]
                        out[(m.name, "")] = f"{os.path.basename(m.path)} cannot be imported with the installed vLLM: {first}"
                else:
                    used = decided[(m.name, q)] = self._used_elsewhere(m, q)
                    if used:
                        continue  # imported, subclassed or used by other code: it can be reached without selection
                    why = f"{q} is not registered, not returned by the platform's get_attn_backend_cls and not used elsewhere"
                out[(m.name, q)] = why
                for attr, meth in (("impl", "get_impl_cls"), ("builder", "get_builder_cls")):
                    fv = self.resolver.class_attr(m, q, meth, Walk())
                    if fv is None or fv.func is None or fv.module is None:
                        continue
                    for r in fv.func.returns:
                        cv = self.resolver.resolve_dotted(fv.module, fv.func.qualname, r, Walk()) if r else None
                        if cv is not None and cv.kind == ValKind.CLASS and cv.module is not None and cv.module.workspace \
                                and f"{cv.module.name}.{cv.qual}" not in live:
                            out[(cv.module.name, cv.qual)] = f"the {attr} of {q}, which is never selected: {why}"
        self._never_memo = self._record_selection_facts((gen, out, {}, decided, {}, set(), -1))
        return out

    # -- derived results cached on disk (whole command outputs) ------------------------------
    def derived_key(self, *parts: str) -> str:
        """A cache key for a result derived from the whole workspace: the workspace fingerprint (every
        workspace file's stamp and the overlays), the target's search path, the analyser's own code
        and ``parts``. Installed files the result read are checked separately (see load_derived)."""
        h = hashlib.sha1()
        meta = []
        for name in ("pyproject.toml", "setup.cfg", "setup.py"):  # entry points decide the platform
            try:
                st = (self.root / name).stat()
                meta.append(f"{name}|{st.st_mtime_ns}|{st.st_size}")
            except OSError:
                pass
        for x in (self.index.fingerprint(), repr(self.target.sys_path), _code_stamp(), *meta, *parts):
            h.update(x.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
        return f"{parts[0] if parts else 'derived'}-{h.hexdigest()[:24]}"

    def load_derived(self, key: str):
        if self.index.has_overlays():
            return None
        hit = self.cache.load_pickle("derived", key)
        if hit is None or not _deps_fresh(hit[0]):
            return None
        return hit[1]

    def store_derived(self, key: str, value) -> None:
        if not self.index.has_overlays():
            self.cache.store_pickle("derived", key, (self._dependency_stamps(), value))

    def open_derived_text(self, key: str):
        """The text stored under ``key`` by :meth:`derived_text_writer`, open for reading, when nothing it was
        derived from changed (:meth:`load_derived`); else None."""
        hit = self.load_derived(key)
        if not (isinstance(hit, tuple) and len(hit) == 2 and hit[0] == "text-file"):
            return None
        try:
            return open(self.cache.path("derived", hit[1]), encoding="utf-8", newline="")
        except (OSError, ValueError):
            return None

    def derived_text_writer(self, key: str, max_chars: int) -> "DerivedTextWriter | None":
        """A writer of a long text derived from the workspace (``attnlens sites``: 100 MB of JSON for upstream
        vLLM), put in the cache folder as it is made rather than kept and pickled; :meth:`open_derived_text`
        reads it back. None where nothing is cached (no cache folder, an open buffer)."""
        if self.cache.folder is None or self.index.has_overlays():
            return None
        try:
            return DerivedTextWriter(self, key, max_chars)
        except (OSError, ValueError):
            return None

    def _dependency_stamps(self) -> list:
        paths = [m.path for m in self.index.loaded_modules() if not m.workspace]
        cpp = self.resolver.ops.cpp_files()
        out = []
        for p in sorted(set(paths) | set(map(str, cpp))):
            try:
                st = os.stat(p)
                out.append((p, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((p, 0, -1))
        return out

    # -- positions -------------------------------------------------------------
    def refs_for(self, mod: Module) -> list:
        """Every name / attribute chain of ``mod`` with its range (editor positions outside a call). An open
        buffer's summary carries them (``Index``); other modules are summarised again with references."""
        if mod.summary.refs or mod.summary.error:  # an unparsable text has no references either way
            return mod.summary.refs
        text = self.index.source_text(mod.path) or ""
        key = (mod.path, hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest())
        refs = self._refs.get(key)
        if refs is None:
            refs = summarize(text, mod.path, "", refs=True).refs
            self._refs = {k: v for k, v in self._refs.items() if k[0] != mod.path}
            self._refs[key] = refs
        return refs

    def ref_at(self, path: str, line: int, col: int) -> CallRef | None:
        mod = self.index.module_for_path(path)
        if mod is None:
            return None
        s = mod.summary
        best = None
        for cs in s.calls:
            if cs.fline <= line <= cs.fend_line:
                if (cs.fline, cs.fcol) <= (line, col) <= (cs.fend_line, cs.fend_col):
                    span = (cs.fend_line - cs.fline, cs.fend_col - cs.fcol)
                    if best is None or span < best[0]:
                        best = (span, cs)
        if best is not None:
            # anywhere inside a callee expression: the call is what is traced
            cs = best[1]
            return CallRef(mod, cs.scope, cs.func, cs.line, cs.fcol, cs.fend_col, cs)
        ref_hit = None
        for r in self.refs_for(mod):
            if r.line == line and r.col <= col <= r.end_col:
                if ref_hit is None or (r.end_col - r.col) < (ref_hit.end_col - ref_hit.col):
                    ref_hit = r
        if ref_hit is not None:
            # the prefix up to the segment under the cursor
            parts = ref_hit.text.split(".")
            k = len(parts)
            for i, end in enumerate(ref_hit.seg_ends):
                if col <= end:
                    k = i + 1
                    break
            text = ".".join(parts[:k])
            call = None
            if best is not None and best[1].func == ref_hit.text and k == len(parts) and best[1].fline == line:
                call = best[1]
            return CallRef(mod, ref_hit.scope, text, line, ref_hit.col, ref_hit.seg_ends[k - 1], call)
        if best is not None:
            cs = best[1]
            return CallRef(mod, cs.scope, cs.func, cs.line, cs.fcol, cs.fend_col, cs)
        # anywhere inside a call's parentheses: the innermost call
        inner = None
        for cs in s.calls:
            if (cs.line, cs.col) <= (line, col) <= (cs.end_line, cs.end_col):
                span = (cs.end_line - cs.line, cs.end_col - cs.col)
                if inner is None or span < inner[0]:
                    inner = (span, cs)
        if inner is not None:
            cs = inner[1]
            return CallRef(mod, cs.scope, cs.func, cs.line, cs.fcol, cs.fend_col, cs)
        return None

    def trace_at(self, path: str, line: int, col: int, budget_s: float | None = None, cancel=None) -> M.Chain | None:
        ref = self.ref_at(path, line, col)
        if ref is None:
            d = self.def_at(path, line, col)
            if d is None:
                return None
            return self.trace_symbol(d, budget_s, cancel)
        return self.trace_ref(ref, budget_s, cancel)

    def trace_ref(self, ref: CallRef, budget_s: float | None = None, cancel=None) -> M.Chain:
        if ref.call is not None:
            chain = self.resolver.trace_call(ref.module, ref.call, budget_s, cancel)
        else:
            chain = self.resolver.trace_text(ref.module, ref.scope, ref.text, ref.line, budget_s, col=ref.col, cancel=cancel)
        # a request with a time budget (an editor's) takes the never-selected set of before the last edits
        # when checking it again would wait for summaries or the registry (``never_selected``)
        return self.mark_selection(ref.module, ref.line, chain, provisional=budget_s is not None)

    def mark_selection(self, mod: Module, line: int, chain: M.Chain, never: dict | None = None,
                       provisional: bool = False) -> M.Chain:
        """The chain of code inside a class vLLM never instantiates on this platform, marked dead (a new chain).
        ``provisional``: see :meth:`never_selected`; a chain marked with a set not checked since the last edits
        comes back with ``provisional`` set (even when nothing marks it: the next check may)."""
        if not mod.workspace:
            return chain
        cls_q = mod.summary.class_at(line)
        top = cls_q.split(".")[0] if cls_q else ""
        stale = False
        if never is None:
            if not self._never_may_name(mod, top):
                return chain
            never = self.never_selected(provisional)
            stale = provisional and self._never_stale
        why = never.get((mod.name, top)) if top else None
        if why is None:
            why = never.get((mod.name, ""))  # the whole module cannot be imported
            if why is None:
                return dataclasses.replace(chain, provisional=True) if stale else chain
            hop = M.Hop(M.HopKind.SELECTION, mod.path, 1, mod.name, f"never runs on this platform: {why}", why, False)
        else:
            hop = M.Hop(M.HopKind.SELECTION, mod.path, mod.summary.classes[top].line if top in mod.summary.classes else line,
                        top, f"never selected on this platform: {why}", why, False)
        hops = [chain.hops[0], hop] + chain.hops[1:] if chain.hops else [hop]
        return M.Chain(hops, chain.final, False, chain.partial, chain.upstream, stale)

    def _never_may_name(self, mod: Module, top: str) -> bool:
        """Can :meth:`never_selected` hold ``(mod, top)`` or ``(mod, "")``? False only when it cannot, decided without
        computing the set (the registry and every module that mentions ``AttentionBackend``: 3 s on the first
        hover of upstream vLLM as the workspace): the set names (1) backend classes of a module that mentions
        ``AttentionBackend``, with an installed ``AttentionBackend`` in their MRO, and that module itself when it
        cannot be imported, and (2) the impl or builder class a never-selected backend's ``get_impl_cls`` /
        ``get_builder_cls`` returns by a (dotted) name, which some module must then spell in a return, an
        ``as`` alias or an assignment. Only until the set is first computed (the server computes it while it
        indexes): the first hovers on a fresh server do not wait for it."""
        if self._never_memo is not None:
            return True  # the set was computed: it is kept across edits (``_never_still_valid``), asking it is cheap
        idx = self.index
        if idx.text_matches(mod.path, rb"AttentionBackend"):
            for q in mod.summary.classes:
                if "." in q:
                    continue
                mro = self.resolver.mro(mod, q)
                if any(b.qual == "AttentionBackend" and b.module is not None and not b.module.workspace for b in mro[1:]):
                    return True
        if not top:
            return False
        t = re.escape(top).encode()
        rx = rb"return[ \t]+\(?[\w.]*\b" + t + rb"\b|\b" + t + rb"[ \t]+as\b|=[ \t]*[\w.]*\b" + t + rb"\b"
        return bool(idx.matching_names(rx))

    def trace_symbol(self, dotted: str, budget_s: float | None = None, cancel=None) -> M.Chain:
        """The chain of a fully qualified symbol (``pkg.mod.Class.method`` or ``ns::op``)."""
        from .model import Hop

        v = self.resolver.resolve_symbol(dotted)
        first = Hop(M.HopKind.DEFINITION, v.path or "", v.line or 0, dotted, "symbol") if v.path else None
        return self.resolver.trace_value(v, first, budget_s, cancel)

    def def_at(self, path: str, line: int, col: int) -> str | None:
        """The dotted name of the function or class whose ``def``/``class`` name is at the position."""
        mod = self.index.module_for_path(path)
        if mod is None:
            return None
        text = self.index.source_text(path) or ""
        lines = text.splitlines()
        if not (1 <= line <= len(lines)):
            return None
        for q, f in mod.summary.functions.items():
            if f.line == line and lines[line - 1].find(f.name, f.col) <= col <= lines[line - 1].find(f.name, f.col) + len(f.name):
                return f"{mod.name}.{q}"
        for q, c in mod.summary.classes.items():
            if c.line == line and lines[line - 1].find(c.name, c.col) <= col <= lines[line - 1].find(c.name, c.col) + len(c.name):
                return f"{mod.name}.{q}"
        return None

    def close(self) -> None:
        self.index.flush()
        self.cache.flush()


_CODE_STAMP: list = []  # the analyser's own code stamp: one per process, the same for every workspace


def _code_stamp() -> str:
    """Stamps of the analyser's own modules: a result computed by other code is never reused."""
    if not _CODE_STAMP:
        h = hashlib.sha1()
        base = Path(__file__).resolve().parent
        for p in sorted(base.rglob("*.py")):
            try:
                st = p.stat()
            except OSError:
                continue
            h.update(f"{p}|{st.st_mtime_ns}|{st.st_size}\n".encode())
        _CODE_STAMP.append(h.hexdigest()[:16])
    return _CODE_STAMP[0]


def _failed_site(mod, cs, e: Exception):
    from .registry import CallSiteResult

    fin = M.Final(M.FinalKind.UNRESOLVED, mod.path, cs.line, cs.func or "?", reason=f"analysis failed here: {type(e).__name__}: {e}"[:300])
    hop = M.Hop(M.HopKind.CALL, mod.path, cs.line, cs.func or "?", "call", None, None, cs.col)
    return CallSiteResult(mod.path, cs.line, cs.col, cs.func or "?", cs.scope, M.Chain([hop], fin, None))


def _deps_fresh(stamps: list) -> bool:
    for p, mt, size in stamps:
        try:
            st = os.stat(p)
        except OSError:
            if size != -1:
                return False
            continue
        if st.st_mtime_ns != mt or st.st_size != size:
            return False
    return True


# summary sha -> registry signature: a pure function of the module's content (the sha names the text the
# summary was built from), bounded; kept across workspaces, which can only share a value for equal content
_REG_SIGS: dict = {}
_SELECTORS = ("get_attn_backend_cls", "prefill_backend")


def _text_digest(text: str | None):
    """A module's text by digest (``Workspace._registry_inputs`` for a module not summarised yet)."""
    if text is None:
        return None
    return ("text", hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest())


def _registry_signature(summary, text: str) -> str:
    """One module's part of :meth:`Workspace._registry_inputs` (memoised by the summary's content sha)."""
    hit = _REG_SIGS.get(summary.sha)
    if hit is not None:
        return hit
    if any(sel in text for sel in _SELECTORS):
        sig = "sha:" + summary.sha
    else:
        from .callindex import outside_facts

        positions = (tuple((q, f.line, f.end_line) for q, f in sorted(summary.functions.items())),
                     tuple((q, c.line, c.end_line) for q, c in sorted(summary.classes.items())),
                     tuple(cs.line for cs in summary.calls if not cs.scope or "regist" in cs.func))
        sig = hashlib.sha1(repr((outside_facts(summary), positions)).encode()).hexdigest()
    if len(_REG_SIGS) > 20_000:
        _REG_SIGS.clear()
    _REG_SIGS[summary.sha] = sig
    return sig


class DerivedTextWriter:
    """Writes a derived text into the cache folder as it is made (``cache.AtomicFile``); :meth:`commit` puts it
    under its key's name and records what it was derived from (:meth:`Workspace.store_derived`), unless it grew
    past ``max_chars`` (then it is cheaper to recompute than to keep) or :meth:`discard` was called."""

    def __init__(self, ws: "Workspace", key: str, max_chars: int):
        from .cache import AtomicFile

        self.ws, self.key, self.max_chars = ws, key, max_chars
        self.out: AtomicFile | None = AtomicFile(ws.cache.path("derived", f"{key}.txt"), text=True)
        self.chars = 0

    def write(self, chunk: str) -> None:
        if self.out is None:
            return
        self.chars += len(chunk)
        if self.chars > self.max_chars:
            self.discard()
        else:
            self.out.write(chunk)

    def commit(self) -> None:
        out, self.out = self.out, None
        if out is None:
            return
        try:
            out.commit()
        except OSError:
            return
        self.ws.store_derived(self.key, ("text-file", out.path.name))

    def discard(self) -> None:
        out, self.out = self.out, None
        if out is not None:
            out.discard()
