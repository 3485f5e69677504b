"""The workspace index: module names to files, summaries on demand.

* Workspace modules (every package under the root, and ``src/`` layouts) are
  found by walking the tree once; their summaries are loaded eagerly for
  whole-workspace questions (registry, patches) and lazily otherwise.
* Site-packages modules are located through the target interpreter's
  ``sys.path`` and parsed only when a chain reaches them.
* Summaries are cached per file by content hash (sha256) in the cache folder;
  a ``(path, mtime, size) -> sha`` memo avoids re-hashing unchanged files.
* Open editor buffers are *overlays*: their text wins over the disk.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import hashlib
import operator
import os
import re
import stat
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from . import gcpolicy
from .cache import Cache
from .pyincremental import IncrementalSummary
from .pyindex import ModuleSummary, Stopped, decode_source, interned_names, summarize
from .target import TargetInfo

# a buffer first overlaid with more lines than this is summarised whole: the first incremental build of a
# 50,000-line buffer costs ~1.5x a whole summary (per-chunk parses and one shifted copy of every chunk)
INCREMENTAL_MAX_FIRST_LINES = 20_000

_POS = struct.Struct("q")  # the shared position of workspace_modules (see Index.prefetch_summaries)

SKIP_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", "node_modules", "build", "dist", ".tox", ".nox",
    ".mypy_cache", ".pytest_cache", ".ruff_cache", ".venv", "venv", ".eggs", "site-packages",
}
MAX_FILE_BYTES = 8 * 1024 * 1024


class Module:
    """A module of the index: its name, file and summary. The summary of a module read from the cache folder
    can be dropped when many are loaded (:meth:`Index.module` keeps at most ``Index.SUMMARY_KEEP_MAX`` of
    them) and is read back from the cache when asked again: memos hold ``Module`` objects, not summaries, so
    a large workspace's memory is bounded by the summaries in use rather than every one a memo ever met."""

    __slots__ = ("name", "path", "workspace", "is_package", "sha", "_summary", "_owner", "_hot")

    def __init__(self, name: str, path: str, summary: ModuleSummary, workspace: bool, is_package: bool,
                 owner: "Index | None" = None):
        self.name = name
        self.path = path
        self.workspace = workspace
        self.is_package = is_package
        self.sha = summary.sha
        self._summary = summary
        self._owner = owner  # the index that reads a dropped summary back (None: never dropped)
        self._hot = True  # asked since the last sweep (Index._keep_locked): a second chance

    @property
    def summary(self) -> ModuleSummary:
        s = self._summary
        if s is None:
            return self._owner._summary_back(self)
        self._hot = True
        return s

    @property
    def package(self) -> str:
        return self.name if self.is_package else self.name.rpartition(".")[0]

    def __repr__(self) -> str:
        return f"Module({self.name!r}, {self.path!r}, workspace={self.workspace})"


@dataclass(frozen=True)
class Location:
    kind: str  # py | ext | namespace
    path: str
    is_package: bool = False


class Index:
    """The modules of one workspace and its target environment, each as a :class:`pyindex.ModuleSummary`.

    Public: ``locate`` / ``module`` / ``module_for_path`` (a module by name or path, summarised once per
    content and cached on disk by content sha), ``workspace_modules`` / ``workspace_modules_matching``
    (whole-workspace scans), ``source_text`` / ``per_text`` (texts and per-text facts), ``set_overlay`` /
    ``overlay_text`` (open editor buffers, which win over the disk), ``invalidate`` / ``refresh`` /
    ``generation`` / ``changed_since`` (what changed), ``observe`` / ``replay`` / ``note_read`` (dependency
    recording for memos), ``outside_memo`` (memos of installed code), ``realpath``. Prefetch workers
    (``prefetch_summaries``, ``start_summary_helper``) change who summarises a file, never an answer.
    Reached outside the core through :class:`attnlens.query.Query`; not thread-safe beyond ``module``'s lock.
    """

    allow_fork = False  # forked prefetch workers: only in single-threaded CLI processes
    # asked while an open buffer is summarised (pyindex.summarize's should_stop; the rules engine sets it for
    # the duration of an editor's check): the summary stops with pyindex.Stopped, nothing is kept
    should_stop = None
    # the same for a file on disk summarised inside a job that gives way to requests (the call index's step)
    build_should_stop = None
    # below this many workspace modules a second process costs more than it saves
    # (ATTNLENS_PREFETCH_MIN_MODULES overrides it: tests and benchmarks force the worker on)
    PREFETCH_MIN_MODULES = int(os.environ.get("ATTNLENS_PREFETCH_MIN_MODULES") or 400)

    def __init__(self, root: Path, target: TargetInfo | None, cache: Cache | None = None,
                 extra_paths: Iterable[str] = ()):
        self._realpaths: dict[str, str] = {}  # path -> os.path.realpath(path): see realpath
        self.root = Path(self.realpath(root))
        self.target = target
        self.cache = cache or Cache(None)
        self._lock = threading.RLock()
        self.workspace_roots = self._find_workspace_roots()
        sp = list(extra_paths) + (list(target.sys_path) if target else [])
        ws = {str(p) for p in self.workspace_roots}
        self.search_path = [str(p) for p in self.workspace_roots] + [p for p in sp if p not in ws]
        self.ext_suffixes = tuple(sorted(set((target.ext_suffixes if target else []) + [".so", ".pyd"]), key=len, reverse=True))
        # the target's own suffixes in its import system's order (an exact `name + suffix` wins, as in FileFinder)
        self.ext_order = tuple(dict.fromkeys((target.ext_suffixes if target else []) + [".so", ".pyd"]))
        self._modules: dict[str, Module | None] = {}
        self._kept: collections.deque = collections.deque()  # modules with a droppable summary, in load order
        self._kept_lock = threading.Lock()  # (the summaries read back: never waits for _lock's summary builds)
        self.summary_sweeps = 0  # times SUMMARY_KEEP_MAX was passed (summaries dropped)
        self.summaries_read_back = 0
        self._path_to_name: dict[str, str] = {}
        self._loc_cache: dict[str, Location | None] = {}
        self._dir_cache: dict[str, frozenset | None] = {}
        self._overlays: dict[str, str] = {}
        self._incremental: dict[str, IncrementalSummary] = {}  # open buffer -> its chunk summaries (pyincremental)
        # open buffers whose file is not on disk (a new file, an untitled buffer): real path <-> name
        self._virtual: dict[str, str] = {}
        self._virtual_paths: dict[str, str] = {}
        self._sha_memo: dict[str, tuple] = self.cache.load_pickle("meta", "shamemo") or {}
        self._sha_memo_dirty = False
        self.ws_files: dict[str, str] = {}  # module name -> path, every workspace module
        self._scan_workspace()
        self.generation = 0  # bumped on every change (overlay/edit/refresh)
        self._changes: list[tuple[int, str]] = []  # (generation, real path) of each invalidation
        self._changes_floor = 0
        self._changed_memo: tuple = (-1, {})  # (generation, {since: changed_since(since)})
        # the generation of the last change outside the workspace's Python modules (an installed module, a
        # C++ file, a full refresh): what depends only on those stays valid across edits of the plugin
        self.outside_generation = 0
        self._outside_memo: tuple[int, dict] = (0, {})
        self._stopped_builds: set = set()  # content shas whose summary gave way once (built whole next time)
        self._prefetch: tuple[int, object] | None = None  # (pid, shared position) of the summary worker
        self._helper = None  # the server's summary helper process (start_summary_helper)
        self._carried: dict = {}  # key -> (generation, what it read: _Observed, value): see carried
        self._match_memo: dict = {}  # workspace_modules_matching: pattern -> (generation, module names)
        self._class_facts: dict = {}  # class_facts: module path -> (sha, facts)
        self._name_index: dict = {}  # scan -> (generation, {name in that form: module names}): see _name_scan
        self._text_memo: dict[str, tuple] = {}  # real path -> ((mtime_ns, size), text) of files read from disk
        self._texts_decoded: collections.OrderedDict = collections.OrderedDict()  # real path -> (UTF-8 kept, text): the last 16 asked
        self._text_memo_chars = 0
        self._per_text: dict = {}  # real path -> (buffer text or file stamp, {key: value}): see per_text
        self._per_text_keys: dict = {}  # the per_text keys asked, each once

    def realpath(self, path) -> str:
        """``os.path.realpath`` memoised per index: a cold check of the real checkout resolved 3,000 paths
        with 24,000 ``lstat`` calls (0.3 s of system time). Cleared by :meth:`refresh`, which re-scans the
        workspace after a change the watchers cannot describe (another index's memo is left alone)."""
        p = os.fspath(path)
        r = self._realpaths.get(p)
        if r is None:
            d, base = os.path.split(p)
            if base and base not in (".", "..") and os.path.isabs(d):
                # the folder's real path (memoised: the files of one folder share it) and one lstat for the
                # file itself: upstream vLLM's 2,234 files took 15,000 lstat calls (0.1 s of a server's start)
                rd = self._realpaths.get(d)
                if rd is None:
                    rd = self._realpaths[d] = os.path.realpath(d)
                r = os.path.realpath(p) if os.path.islink(p) else os.path.join(rd, base)
            else:
                r = os.path.realpath(p)
            if len(self._realpaths) > 200_000:
                self._realpaths.clear()
            self._realpaths[p] = r
        return r

    # -- workspace discovery ---------------------------------------------------
    def _find_workspace_roots(self) -> list[Path]:
        roots = [self.root]
        src = self.root / "src"
        if src.is_dir() and any((src / d / "__init__.py").exists() for d in _listdir(src)):
            roots.insert(0, src)
        return roots

    def _scan_workspace(self) -> None:
        files: dict[str, str] = {}
        for base in self.workspace_roots:
            for entry in _listdir(base):
                p = base / entry
                if entry in SKIP_DIRS or entry.startswith(".") or entry in ("tests", "test", "docs", "examples", "benchmarks"):
                    continue
                if p.is_dir() and not p.is_symlink():
                    if (p / "pyvenv.cfg").exists() or not (p / "__init__.py").exists():
                        continue
                    prefix = os.path.join(str(base), "")
                    for f in _walk_py(p):  # paths under base ending in .py (string slicing: no Path per file)
                        rel = f[len(prefix):-3] if f.startswith(prefix) else str(Path(f).relative_to(base).with_suffix(""))
                        parts = rel.split(os.sep)
                        if parts[-1] == "__init__":
                            parts.pop()
                        if all(x.isidentifier() for x in parts):
                            files[".".join(parts)] = f
        for real, name in getattr(self, "_virtual", {}).items():
            # a new file of a workspace package, not saved yet: a workspace module like the others
            if "." in name and name.rpartition(".")[0] in files and name not in files:
                files[name] = real
        if files.keys() != getattr(self, "ws_files", {}).keys():
            self.layout_version = getattr(self, "layout_version", 0) + 1  # a workspace module appeared or went
        self.ws_files = files
        self._ws_reals = {self.realpath(p) for p in files.values()} | set(files.values())
        for name, path in files.items():
            self._path_to_name[path] = name

    def fingerprint(self) -> str:
        """Changes whenever a workspace file, an overlay or the target changes (cheap: stats only)."""
        if getattr(self, "_fp_gen", None) == self.generation and getattr(self, "_fp", None):
            return self._fp
        h = hashlib.sha1()
        h.update(repr(self.search_path).encode())
        for name in sorted(self.ws_files):
            p = self.ws_files[name]
            try:
                st = os.stat(p)
                h.update(f"{p}|{st.st_mtime_ns}|{st.st_size}\n".encode())
            except OSError:
                h.update(f"{p}|gone\n".encode())
        for p in sorted(self._overlays):
            h.update(p.encode())
            h.update(hashlib.sha1(self._overlays[p].encode("utf-8", "surrogatepass")).digest())
        self._fp = h.hexdigest()[:24]
        self._fp_gen = self.generation
        return self._fp

    def is_workspace_path(self, path: str) -> bool:
        real = self.realpath(path)
        # `_path_to_name` also learns installed modules (module_for_path of a site-packages file):
        # only the workspace's own files count here
        return real in self._ws_reals or any(
            real.startswith(str(r) + os.sep) for r in self.workspace_roots
        ) and not real.startswith(str(self.root / ".venv"))

    # -- module location ---------------------------------------------------
    def locate(self, modname: str) -> Location | None:
        if modname in self._loc_cache:
            return self._loc_cache[modname]
        loc = None
        if modname in self._virtual_paths:
            p = self._virtual_paths[modname]
            loc = Location("py", p, p.endswith("__init__.py"))
        elif modname in self.ws_files:
            p = self.ws_files[modname]
            loc = Location("py", p, p.endswith("__init__.py"))
        else:
            parts = modname.split(".")
            if all(p.isidentifier() for p in parts):
                loc = self._search(parts)
        self._loc_cache[modname] = loc
        return loc

    def _search(self, parts: list[str]) -> Location | None:
        if len(parts) > 1:
            parent = self.locate(".".join(parts[:-1]))
            if parent is None or parent.kind == "ext" or not parent.is_package:
                return None
            dirs = [os.path.dirname(parent.path)] if parent.kind == "py" else [parent.path]
            if parent.kind == "namespace":
                dirs = [d for d in self._namespace_dirs(parts[:-1])]
        else:
            dirs = self.search_path
        name = parts[-1]
        namespace = None
        for d in dirs:
            listing = self._listing(d)
            if listing is None:
                continue
            if name in listing:
                pkg = os.path.join(d, name)
                init = os.path.join(pkg, "__init__.py")
                if os.path.isfile(init):
                    return Location("py", init, True)
                if os.path.isdir(pkg) and namespace is None:
                    namespace = Location("namespace", pkg, True)
            if name + ".py" in listing:
                return Location("py", os.path.join(d, name + ".py"), False)
            for suffix in self.ext_order:
                if name + suffix in listing:
                    return Location("ext", os.path.join(d, name + suffix), False)
            # another interpreter's build (`_C.cpython-312-...so` for a 3.11 target): the first in name order, so
            # the answer never depends on the listing's (hash-seeded) iteration order
            for entry in sorted(e for e in listing if e.startswith(name + ".")):
                if entry.endswith(self.ext_suffixes):
                    rest = entry[len(name):]
                    if any(rest == s or rest.endswith(s) and rest.count(".") >= 2 for s in self.ext_suffixes):
                        return Location("ext", os.path.join(d, entry), False)
        return namespace

    def _namespace_dirs(self, parts: list[str]) -> list[str]:
        out = []
        for d in self.search_path:
            cand = os.path.join(d, *parts)
            if os.path.isdir(cand):
                out.append(cand)
        return out

    def _listing(self, d: str) -> frozenset | None:
        if d in self._dir_cache:
            return self._dir_cache[d]
        try:
            lst = frozenset(os.listdir(d))
        except OSError:
            lst = None
        self._dir_cache[d] = lst
        return lst

    def top_level_installed(self, modname: str) -> bool:
        return self.locate(modname.split(".", 1)[0]) is not None

    # -- summaries ---------------------------------------------------------
    def module(self, modname: str) -> Module | None:
        mod = self._modules.get(modname)  # the hot path (400,000 calls in a census): no lock
        if mod is not None:
            return mod
        with self._lock:
            if modname in self._modules:
                return self._modules[modname]
            mod = self._modules[modname] = self._read_module(modname)
            if mod is not None and mod._owner is not None:
                self._keep(mod)
            return mod

    def _read_module(self, modname: str) -> Module | None:
        """The module ``modname`` read (its summary from the cache folder, or built and cached), not kept (under
        ``_lock``)."""
        loc = self.locate(modname)
        if loc is None or loc.kind != "py":
            return None
        summ = self._summary_for(loc.path)
        if summ is None:
            return None
        real = self.realpath(loc.path)
        self._path_to_name.setdefault(real, modname)
        return Module(modname, loc.path, summ, self.is_workspace_path(loc.path), loc.is_package,
                      self if self._droppable(real, summ) else None)

    # summaries read from the cache folder kept at once (a dropped one is read back when asked again: ~0.5 ms).
    # Upstream vLLM as the workspace: a server's background checks loaded 1,786 modules, 175 MB of summaries;
    # on the real vLLM-MetaX checkout none is dropped (its server loads 552 modules, `check` 338, `sites` 541).
    # 800 since the scans for subclasses read class facts instead of summaries (twenty-fourth session): upstream
    # `sites` 300 MB at the peak against 319 with 1,000, no slower; its server 318-320 MB against 338-343
    # (a server keeps 500 since the twenty-sixth session: ``Query.serve_long``)
    SUMMARY_KEEP_MAX = int(os.environ.get("ATTNLENS_SUMMARY_KEEP_MAX") or 800)

    def bound_summaries(self, keep_max: int) -> None:
        """Keep at most ``keep_max`` droppable summaries in this index (a long-lived editor's server: 500, where
        a batch keeps ``SUMMARY_KEEP_MAX``); ``ATTNLENS_SUMMARY_KEEP_MAX``, when set, wins."""
        if not os.environ.get("ATTNLENS_SUMMARY_KEEP_MAX"):
            self.SUMMARY_KEEP_MAX = max(1, keep_max)

    def _droppable(self, real: str, summ: ModuleSummary) -> bool:
        """Can this summary of a file be dropped and read back: a file's (not an open buffer's) with a sha, where
        there is a cache folder (``_summary_for`` read it from there or stored it; one whose file did not get
        written is read again by :meth:`_summary_back`)?"""
        return bool(summ.sha) and self.cache.enabled and real not in self._overlays

    def _keep(self, mod: Module) -> None:
        """Note a droppable summary loaded; past ``SUMMARY_KEEP_MAX`` drop some."""
        with self._kept_lock:
            self._keep_locked(mod)

    def _keep_locked(self, mod: Module) -> None:
        kept = self._kept
        kept.append(mod)
        if len(kept) <= self.SUMMARY_KEEP_MAX:
            return
        # down to 90 %: those loaded first and not asked since the last sweep are dropped; a module asked since
        # gets a second chance ("clock" eviction: a mark set by Module.summary, no bookkeeping per request)
        target = self.SUMMARY_KEEP_MAX * 9 // 10
        passes = 2 * len(kept)  # (after one pass every mark is cleared: the loop ends)
        while len(kept) > target and passes > 0:
            passes -= 1
            m = kept.popleft()
            if m._summary is None:
                continue
            if m._hot and self._modules.get(m.name) is m:
                m._hot = False
                kept.append(m)
                continue
            m._summary = None
        self.summary_sweeps += 1

    def _summary_back(self, mod: Module) -> ModuleSummary:
        """The summary of ``mod`` after it was dropped: read back from the cache folder (the same content: the
        same sha), else the module read again (a cache file gone: then kept for good). Not under ``_lock``: a
        request never waits here for another thread's summary build."""
        with gcpolicy.loading():
            s = self.cache.load_pickle("py", mod.sha)
        if s is None:
            with self._lock:
                again = self._read_module(mod.name)
            s = again.summary if again is not None and again.sha == mod.sha else \
                ModuleSummary(path=mod.path, sha=mod.sha, error="summary no longer available (its file changed)")
            with self._kept_lock:
                mod._owner = None
                mod._summary = s
            return s
        s.path = mod.path
        with self._kept_lock:
            cur = mod._summary
            if cur is not None:
                return cur  # (another thread read it back first)
            mod._summary = s
            mod._hot = True
            self.summaries_read_back += 1
            if self._modules.get(mod.name) is mod:
                self._keep_locked(mod)
        return s

    def transient_module(self, modname: str) -> Module | None:
        """The module as :meth:`module` gives it, without keeping a module that is not loaded yet: its summary is
        read from the cache or built (and cached) for the caller only. Not recorded by :meth:`observe`."""
        mod = self._modules.get(modname)
        if mod is not None or modname in self._modules:
            return mod
        with self._lock:
            if modname in self._modules:
                return self._modules[modname]
            return self._read_module(modname)

    # a whole-workspace scan keeps the modules it reads up to this many workspace modules; above, it reads those not
    # loaded yet without keeping them (keeping all of upstream vLLM's 2,234 summaries took 230 MB of a server)
    SCAN_RETAIN_MAX_MODULES = 1000

    def scan_module(self, modname: str) -> Module | None:
        """A module read by a whole-workspace scan that needs a few facts of each (the server's symbol table, the
        import graph): :meth:`module` on a workspace of up to ``SCAN_RETAIN_MAX_MODULES`` modules (the requests
        that follow find it loaded), else :meth:`transient_module`."""
        if len(self.ws_files) <= self.SCAN_RETAIN_MAX_MODULES:
            return self.module(modname)
        return self.transient_module(modname)

    def workspace_names_changed_since(self, generation: int) -> set[str] | None:
        """The workspace modules whose text changed after ``generation`` (a buffer or the file); None when
        unknown (a full refresh, or the workspace's files came or went)."""
        changed = self.changed_since(generation)
        if changed is None:
            return None
        if not changed:
            return set()
        return {n for n, p in self.ws_files.items() if self.realpath(p) in changed}

    def module_for_path(self, path: str) -> Module | None:
        real = self.realpath(path)
        name = self._path_to_name.get(real) or self._path_to_name.get(path)
        if name is None:
            name = self._guess_name(real)
            if name is None:
                return None
        return self.module(name)

    def _guess_name(self, real: str) -> str | None:
        for base in self.search_path:
            b = self.realpath(base)
            if real.startswith(b + os.sep):
                rel = Path(real[len(b) + 1:]).with_suffix("")
                parts = list(rel.parts)
                if parts and parts[-1] == "__init__":
                    parts.pop()
                if parts and all(p.isidentifier() for p in parts):
                    name = ".".join(parts)
                    loc = self.locate(name)
                    if loc is not None and self.realpath(loc.path) == real:
                        self._path_to_name[real] = name
                        return name
        return None

    def _summary_for(self, path: str) -> ModuleSummary | None:
        real = self.realpath(path)
        text = self._overlays.get(real)
        if text is not None:
            # an unsaved buffer: reuse a cached summary of the same content, never store one
            # (a pickle per keystroke would only fill the cache); a new one carries the buffer's
            # references too (``Workspace.refs_for``: editor positions outside a call were a second
            # summary of the same text after every edit), and is built from the summaries of the
            # buffer's top-level statements, re-summarising only those an edit touched (pyincremental)
            sha = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            cached = self.cache.load_pickle("py", sha)
            if cached is not None:
                cached.path = path
                return cached
            inc = self._incremental.get(real)
            if inc is None:
                if text.count("\n") > INCREMENTAL_MAX_FIRST_LINES:
                    # a huge buffer opened as it is: one whole summary (its first incremental build costs more)
                    return summarize(text, path, sha, refs=True, should_stop=self.should_stop)
                inc = self._incremental[real] = IncrementalSummary(refs=True)
            return inc.summarize(text, path, sha, should_stop=self.should_stop)
        try:
            st = os.stat(path)
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return ModuleSummary(path=path, sha="", error="not a regular file (FIFO, device or socket): not read")
        if st.st_size > MAX_FILE_BYTES:
            s = ModuleSummary(path=path, sha="", error=f"file too large to analyse ({st.st_size} bytes)")
            return s
        memo = self._sha_memo.get(path)
        stamp = (st.st_mtime_ns, st.st_size)
        if memo is not None and memo[0] == stamp:
            cached = self.cache.load_pickle("py", memo[1])
            if cached is not None:
                cached.path = path
                return cached
        try:
            data = Path(path).read_bytes()
        except OSError as e:
            return ModuleSummary(path=path, sha="", error=f"cannot read: {e.strerror}")
        sha = hashlib.sha256(data).hexdigest()
        self._sha_memo[path] = (stamp, sha)
        self._sha_memo_dirty = True
        text = decode_source(data)
        if text is None:
            return ModuleSummary(path=path, sha=sha, error="binary file, not Python source")
        return self._cached_or_build(sha, text, path)

    # called as ``after_parse(path, sha, text)`` right after a file on disk is summarised, while its parse is
    # still memoised (``pyindex.parse_source``): a whole-workspace check collects the module's rule facts
    # there instead of parsing the file a second time later (``rules.engine.Engine.check_paths``)
    after_parse = None

    def _cached_or_build(self, sha: str, text: str, path: str) -> ModuleSummary:
        cached = self.cache.load_pickle("py", sha)
        if cached is not None:
            cached.path = path
            return cached
        # a file summarised inside a job that gives way to requests (``build_should_stop``: the call index's step)
        # stops too, once per file (so the job always gets on): a 2,000-line module's summary held a waiting hover
        # 60-150 ms (its parse stays memoised for the next try)
        stop = self.build_should_stop if sha not in self._stopped_builds else None
        try:
            summ = summarize(text, path, sha, should_stop=stop)
        except Stopped:  # (only a stop raises it)
            if len(self._stopped_builds) > 4096:
                self._stopped_builds.clear()
            self._stopped_builds.add(sha)
            raise
        self.cache.store_pickle("py", sha, summ)
        hook = self.after_parse
        if hook is not None:
            hook(path, sha, text)
        return summ

    def flush(self) -> None:
        """Persist the (path, stamp) -> sha memo (cheap warm starts); stop a summary worker."""
        self.stop_prefetch()
        if self._sha_memo_dirty:
            self.cache.store_pickle("meta", "shamemo", self._sha_memo)
            self._sha_memo_dirty = False

    def has_overlays(self) -> bool:
        return bool(self._overlays)

    def is_loaded(self, modname: str) -> bool:
        """Has ``modname`` been summarised already (so reading its summary costs nothing)?"""
        return self._modules.get(modname) is not None

    def summary_ready(self, path: str) -> bool:
        """Is the module of ``path`` summarised as its text is now (reading it costs nothing)? False for a path
        that is not a module's."""
        name = self._path_to_name.get(self.realpath(path))
        return name is not None and self.is_loaded(name)

    def loaded_modules(self) -> list[Module]:
        return [m for m in self._modules.values() if m is not None]

    def summary_stats(self) -> dict:
        """``modules`` loaded (names looked up that are modules), ``inMemory`` (their summaries in memory now),
        ``keepMax`` (the bound on droppable ones), ``sweeps`` (times it was passed) and ``readBack`` (dropped
        summaries read back from the cache folder)."""
        mods = [m for m in list(self._modules.values()) if m is not None]
        return {"modules": len(mods), "inMemory": sum(1 for m in mods if m._summary is not None),
                "keepMax": self.SUMMARY_KEEP_MAX, "sweeps": self.summary_sweeps, "readBack": self.summaries_read_back}

    def loaded_count(self) -> int:
        """How many module names have been looked up so far (grows when :meth:`loaded_modules` may have)."""
        return len(self._modules)

    def workspace_modules(self) -> Iterator[Module]:
        names = sorted(self.ws_files)
        shared = self._prefetch[1] if self._prefetch is not None else None
        for i, name in enumerate(names):
            if shared is not None:
                _POS.pack_into(shared, 0, i)  # the summary worker stops where this loop is
            m = self.module(name)
            if m is not None:
                yield m
        if shared is not None:
            _POS.pack_into(shared, 0, len(names))

    def modules_named(self, names: list[str]) -> Iterator[Module]:
        """The modules of ``names`` (workspace module names, e.g. :meth:`names_under`), in that order, each read
        through :meth:`module` (so dependency recorders see exactly these reads)."""
        for name in names:
            m = self.module(name)
            if m is not None:
                yield m

    def names_under(self, paths) -> list[str]:
        """The sorted names of the workspace modules whose file lies at or under one of ``paths``."""
        wanted = [os.path.realpath(p) for p in paths]
        prefixes = tuple(w.rstrip(os.sep) + os.sep for w in wanted)
        out = []
        for name in sorted(self.ws_files):
            real = self.realpath(self.ws_files[name])
            if real in wanted or real.startswith(prefixes):
                out.append(name)
        return out

    def workspace_modules_matching(self, pattern) -> Iterator[Module]:
        """The workspace modules whose source matches the regular expression ``pattern`` (bytes;
        an open buffer's text is tested as UTF-8) or a text predicate (:meth:`text_matches`), in
        :meth:`workspace_modules` order; only those
        are summarised. For whole-workspace scans that look for something rare (an import hook,
        a ``Platform`` subclass): the first hover on upstream vLLM waited 16-30 s for two such
        scans to summarise all 2,234 modules, while reading the files' bytes takes about 0.2 s.
        The names are memoised per pattern and index generation."""
        for name in self.matching_names(pattern):
            m = self.module(name)
            if m is not None:
                yield m

    def class_facts(self, mod: Module) -> tuple:
        """``(qualname, line, method names, instance attribute names)`` of each class of ``mod``, kept for every
        module once read (by path and sha: a few hundred bytes a module). Whole-workspace scans for subclasses
        (the attention layers, the subclasses that override a method or set an attribute) read these, and a
        module's summary only for the classes that pass: on upstream vLLM those scans read back 3,000 dropped
        summaries in a `sites` run, 60 % of all read-backs."""
        hit = self._class_facts.get(mod.path)
        if hit is not None and hit[0] == mod.sha:
            return hit[1]
        facts = tuple((q, c.line, tuple(c.methods), tuple(c.inst_attrs)) for q, c in mod.summary.classes.items())
        self._class_facts[mod.path] = (mod.sha, facts)
        return facts

    def matching_names(self, pattern) -> list[str]:
        """The names of :meth:`workspace_modules_matching` (nothing summarised). Memoised per pattern and
        carried across generations: after an edit only the changed files are tested again (every file was
        tested against every pattern after each keystroke: 20-30 ms per request on the real checkout)."""
        gen = self.generation
        hit = self._match_memo.get(pattern)
        if hit is not None and hit[0] == gen:
            return hit[1]
        changed = self.changed_since(hit[0]) if hit is not None else None
        if changed is None or len(changed) > 64:
            names = self._name_scan(pattern)
            if names is None:
                names = [name for name in sorted(self.ws_files) if self.text_matches(self.ws_files[name], pattern)]
        else:
            ws = self.ws_files
            got = {n for n in hit[1] if n in ws}
            for real in changed:
                name = self._path_to_name.get(real)
                if name is None or name not in ws:
                    continue
                if self.text_matches(ws[name], pattern):
                    got.add(name)
                else:
                    got.discard(name)
            names = hit[1] if got == set(hit[1]) else sorted(got)
        if len(self._match_memo) > 4096:
            self._match_memo.clear()
        self._match_memo[pattern] = (gen, names)
        return names

    def _name_scan(self, pattern) -> list[str] | None:
        """:meth:`matching_names` of a pattern that names one identifier in a fixed form (``_NAME_SCANS``:
        ``rb"def\\s+NAME\\b"``, the subclasses that override a method; ``rb"self\\.NAME\\s*(:[^=]*)?="``, the
        subclasses that set an attribute; ``rb"class\\s+\\w+\\s*\\([^)]*\\bNAME\\b"``, the classes that name a class
        among their bases; NAME an ASCII identifier) without testing every file: the names each
        text has in that form (memoised per text), inverted once per generation. A scan per name read upstream
        vLLM's 33 MB again for each name (255 method names: 5-11 s of `attnlens sites`; 100 attribute names:
        3 s). None for any other pattern."""
        if not isinstance(pattern, bytes):
            return None
        for rx, key, names_of in _NAME_SCANS:
            m = rx.fullmatch(pattern)
            if m is not None:
                break
        else:
            return None
        gen = self.generation
        memo = self._name_index.get(key)
        if memo is None or memo[0] != gen:
            inv: dict = {}
            ws = self.ws_files
            for name in sorted(ws):
                for d in self.per_text(ws[name], key, names_of):
                    inv.setdefault(d, []).append(name)
            memo = self._name_index[key] = (gen, inv)
        return list(memo[1].get(m.group(1).decode("ascii"), ()))

    def text_matches(self, path: str, pattern) -> bool:
        """Does the current text of ``path`` match ``pattern`` (memoised per text)? ``pattern``: a regular
        expression (bytes), or a module-level function of the text (str or None) that says whether it matches.
        A pattern every match of which contains one of a few literals made of word characters only is, once the
        text memo is full, first tested against the file's words (:meth:`file_words`): a text none of whose words
        contains one is not read again."""
        if callable(pattern):
            return bool(self.per_text(path, ("matching", pattern), pattern))
        if _compiled(pattern)[2]:
            return bool(self.per_text(path, ("matching", pattern), functools.partial(self._matches_lazily, path, pattern),
                                      lazy=True))
        return bool(self.per_text(path, ("matching", pattern), functools.partial(_text_matches, pattern)))

    def _matches_lazily(self, path: str, pattern: bytes, real: str, token) -> bool:
        """:meth:`text_matches` of a pattern with word-only literals: a text at hand (an open buffer, or kept by
        :meth:`source_text`, or one the memo has room for) is searched as it is; once the memo is full, a text to
        read from the file is first ruled out by the file's words, computed at that read and kept (computed for
        every file, they took the server's first hover on upstream vLLM from 0.8 to 2 s)."""
        if type(token) is str:
            return _text_matches(pattern, token)
        kept = self._text_memo.get(real)
        if kept is not None and kept[0] == token:
            return _text_matches(pattern, kept[1] if type(kept[1]) is str else self._decoded(real, kept[1]))
        if token is None or self._text_memo_chars + token[1] <= self.TEXT_MEMO_CHARS:
            return _text_matches(pattern, self._text_at(real, path, token))  # (kept from now on)
        words = self.file_words(path)
        if not any(lit in words for lit in _compiled(pattern)[1]):
            return False
        return _text_matches(pattern, self._text_at(real, path, token))

    def file_words(self, path: str) -> str:
        """The words of the current text of ``path`` (maximal runs of word characters, ``\\w+``), each once,
        sorted, as one string with a line break before and after each: a literal made of word characters occurs
        in the text exactly when it occurs in this string, and an identifier is a whole word of the text exactly
        when ``"\\nNAME\\n"`` does (:meth:`has_word`). Kept per text (``per_text``; upstream vLLM: 312 words a
        file, ~6 MB for its 2,234 files against 46 MB of texts), so the whole-workspace scans that test a new
        name or pattern on every file read only the texts that can match."""
        return self.per_text(path, ("words",), _words_of)

    def has_word(self, path: str, word: str) -> bool:
        """Is ``word`` (an identifier) spelled as a whole word in the current text of ``path``
        (``(?<!\\w)WORD(?!\\w)``)?"""
        return f"\n{word}\n" in self.file_words(path)

    # -- a forked summary worker (cold whole-workspace commands) -----------------------
    def after_fork_in_child(self) -> None:
        """In a process forked from this one (a second checker): the summary worker and helper are the
        parent's children, not this process's, so this copy neither steers nor waits for them."""
        self._prefetch = None
        self._helper = None

    def prefetch_summaries(self) -> bool:
        """Fork a worker that builds the workspace summaries into the cache folder from the *end*
        of the module list while this process walks it from the front (:meth:`workspace_modules`
        publishes its position in shared memory; the worker stops where the two meet). The
        summaries are content-addressed and deterministic, so what this process computes is the
        same with or without the worker; only who parses a file changes. Only where forking is
        safe (``allow_fork``: a single-threaded CLI process), with a cache folder, and for a
        workspace of at least ``PREFETCH_MIN_MODULES`` modules. True when a worker started."""
        if (self._prefetch is not None or not self.allow_fork or not self.cache.enabled
                or not hasattr(os, "fork") or len(self.ws_files) < self.PREFETCH_MIN_MODULES):
            return False
        import mmap

        names = sorted(self.ws_files)
        shared = mmap.mmap(-1, _POS.size)
        _POS.pack_into(shared, 0, -1)
        try:
            pid = os.fork()
        except OSError:
            return False
        if pid == 0:  # the worker: summaries into the cache, nothing kept in memory
            code = 0
            try:
                self._prefetch_worker(names, shared)
            except BaseException:  # noqa: BLE001 - the parent parses what is missing itself
                code = 1
            os._exit(code)
        self._prefetch = (pid, shared)
        return True

    def _prefetch_worker(self, names: list[str], shared) -> None:
        """Summaries from the end of the list, until the parent's position: the parent walks
        from the front (and parses what its chains lead to on the way), so the two rarely parse
        the same file. A file whose summary is already in the cache is skipped unparsed.
        (Measured: a worker walking from the front, just ahead of the parent, collided with the
        parent's chains into the same front modules: 1,000 of 2,234 files were parsed twice.)"""
        for i in range(len(names) - 1, -1, -1):
            if i <= _POS.unpack_from(shared, 0)[0]:
                break
            name = names[i]
            if name in self._modules:
                continue
            _summarize_into(self.cache, self.ws_files[name])
        self.cache.flush()

    def start_summary_helper(self) -> bool:
        """The language server's variant of :meth:`prefetch_summaries` (a threaded process must
        not fork): a helper *process* (``python -m attnlens.index``, at lower CPU priority) builds
        the workspace summaries into the cache folder from the end of the module list, while the
        server's own indexing (and the whole-workspace scans of its first requests) walk it from
        the front and find the helper's files in the cache. Stopped by :meth:`stop_prefetch`
        (the server's indexing does so when it has every module). True when it started."""
        if (self._prefetch is not None or self._helper is not None or not self.cache.enabled
                or len(self.ws_files) < self.PREFETCH_MIN_MODULES):
            return False
        import subprocess
        import sys

        names = sorted(self.ws_files)
        todo = [self.ws_files[n] for n in reversed(names) if n not in self._modules]
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        try:
            proc = subprocess.Popen([sys.executable, "-m", "attnlens.index", str(self.cache.folder)],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=env, close_fds=True)
            assert proc.stdin is not None
        except (OSError, ValueError):
            return False
        data = ("\n".join(todo) + "\n\n").encode("utf-8", "surrogateescape")
        stdin = proc.stdin

        def feed() -> None:
            # from a thread: the list (110 KB for upstream vLLM) is more than a pipe holds, and the write
            # waited for the helper's interpreter to start and read it (60 ms of the server's first request)
            try:
                stdin.write(data)
                stdin.flush()  # the pipe stays open: closing it tells the helper to stop
            except (OSError, ValueError):
                pass

        threading.Thread(target=feed, name="attnlens-helper-feed", daemon=True).start()
        self._helper = proc
        return True

    def stop_prefetch(self) -> None:
        """Stop the summary worker or helper (it ends after the file it is parsing) and reap it."""
        helper, self._helper = self._helper, None
        if helper is not None:
            try:
                helper.stdin.close()
            except (OSError, ValueError):
                pass
            try:
                helper.wait(timeout=5)
            except Exception:  # noqa: BLE001 - a stuck helper must not keep the caller waiting
                helper.kill()
                helper.wait()
        if self._prefetch is None:
            return
        pid, shared = self._prefetch
        self._prefetch = None
        _POS.pack_into(shared, 0, 1 << 62)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    # the characters of the file texts source_text keeps (the real checkout's are 6 MB with vLLM's read; upstream
    # vLLM's 33 MB are all kept: a server with a bound of 8 M grew by 150 MB instead, see docs/performance.md)
    TEXT_MEMO_CHARS = int(os.environ.get("ATTNLENS_TEXT_MEMO_CHARS") or 48_000_000)

    def source_text(self, path: str) -> str | None:
        """The text of ``path``: its open buffer, else the file (None for a binary, huge or special file).
        A file's text is kept while its stamp (mtime, size) stays, so asking again costs a ``stat`` and
        returns the *same* object; the memo is bounded by characters (the texts read first go first)."""
        real = self.realpath(path)
        return self._text_at(real, path, self._text_stamp(real, path))

    def _text_stamp(self, real: str, path: str):
        """What tells the current text of ``path`` without reading it: the open buffer itself, else the file's
        (mtime, size); None for a missing or special file (never open a FIFO or a device: reading it could
        block forever)."""
        text = self._overlays.get(real)
        if text is not None:
            return text
        try:
            st = os.stat(path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if stat.S_ISREG(st.st_mode) else None

    def _text_at(self, real: str, path: str, token) -> str | None:
        """:meth:`source_text` of a file whose :meth:`_text_stamp` is ``token``."""
        if token is None or type(token) is str:
            return token
        hit = self._text_memo.get(real)
        if hit is not None and hit[0] == token:
            return hit[1] if type(hit[1]) is str else self._decoded(real, hit[1])
        if token[1] > MAX_FILE_BYTES:
            return None
        try:
            data = Path(path).read_bytes()
        except OSError:
            return None
        if len(data) > MAX_FILE_BYTES:
            return None
        text = decode_source(data)
        if text is not None:
            memo = self._text_memo
            if hit is not None:
                del memo[real]
                self._text_memo_chars -= len(hit[1])
            # a text with a character past ASCII is kept as UTF-8: Python stores all of it at 2 or 4 bytes a
            # character (upstream vLLM: 417 of 2,234 files, 24 of 43 MB as texts, ~9 MB as UTF-8)
            kept = text if text.isascii() else text.encode("utf-8")
            while memo and self._text_memo_chars + len(kept) > self.TEXT_MEMO_CHARS:
                self._text_memo_chars -= len(memo.pop(next(iter(memo)))[1])
            if len(kept) <= self.TEXT_MEMO_CHARS:
                memo[real] = (token, kept)
                self._text_memo_chars += len(kept)
                if kept is not text:
                    self._remember_decoded(real, kept, text)
        return text

    def _decoded(self, real: str, data: bytes) -> str:
        """The text of a file kept as UTF-8 (``_text_at``): the same object while it is among the last 16 asked
        (the line tables of the editor features are memoised per text object), else decoded again (~0.1 ms a
        100 KB file)."""
        got = self._texts_decoded.get(real)
        if got is not None and got[0] is data:
            return got[1]
        text = data.decode("utf-8")
        self._remember_decoded(real, data, text)
        return text

    def _remember_decoded(self, real: str, data: bytes, text: str) -> None:
        recent = self._texts_decoded
        recent[real] = (data, text)
        recent.move_to_end(real)
        try:
            while len(recent) > 16:
                recent.popitem(last=False)
        except KeyError:  # (another thread emptied it meanwhile: it is only a cache)
            pass

    def per_text(self, path: str, key, fn, lazy: bool = False):
        """``fn(text)`` for the current text of ``path`` (:meth:`source_text`, None when unreadable),
        memoised per (``key``, file) while that text stays: the same buffer object, or the file's stamp (mtime,
        size), so an unchanged file or buffer is not scanned again after edits elsewhere, and the memo keeps no
        file's text (it kept every text it was asked about: 43 MB of a server on upstream vLLM). For cheap
        whole-file facts of workspace files (does it match a pattern, which keywords does it pass) that
        per-generation scans used to recompute for every file after each keystroke. With ``lazy``, ``fn`` is
        given the file's real path and stamp instead (``_text_at`` reads the text), so a value found without the
        text reads nothing."""
        real = self.realpath(path)
        token = self._text_stamp(real, path)
        keys = self._per_text_keys  # (one key object for every file: upstream vLLM's ~100,000 (key, file) values
        # held 10 MB of equal key tuples, one made per call)
        if len(keys) > 100_000:
            keys.clear()
        key = keys.setdefault(key, key)
        hit = self._per_text.get(real)
        if hit is not None and token is not None and (hit[0] is token or (type(token) is tuple and hit[0] == token)):
            vals = hit[1]
            if key in vals:
                return vals[key]
        else:
            vals = None
        val = fn(real, token) if lazy else fn(self._text_at(real, path, token))
        if token is not None:
            if vals is None:
                if len(self._per_text) > self.PER_TEXT_MAX_FILES:
                    self._per_text.clear()
                vals = {}
                self._per_text[real] = (token, vals)
            elif len(vals) >= self.PER_TEXT_MAX_KEYS:
                vals.clear()
            vals[key] = val
        return val

    # files whose per_text values are kept (each file's values for every key, while its text stays). Keyed per
    # (key, file) and bounded at 50,000 entries, the memo emptied itself in the middle of the server's checks on
    # upstream vLLM, whose op scans alone ask ~45 `contains` keys of each of its 2,234 files: the rules' pattern
    # tests then scanned the texts again (benchmark with a 4 M-character text memo: 38,000 -> 17,600 re-reads)
    PER_TEXT_MAX_FILES = 20_000
    PER_TEXT_MAX_KEYS = 1_000  # keys of one file (upstream vLLM: ~60)

    # -- edits -------------------------------------------------------------
    def set_overlay(self, path: str, text: str | None) -> None:
        """Use ``text`` for ``path`` instead of the disk (None drops the overlay). A buffer whose
        file is not on disk becomes a module of its own (see :meth:`_add_virtual`)."""
        real = self.realpath(path)
        with self._lock:
            if text is None:
                self._overlays.pop(real, None)
                self._incremental.pop(real, None)
                self._drop_virtual(real)
            else:
                self._overlays[real] = text
                if real not in self._virtual and not os.path.exists(real):
                    self._add_virtual(real)
            self.invalidate(path)

    def _add_virtual(self, real: str) -> None:
        """Make the unsaved buffer ``real`` a module: the name its path gives under the search path
        (``pkg.new_mod`` for a new file of a workspace package, which also joins the workspace
        modules) when that name is free, else a name of its own (an untitled buffer, a file outside
        the workspace)."""
        name = None
        for base in self.search_path:
            b = self.realpath(base)
            if real.startswith(b + os.sep):
                parts = list(Path(real[len(b) + 1:]).with_suffix("").parts)
                if parts and parts[-1] == "__init__":
                    parts.pop()
                if parts and all(p.isidentifier() for p in parts):
                    cand = ".".join(parts)
                    if self.locate(cand) is None:
                        name = cand
                break
        if name is None:
            stem = re.sub(r"\W", "_", Path(real).stem) or "buffer"
            name = f"_buffer_{stem}_{hashlib.sha1(real.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
        self._virtual[real] = name
        self._virtual_paths[name] = real
        self._path_to_name[real] = name
        self._loc_cache.pop(name, None)
        self._scan_workspace()

    def _drop_virtual(self, real: str) -> None:
        name = self._virtual.pop(real, None)
        if name is None:
            return
        self._virtual_paths.pop(name, None)
        self._path_to_name.pop(real, None)
        self._modules.pop(name, None)
        self._loc_cache.clear()
        self._dir_cache.clear()
        self._scan_workspace()  # saved meanwhile: now found on disk; else gone

    def overlay_text(self, path: str) -> str | None:
        """The open buffer's text for ``path`` (None when the disk's text is used)."""
        return self._overlays.get(self.realpath(path))

    def known_sha(self, path: str) -> str | None:
        """The content sha remembered for ``path`` at its current stamp (mtime, size), without reading it;
        None when none is remembered or the file changed since."""
        memo = self._sha_memo.get(path)
        if memo is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return None
        return memo[1] if memo[0] == (st.st_mtime_ns, st.st_size) else None

    def has_known_sha(self, path: str) -> bool:
        """Was ``path`` ever summarised with this cache (its sha remembered, whatever its stamp)?"""
        return path in self._sha_memo

    def module_name_of(self, path: str) -> str | None:
        """The module name a path is known under (workspace or installed), without locating anything."""
        return self._path_to_name.get(self.realpath(path)) or self._path_to_name.get(path)

    def top_level_names(self, modname: str) -> frozenset | None:
        """Names that module ``modname`` binds at column 0 (``def``, ``class``, ``NAME =`` / ``NAME:``,
        ``import``, ``from ... import``), read without summarising it when it is not summarised yet: enough
        to say that ``from modname import NAME`` loads. A name bound only inside a top-level ``if`` / ``try``
        or through ``*`` / ``__getattr__`` is missing here, so only a hit is an answer (callers ask
        :meth:`module` when it misses). None when it is not a readable Python module. The read is recorded
        like a :meth:`module` read (:meth:`note_read`)."""
        mod = self._modules.get(modname)
        if mod is not None:
            self.module(modname)  # recorded by the observers like any read
            return frozenset(mod.summary.bindings)
        loc = self.locate(modname)
        if loc is None or loc.kind != "py":
            return None
        names = self.per_text(loc.path, "top_level_names", _top_level_names)
        if names is None:
            return None
        sha = self.known_sha(loc.path)
        if sha is None:
            try:
                st = os.stat(loc.path)
                sha = hashlib.sha256(Path(loc.path).read_bytes()).hexdigest()
            except OSError:
                return None
            self._sha_memo[loc.path] = ((st.st_mtime_ns, st.st_size), sha)
            self._sha_memo_dirty = True
        self.note_read(modname, sha)
        return names

    def note_read(self, name: str, sha: str | None) -> None:
        """A module's content was read without :meth:`module` (:meth:`top_level_names`): dependency
        observers (:meth:`observe`, the rules engine's recorder) shadow this to record it."""

    def peek(self, name: str):
        """:meth:`module` for bookkeeping, not an analysis read: dependency recorders that observe
        :meth:`module` (``observe``, the rules engine's) do not see it."""
        return Index.module(self, name)

    @contextlib.contextmanager
    def observe(self):
        """Record which modules a computation reads: ``obs.names`` (by :meth:`module`) and ``obs.scanned``
        (whether it iterated :meth:`workspace_modules`), for :meth:`replay`. Works under other observers
        (each call goes through to the one below)."""
        obs = _Observed(set(), False, layout=self.layout_version)
        below_module, below_scan, below_note = self.module, self.workspace_modules, self.note_read
        below_matching = self.workspace_modules_matching
        had = {k: k in self.__dict__ for k in ("module", "workspace_modules", "note_read", "workspace_modules_matching")}
        depth = [0]

        def module(name):
            if not depth[0]:
                obs.names.add(name)
            return below_module(name)

        def note_read(name, sha):
            if not depth[0]:
                obs.names.add(name)
            below_note(name, sha)

        def unrecorded(it):
            """The items of a scan, its own reads not recorded (the caller's reads between items are)."""
            while True:
                depth[0] += 1
                try:
                    m = next(it)
                except StopIteration:
                    return
                finally:
                    depth[0] -= 1
                yield m

        def workspace_modules():
            obs.scanned = True
            return unrecorded(below_scan())

        def workspace_modules_matching(pattern):
            if pattern not in obs.patterns:
                obs.patterns.append(pattern)
                obs.matched[pattern] = frozenset(self.matching_names(pattern))
            return unrecorded(below_matching(pattern))

        self.module, self.workspace_modules, self.note_read = module, workspace_modules, note_read
        self.workspace_modules_matching = workspace_modules_matching
        try:
            yield obs
        finally:
            for k, below in (("module", below_module), ("workspace_modules", below_scan), ("note_read", below_note),
                             ("workspace_modules_matching", below_matching)):
                if had[k]:
                    setattr(self, k, below)
                else:
                    self.__dict__.pop(k, None)

    def still_valid(self, obs: "_Observed", generation: int) -> bool:
        """Is everything a computation observed at ``generation`` read (:meth:`observe`) unchanged now? False when
        installed code or a non-Python file changed since, when a workspace module appeared or went, when it
        scanned the whole workspace and a module changed, when a changed module is one it read by name or one a
        text scan of it yielded then or would yield now. (A module's summary stands for its text: an edit of a
        module it read counts, whatever the edit.)"""
        if self.outside_generation > generation or obs.layout != self.layout_version:
            return False
        changed = self.changed_since(generation)
        if changed is None:
            return False
        if not changed:
            return True
        if obs.scanned:
            return False
        for real in changed:
            name = self._path_to_name.get(real)
            path = self.ws_files.get(name) if name is not None else None
            if path is None or name in obs.names:
                return False
            for pattern in obs.patterns:
                if name in obs.matched.get(pattern, ()) or self.text_matches(path, pattern):
                    return False
        return True

    def replay(self, obs: "_Observed") -> None:
        """Read again what an observed computation read, so that observers now recording see the same
        dependencies when its result is reused instead of recomputed."""
        if obs.scanned:
            for _m in self.workspace_modules():
                pass
        for pattern in obs.patterns:
            for _m in self.workspace_modules_matching(pattern):
                pass
        for name in sorted(obs.names):
            self.module(name)

    def carried(self, key, fn, reads=()):
        """``fn()`` memoised across index generations while everything it read stands (:meth:`still_valid`):
        what it reads through :meth:`module` and the workspace scans, plus the module names ``reads`` (modules
        it is handed rather than looks up). A reuse replays those reads (:meth:`replay`), so recorders now
        observing see the same dependencies. For pieces of whole-workspace results (a selector's candidates,
        one backend's parts) that an edit elsewhere leaves as they were: an edit then recomputes only the pieces
        that read the edited module. ``fn``'s value is shared: callers never mutate it."""
        hit = self.carried_valid(key)
        if hit is not None:
            return hit[0]
        gen = self.generation
        with self.observe() as obs:
            for name in reads:
                self.module(name)
            value = fn()
        if len(self._carried) > 20_000:
            self._carried.clear()
        self._carried[key] = (gen, obs, value)
        return value

    def carried_valid(self, key) -> tuple | None:
        """``(value,)`` of :meth:`carried` under ``key`` when it stands now (its reads replayed), else None:
        nothing is computed."""
        gen = self.generation
        hit = self._carried.get(key)
        if hit is not None and (hit[0] == gen or self.still_valid(hit[1], hit[0])):
            if hit[0] != gen:
                self._carried[key] = (gen, hit[1], hit[2])
            self.replay(hit[1])
            return (hit[2],)
        return None

    def observed(self) -> bool:
        """Is a dependency recorder (:meth:`observe`, the rules engine's) shadowing the reads now?"""
        d = self.__dict__
        return "module" in d or "workspace_modules_matching" in d or "note_read" in d

    def installed_files_containing(self, folder: str, skip_dirs: tuple, needles: tuple) -> list:
        """(path, bytes) of the ``.py`` files under ``folder`` (installed code, as :func:`iter_py_bytes`
        walks it) whose bytes contain one of ``needles``. The matching paths are kept in the cache folder
        with the stamp of every file walked: a later process (the cold check's second checker, the next
        run) stats the files and reads only the matching ones (vLLM 0.26.0: 180 of 2,209 files; 0.13 s to
        read and test them all, 0.02 s to stat them)."""
        name, stamps, paths = self._folder_derived("textscan", folder, skip_dirs, (needles,))
        if paths is not None:
            out = []
            for p in paths:
                try:
                    with open(p, "rb") as f:
                        out.append((p, f.read()))
                except OSError:
                    break
            else:
                return out
        out = [(p, data) for p, data in iter_py_bytes(folder, skip_dirs) if any(n in data for n in needles)]
        self.cache.store_pickle("derived", name, (stamps, tuple(p for p, _ in out)))
        return out

    def _folder_derived(self, kind: str, folder: str, skip_dirs: tuple, extra: tuple = ()) -> tuple:
        """(cache entry name, the stamps of the ``.py`` files under ``folder``, what the entry holds when it was made
        from files with exactly those stamps, else None): a result derived from installed files, kept in the cache
        folder (the caller stores ``(stamps, value)`` under the name when it had to compute it)."""
        name = f"{kind}-" + hashlib.sha1(repr((folder, skip_dirs) + extra).encode()).hexdigest()[:24]
        stamps = tuple(_iter_py_stamps(folder, skip_dirs))
        hit = self.cache.load_pickle("derived", name)
        return name, stamps, (hit[1] if hit is not None and hit[0] == stamps else None)

    def installed_def_files(self, folder: str, skip_dirs: tuple, name: str) -> tuple:
        """The ``.py`` files under ``folder`` (installed code) whose text has ``def NAME(``: from one table of every
        file's def names, made in one read of the folder (vLLM 0.26.0: 2,209 files, 12,006 names, 0.2 s) and kept in
        the cache folder with the stamp of every file (a later process only stats them), and in memory until
        installed code changes. A search per name read the whole folder each time (0.15 s a name)."""
        table = self.outside_memo(("def-table", folder, skip_dirs), lambda: self._def_table(folder, skip_dirs))
        paths, names = table
        return tuple(paths[i] for i in names.get(name, ()))

    def _def_table(self, folder: str, skip_dirs: tuple) -> tuple:
        name, stamps, table = self._folder_derived("deftable", folder, skip_dirs)
        if table is not None:
            return table
        paths: list = []
        names: dict = {}
        for p, data in iter_py_bytes(folder, skip_dirs):
            i = len(paths)
            paths.append(p)
            for n in set(_DEF_NAME.findall(data)):
                names.setdefault(n.decode("ascii", "replace"), []).append(i)
        table = (tuple(paths), {n: tuple(ix) for n, ix in names.items()})
        self.cache.store_pickle("derived", name, (stamps, table))
        return table

    def outside_memo(self, key, fn):
        """``fn()`` memoised until something outside the workspace's Python modules changes
        (:attr:`outside_generation`): for answers that read only installed code, or that name the
        workspace content they read in ``key`` (module names and summary shas)."""
        gen, memo = self._outside_memo
        if gen != self.outside_generation:
            memo = {}
            self._outside_memo = (self.outside_generation, memo)
        if key not in memo:
            if len(memo) > 20_000:
                memo.clear()
            memo[key] = fn()
        return memo[key]

    def changed_since(self, generation: int) -> frozenset | None:
        """Real paths changed after ``generation``; None when unknown (a full refresh happened). Memoised per
        ``generation`` until the next change: every carried result and memoised chain asks it on reuse, and
        each ask walked the whole change log (a refresh after an edit spent 50-70 ms there, not yielding)."""
        if generation < self._changes_floor:
            return None
        memo = self._changed_memo
        if memo[0] != self.generation:
            memo = self._changed_memo = (self.generation, {})
        hit = memo[1].get(generation)
        if hit is None:
            changes = self._changes
            i = bisect.bisect_right(changes, generation, key=operator.itemgetter(0))  # the log is in order
            hit = memo[1][generation] = frozenset(p for _g, p in changes[i:])
        return hit

    def invalidate(self, path: str) -> None:
        real = self.realpath(path)
        with self._lock:
            self.generation += 1
            self._changes.append((self.generation, real))
            if len(self._changes) > 4096:
                self._changes_floor = self._changes[2048][0]
                self._changes = self._changes[2048:]
            name = self._path_to_name.get(real)
            if name is None:
                # a new workspace file?
                self._loc_cache.clear()
                self._dir_cache.clear()
                self._scan_workspace()
                name = self._path_to_name.get(real)
            if name is not None:
                self._modules.pop(name, None)
            if name is None or self.ws_files.get(name) is None or not real.endswith(".py"):
                self.outside_generation = self.generation
            if not os.path.exists(real) and real not in self._virtual:
                self._loc_cache.clear()
                self._dir_cache.clear()
                self._scan_workspace()

    def bump(self) -> None:
        """Mark derived results stale (e.g. after a C++ file changed) without rescanning."""
        with self._lock:
            self.generation += 1
            self._changes_floor = self.generation
            self.outside_generation = self.generation

    def refresh(self) -> None:
        with self._lock:
            self._realpaths.clear()
            self.generation += 1
            self._changes_floor = self.generation
            self.outside_generation = self.generation
            self._modules.clear()
            with self._kept_lock:
                self._kept.clear()
            self._loc_cache.clear()
            self._dir_cache.clear()
            self._scan_workspace()


_DEF_NAME = re.compile(rb"def (\w+)\(")  # (Index.installed_def_files: the form `def NAME(` only)


def iter_py_bytes(top: str, skip_dirs: tuple = ()) -> Iterator[tuple[str, bytes]]:
    """(path, content) of every regular ``.py`` file under ``top`` (byte pre-filters over packages)."""
    for p, _st in _iter_py_stats(top, skip_dirs):
        try:
            with open(p, "rb") as f:
                yield p, f.read()
        except OSError:
            continue


def _iter_py_stamps(top: str, skip_dirs: tuple = ()) -> Iterator[tuple[str, int, int]]:
    """(path, mtime_ns, size) of the files :func:`iter_py_bytes` reads, in its order, without reading them."""
    for p, st in _iter_py_stats(top, skip_dirs):
        yield p, st.st_mtime_ns, st.st_size


def _iter_py_stats(top: str, skip_dirs: tuple) -> Iterator[tuple[str, os.stat_result]]:
    """(path, stat) of every regular ``.py`` file under ``top``, skipping hidden, dunder and ``skip_dirs`` folders."""
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "__")) and d not in skip_dirs)
        for fn in filenames:
            if not fn.endswith(".py"):
                continue
            p = os.path.join(dirpath, fn)
            try:
                st = os.stat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield p, st


def _listdir(p: Path) -> list[str]:
    try:
        return sorted(os.listdir(p))
    except OSError:
        return []


def _walk_py(top: Path) -> Iterator[str]:
    seen: set[tuple[int, int]] = set()
    stack = [str(top)]
    while stack:
        d = stack.pop()
        try:
            st = os.stat(d)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            continue  # symlink loop
        seen.add(key)
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.name in SKIP_DIRS or e.name.startswith("."):
                continue
            try:
                if e.is_dir():
                    if os.path.exists(os.path.join(e.path, "pyvenv.cfg")):
                        continue
                    stack.append(e.path)
                elif e.name.endswith(".py") and e.is_file():  # is_file(): regular files only (no FIFOs)
                    yield e.path
            except OSError:
                continue



def _summary_helper(folder: str) -> int:
    """``python -m attnlens.index CACHE_FOLDER``: paths on stdin (one a line, an empty line ends
    the list); build each file's summary into the cache unless it is there, until the list ends
    or stdin is closed (the server stops the helper that way). Runs at lower CPU priority."""
    import select
    import sys

    try:
        os.nice(10)
    except OSError:
        pass
    cache = Cache(Path(folder))
    paths = []
    for line in sys.stdin.buffer:
        line = line.rstrip(b"\n")
        if not line:
            break
        paths.append(os.fsdecode(line))
    for path in paths:
        readable, _, _ = select.select([sys.stdin], [], [], 0)
        if readable:  # EOF: the server has what it needs
            break
        _summarize_into(cache, path)
    cache.flush()
    return 0


def _summarize_into(cache, path: str) -> None:
    """Store the summary of one file in the cache (content-addressed) unless it is there already."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return
    if len(data) > MAX_FILE_BYTES:
        return
    sha = hashlib.sha256(data).hexdigest()
    if cache.has_pickle("py", sha):
        return
    text = decode_source(data)
    if text is not None:
        cache.store_pickle("py", sha, summarize(text, path, sha))


if __name__ == "__main__":  # pragma: no cover - the server's summary helper
    import sys

    sys.exit(_summary_helper(sys.argv[1]))


_TOP_DEF = re.compile(r"^(?:async[ \t]+)?(?:def|class)[ \t]+([A-Za-z_]\w*)|^([A-Za-z_]\w*)[ \t]*(?::(?!=)|=(?!=))", re.M)
_TOP_FROM = re.compile(r"^from[ \t]+[\w.]+[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
_TOP_IMPORT = re.compile(r"^import[ \t]+([^\n]*)", re.M)
_ALIAS = re.compile(r"([\w.]+)(?:[ \t]+as[ \t]+(\w+))?")


def _top_level_names(text: str | None) -> frozenset | None:
    """:meth:`Index.top_level_names` of a text (a line scan, no parse: a name it misses costs the caller
    a summary, a name inside a string at column 0 is the only thing it can get wrong)."""
    if text is None:
        return None
    names = set()
    for m in _TOP_DEF.finditer(text):
        names.add(m.group(1) or m.group(2))
    for m in _TOP_FROM.finditer(text):
        for a in _ALIAS.finditer(m.group(1).split("#", 1)[0] if not m.group(1).startswith("(") else
                                 re.sub(r"#[^\n]*", "", m.group(1))):
            names.add(a.group(2) or a.group(1))
    for m in _TOP_IMPORT.finditer(text):
        for a in _ALIAS.finditer(m.group(1).split("#", 1)[0]):
            names.add(a.group(2) or a.group(1).partition(".")[0])
    names.discard("import")
    return frozenset(names)


@dataclass
class _Observed:
    """What :meth:`Index.observe` saw: modules read by name, and whether the workspace was scanned."""

    names: set
    scanned: bool
    patterns: list = field(default_factory=list)  # the patterns of its workspace_modules_matching scans
    matched: dict = field(default_factory=dict)  # pattern -> the module names its scan yielded (then)
    layout: int = 0  # Index.layout_version then (a module that appears can change what a name resolves to)


@functools.lru_cache(maxsize=256)
def _compiled(pattern: bytes):
    """(compiled pattern, literals one of which every match contains, or None). Searched in the text itself
    (encoding every text to UTF-8 for each pattern was 0.9 s on upstream vLLM's 33 MB), ASCII classes as for
    bytes (a non-ASCII character is no word character either way). The literals let ``in`` (a C substring
    search) rule out most texts first: ``re`` has no fast scan for a pattern that starts with ``\\b`` or an
    alternation (0.3-1.0 s per pattern over upstream's 33 MB, against 0.02 s)."""
    source = pattern.decode("utf-8")
    literals = _required_literals(source)
    return re.compile(source, re.ASCII), literals, bool(literals) and all(_WORD_ONLY.fullmatch(x) for x in literals)


_WORD_ONLY = re.compile(r"\w+")


def _words_of(text) -> str:
    """:meth:`Index.file_words` of a text (None: no words)."""
    return "\n" + "\n".join(sorted(set(_WORD_ONLY.findall(text)))) + "\n" if text else "\n"


def _required_literals(source: str) -> tuple | None:
    """The longest literal run of each top-level alternative of ``source`` (a match contains one of them), or
    None when some alternative has none of 3 characters or more (then every text is searched)."""
    try:
        from re import _parser  # the stdlib's own parser of patterns (``sre_parse``)

        parsed = _parser.parse(source)
    except Exception:  # noqa: BLE001 - an unusual pattern is simply searched everywhere
        return None
    if parsed.state.flags & re.IGNORECASE:
        return None
    items = list(parsed)
    branches = [items]
    if len(items) == 1 and items[0][0] == _parser.BRANCH:
        branches = [list(b) for b in items[0][1][1]]
    out = []
    for br in branches:
        best, run = "", []
        for op, av in br + [(None, None)]:
            if op == _parser.LITERAL:
                run.append(chr(av))
                continue
            if op == _parser.AT:  # \b, ^, $: zero width, the run goes on
                continue
            if len(run) > len(best):
                best = "".join(run)
            run = []
        if len(best) < 3:
            return None
        out.append(best)
    return tuple(out)


_DEF_PATTERN = re.compile(rb"def\\s\+([A-Za-z_][A-Za-z0-9_]*)\\b")  # the pattern ``rb"def\s+" + NAME + rb"\b"``
_DEF_NAMES = re.compile(r"(?=def\s+(\w+))", re.ASCII)  # (a lookahead: `def def f` names both)


def _def_names(text) -> tuple:
    r"""The ASCII words after ``def`` and white space anywhere in ``text`` (:func:`pyindex.interned_names`):
    ``rb"def\s+NAME\b"`` matches the text exactly when NAME is one of them (the same ASCII classes as
    :func:`_compiled`)."""
    if not text or "def" not in text:
        return ()
    return interned_names(m.group(1) for m in _DEF_NAMES.finditer(text))


# the pattern ``rb"self\." + NAME + rb"\s*(:[^=]*)?="`` (profile.py: subclasses that set an attribute)
_SELF_SET_PATTERN = re.compile(re.escape(rb"self\.") + rb"([A-Za-z_][A-Za-z0-9_]*)" + re.escape(rb"\s*(:[^=]*)?="))
# (a lookahead: what the pattern reads after the name does not hide a later ``self.y`` from the scan)
_SELF_SETS = re.compile(r"self\.(\w+)(?=\s*(?::[^=]*)?=)", re.ASCII)


def _self_set_names(text) -> tuple:
    r"""The ASCII words ``NAME`` for which ``rb"self\." + NAME + rb"\s*(:[^=]*)?="`` matches ``text`` (with the
    same ASCII classes as :func:`_compiled`): ``self.NAME =``, ``self.NAME: T = ...``, and what else that pattern
    lets through (``self.NAME == x``; a colon followed, anywhere later, by an ``=``)."""
    if not text or "self." not in text:
        return ()
    return interned_names(m.group(1) for m in _SELF_SETS.finditer(text))


# the pattern ``rb"class\s+\w+\s*\([^)]*\b" + NAME + rb"\b"`` (profile.py: the classes that name a class among their
# bases)
_CLASS_BASE_PATTERN = re.compile(re.escape(rb"class\s+\w+\s*\([^)]*\b") + rb"([A-Za-z_][A-Za-z0-9_]*)" + re.escape(rb"\b"))
# (a lookahead: a class statement whose parenthesis is not closed does not hide the next one)
_CLASS_BASES = re.compile(r"(?=class\s+\w+\s*\(([^)]*))", re.ASCII)
_WORDS = re.compile(r"\w+", re.ASCII)


def _class_base_names(text) -> tuple:
    r"""The ASCII identifiers ``NAME`` for which ``rb"class\s+\w+\s*\([^)]*\b" + NAME + rb"\b"`` matches ``text``:
    the whole words between the parenthesis of a ``class X(`` and the first ``)`` after it."""
    if not text or "class" not in text:
        return ()
    return interned_names(w for m in _CLASS_BASES.finditer(text) for w in _WORDS.findall(m.group(1))
                          if not w[0].isdigit())


# the fixed-form patterns :meth:`Index._name_scan` answers from per-text name sets: (pattern of the pattern, the
# per-text memo key, the names of a text)
_NAME_SCANS = ((_DEF_PATTERN, "def-names", _def_names), (_SELF_SET_PATTERN, "self-set-names", _self_set_names),
               (_CLASS_BASE_PATTERN, "class-base-names", _class_base_names))


def _text_matches(pattern: bytes, text) -> bool:
    if text is None:
        return False
    rx, literals, _words = _compiled(pattern)
    if literals is not None and not any(lit in text for lit in literals):
        return False
    return rx.search(text) is not None
