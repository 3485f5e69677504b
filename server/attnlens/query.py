"""The one door into the analysis core: every question the CLI, the language server, the rules and the
upgrade code ask of one analysed workspace.

A :class:`Query` wraps one :class:`~attnlens.workspace.Workspace` (get it as ``ws.query``: one per
workspace). Its answers are the core's own types: chains, hops and finals of :mod:`attnlens.model`,
backend entries and call-site results of the registry, the index's modules and summaries, the
resolver's values for the resolution questions the rules and the upgrade code ask. Never an LSP type:
lines are 1-based and columns 0-based code points, as everywhere in the core. The language server and
the CLI import this module (and ``model`` / ``render`` for what they show), never ``resolver``,
``registry``, ``index``, ``torchops``, ``profile``, ``patches`` or ``callindex``: the import-linter
contract ``lsp-cli-through-query`` in ``.importlinter`` keeps it so.

Not thread-safe, like the objects behind it: the language server asks from its one analysis thread.

Questions, by group:

* the workspace: :attr:`root`, :attr:`target` (the target interpreter), :attr:`target_error`,
  :attr:`cache`, :attr:`subject`, :attr:`generation`, :meth:`close`, :meth:`state` (the per-workspace state
  of the code above the core);
* documents: :meth:`source_text`, :meth:`overlay_text`, :meth:`set_overlay`, :meth:`files_changed`,
  :meth:`module_for_path`, :meth:`module`, :meth:`is_loaded`, :meth:`workspace_modules`,
  :meth:`workspace_files`, :meth:`installed_sources`, the prefetch and cache switches;
* positions: :meth:`ref_at`, :meth:`def_at`, :meth:`trace_at`, :meth:`trace_ref`, :meth:`trace_symbol`;
* backends and kernel call sites: :meth:`backends`, :meth:`never_selected`, :meth:`kernel_sites`,
  :meth:`kernel_tracer`, :meth:`mark_selection`, :meth:`registry_warm_steps`, the derived-result cache;
* the platform and its ops: :meth:`platform_summary`, :meth:`platform_method_value`, :meth:`platform_defaults`,
  :meth:`kernel_providers`, :meth:`cpp_op_symbols`, :meth:`installed_kernel_packages`, the C++ index steps and
  its worker's handshake (:meth:`set_cpp_pending`), :meth:`library_ns`, :meth:`installed_modules_matching`;
* call hierarchy: :meth:`call_index` (incoming calls), :meth:`kernel_tracer` (outgoing);
* resolution (rules, upgrade): :meth:`resolve_symbol`, :meth:`resolve_dotted`, :meth:`mro`, :meth:`class_attr`,
  :meth:`class_bases`, :meth:`enclosing_class`, :meth:`abs_module`, :meth:`guard_value`, :meth:`backend_part`,
  :meth:`patches`, :meth:`patched`, :meth:`stdlib` ...; :meth:`evaluator` for the rule API's step-by-step
  evaluation only
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Callable, Iterator

from . import model as M

if TYPE_CHECKING:  # the heavier core modules are imported when a question needs them (CLI start-up)
    from .callindex import CallIndex
    from .index import Module
    from .lookup import Evaluator
    from .registry import CallSiteResult
    from .workspace import CallRef, Workspace

log = logging.getLogger(__name__)

# a change of more files than this at once re-scans the whole workspace (a branch switch, a pull)
REFRESH_AFTER_FILES = 32


def is_kernel_chain(chain: M.Chain) -> bool:
    """Does ``attnlens sites`` count the chain's call as a kernel call site (``registry.is_kernel_chain``)?"""
    from .registry import is_kernel_chain as counted

    return counted(chain)


def cpp_suffixes() -> tuple[str, ...]:
    """The file suffixes the C++ index reads: a change of such a file invalidates it."""
    from .cppindex import CPP_SUFFIXES

    return tuple(sorted(CPP_SUFFIXES))


class Query:
    """The questions one analysed workspace answers (see the module docstring). Get it as ``ws.query``."""

    def __init__(self, ws: "Workspace"):
        self.ws = ws  # handed to the rules and upgrade entry points, which take a workspace
        self._calls: "CallIndex | None" = None
        self._defaults = None  # envflags.PlatformDefaults, made on the first platform_defaults()

    # -- the workspace ----------------------------------------------------------------------
    @property
    def root(self):
        return self.ws.root

    @property
    def target(self):
        """The target interpreter (:class:`attnlens.target.TargetInfo`)."""
        return self.ws.target

    @property
    def target_error(self) -> str | None:
        return self.ws.target_error

    @property
    def cache(self):
        return self.ws.cache

    @property
    def subject(self):
        """The review subject (``upgrade.subjects``) the workspace was built for; None for the worktree."""
        return self.ws.subject

    @property
    def generation(self) -> int:
        """The index generation: bumped by every change the analysis sees (an edit, a file on disk)."""
        return self.ws.index.generation

    def allow_fork(self) -> None:
        """Forked prefetch workers are safe (single-threaded CLI processes only)."""
        self.ws.allow_fork = True
        self.ws.index.allow_fork = True

    def close(self) -> None:
        self.ws.close()

    def serve_long(self, summaries: int) -> None:
        """This workspace serves an editor for hours: keep at most ``summaries`` summaries in memory
        (``Index.bound_summaries``); the server also calls :meth:`trim_memos` between two files' work."""
        self.ws.index.bound_summaries(summaries)

    def trim_memos(self) -> bool:
        """Between two pieces of a long-lived process's work (an editor's files): empty the resolver's work
        memos when they have grown past their bound, keeping the answers (``Resolver.trim_memos``)."""
        return self.ws.resolver.trim_memos()

    def flush(self) -> None:
        """Write the index's pending cache entries."""
        self.ws.index.flush()

    def state(self, owner: str) -> dict:
        """The per-workspace state of ``owner`` (a module above the core: the rules engine of the current
        index generation, the memoised drift report, ...), an empty dict on the first ask. It lives exactly
        as long as the workspace, so two workspaces in one process share none of it: the place for what
        would otherwise be a module-level memo keyed by the workspace."""
        return self.ws.attached.setdefault(owner, {})

    # -- documents ----------------------------------------------------------------------------
    def source_text(self, path: str) -> str | None:
        """The text the analysis reads: the open buffer's overlay, else the file."""
        return self.ws.index.source_text(path)

    def overlay_text(self, path: str) -> str | None:
        return self.ws.index.overlay_text(path)

    def set_overlay(self, path: str, text: str | None) -> None:
        """An open buffer's text wins over the disk (None: back to the disk)."""
        self.ws.index.set_overlay(path, text)

    def files_changed(self, paths: list[str]) -> None:
        """Files changed on disk (the editor's watchers): C++ files drop the C++ index; many files at once
        re-scan the workspace; otherwise each Python file is read again."""
        cpp = any(p.endswith(cpp_suffixes()) for p in paths)
        py = [p for p in paths if p.endswith(".py")]
        if cpp:
            self.ws.resolver.ops.invalidate_cpp()
        idx = self.ws.index
        if len(paths) > REFRESH_AFTER_FILES:
            idx.refresh()
            return
        for p in py:
            idx.invalidate(p)
        if cpp and not py:
            idx.invalidate(paths[0])  # bumps the generation: chains through C++ change

    def module_for_path(self, path: str) -> Module | None:
        return self.ws.index.module_for_path(path)

    def module(self, name: str) -> Module | None:
        return self.ws.index.module(name)

    def is_loaded(self, name: str) -> bool:
        """Is module ``name`` summarised already (asking for it costs nothing)?"""
        return self.ws.index.is_loaded(name)

    def workspace_modules(self):
        return self.ws.index.workspace_modules()

    def scan_module(self, name: str) -> Module | None:
        """Module ``name`` for a whole-workspace scan: not kept on a large workspace when it was not loaded
        (:meth:`attnlens.index.Index.scan_module`)."""
        return self.ws.index.scan_module(name)

    def workspace_names_changed_since(self, generation: int) -> set[str] | None:
        return self.ws.index.workspace_names_changed_since(generation)

    def workspace_module_names(self) -> list[str]:
        return sorted(self.ws.index.ws_files)

    def workspace_files(self) -> list[str]:
        """The paths of the workspace's modules."""
        return list(self.ws.index.ws_files.values())

    def summary_stats(self) -> dict:
        """How many modules are loaded, how many summaries are in memory, and how often summaries were dropped
        and read back (:attr:`attnlens.index.Index.SUMMARY_KEEP_MAX`)."""
        return self.ws.index.summary_stats()

    def installed_sources(self, folder: str, skip_dirs=()) -> Iterator[tuple[str, bytes]]:
        """(path, bytes) of the Python files under an installed package's folder (no summary built)."""
        from .index import iter_py_bytes

        return iter_py_bytes(folder, skip_dirs)

    def start_summary_helper(self) -> None:
        """A large cold workspace: a second process parses the modules from the end of the list."""
        self.ws.index.start_summary_helper()

    def stop_prefetch(self) -> None:
        self.ws.index.stop_prefetch()

    def prefetch_summaries(self) -> None:
        self.ws.index.prefetch_summaries()

    # -- positions ----------------------------------------------------------------------------
    def prepare_refs(self, path: str) -> None:
        """Build what :meth:`ref_at` reads for a position outside a call (the module's references): an open file
        whose text is the one on disk has a cached summary without them, and the first such position paid a
        summary of the whole file."""
        mod = self.ws.index.module_for_path(path)
        if mod is not None:
            self.ws.refs_for(mod)

    def ref_at(self, path: str, line: int, col: int) -> "CallRef | None":
        """The call or name under a position (:class:`attnlens.workspace.CallRef`)."""
        return self.ws.ref_at(path, line, col)

    def def_at(self, path: str, line: int, col: int) -> str | None:
        """The dotted name of the function or class whose ``def``/``class`` name is at the position."""
        return self.ws.def_at(path, line, col)

    def trace_at(self, path: str, line: int, col: int, budget_s: float | None = None, cancel=None) -> M.Chain | None:
        """The chain at a position: the call or name there, else the ``def``/``class`` named there."""
        return self.ws.trace_at(path, line, col, budget_s, cancel)

    def trace_ref(self, ref: "CallRef", budget_s: float | None = None, cancel=None) -> M.Chain:
        return self.ws.trace_ref(ref, budget_s, cancel)

    def trace_symbol(self, dotted: str, budget_s: float | None = None, cancel=None) -> M.Chain:
        """The chain of a fully qualified symbol (``pkg.mod.Class.method`` or ``ns::op``)."""
        return self.ws.trace_symbol(dotted, budget_s, cancel)

    # -- backends and kernel call sites ---------------------------------------------------------
    def backends(self, with_call_sites: bool = True, include_custom_ops: bool = False) -> list:
        """The registry's entries (``registry.BackendEntry``)."""
        return self.ws.backends(with_call_sites=with_call_sites, include_custom_ops=include_custom_ops)

    def never_selected(self) -> dict:
        return self.ws.never_selected()

    def never_selected_checked(self) -> bool:
        """Has :meth:`never_selected` been checked since the last edit (an editor request's answer is not provisional)?"""
        return self.ws.never_selected_checked()

    def check_never_selected(self) -> bool:
        """Check the never-selected set now (a status report does, so that the answers after it are not
        provisional); False when it was stopped for a waiting request or failed."""
        from .pyindex import Stopped

        try:
            self.ws.never_selected()
        except (Stopped, Exception):  # noqa: BLE001 - stopped for a request, or a bad input: reported as pending
            return False
        return True

    def never_selected_steps(self) -> Iterator[int]:
        """:meth:`never_selected` brought up to date in steps (the edited modules' summaries one per step)."""
        return self.ws.never_selected_steps()

    def kernel_sites(self, paths: list[str] | None = None) -> "list[CallSiteResult]":
        """Every kernel call site under ``paths`` (default: the workspace), as ``attnlens sites`` lists them."""
        return self.ws.kernel_sites(paths)

    def kernel_site_records(self, paths: list[str] | None, render) -> Iterator:
        """``render(site)`` of each of :meth:`kernel_sites`, in order, as they are made (a CLI process may share
        the modules with a forked helper: ``render`` gives a plain, picklable value)."""
        return self.ws.kernel_site_records(paths, render)

    def sites_split(self, paths: list[str] | None) -> bool:
        """Does :meth:`kernel_site_records` of ``paths`` fork a helper?"""
        return self.ws.sites_split(paths)

    def kernel_tracer(self) -> "Callable[[Module, object], CallSiteResult | None]":
        """``trace(module, call_site)``: the call site's chain when it is a kernel call site, else None; one
        registry's memo for a batch of calls (a file's, a function's). The chain is the raw one:
        :meth:`mark_selection` adds what the platform's backend selection rules out."""
        from .registry import Registry

        return Registry(self.ws.resolver).kernel_call

    def mark_selection(self, mod: Module, line: int, chain: M.Chain, never: dict | None = None) -> M.Chain:
        """The chain of code inside a class vLLM never selects on this platform, marked dead (a new chain);
        ``never``: :meth:`never_selected`, when the caller holds it already."""
        return self.ws.mark_selection(mod, line, chain, never)

    def registry_warm_steps(self, budget_s: float):
        """The backends' call-site chains, a few at a time (yields the count after each ``budget_s``)."""
        from .registry import Registry

        return Registry(self.ws.resolver).warm_steps(budget_s)

    def derived_key(self, *parts: str) -> str:
        return self.ws.derived_key(*parts)

    def load_derived(self, key: str):
        return self.ws.load_derived(key)

    def store_derived(self, key: str, value) -> None:
        self.ws.store_derived(key, value)

    def open_derived_text(self, key: str):
        """A long text :meth:`derived_text_writer` stored, open for reading, while it is fresh; else None."""
        return self.ws.open_derived_text(key)

    def derived_text_writer(self, key: str, max_chars: int):
        """A writer (``write(str)``, ``commit()``, ``discard()``) of a long derived text into the cache folder as
        it is made; None where nothing is cached."""
        return self.ws.derived_text_writer(key, max_chars)

    # -- the platform and its ops -----------------------------------------------------------------
    def platform_summary(self) -> dict:
        """The platform profile as ``attnlens profile`` prints it (raises when it cannot be read)."""
        return self.ws.resolver.profile.summary()

    def platform_info(self):
        """The platform profile's facts (``profile.PlatformInfo``: entry point, classes, enum)."""
        return self.ws.resolver.profile.info

    def platform_method_value(self, name: str, args: tuple = ()):
        """The constant ``current_platform.<name>(*args)`` returns on this platform, or None when unknown."""
        return self.ws.resolver.profile.method_value(name, args)

    def platform_defaults(self):
        """The env flags at their defaults (``envflags.PlatformDefaults``), for rendering verdicts; one per
        workspace (it memoises per index generation itself)."""
        if self._defaults is None:
            from .envflags import PlatformDefaults

            self._defaults = PlatformDefaults(self.ws.resolver)
        return self._defaults

    def kernel_providers(self) -> list[tuple[str, str | None, str]]:
        """(module, guard, status) for each kernel module the platform imports."""
        return self.ws.resolver.ops.providers()

    def prefetch_cpp(self) -> None:
        """Build the C++ index in a forked worker (CLI processes that allow forks; see :meth:`allow_fork`)."""
        self.ws.resolver.ops.prefetch_cpp()

    def cpp_warm_steps(self, budget_s: float):
        """Build the C++ index a few files at a time (yields the files done after each ``budget_s``)."""
        return self.ws.resolver.ops.cpp_warm_steps(budget_s)

    def cpp_index(self):
        """The C++ index (``cppindex``), built now when it is not there; raises ``torchops.CppNotReady``
        while a worker of the caller builds it."""
        return self.ws.resolver.ops.cpp()

    def cpp_op(self, qualname: str):
        """The C++ index's facts of one op (``ns::name``), or None; raises as :meth:`cpp_index`."""
        return self.ws.resolver.ops.cpp().op(qualname)

    def cpp_files(self) -> list:
        """The workspace's C++ files the C++ index was built from (empty until it is built)."""
        return self.ws.resolver.ops.cpp_files()

    def set_cpp_pending(self, pending: "Callable[[], bool]") -> None:
        """A worker of the caller builds the C++ index: while ``pending()`` says it still does, asking for
        the C++ index raises ``torchops.CppNotReady`` instead of building it a second time."""
        self.ws.resolver.ops.cpp_pending = pending

    def clear_cpp_pending(self, pending: "Callable[[], bool]") -> None:
        """Drop the hook :meth:`set_cpp_pending` set, when it is still ``pending`` (the C++ index is built
        here again when asked for)."""
        ops = self.ws.resolver.ops
        if getattr(ops, "cpp_pending", None) == pending:
            ops.cpp_pending = None

    def library_ns(self, mod: Module, scope: str, text: str) -> str | None:
        """The op namespace of the ``torch.library.Library`` object ``text`` names in ``scope`` of ``mod``
        (a ``target_lib=`` argument), or None."""
        return self.ws.resolver.ops._library_ns(mod, scope, text)  # noqa: SLF001 - the registry's own reader

    def prepare_installed_scan(self, ns: str) -> None:
        """Read the installed files that register ops of ``ns`` from Python once (kept in the cache folder)."""
        self.ws.resolver.ops.prepare_installed_scan(ns)

    def installed_modules_matching(self, ns: str, match: "Callable[[bytes], bool]") -> list:
        """Installed modules (of the packages an op of ``ns`` can come from) that use a Python
        op-registration API and whose bytes satisfy ``match``: only these are summarised."""
        return self.ws.resolver.ops.installed_modules_matching(ns, match)

    def cpp_op_symbols(self) -> list[tuple[str, str, int, str]]:
        """(op, path, line, schema) of every op the C++ index defines or implements (its first site);
        empty when the C++ index cannot be built."""
        try:
            idx = self.ws.resolver.ops.cpp()
            names = idx.ops()
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
                out.append((op, where[0].path, where[0].line, info.schema or ""))
        return out

    def installed_kernel_packages(self) -> list[tuple[str, str]]:
        """(top-level name, folder) of the installed packages the workspace's chains reach (those of the
        installed modules loaded so far) and of the kernel modules the platform imports."""
        idx = self.ws.index
        names = {m.name.split(".")[0] for m in idx.loaded_modules() if not m.workspace}
        try:
            names |= {t.split(".")[0] for t, _g, _s in self.ws.resolver.ops.providers()}
        except Exception:  # noqa: BLE001 - providers are a nicety here
            pass
        tops: dict[str, str] = {}
        for top in sorted(names):
            loc = idx.locate(top)
            if loc is None or loc.kind != "py" or not loc.is_package or idx.is_workspace_path(loc.path):
                continue
            tops[top] = os.path.dirname(loc.path)
        return sorted(tops.items())

    # -- call hierarchy -----------------------------------------------------------------------
    def call_index(self, budget_s: float | None = 0.25) -> "CallIndex":
        """The workspace's reverse call index (incoming calls: ``calls_into``, ``calls_meeting``,
        ``calls_through``; brought up to date by its ``step``), made on the first call with that
        per-trace ``budget_s``; one per query."""
        if self._calls is None:
            from .callindex import CallIndex

            self._calls = CallIndex(self.ws.index, self.ws.resolver, budget_s)
        return self._calls

    # -- resolution (the rules and the upgrade code) -----------------------------------------------
    def resolve_symbol(self, dotted: str):
        """A fully qualified dotted name to the resolver's value (``Val``)."""
        return self.ws.resolver.resolve_symbol(dotted)

    def resolve_dotted(self, mod: Module, scope: str, text: str, line: int | None = None):
        """``text`` (a dotted name as written in ``scope`` of ``mod``, at ``line``) to its value, in a walk
        of its own."""
        from .walk import Walk

        return self.ws.resolver.resolve_dotted(mod, scope, text, Walk(), line=line)

    def mro(self, mod: Module, qual: str) -> list:
        """Class ``qual`` of ``mod`` and its bases, linearised (values)."""
        return self.ws.resolver.mro(mod, qual)

    def class_bases(self, mod: Module, qual: str) -> list:
        return self.ws.resolver.class_bases(mod, qual)

    def abs_module(self, mod: Module, target: str, level: int) -> str | None:
        """The absolute module an import in ``mod`` names (``from ..x import y``: ``target`` x, ``level`` 2)."""
        return self.ws.resolver.abs_module(mod, target, level)

    def class_attr(self, mod: Module, qual: str, name: str, instance: bool = False):
        """The value of attribute ``name`` of class ``qual`` of ``mod`` (the first class of its MRO that
        defines it), in a walk of its own; None when no class defines it."""
        from .walk import Walk

        return self.ws.resolver.class_attr(mod, qual, name, Walk(), instance=instance)

    def enclosing_class(self, mod: Module, scope: str) -> str | None:
        """The qualname of the class whose method ``scope`` (a function qualname of ``mod``) is, or None."""
        return self.ws.resolver.enclosing_class(mod, scope)

    def guard_value(self, mod: Module | None, guards: tuple, scope: str = "") -> bool | None:
        """A summary's guards (``(kind, text, line)`` tuples) on this platform, combined as a chain's
        reachability: False when one cannot hold (``if TYPE_CHECKING`` never does), None when one is decided
        at run time, else True; ``try``/``except`` guards do not count."""
        return self.ws.resolver.guard_value(mod, guards, scope)

    def backend_part(self, cls, meth: str):
        """(``registry.ClassRef``, class value or None) of what backend class ``cls`` (a class value)
        returns from ``meth`` (``get_impl_cls``, ``get_builder_cls``), as ``attnlens backends`` reads it."""
        from .registry import Registry

        return Registry(self.ws.resolver).part(cls, meth)

    def evaluator(self) -> "Evaluator":
        """The resolver's evaluation primitives (``lookup_name``, ``attr``, ``class_attr``, ``resolve_dotted``
        with the caller's ``Walk``, ``trace_call``, ``guard_value``, the op registry ...), for the one caller that
        walks values step by step: the rule API's ``ModuleContext.r`` (``rules/api.py``). Everything else asks
        the questions of this class (``tests/test_architecture.py`` keeps it so). Typed as
        :class:`attnlens.lookup.Evaluator`: what the checks may read on it."""
        return self.ws.resolver

    def patches(self) -> dict:
        """(upstream module, attribute path) -> (replacement value, path, line, decorator text)."""
        return self.ws.resolver.patches()

    def patched(self, v):
        """The plugin's replacement of an upstream value, or None."""
        return self.ws.resolver.patched(v)

    def oot_replacements(self) -> dict:
        """The plugin's ``register_oot`` CustomOp registrations by name."""
        return self.ws.oot_replacements()

    def stdlib(self) -> frozenset:
        """The target interpreter's standard-library module names."""
        return self.ws.resolver.stdlib

    # -- for the language server (wt-lsp)
    @staticmethod
    def triton_kernel_decorated(decorators) -> bool:
        """Is a def a Triton kernel by its decorators' text alone (no resolution: what the editor's outline and
        symbols label "Triton kernel")? A bare ``@jit`` / ``@autotune`` / ``@heuristics`` (the core's names,
        ``pyindex.triton_decorated``), or any decorator of the ``triton`` package (``@triton.jit``,
        ``@triton.autotune(...)``); a name qualified by another package (``@cute.jit``) is not Triton's."""
        from .pyindex import triton_decorated

        return any(d.func.startswith("triton.") or ("." not in d.func and triton_decorated((d,))) for d in decorators)

    @staticmethod
    def triton_decorator_pattern():
        """The decorator lines of a Triton kernel in a source file's bytes, for a scan that parses nothing (the
        installed packages' symbols): ``@jit`` / ``@autotune`` / ``@heuristics`` (``pyindex.TRITON_JIT_NAMES`` /
        ``TRITON_WRAPPERS``), bare or ``triton.``-qualified. A compiled ``re`` pattern (multi-line)."""
        import re

        from .pyindex import TRITON_JIT_NAMES, TRITON_WRAPPERS

        names = b"|".join(re.escape(n.encode()) for n in TRITON_JIT_NAMES + TRITON_WRAPPERS)
        return re.compile(rb"^[ \t]*@(?:triton\.)?(?:" + names + rb")\b", re.M)
