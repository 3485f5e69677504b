"""The rules engine: runs the checks over the resolved chains of one workspace.

Pure analysis (no LSP types). What a check author uses (rules, checks, findings, the per-module
context, shared tables) is :mod:`.api`; this module finds the ``checks_*`` modules (:func:`load_checks`),
computes the shared tables (``api.prepare``) once per engine, runs the checks per module, caches and
merges their findings, and for a cold CLI check runs a prefetch worker and a second checker. It
re-exports the API's names for its callers (CLI, editor, upgrade, tests).

Every finding carries ``data`` with the resolved ``chain`` (``Chain.to_json()``)
when there is one, the ``contract`` entry id that was consulted, and the
``probe`` family that could decide the question on a device.

Suppression: a trailing ``# attnlens: ignore[AL101]`` (several ids separated
by commas) or ``# attnlens: ignore`` on any line of the finding's range.

Caching: findings of a module are stored in the workspace cache keyed by the
module's content hash and a global fingerprint (rules code, contracts,
target interpreter, workspace file set, plugin config), together with the
content hashes of every module the checks read (recorded while checking);
a cached entry is used only while all of them are unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import struct
import sys
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

from ..walk import Val, ValKind
from . import facts as F
from .api import (CHECKS, FACT_PREFILTERS, PREPARES, RULES, SEVERITIES, SEVERITY_RANK, Finding, ModuleContext, Rule,
                  check, content_memo, fact_prefilter, prepare, rule, short_list, short_paths, suppressed)
from .contracts import ContractSet, load_contracts

__all__ = ["CHECKS", "RULES", "SEVERITIES", "SEVERITY_RANK", "Engine", "Finding", "ModuleContext", "Rule", "check",
           "check_module", "check_paths", "content_memo", "engine_for", "fact_prefilter", "load_checks",
           "merge_causes", "module_facts", "prepare", "prepare_module", "rule", "rules_table", "short_list",
           "short_paths", "suppressed"]



def _fold_covered(findings: list[Finding]) -> list[Finding]:
    """One finding per cause within a module: a dummy call (AL106) on the path of an advertised capability
    whose entry point raises (AL116) is reported once, on the advertisement where the fix belongs; the call
    is already one of its related locations."""
    covered = {(e.get("path"), e.get("line")) for f in findings if f.rule == "AL116"
               for e in (f.data or {}).get("entries") or ()}
    if not covered:
        return findings
    return [f for f in findings if not (f.rule == "AL106" and (f.path, f.line) in covered)]


def merge_causes(findings: list[Finding]) -> list[Finding]:
    """One finding per cause across modules (a workspace report): findings whose ``data["cause"]`` is
    the same (one upstream call that breaks on this platform, reached from several files) become the
    first one, with the others as related locations. Per-file answers (the editor) keep their own."""
    first: dict[str, Finding] = {}
    out = []
    for f in findings:
        cause = (f.data or {}).get("cause")
        if not cause:
            out.append(f)
            continue
        keep = first.get(cause)
        if keep is None:
            first[cause] = f
            out.append(f)
            continue
        keep.related = list(keep.related) + [{"path": f.path, "line": f.line, "col": f.col, "end_line": f.end_line,
                                              "end_col": f.end_col, "message": "same cause"}] + list(f.related)
    for f in first.values():
        n = sum(1 for r in f.related if r.get("message") == "same cause")
        if n and "(also reached from" not in f.message:
            f.message = f.message[:-1] + f" (also reached from {n} other place{'s' if n > 1 else ''})."
    return out


def _facts_key(sha: str) -> str:
    return hashlib.sha256(f"{_rules_code_hash()}|{sha}".encode()).hexdigest()[:40]


def module_facts(ws, name: str, path: str, sha: str, use_cache: bool, text: str | None = None) -> F.AstFacts:
    """Expression-level facts of a module (cached by content hash when the cache is on). ``text``: the
    file's content when the caller has it (of a file on disk, whose content hash is ``sha``)."""
    if text is None and ws.index.overlay_text(path) is not None:
        # an unsaved buffer: never on disk (a pickle per keystroke would only fill the cache),
        # but memoised in memory for the latest versions (prepared before the debounce ends)
        return overlay_facts(path, ws.index.source_text(path) or "", ws.index.should_stop)
    key = _facts_key(sha) if (use_cache and sha) else None
    if key is not None:
        hit = ws.cache.load_pickle("rulesfacts", key)
        if hit is not None:
            return hit
    facts = _collect((ws.index.source_text(path) if text is None else text) or "")
    if key is not None:
        ws.cache.store_pickle("rulesfacts", key, facts)
    return facts


def _collect(text: str) -> F.AstFacts:
    load_checks()  # the line patterns the checks registered (api.fact_prefilter)
    return F.collect(text, _prefilter())


@functools.lru_cache(maxsize=1)
def _prefilter_of(patterns: tuple) -> re.Pattern | None:
    if not patterns:
        return None
    if len(patterns) == 1:
        return patterns[0]
    return re.compile("|".join(f"(?:{p.pattern})" for p in patterns), re.IGNORECASE)


def _prefilter() -> re.Pattern | None:
    return _prefilter_of(tuple(FACT_PREFILTERS))


_OVERLAY_FACTS: dict = {}  # (path, buffer text) -> its rule facts, the latest OVERLAY_FACTS_KEPT


OVERLAY_FACTS_KEPT = 8


def overlay_facts(path: str, text: str, should_stop=None) -> F.AstFacts:
    """The facts of an unsaved buffer's text, collected per top-level chunk from the buffer's previous
    texts (``facts.IncrementalFacts``); memoised for the latest texts by (path, text) only, so that a check
    that may give way (``should_stop``: the index's, asked between chunks) and one that may not share them.
    A stopped call raises ``pyindex.Stopped`` and memoises nothing."""
    key = (path, text)
    hit = _OVERLAY_FACTS.get(key)
    if hit is not None:
        return hit
    load_checks()
    inc = F.buffer_facts(path)
    with inc.lock:
        facts = inc.collect(text, _prefilter(), should_stop)
    while len(_OVERLAY_FACTS) >= OVERLAY_FACTS_KEPT:
        _OVERLAY_FACTS.pop(next(iter(_OVERLAY_FACTS)), None)  # the oldest first
    _OVERLAY_FACTS[key] = facts
    return facts


# --------------------------------------------------------------------------- the engine


@functools.lru_cache(maxsize=1)
def _rules_code_hash() -> str:
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for p in sorted(here.glob("*.py")):
        try:
            h.update(p.name.encode() + b"\0" + p.read_bytes())
        except OSError:
            pass
    for name in ("resolver.py", "walk.py", "pyindex.py", "model.py", "profile.py", "patches.py", "registry.py", "torchops.py"):
        p = here.parent / name
        try:
            st = p.stat()
            h.update(f"{name}:{st.st_mtime_ns}:{st.st_size}".encode())
        except OSError:
            pass
    return h.hexdigest()[:20]


def global_signature(summary) -> str:
    """What whole-workspace scans read from a module (patch decorators, registrations,
    monkey patches, Python op registrations): a change elsewhere in the module does not
    change the answers of those scans."""
    if not summary.sha:
        return _global_signature(summary)
    return content_memo(("gsig", summary.sha), lambda: _global_signature(summary))


def _global_signature(summary) -> str:
    h = hashlib.sha1()
    for q in sorted(summary.functions):
        f = summary.functions[q]
        for d in f.decorators:
            h.update(repr((q, d.func, d.str_args, d.arg_texts, d.kw_texts)).encode())
    for q in sorted(summary.classes):
        c = summary.classes[q]
        h.update(repr((q, c.bases)).encode())
        for d in c.decorators:
            h.update(repr((q, d.func, d.str_args, d.arg_texts, d.kw_texts)).encode())
    for ap in summary.attr_patches:
        h.update(repr((ap.target, ap.value, ap.guards)).encode())
    for cs in summary.calls:
        last = cs.func.rpartition(".")[2]
        if last.startswith("register") or last in ("setattr", "impl", "define", "direct_register_custom_op", "Library"):
            h.update(repr((cs.func, cs.str_args, cs.arg_texts, cs.kw_texts, cs.scope, cs.guards)).encode())
    return h.hexdigest()


class _Recorder:
    """Records every module the analysis reads: ``hard`` deps (name -> content sha) for modules
    whose content was resolved into, ``soft`` deps (name -> (sha, signature)) for workspace
    modules only visited by whole-workspace scans (``Index.workspace_modules``)."""

    def __init__(self, index):
        self.index = index
        self.orig = index.module
        self.stack: list[tuple[dict, dict]] = []
        self.scanning = False

    def __enter__(self):
        hard: dict = {}
        soft: dict = {}
        self.stack.append((hard, soft))
        if len(self.stack) == 1:
            orig = self.orig
            stack = self.stack
            rec = self
            idx = self.index

            def recording(name):
                m = orig(name)
                sha = m.summary.sha if m is not None else None
                if rec.scanning and m is not None:
                    sig = global_signature(m.summary)
                    for _h, s in stack:
                        s.setdefault(name, (sha, sig))
                else:
                    for h, _s in stack:
                        h[name] = sha
                return m

            def scanned(names):
                """The modules of a whole-workspace scan: each recorded by its scan signature (soft)."""
                for name in names:
                    rec.scanning = True
                    try:
                        m = idx.module(name)
                    finally:
                        rec.scanning = False
                    if m is not None:
                        yield m

            def workspace_modules():
                return scanned(sorted(idx.ws_files))

            def workspace_modules_matching(pattern):
                # a scan that summarises only the modules whose text matches: the others are recorded as "still
                # does not match" (a soft dependency that holds while the text does not match ``pattern``)
                names = idx.matching_names(pattern)
                chosen = set(names)
                for name in idx.ws_files:
                    if name not in chosen:
                        for _h, s in stack:
                            s.setdefault(name, (None, (NOMATCH, pattern)))
                return scanned(names)

            def note_read(name, sha):
                for h, _s in stack:
                    h[name] = sha

            self.index.module = recording  # instance attributes shadow the methods
            self.index.workspace_modules = workspace_modules
            self.index.workspace_modules_matching = workspace_modules_matching
            self.index.note_read = note_read
        return hard, soft

    def __exit__(self, *exc):
        self.stack.pop()
        if not self.stack:
            for attr in ("module", "workspace_modules", "workspace_modules_matching", "note_read"):
                try:
                    delattr(self.index, attr)
                except AttributeError:
                    pass
        return False


NOMATCH = "nomatch"  # a soft dependency's signature ("nomatch", pattern): the module's text did not match the scan's pattern


def _merge_deps(hard: dict, soft: dict) -> dict:
    out = {k: ("h", v) for k, v in hard.items()}
    for k, (sha, sig) in soft.items():
        if k not in out:
            out[k] = ("s", sha, sig)
    return out


_log = logging.getLogger(__name__)


class Interrupted(Exception):
    """:meth:`Engine.check_module` stopped between two checks because its caller's ``should_stop`` said so;
    the checks done are kept, and the next call for the same text goes on with the next one."""


class Engine:
    """Runs the checks of the rule API (:mod:`.api`) over a workspace: ``check_module`` (one file, memoised
    for an open buffer per index generation, on disk by content for files; stoppable between checks),
    ``check_paths`` (many files, with a forked second checker in the CLI), ``global_deps`` (the shared state
    every check starts from), the prefetch worker (``start_prefetch`` / ``join_prefetch`` / ``stop_prefetch``)
    and the memos the checks share (``memo``, ``outside_memo``). Checks never import it (an import-linter
    contract); one engine per workspace and index generation (:func:`engine_for`).
    """

    def __init__(self, ws, contracts: ContractSet | None = None, use_cache: bool = True):
        self.ws = ws
        self.contracts = contracts if contracts is not None else load_contracts(root=ws.root)
        self.use_cache = use_cache and ws.cache.enabled
        self._global_deps: dict | None = None
        self._global_partial: tuple = ({}, {})  # (hard, soft) reads of a global_deps attempt an open buffer's summary stopped
        self._gkey: str | None = None
        self._fingerprint: str | None = None
        self.generation = ws.index.generation  # the index generation this engine's memos belong to
        self._memo: dict = {}  # shared lazily computed things (registry pairs, ...)
        self._buffer_findings: dict = {}  # module name -> findings of its open buffer (this generation)
        # module name -> (summary sha, next check, context, hard deps, soft deps) of a check that stopped
        # between two checks (:class:`Interrupted`): the next call for the same text goes on from there
        self._resume: dict = {}
        self._should_stop = None  # the caller's "stop at the next check" callable, for one check_module call
        self._sha_now: dict = {}
        self.errors: list[str] = []
        self.stats = {"cached": 0, "checked": 0}
        self.timings: dict = {}
        self.ws_tops = {n.split(".", 1)[0] for n in ws.index.ws_files}
        self._lock = threading.RLock()  # one check at a time: the dependency recorder is per engine

    # -- parallel prefetch (CLI) ----------------------------------------------
    prefetch_pid: int | None = None
    _prefetch_fd: int | None = None
    _prefetch_stop = None  # one shared byte: 1 = stop after the C++ index

    def wind_down_prefetch(self) -> None:
        """Ask the worker to stop once the C++ index is stored: from here on two checkers use both cores,
        and summaries they need they build as they go (a third process would only compete with them)."""
        if self._prefetch_stop is not None:
            self._prefetch_stop[0] = 1

    def start_prefetch(self) -> None:
        """Fork a worker that fills the cache with what the checks will need: first the C++ index
        (signalled through a pipe), then summaries of the upstream modules the workspace imports
        (most imported first). Only for a single-threaded CLI process with a cache; the parent
        reads the results back from the cache folder."""
        if self.prefetch_pid is not None or not self.use_cache or not hasattr(os, "fork"):
            return
        import mmap

        from .. import cppindex  # noqa: F401 - imported once before the fork (10-25 ms): the worker builds the C++ index, the checkers read it

        stop = mmap.mmap(-1, 1)  # set by the parent when two checkers take over (see _start_checker)
        try:
            rfd, wfd = os.pipe()
            pid = os.fork()
        except OSError:
            return
        if pid == 0:  # pragma: no cover - child
            code = 0
            try:
                os.close(rfd)
                _prefetch_child(self.ws, wfd, stop)
            except BaseException:  # noqa: BLE001 - analysis must not fail on a bad input
                code = 1
            os._exit(code)
        os.close(wfd)
        self.prefetch_pid = pid
        self._prefetch_fd = rfd
        self._prefetch_stop = stop
        # checks that need the C++ index before the worker stored it are retried at the end
        self.ws.query.set_cpp_pending(self.cpp_pending)

    def cpp_pending(self) -> bool:
        """Is the worker still building the C++ index? (A non-blocking look at its pipe.)"""
        fd = self._prefetch_fd
        if fd is None:
            return False
        import select

        try:
            ready, _, _ = select.select([fd], [], [], 0)
        except (OSError, ValueError):
            ready = [fd]
        if ready:
            self.join_prefetch()
            return False
        return True

    def join_prefetch(self) -> None:
        """Wait until the worker has stored the C++ index (or gave up)."""
        fd = self._prefetch_fd
        if fd is None:
            return
        try:
            os.read(fd, 1)
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass
        self._prefetch_fd = None

    def stop_prefetch(self) -> None:
        self.ws.query.clear_cpp_pending(self.cpp_pending)
        if self._prefetch_fd is not None:
            try:
                os.close(self._prefetch_fd)
            except OSError:
                pass
            self._prefetch_fd = None
        if self.prefetch_pid is None:
            return
        try:
            import signal

            os.kill(self.prefetch_pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            os.waitpid(self.prefetch_pid, 0)
        except ChildProcessError:
            pass
        self.prefetch_pid = None

    # -- shared helpers used by checks -------------------------------------
    def facts_of(self, mod) -> F.AstFacts:
        """The expression-level facts of workspace module ``mod`` (cached by content)."""
        return module_facts(self.ws, mod.name, mod.path, mod.summary.sha, self.use_cache)

    def apply_patch(self, v: Val) -> Val:
        if v.kind in (ValKind.FUNCTION, ValKind.CLASS) and v.module is not None and not v.module.workspace:
            try:
                p = self.ws.query.patched(v)
            except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
                p = None
            if p is not None:
                rep = p[0]
                rep.extra = dict(rep.extra, patched_from=v.dotted, patch_at=f"{p[1]}:{p[2]}")
                return rep
        return v

    def memo(self, key, fn):
        if key not in self._memo:
            self._memo[key] = fn()
        return self._memo[key]

    def memo_steps(self, key, steps):
        """:meth:`memo` of a computation written as steps (``steps()`` makes a generator that yields between
        its items and returns the value): ``value = yield from engine.memo_steps(key, steps)`` inside a check
        (stop points), ``api.run_steps(engine.memo_steps(key, steps))`` elsewhere. Kept only when it ends:
        a check stopped inside it and resumed later goes on with the same generator."""
        if key in self._memo:
            return self._memo[key]
        value = yield from steps()
        self._memo[key] = value
        return value

    def outside_memo(self, key, fn):
        """Like :meth:`memo` for a result that reads nothing of the workspace's Python modules (installed
        code, dist metadata, the plugin's requirement files): it outlives this engine, until something
        outside those modules changes (``Index.outside_memo``). Never for results holding Module objects."""
        return self.ws.index.outside_memo(("rules", key), fn)

    # -- fingerprints --------------------------------------------------------
    def fingerprint(self) -> str:
        if self._fingerprint is not None:
            return self._fingerprint
        h = hashlib.sha256()
        h.update(_rules_code_hash().encode())
        h.update(self.contracts.fingerprint.encode())
        t = self.ws.target
        h.update((getattr(t, "python", "") or "").encode())
        for p in list(getattr(t, "sys_path", []) or []):
            try:
                st = os.stat(p)
                h.update(f"{p}:{st.st_mtime_ns}".encode())
            except OSError:
                h.update(f"{p}:-".encode())
        idx = self.ws.index
        h.update("\n".join(sorted(idx.ws_files)).encode())
        for name in ("pyproject.toml", "setup.py", "setup.cfg"):
            try:
                st = os.stat(self.ws.root / name)
                h.update(f"{name}:{st.st_mtime_ns}:{st.st_size}".encode())
            except OSError:
                pass
        self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def current_sha(self, name: str) -> str | None:
        """Content sha of module ``name`` now, without parsing it when possible."""
        if name in self._sha_now:
            return self._sha_now[name]
        idx = self.ws.index
        sha = None
        loc = idx.locate(name)
        if loc is not None and loc.kind == "py":
            real = idx.realpath(loc.path)
            text = idx.overlay_text(real)
            if text is not None:
                sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            else:
                sha = idx.known_sha(loc.path)
                if sha is None:
                    try:
                        sha = hashlib.sha256(Path(loc.path).read_bytes()).hexdigest()
                    except OSError:
                        sha = None
        elif loc is not None:
            sha = None  # extension/namespace: the fingerprint covers installs
        self._sha_now[name] = sha
        return sha

    def _deps_fresh(self, deps: dict) -> bool:
        for name, rec in deps.items():
            if rec[0] == "s" and type(rec[2]) is tuple and rec[2][0] == NOMATCH:
                # left out of a text-matching scan: fresh while its text still does not match
                path = self.ws.index.ws_files.get(name)
                if path is None or self.ws.index.text_matches(path, rec[2][1]):
                    return False
                continue
            now = self.current_sha(name)
            if rec[0] == "h":
                if now != rec[1]:
                    return False
            elif now != rec[1]:
                m = self.ws.index.module(name)
                if m is None or global_signature(m.summary) != rec[2]:
                    return False
        return True

    def _has_overlay(self, path: str) -> bool:
        return self.ws.index.overlay_text(path) is not None

    def global_deps(self) -> dict:
        """Load what every module's checks share (platform profile, patches, registry)."""
        if self._global_deps is None:
            from ..pyindex import Stopped

            with _Recorder(self.ws.index) as (hard, soft):
                hard0, soft0 = self._global_partial  # what an attempt stopped by an open buffer's summary read
                hard.update(hard0)
                soft.update(soft0)
                try:
                    self._global_steps()
                except Stopped:
                    # its finished parts are memoised; their reads are kept for the next attempt's record
                    self._global_partial = (dict(hard), dict(soft))
                    raise
            self._global_partial = ({}, {})
            self._global_deps = _merge_deps(hard, soft)
        return self._global_deps

    def _global_steps(self) -> None:
        """The profile, the patches and every PREPARES entry (each memoised by its own code)."""
        try:
            _ = self.ws.query.platform_info()
            self.ws.query.patches()
        except Exception as e:  # pragma: no cover - defensive  # noqa: BLE001 - analysis must not fail on a bad input
            self.errors.append(f"profile/patches: {type(e).__name__}: {e}")
        load_checks()
        for label, fn in PREPARES:
            try:
                fn(self)
            except Exception as e:  # pragma: no cover - defensive  # noqa: BLE001 - analysis must not fail on a bad input
                self.errors.append(f"{label}: {type(e).__name__}: {e}")

    # -- checking ------------------------------------------------------------
    def _module_name(self, path: str) -> str | None:
        idx = self.ws.index
        name = idx.module_name_of(path)
        if name is None:
            mod = idx.module_for_path(path)
            name = mod.name if mod is not None else None
        return name if name in self.ws.index.ws_files else None

    def _cache_key(self, name: str) -> str | None:
        sha = self.current_sha(name)
        if sha is None:
            return None
        return hashlib.sha256(f"{self.fingerprint()}|{name}|{sha}".encode()).hexdigest()[:40]

    def needs_checking(self, paths=None) -> bool:
        """True when some module's findings are not in the cache (a cheap existence test)."""
        if not self.use_cache:
            return True
        folder = self.ws.cache.folder
        for p in self.files_for(paths):
            name = self._module_name(p)
            if name is None:
                continue
            key = self._cache_key(name)
            if key is None or not (folder / "rules" / f"{key}.pickle").exists():
                return True
        return False

    def check_module(self, path: str, should_stop=None) -> list[Finding]:
        """The findings of ``path``. ``should_stop``: a callable asked between two checks (after at least one
        ran in this call); when it says so, :class:`Interrupted` is raised and the work done so far is kept
        for the next call on the same text (an editor passes "a request is waiting")."""
        from ..pyindex import Stopped

        with self._lock:
            idx = self.ws.index
            before = idx.should_stop
            self._should_stop = idx.should_stop = should_stop  # the buffer's own summary gives way too
            try:
                return self._check_module(path)
            except Stopped as e:
                self.stats["interrupted"] = self.stats.get("interrupted", 0) + 1
                raise Interrupted(str(e)) from None
            finally:
                self._should_stop, idx.should_stop = None, before

    def _check_module_or_defer(self, path: str) -> list[Finding] | None:
        """Check a module; None when a check needed the C++ index before the prefetch worker
        stored it (nothing of the attempt is kept: the caller checks the module again later)."""
        from ..torchops import CppNotReady

        with self._lock:
            try:
                return self._check_module(path)
            except CppNotReady:
                self.stats["deferred"] = self.stats.get("deferred", 0) + 1
                return None

    def _check_module(self, path: str) -> list[Finding]:
        load_checks()
        name = self._module_name(path)
        if name is None:
            return []
        cache = self.ws.cache
        key = None
        overlay = self._has_overlay(path)
        if overlay:
            hit = self._buffer_findings.get(name)
            if hit is not None:
                return list(hit)
        if self.use_cache and not overlay:
            key = self._cache_key(name)
            hit = cache.load_pickle("rules", key) if key else None
            if hit is not None:
                gkey = hit.get("global")
                gdeps = cache.load_pickle("rules", gkey) if gkey else {}
                if gdeps is not None and self._deps_fresh(hit["deps"]) and self._deps_fresh(gdeps):
                    self.stats["cached"] += 1
                    return [Finding(**d) for d in hit["findings"]]
        mod = self.ws.index.module(name)
        if mod is None or not mod.workspace:
            return []
        t0 = time.perf_counter()
        gdeps = self.global_deps()
        self.timings["global"] = self.timings.get("global", 0.0) + time.perf_counter() - t0
        findings, deps = self._run(mod)
        self.stats["checked"] += 1
        if overlay:
            self._buffer_findings[name] = tuple(findings)
        if key is not None:
            if self._gkey is None:
                self._gkey = "g-" + hashlib.sha256(repr(sorted(gdeps.items())).encode()).hexdigest()[:32]
                cache.store_pickle("rules", self._gkey, gdeps)
            cache.store_pickle("rules", key, {"deps": deps, "global": self._gkey, "findings": [asdict(f) for f in findings]})
        return findings

    def _run(self, mod) -> tuple[list[Finding], dict]:
        from ..pyindex import Stopped

        held = self._resume.pop(mod.name, None)
        if held is not None and held[0] == mod.summary.sha:
            _sha, start, ctx, hard0, soft0, gen, kept0 = held
        else:
            start, ctx, hard0, soft0, gen, kept0 = 0, ModuleContext(self, mod), {}, {}, None, 0
        stop = self._should_stop
        with _Recorder(self.ws.index) as (hard, soft):
            hard.update(hard0)
            soft.update(soft0)
            ctx.hard_deps = hard
            for i in range(start, len(CHECKS)):
                if gen is None and stop is not None and i > start and stop():
                    self._hold(mod, i, ctx, hard, soft, None, len(ctx.findings))
                fn, _ids = CHECKS[i]
                t0 = time.perf_counter()
                kept = kept0 if gen is not None else len(ctx.findings)  # where this check's findings start
                try:
                    if gen is None:
                        gen = fn(ctx)
                    if gen is not None:
                        self._drain(gen, stop, lambda g=gen, i=i, k=kept: self._hold(mod, i, ctx, hard, soft, g, k))
                except RecursionError:
                    self.errors.append(f"{mod.path}: {fn.__name__}: recursion limit")
                except Stopped:  # another open buffer's summary gave way inside this check: it runs again
                    del ctx.findings[kept:]
                    self._resume[mod.name] = (mod.summary.sha, i, ctx, dict(hard), dict(soft), None, kept)
                    raise
                except Interrupted:
                    raise
                except Exception as e:  # noqa: BLE001 - analysis must not fail on a bad input
                    tb = traceback.extract_tb(e.__traceback__)[-1]
                    self.errors.append(f"{mod.path}: {fn.__name__}: {type(e).__name__}: {e} ({os.path.basename(tb.filename)}:{tb.lineno})")
                gen = None
                took = time.perf_counter() - t0
                self.timings[fn.__name__] = self.timings.get(fn.__name__, 0.0) + took
                if took > 0.03 and _log.isEnabledFor(logging.DEBUG):
                    _log.debug("check %s: %s %.0f ms", mod.name, fn.__name__, took * 1000)
        hard[mod.name] = mod.summary.sha
        deps = _merge_deps(hard, soft)
        lines = ctx.lines if ctx._facts is not None else (self.ws.index.source_text(mod.path) or "").splitlines()
        out = []
        seen = set()
        for f in ctx.findings:
            k = (f.rule, f.line, f.col, f.end_line, f.end_col, f.message)
            if k in seen or suppressed(lines, f):
                continue
            seen.add(k)
            out.append(f)
        out = _fold_covered(out)
        out.sort(key=Finding.sort_key)
        from .ids import assign

        assign(out, self.ws.root, lambda _p: lines)
        return out, deps

    # a check that is a generator stops at a yield when ``stop`` says so, no sooner than this after the last ask
    STOP_EVERY_S = 0.002

    def _drain(self, gen, stop, hold) -> None:
        """Run a check: a plain function has run already; a generator (a check that yields between its items)
        is driven to its end, and when ``stop`` says so at a yield, :meth:`_hold` keeps it suspended for the
        next call on the same text (which goes on from that item)."""
        if not hasattr(gen, "__next__"):
            for _ in gen:  # an iterable of nothing in particular (older checks)
                pass
            return
        last = time.perf_counter()
        for _ in gen:
            if stop is not None:
                now = time.perf_counter()
                if now - last >= self.STOP_EVERY_S:
                    last = now
                    if stop():
                        hold()

    def _hold(self, mod, i: int, ctx, hard: dict, soft: dict, gen, kept: int) -> None:
        """Keep a check run stopped before check ``i`` (or inside it, at a yield of ``gen``) and raise
        :class:`Interrupted`: the next call for the same text goes on from there."""
        self._resume[mod.name] = (mod.summary.sha, i, ctx, dict(hard), dict(soft), gen, kept)
        self.stats["interrupted"] = self.stats.get("interrupted", 0) + 1
        if gen is not None:
            self.stats["interrupted_inside"] = self.stats.get("interrupted_inside", 0) + 1
        where = f"inside check {i + 1}" if gen is not None else f"before check {i + 1}"
        raise Interrupted(f"{mod.name}: stopped {where} of {len(CHECKS)}")

    # a forked second checker (CLI, cold): from this many modules to check
    PARALLEL_MIN_MODULES = 24

    def check_paths(self, paths: Iterable[str] | None = None) -> list[Finding]:
        files = self.files_for(paths)
        idx = self.ws.index
        if self.use_cache and idx.after_parse is None and not idx.has_overlays():
            idx.after_parse = self._facts_after_parse(files)
        try:
            return self._check_paths(files)
        finally:
            idx.after_parse = None

    def _facts_after_parse(self, files: list[str]):
        """``Index.after_parse`` for a check of ``files``: the rule facts of a module to check are collected
        when its summary is built (the shared state before the checks summarises many of them, e.g. the
        patches read every workspace module), from the same memoised parse: 46 of the 151 workspace modules of
        the real checkout were parsed a second time for their facts."""
        wanted = {self.ws.index.realpath(f) for f in files}
        ws, use_cache = self.ws, self.use_cache

        def collect(path: str, sha: str, text: str) -> None:
            if ws.index.realpath(path) in wanted:
                try:
                    module_facts(ws, "", path, sha, use_cache, text)
                except Exception:  # noqa: BLE001, S110 - analysis must not fail on a bad input (the check collects them again)
                    pass

        return collect

    def _check_paths(self, files: list[str]) -> list[Finding]:
        out: list[Finding] = []
        deferred = []
        helper = self._start_checker(files)

        def take(p) -> None:
            got = self._check_module_or_defer(p)
            if got is None:
                deferred.append(p)
            else:
                out.extend(got)

        i = 0
        while i < len(files) and (helper is None or helper.parent_takes(i)):
            take(files[i])
            i += 1
        if helper is not None:  # the rest: the helper's findings (checked here where it left a gap)
            errors, done = helper.join()
            self.errors.extend(errors)
            self.stats["helper"] = 0
            for p in files[i:]:
                got = done.get(p)
                if got is None:
                    take(p)
                else:
                    out.extend(got)
                    self.stats["helper"] += 1
        if deferred:
            self.join_prefetch()  # the worker has stored the C++ index: check those modules now
            for p in deferred:
                out.extend(self.check_module(p))
        try:
            self.ws.index.flush()
        except Exception:  # noqa: BLE001, S110 - analysis must not fail on a bad input
            pass
        out.sort(key=Finding.sort_key)
        return merge_causes(out)

    def _start_checker(self, files: list[str]):
        """Fork a second checker for the back of ``files`` (a :class:`_Checker`), or None. Only in a
        single-threaded CLI process (``Workspace.allow_fork``) with a cache folder, when enough modules
        need checking. The shared state every check starts from (profile, patches, registry: most of a
        cold check's summaries) is computed first, so the two processes inherit it instead of building
        it twice; then each checks modules from its end of the list until they meet. The helper sends its
        findings through a pipe (and leaves them in the cache for the next run), so this process does not
        re-validate their dependencies as a warm check would. A module it did not finish is checked here.
        Findings are the same with or without it."""
        if (len(files) < self.PARALLEL_MIN_MODULES or not self.use_cache or not getattr(self.ws, "allow_fork", False)
                or not hasattr(os, "fork") or not self.needs_checking(files)):
            return None
        self.global_deps()
        self.wind_down_prefetch()
        return _Checker.start(self, files)

    def files_for(self, paths: Iterable[str] | None) -> list[str]:
        idx = self.ws.index
        all_files = sorted(idx.ws_files.values())
        if not paths:
            return all_files
        chosen: list[str] = []
        for p in paths:
            cands = [Path(p)]
            if not Path(p).is_absolute():
                cands.append(self.ws.root / p)
            target = next((c for c in cands if c.exists()), None)
            if target is None:
                self.errors.append(f"{p}: no such file or folder")
                continue
            real = idx.realpath(target)
            if os.path.isdir(real):
                chosen.extend(f for f in all_files if idx.realpath(f).startswith(real + os.sep))
            elif real.endswith(".py"):
                chosen.append(real if real in {idx.realpath(f) for f in all_files} else str(target))
        seen = set()
        out = []
        for f in chosen:
            r = idx.realpath(f)
            if r not in seen:
                seen.add(r)
                out.append(f)
        return out


class _Checker:
    """The forked second checker of :meth:`Engine.check_paths`: positions in shared memory (the parent's
    next module from the front, the helper's from the back), the helper's warnings through a pipe."""

    _ONE = struct.Struct("q")  # at 0: the parent's claimed module; at 8: the helper's

    def __init__(self, pid: int, shared, rfd: int):
        self.pid, self.shared, self.rfd = pid, shared, rfd

    @classmethod
    def start(cls, engine: "Engine", files: list[str]):
        import mmap

        shared = mmap.mmap(-1, 2 * cls._ONE.size)
        cls._ONE.pack_into(shared, 0, -1)
        cls._ONE.pack_into(shared, 8, len(files))
        try:
            rfd, wfd = os.pipe()
            pid = os.fork()
        except OSError:
            return None
        if pid == 0:  # pragma: no cover - runs in the forked helper
            code = 0
            try:
                os.close(rfd)
                _checker_child(engine, files, shared, wfd)
            except BaseException:  # noqa: BLE001 - the parent checks what is missing itself
                code = 1
            os._exit(code)
        os.close(wfd)
        return cls(pid, shared, rfd)

    def parent_takes(self, i: int) -> bool:
        """Claim module ``i`` for the parent; False once the helper has claimed it (a module both claim
        at the same moment is checked twice, harmlessly; one neither checks is checked after join)."""
        self._ONE.pack_into(self.shared, 0, i)
        return i < self._ONE.unpack_from(self.shared, 8)[0]

    def join(self) -> tuple[list[str], dict]:
        """Wait for the helper; its warnings and its findings (path -> list of :class:`Finding`)."""
        from ..forksplit import read_all_and_reap

        data = read_all_and_reap(self.pid, self.rfd)
        try:
            import pickle

            errors, done = pickle.loads(data) if data else ([], {})
        except Exception:  # noqa: BLE001 - a helper that died: the parent checks its modules
            errors, done = [], {}
        if not isinstance(done, dict):
            done = {}
        return [e for e in errors if isinstance(e, str)], done


def _checker_child(engine: "Engine", files: list[str], shared, wfd: int) -> None:  # pragma: no cover - forked
    import pickle
    import signal

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    idx = engine.ws.index
    idx.after_fork_in_child()
    engine.prefetch_pid = None
    n_errors = len(engine.errors)
    one = _Checker._ONE
    done = {}
    for j in range(len(files) - 1, -1, -1):
        one.pack_into(shared, 8, j)
        if j <= one.unpack_from(shared, 0)[0]:
            break
        got = engine._check_module_or_defer(files[j])
        if got is not None:
            done[files[j]] = got
    from ..cache import flush_all

    flush_all()
    from ..forksplit import write_all

    write_all(wfd, pickle.dumps((engine.errors[n_errors:], done)))


_IMPORT_RE = re.compile(r"^[ \t]*(?:from[ \t]+([A-Za-z_][\w.]*)[ \t]+import|import[ \t]+([A-Za-z_][\w.]*))", re.MULTILINE)


def _ws_files_from_the_end(idx):
    """(module name, path, content, content sha) of the workspace modules, last name first."""
    for name in sorted(idx.ws_files, reverse=True):
        path = idx.ws_files[name]
        try:
            data = Path(path).read_bytes()
        except OSError:
            continue
        yield name, path, data, hashlib.sha256(data).hexdigest()


def _upstream_imports(idx, stdlib) -> tuple[list[str], list[str]]:
    """Installed (non-workspace, non-stdlib) modules the workspace imports, most imported first: those
    imported at the top of a file (what loading a backend module and the registry resolve), then the rest
    (imports inside functions and blocks)."""
    tops = {n.split(".", 1)[0] for n in idx.ws_files}
    top_level: dict = {}
    nested: dict = {}
    for path in idx.ws_files.values():
        text = idx.source_text(path)
        if text is None:
            continue
        for m in _IMPORT_RE.finditer(text):
            name = m.group(1) or m.group(2)
            top = name.split(".", 1)[0]
            if top in tops or top in stdlib or top in ("torch", "__future__"):
                continue
            counts = top_level if text[m.start()] in "fi" else nested
            counts[name] = counts.get(name, 0) + 1
    first = sorted(top_level, key=lambda n: (-top_level[n], n))
    rest = sorted((n for n in nested if n not in top_level), key=lambda n: (-nested[n], n))
    return first, rest


def _prefetch_child(ws, wfd: int, stop=None) -> None:  # pragma: no cover - runs in a forked worker
    """The cold CLI check's worker, on the second core while the parent builds the shared state (profile,
    patches, registry) and then until two checkers take over (``stop``). In order: workspace summaries
    from the end of the list, the C++ index (signalled through ``wfd``), summaries of the installed
    modules the workspace imports (top-of-file imports first), the remaining rule facts."""
    import signal

    debug = os.environ.get("ATTNLENS_RULES_DEBUG")
    t0 = time.perf_counter()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    idx = ws.index

    def stopped() -> bool:
        return stop is not None and stop[0] == 1

    def summarise(names) -> None:
        for name in names:
            if stopped():
                return
            loc = idx.locate(name)
            if loc is not None and loc.kind == "py":
                idx.module(name)

    stdlib = ws.query.stdlib()
    # 1. workspace summaries and rule facts (one parse each) from the end of the module list, while the
    #    parent summarises from the front (the patches read every workspace module), until we meet
    met = 0
    for name, path, data, sha in _ws_files_from_the_end(idx):
        if ws.cache.load_pickle("py", sha) is not None:
            if data.strip():  # empty files share one content sha: they say nothing about the parent
                met += 1
                if met >= 3:
                    break
            continue
        met = 0
        idx.module(name)
        if ws.cache.load_pickle("rulesfacts", _facts_key(sha)) is None:
            module_facts(ws, name, path, sha, True)
    ws.cache.flush()
    if debug:
        print(f"[prefetch] workspace {time.perf_counter() - t0:.2f}s", file=sys.stderr)
    # 2. the C++ index (modules whose checks need it earlier are checked again after the signal)
    try:
        ws.query.cpp_index()
    except Exception:  # noqa: BLE001, S110 - analysis must not fail on a bad input
        pass
    try:  # the installed files that register ops from Python, found once for both checkers (kept in the cache)
        ws.query.prepare_installed_scan("vllm")  # upstream's op namespace
    except Exception:  # noqa: BLE001, S110 - analysis must not fail on a bad input
        pass
    ws.cache.flush()  # the parent reads the C++ index back from the cache once signalled
    if debug:
        print(f"[prefetch] cpp {time.perf_counter() - t0:.2f}s", file=sys.stderr)
    try:
        os.write(wfd, b"c")
        os.close(wfd)
    except OSError:
        pass
    # 3. installed modules the workspace imports, those at the top of a file first (the registry and the
    #    import checks resolve them), until the checkers take over
    first, rest = _upstream_imports(idx, stdlib)
    if debug:
        print(f"[prefetch] upstream imports {time.perf_counter() - t0:.2f}s ({len(first)} + {len(rest)})", file=sys.stderr)
    summarise(first)
    summarise(rest)
    # 4. the remaining rule facts, from the end (when the parent has not taken over yet)
    for name, path, _data, sha in _ws_files_from_the_end(idx):
        if stopped():
            break
        if ws.cache.load_pickle("rulesfacts", _facts_key(sha)) is None:
            module_facts(ws, name, path, sha, True)
    ws.cache.flush()
    if debug:
        print(f"[prefetch] done {time.perf_counter() - t0:.2f}s{' (stopped)' if stopped() else ''}", file=sys.stderr)


_ENGINES_LOCK = threading.Lock()


def engine_for(ws) -> Engine:
    """The engine of ``ws`` for its current index generation (a new one after any change). It is kept
    in the workspace's own state (``Query.state``): two workspaces in one process share no engine."""
    with _ENGINES_LOCK:
        return _engine_for(ws)


def _engine_for(ws) -> Engine:
    slot = ws.query.state(__name__)
    e = slot.get("engine")
    if e is None or e.generation != ws.index.generation:
        e = Engine(ws)
        slot["engine"] = e
    return e


def check_module(ws, path: str, should_stop=None) -> list[Finding]:
    return engine_for(ws).check_module(path, should_stop)


def prepare_module(ws, path: str, should_stop=None) -> None:
    """Check ``path`` ahead of the request for its findings. An editor calls this shortly after the
    last keystroke, while the diagnostics debounce is still running; the check asked for when it ends
    finds the findings memoised (an open buffer's, for this index generation: an edit anywhere makes a
    new engine) or on disk (a file's, by content)."""
    engine_for(ws).check_module(path, should_stop)


def check_paths(ws, paths: Iterable[str] | None = None) -> list[Finding]:
    return engine_for(ws).check_paths(paths)


# the modules whose @check functions make up the rules (imported on first use: they import the engine)
@functools.lru_cache(maxsize=1)
def check_modules() -> tuple[str, ...]:
    """The check modules: every ``checks_*`` module of this package (the one way checks are found)."""
    import pkgutil

    here = Path(__file__).resolve().parent
    return tuple(sorted(m.name for m in pkgutil.iter_modules([str(here)]) if m.name.startswith("checks_")))


@functools.lru_cache(maxsize=1)
def load_checks() -> None:
    """Import every check module once (registers their rules and checks); later calls cost nothing (the
    engine asks before every module it checks and every facts collection)."""
    import importlib

    for m in check_modules():
        importlib.import_module(f"{__package__}.{m}")


def rules_table() -> list[Rule]:
    load_checks()
    return [RULES[k] for k in sorted(RULES)]


def _debug(*a):  # pragma: no cover
    print(*a, file=sys.stderr)
