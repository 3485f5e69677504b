"""Torch custom ops: from ``torch.ops.<ns>.<op>`` to where the op is registered.

Sources, all static (nothing is loaded):

1. C++ in the workspace (``csrc/`` and any C++/CUDA file under the root):
   ``TORCH_LIBRARY*``/``STABLE_TORCH_LIBRARY*`` blocks, ``ops.def`` schemas and
   ``ops.impl`` bindings with the C++ function definition they bind
   (tree-sitter-cpp, :mod:`attnlens.cppindex`).
2. Python registrations in the workspace and in installed packages reached by
   the op's namespace: ``direct_register_custom_op(op_name=..., op_func=...)``
   (vLLM's helper, namespace ``vllm`` unless ``target_lib`` says otherwise),
   ``@torch.library.custom_op("ns::op")`` / ``@torch.library.triton_op`` (the op's
   default implementation), the decorator forms ``@torch.library.impl("ns::op",
   "CUDA")`` (also spelled through ``from torch.library import impl`` or
   ``import torch.library as tl``), ``@torch.library.impl(lib, "op", key)``,
   ``@lib.impl("op", key)`` on a ``Library("ns", ...)`` object,
   ``@<op>.register_kernel("cuda")`` (the decorated function is the kernel for that
   key), the call forms ``torch.library.impl("ns::op", "CUDA", fn)`` and
   ``Library("ns", ...).define/impl``. Fake/abstract impls (``register_fake``,
   ``impl_abstract``, ``@<op>.register_fake``) are recorded (kind ``python_fake``,
   key ``Meta``) and never followed; ``define`` gives a ``python_def`` schema. Of
   several kernels the one that runs on the device is followed (:func:`_run_rank`),
   and every registration stays in ``Final.registrations``. Installed packages are
   pre-filtered by a byte search for the op name, so only a handful of files are
   parsed.
3. Schemas baked into native extensions (``.so`` ``.rodata``) when no source
   declares the op (:mod:`attnlens.elfscan`, cached by file stamp).

The *provider* of compiled ops is read from the platform's ``import_kernels``
(the modules it imports, with their guards): e.g. a workspace extension that
is not built in this checkout, or a precompiled package that is not installed.
When nothing in reach registers an op and a package that would provide it is not
installed (a platform kernel import, or an extension-like import of the calling
module), the final names it instead of claiming an exhaustive search; otherwise
"no registration found" comes with the list of what was searched.

C++ registrations carry the build-flag ``condition`` (``#ifdef``/``#if``/``#else``
around them, see :mod:`attnlens.cppindex`) into ``Registration.condition``.
"""

from __future__ import annotations

import dataclasses

import os
from dataclasses import dataclass

from .lookup import Lookup
from .model import Final, FinalKind, Hop, HopKind, Registration, extension_holds, or_joined
from .walk import ValKind, Walk


# the dispatch key of `direct_register_custom_op` when the call names none (the platform's, folded where the answer is
# made: OpRegistry.key_of)
_PLATFORM_KEY = "current_platform.dispatch_key"

class CppNotReady(BaseException):
    """The C++ index is being built by a worker process and is not ready yet.

    Raised by :meth:`TorchOps.cpp` only while a caller has set ``cpp_pending`` (the CLI's rules
    engine, which then checks the module again once the worker is done). A BaseException, so
    that no ``except Exception`` on the way turns it into a wrong answer: analysis state is
    only memoised after a computation completes, so an interrupted one leaves nothing behind.
    """


class OpRegistry:
    def __init__(self, resolver: Lookup):
        self.r = resolver
        self._cpp = None
        self._cpp_gen = -1
        self._py_cache: dict = {}
        self._ext_cache: dict = {}
        self._cpp_files: list = []  # the workspace's C++ files, once the C++ index is built (cpp_files())
        self._prefetch = None
        self._providers_gen = -1
        self._providers = None
        self._searched: dict = {}  # (ns, op) -> what the Python scan looked at (for "no registration found")
        self._ext_searched_for: dict = {}  # (namespace, op) -> .so files its extension-schema search read
        self._ext_files_memo: tuple | None = None  # (generation, the native extensions extension_schema reads)
        self._reg_files_memo: tuple | None = None  # (generation, files that can register ops from Python)

    # -- C++ ---------------------------------------------------------------
    def prefetch_cpp(self) -> None:
        """Build the C++ index in a forked worker while Python parsing goes on (cold CLI runs).

        Only used where forking is safe (a single-threaded CLI process); the result
        comes back through the cache folder.
        """
        if self._cpp is not None or self._prefetch is not None or not hasattr(os, "fork"):
            return
        if not getattr(self.r.index, "allow_fork", False):
            return
        try:
            pid = os.fork()
        except OSError:
            return
        if pid == 0:  # child
            code = 0
            try:
                self.cpp()
                self.r.index.cache.flush()
            except BaseException:
                code = 1
            os._exit(code)
        self._prefetch = pid

    def _join_prefetch(self) -> None:
        if self._prefetch is None:
            return
        try:
            os.waitpid(self._prefetch, 0)
        except ChildProcessError:
            pass
        self._prefetch = None

    cpp_pending = None  # set by a caller whose worker is building the C++ index (see CppNotReady)

    def cpp_files(self) -> list:
        """The workspace's C++ files the C++ index was built from (empty until it is built)."""
        return list(self._cpp_files)

    def cpp(self):
        if self._cpp is not None:
            return self._cpp
        pending = self.cpp_pending
        if pending is not None and pending():
            raise CppNotReady()
        self._join_prefetch()
        for _ in self._build_cpp(None):
            pass
        return self._cpp

    def cpp_warm_steps(self, budget_s: float = 0.05):
        """Build the C++ index, then summarise its remaining files a few at a time (yields the number of
        files summarised so far after each ``budget_s`` of work): background indexing in the server never
        holds its one analysis thread for the whole C++ tree, and a later query parses no C++ file.
        Afterwards :meth:`cpp` returns the index at once."""
        if self._cpp is None:
            yield from self._build_cpp(budget_s)
        cpp = self._cpp
        if getattr(cpp, "pending_files", 0):
            for _ in cpp.complete_steps(budget_s):
                yield len(cpp.summaries)
            if not self.r.index.has_overlays() and self._cpp_fp is not None:
                self.r.index.cache.store_pickle("derived", f"cpp-{self._cpp_fp}", cpp)  # the next start loads it whole

    _cpp_fp: str | None = None  # the fingerprint of the C++ files the index was built from

    def _build_cpp(self, budget_s: float | None):
        """Set ``self._cpp``: the index from the cache when no C++ file changed, else a lazy index
        (:func:`cppindex.lazy_index`: the files that register ops summarised now, each cached by
        content; the others when a query names a function their text spells). Yields progress every
        ``budget_s`` (never when None)."""
        try:
            from . import cppindex
        except Exception:  # pragma: no cover - tree-sitter missing
            self._cpp = _EmptyCpp()
            return
        import hashlib

        cache = self.r.index.cache
        files = list(cppindex.iter_cpp_files(self.r.index.root))
        self._cpp_files = files
        h = hashlib.sha1()
        h.update(f"format={cppindex.SUMMARY_FORMAT}|lazy2\n".encode())
        for f in sorted(files):
            try:
                st = os.stat(f)
                h.update(f"{f}|{st.st_mtime_ns}|{st.st_size}\n".encode())
            except OSError:
                pass
        fp = h.hexdigest()[:24]
        self._cpp_fp = fp
        whole = cache.load_pickle("derived", f"cpp-{fp}")
        if isinstance(whole, cppindex.CppIndex):
            whole.summarise = self._cpp_summarise  # (the reader of the pending files is not pickled)
            self._cpp = whole
            return
        try:
            index = cppindex.lazy_index(files, load=self._cpp_load, store=self._cpp_store)
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            self._cpp = _EmptyCpp()
            return
        self._cpp = index
        cache.store_pickle("derived", f"cpp-{fp}", index)
        if budget_s is not None:
            yield len(index.summaries)

    def _cpp_summarise(self, path: str, data: bytes):
        """The lazy C++ index's reader of a pending file (cached by content, as every C++ summary)."""
        from . import cppindex

        return cppindex.summary_of(path, data, self._cpp_load, self._cpp_store)

    def _cpp_load(self, sha: str):
        from . import cppindex

        data = self.r.index.cache.load_json("cpp", f"{sha}.json")
        if data is None:
            return None
        try:
            return cppindex.FileSummary.from_json(data)
        except Exception:  # noqa: BLE001 - a torn or foreign entry is a miss
            return None

    def _cpp_store(self, sha: str, summ) -> None:
        self.r.index.cache.store_json("cpp", f"{sha}.json", summ.to_json())

    def invalidate_cpp(self) -> None:
        self._cpp = None

    # -- providers ---------------------------------------------------------
    def providers(self) -> list[tuple[str, str | None, str]]:
        """(module, guard, status) for each kernel module the platform imports."""
        if self._providers is not None and self._providers_gen == self.r.index.generation:
            return self._providers
        self._providers_gen = self.r.index.generation
        out = []
        guards: dict = {}  # module -> the guard of each import of it (the platform may import one in two branches)
        for cv in self.r.profile.info.classes:
            fv = self.r.class_attr(cv.module, cv.qual, "import_kernels", Walk())
            if fv is None or fv.func is None or fv.module is None or not fv.module.workspace:
                continue
            for name, bindings in fv.func.locals.items():
                for b in bindings:
                    if b.kind not in ("import", "from"):
                        continue
                    target = b.alternatives[0] if b.alternatives else b.target
                    if b.kind == "from":
                        target = f"{b.target}.{b.attr}"
                    if not target:
                        continue
                    g = self.r.guard_text(b.guards)
                    if target in guards:
                        if g not in guards[target]:
                            guards[target].append(g)
                        continue
                    guards[target] = [g]
                    loc = self.r.index.locate(target)
                    if loc is None:
                        top = target.split(".", 1)[0]
                        status = "not built in this checkout" if self.r.index.locate(top) is not None and top in {m.split(".")[0] for m in self.r.index.ws_files} else "not installed"
                    else:
                        status = f"installed at {loc.path}"
                    out.append((target, g, status))
        # imported on several paths: under any of their guards (`vllm._C` on x86 with AVX-512, and on every other
        # architecture), unguarded when one path is
        out = [(t, None if None in guards[t] else or_joined(guards[t]), st) for t, _g, st in out]
        self._providers = out
        return out

    # -- python registrations ----------------------------------------------------
    def python_registrations(self, ns: str, op: str) -> list[tuple]:
        """[(module, line, scope, function text, dispatch key, registration text)] of the Python
        functions registered as kernels of ``ns::op`` (fake/abstract impls and bare ``define``s
        left out), the one that runs on the device first (see :func:`_run_rank`)."""
        regs = [r for r in self.python_registrations_all(ns, op) if r.role in ("impl", "default")]
        regs.sort(key=_run_rank)
        return [(r.module, r.line, r.scope, r.func, r.key, r.text) for r in regs]

    def python_registrations_all(self, ns: str, op: str) -> list["PyReg"]:
        """Every Python registration of ``ns::op`` in reach, in source order per module: kernels
        (``impl``/``default``), fake/abstract impls (``fake``) and schemas (``def``)."""
        key = (ns, op, self.r.index.generation)
        if key in self._py_cache:
            return self._py_cache[key]
        if self._py_cache and next(iter(self._py_cache))[2] != self.r.index.generation:
            self._py_cache.clear()  # entries of older generations can never hit again
            self._searched.clear()
        mark = self.r.cut_mark()
        found: list[PyReg] = []
        mods = []
        seen = set()
        n_ws = 0
        reg_files = self._registering_files()
        for name, path, text in reg_files:
            if op in text:
                m = self.r.index.module(name)
                if m is not None:
                    mods.append(m)
                    seen.add(m.name)
                    n_ws += 1
        inst, pkgs, tried = self._installed_candidates(ns, op)
        mods += [m for m in inst if m.name not in seen]
        seen.update(m.name for m in inst)
        for m in mods:
            found.extend(self._scan_module(m, ns, op))
        # `@<op function>.register_kernel/register_fake` in a module that never spells the op name
        fnames = {r.func.rpartition(".")[2] for r in found if r.api in ("custom_op", "triton_op") and r.func}
        if fnames:
            for name, path, text in reg_files:
                if name in seen:
                    continue
                if any(f"{fn}.register_" in text for fn in fnames):
                    m = self.r.index.module(name)
                    if m is not None:
                        seen.add(name)
                        n_ws += 1
                        found.extend(self._scan_module(m, ns, op))
        self._searched[(ns, op)] = {"ws_modules": n_ws, "ws_registering": len(reg_files), "packages": pkgs, "tried": tried, "installed_modules": len(inst)}
        if self.r.clean_since(mark):  # (a name met while an enclosing resolution resolves it: asked again later)
            self._py_cache[key] = found
        return found

    _REG_MARKERS = ("custom_op", "Library(", "torch.library", "register_kernel", "register_fake", "triton_op",
                    "library.impl", "impl_abstract", "from torch import library", ".impl(", ".define(")

    def _registering_files(self) -> list:
        """(module name, path, text) of the workspace files that can register a torch op from Python
        (they mention a registration API), read once per index generation: the per-op search then
        scans only these instead of every workspace file."""
        gen = self.r.index.generation
        memo = self._reg_files_memo
        if memo is not None and memo[0] == gen:
            return memo[1]
        out = []
        markers = self._REG_MARKERS

        def registers(text) -> bool:
            return text is not None and any(mk in text for mk in markers)

        idx = self.r.index
        for name, path in sorted(idx.ws_files.items()):
            if idx.per_text(path, "op-registration-markers", registers):
                out.append((name, path, idx.source_text(path)))
        self._reg_files_memo = (gen, out)
        return out

    def _installed_candidates(self, ns: str, op: str, match=None):
        """(installed modules whose bytes mention the op name, or satisfy ``match(data)`` when given
        (byte pre-filter), installed packages searched, package names tried)."""
        pkgs = {"vllm"} if ns == "vllm" else set()
        pkgs.add(ns.lstrip("_").split("_")[0])
        if ns.isidentifier() and not ns.startswith("_"):
            pkgs.add(ns)  # a namespace named after its package (`sgl_kernel`)
        out = []
        searched = []
        if match is None:
            needle = op.encode()

            def match(data: bytes) -> bool:
                return needle in data
        for pkg in sorted(pkgs):
            loc = self.r.index.locate(pkg)
            if loc is None or loc.kind != "py" or not loc.is_package or self.r.index.is_workspace_path(loc.path):
                continue
            searched.append(pkg)
            for p, data in self._installed_registering(pkg, os.path.dirname(loc.path)):
                if match(data):
                    m = self.r.index.module_for_path(p)
                    if m is not None:
                        out.append(m)
        return out, searched, sorted(pkgs)

    def prepare_installed_scan(self, ns: str) -> None:
        """Find (and keep in the cache) the installed files that register ops from Python, for the packages an
        op of ``ns`` can come from, summarising none: a forked worker does it once for the processes after it."""
        self._installed_candidates(ns, "", lambda data: False)

    def installed_modules_matching(self, ns: str, match) -> list:
        """Installed modules (of the packages an op of ``ns`` can come from) that use a Python
        op-registration API and whose bytes satisfy ``match``: only these are summarised."""
        return self._installed_candidates(ns, "", match)[0]

    def _installed_registering(self, pkg: str, folder: str) -> list:
        """(path, bytes) of an installed package's files that use a Python op-registration API, read
        once until something outside the workspace changes (``Index.outside_memo``: reading every file of
        vLLM was 115 ms after each edit of the workspace); the per-op search then scans only these."""
        def compute():
            # "custom_op" also covers "register_custom_op"
            return self.r.index.installed_files_containing(folder, ("tests", "benchmarks"),
                                                           (b"custom_op", b"Library(", b"torch.library"))

        return self.r.index.outside_memo(("torchops.installed_registering", pkg, folder), compute)

    def _torch_library_api(self, m, dotted: str) -> str | None:
        """``X`` when the dotted callee ``dotted`` names ``torch.library.X`` in module ``m``
        (``torch.library.impl``, ``from torch.library import impl``, ``import torch.library as tl``,
        ``from torch import library``), else None."""
        if not dotted:
            return None
        if dotted.startswith("torch.library.") and dotted.count(".") == 2:
            return dotted.rpartition(".")[2]
        head, _, rest = dotted.partition(".")
        for b in m.summary.bindings.get(head, []):
            if b.kind == "from" and b.target == "torch.library" and b.attr and not rest:
                return b.attr
            if rest and "." not in rest and (
                    (b.kind == "from" and b.target == "torch" and b.attr == "library")
                    or (b.kind == "import" and b.target == "torch.library")):
                return rest
        return None

    def _custom_op_of(self, m, text: str) -> str | None:
        """The ``ns::op`` of a function decorated with ``@torch.library.custom_op``/``triton_op``
        that ``text`` names in module ``m`` (for ``@<fn>.register_kernel(...)``), else None."""
        f = m.summary.functions.get(text)
        fm = m
        if f is None:
            try:
                v = self.r.resolve_dotted(m, "", text, Walk())
            except RecursionError:
                return None
            if v.kind != ValKind.FUNCTION or v.module is None:
                return None
            fm, f = v.module, v.func
            if f is None:
                return None
        for d in f.decorators:
            api = self._torch_library_api(fm, d.func) or d.func.rpartition(".")[2]
            if api in ("custom_op", "triton_op") and d.str_args and d.str_args[0]:
                return d.str_args[0]
        return None

    def _scan_module(self, m, ns: str, op: str) -> list["PyReg"]:
        out: list[PyReg] = []
        qual = f"{ns}::{op}"
        s = m.summary
        deco_at = set()
        for f in s.functions.values():
            deco_at.update((d.line, d.col) for d in f.decorators)
        for c in s.classes.values():
            deco_at.update((d.line, d.col) for d in c.decorators)
        # `reg = functools.partial(direct_register_custom_op, target_lib=lib)` at module level: `reg(...)` registers
        # like it, in that library (vLLM's `direct_register_aiter_op`)
        partials = {cs.assigned_to: dict(cs.kw_texts).get("target_lib") for cs in s.calls
                    if not cs.scope and cs.assigned_to and cs.func.rpartition(".")[2] == "partial" and cs.arg_texts
                    and cs.arg_texts[0].rpartition(".")[2] == "direct_register_custom_op"}
        for cs in s.calls:
            if (cs.line, cs.col) in deco_at:
                continue  # a decorator: read below with the function it decorates
            last = cs.func.rpartition(".")[2]
            kw = dict(cs.kw_texts)
            sargs = cs.str_args
            if last == "direct_register_custom_op" or cs.func in partials:
                name = (kw.get("op_name") or "").strip("'\"") or (sargs[0] if sargs else None)
                func = kw.get("op_func") or (cs.arg_texts[1] if len(cs.arg_texts) > 1 else "")
                lib_ns = "vllm"
                tl = kw.get("target_lib") or partials.get(cs.func)
                if tl:
                    lib_ns = self._library_ns(m, cs.scope, tl) or "?"
                key = (kw.get("dispatch_key") or "").strip("'\"") or _PLATFORM_KEY
                if name == op and lib_ns == ns:
                    out.append(PyReg(m, cs.line, cs.scope, func, key, f"{cs.func}(op_name=\"{op}\")",
                                     "default", "direct_register_custom_op"))
                continue
            api = self._torch_library_api(m, cs.func)
            if api is None and last in ("custom_op", "register_fake", "impl_abstract", "register_kernel") \
                    and sargs and sargs[0] == qual:
                api = last
            if api is not None and sargs and sargs[0] == qual:
                # torch.library.X("ns::op", ...) called, not applied as a decorator
                txt = f"torch.library.{api}(\"{qual}\")"
                if api in ("custom_op", "triton_op"):
                    func = cs.arg_texts[1] if len(cs.arg_texts) > 1 else kw.get("fn", "")
                    if func:
                        out.append(PyReg(m, cs.line, cs.scope, func, _custom_op_key(api, kw), txt, "default", api))
                elif api in ("impl", "register_kernel"):
                    func = cs.arg_texts[2] if len(cs.arg_texts) > 2 else kw.get("func", "")
                    keys = _keys_of(cs.arg_texts[1] if len(cs.arg_texts) > 1 else kw.get("types") or kw.get("device_types", ""))
                    if func:
                        out.extend(PyReg(m, cs.line, cs.scope, func, k, txt, "impl", api) for k in keys)
                elif api in ("register_fake", "impl_abstract"):
                    func = cs.arg_texts[1] if len(cs.arg_texts) > 1 else kw.get("func", "")
                    if func:
                        out.append(PyReg(m, cs.line, cs.scope, func, "Meta", txt, "fake", api))
                elif api == "define":
                    sch = sargs[1] if len(sargs) > 1 and sargs[1] else (kw.get("schema") or "").strip("'\"")
                    out.append(PyReg(m, cs.line, cs.scope, "", None, txt, "def", api,
                                     schema=f"{op}{sch}" if sch else None))
                continue
            if api is not None:
                continue
            if last in ("impl", "define", "_register_fake", "_impl_with_aoti_compile") and sargs and sargs[0]:
                base = cs.func.rpartition(".")[0]
                head = sargs[0].split("(", 1)[0].strip() if last == "define" else sargs[0]
                if head not in (op, qual):
                    continue
                lib_ns = self._library_ns(m, cs.scope, base) if base else None
                if head != qual and lib_ns != ns:
                    continue
                txt = f"{cs.func}(\"{sargs[0] if last != 'define' else head}\")"
                if last == "define":
                    out.append(PyReg(m, cs.line, cs.scope, "", None, txt, "def", "Library.define", schema=sargs[0]))
                elif last == "_register_fake":
                    func = cs.arg_texts[1] if len(cs.arg_texts) > 1 else ""
                    out.append(PyReg(m, cs.line, cs.scope, func, "Meta", txt, "fake", "Library._register_fake"))
                else:  # Library.impl(op_name, fn, dispatch_key="")
                    func = cs.arg_texts[1] if len(cs.arg_texts) > 1 else kw.get("fn", "")
                    key = (sargs[2] if len(sargs) > 2 and sargs[2] else kw.get("dispatch_key", "")).strip("'\"")
                    out.append(PyReg(m, cs.line, cs.scope, func, key or "CompositeImplicitAutograd", txt, "impl",
                                     "Library.impl"))
        for q, f in s.functions.items():
            for d in f.decorators:
                r = self._decorator_reg(m, q, f, d, ns, op)
                if r:
                    out.extend(r)
        out.sort(key=lambda r: r.line)
        return out

    def _decorator_reg(self, m, q: str, f, d, ns: str, op: str) -> list["PyReg"]:
        """Registrations of ``ns::op`` made by decorator ``d`` on function ``q``: the decorated
        function is the registered one (never a string argument of the decorator)."""
        qual = f"{ns}::{op}"
        last = d.func.rpartition(".")[2]
        base = d.func.rpartition(".")[0]
        sargs = d.str_args
        kw = dict(d.kw_texts)
        scope = q.rpartition(".")[0]
        api = self._torch_library_api(m, d.func)
        if api is None and not base and last in ("custom_op", "triton_op", "register_fake", "impl_abstract",
                                                 "register_kernel", "impl") and sargs and sargs[0] and "::" in sargs[0]:
            api = last  # an unbound helper spelled like torch.library's: judged by the qualified op name
        if api is None and base.endswith(".library") and last in ("custom_op", "triton_op"):
            api = last
        text = f"@{d.func}(" + ", ".join(f'"{a}"' if a is not None else (t or "...")
                                         for a, t in zip(sargs, d.arg_texts)) + ")" if d.is_call else f"@{d.func}"
        if api in ("custom_op", "triton_op"):
            if sargs and sargs[0] == qual:
                return [PyReg(m, d.line, scope, q, _custom_op_key(api, kw), text, "default", api)]
            return []
        if api in ("impl", "register_kernel"):
            if sargs and sargs[0] == qual:  # impl("ns::op", types)
                keys = _keys_of(d.arg_texts[1] if len(d.arg_texts) > 1 else kw.get("types") or kw.get("device_types", ""))
                return [PyReg(m, d.line, scope, q, k, text, "impl", api) for k in keys]
            if api == "impl" and len(sargs) > 1 and sargs[0] is None and sargs[1] in (op, qual):
                # legacy impl(lib, "op", dispatch_key)
                if sargs[1] == qual or self._library_ns(m, scope, d.arg_texts[0]) == ns:
                    keys = _keys_of(d.arg_texts[2] if len(d.arg_texts) > 2 else kw.get("dispatch_key", ""))
                    return [PyReg(m, d.line, scope, q, k, text, "impl", api) for k in keys]
            return []
        if api in ("register_fake", "impl_abstract"):
            if sargs and sargs[0] == qual:
                return [PyReg(m, d.line, scope, q, "Meta", text, "fake", api)]
            return []
        if api is not None or not base:
            return []
        if last == "impl" and sargs and sargs[0] in (op, qual):
            # @lib.impl("op", "CUDA") on a torch.library.Library("ns", ...) object
            if sargs[0] == qual or self._library_ns(m, scope, base) == ns:
                keys = _keys_of(d.arg_texts[1] if len(d.arg_texts) > 1 else kw.get("dispatch_key", ""))
                return [PyReg(m, d.line, scope, q, k, text, "impl", "Library.impl") for k in keys]
            return []
        if last in ("register_kernel", "register_fake") and self._custom_op_of(m, base) == qual:
            # @<custom op function>.register_kernel("cuda") / .register_fake
            if last == "register_kernel":
                keys = _keys_of(d.arg_texts[0] if d.arg_texts else kw.get("device_types", ""))
                return [PyReg(m, d.line, scope, q, k, text, "impl", "register_kernel") for k in keys]
            if last == "register_fake":
                return [PyReg(m, d.line, scope, q, "Meta", text, "fake", "register_fake")]
        return []

    def _library_ns(self, m, scope: str, text: str) -> str | None:
        name = text.split(".", 1)[0]
        for b in m.summary.bindings.get(name, []):
            if b.kind == "call" and b.target and b.target.rpartition(".")[2] == "Library" and b.str_args and b.str_args[0]:
                return b.str_args[0]
        v = self.r.resolve_dotted(m, scope, text, Walk())
        if v.module is not None:
            for b in v.module.summary.bindings.get(text.rpartition(".")[2], []):
                if b.kind == "call" and b.target and b.target.rpartition(".")[2] == "Library" and b.str_args and b.str_args[0]:
                    return b.str_args[0]
        return None

    # -- extension schemas ---------------------------------------------------
    def extension_schema(self, ns: str, op: str) -> tuple[str, str] | None:
        try:
            from . import elfscan
        except Exception:  # pragma: no cover
            return None
        cands = self._extension_files()
        self._ext_searched_for[(ns, op)] = len(cands)
        for p in cands:
            info = self._ext_info(p, elfscan)
            if info is None:
                continue
            for sch in info.get("schemas", []):
                if sch.startswith(op + "(") or sch.startswith(op + "."):
                    if not info.get("namespaces") or ns in info.get("namespaces", []):
                        return p, sch
        return None

    def _extension_files(self) -> list[str]:
        """The native extensions (``_*.so``) beside the top packages of vLLM and the workspace, sorted: listed once
        per index generation (listed for every op: 1.1 ms each, a second of `sites` over upstream vLLM)."""
        gen = self.r.index.generation
        memo = self._ext_files_memo
        if memo is not None and memo[0] == gen:
            return memo[1]
        cands = []
        for pkg in sorted({"vllm", *(m.split(".")[0] for m in self.r.index.ws_files)}):
            loc = self.r.index.locate(pkg)
            if loc is None or loc.kind != "py":
                continue
            base = os.path.dirname(loc.path)
            try:
                for e in os.scandir(base):
                    if e.name.endswith(".so") and e.name.startswith("_"):
                        cands.append(e.path)
            except OSError:
                continue
        cands.sort()
        self._ext_files_memo = (gen, cands)
        return cands

    def _ext_info(self, path: str, elfscan) -> dict | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = f"ext-{abs(hash((path, st.st_mtime_ns, st.st_size))) % 10**16}"
        if key in self._ext_cache:
            return self._ext_cache[key]
        data = self.r.index.cache.load_json("ext", f"{key}.json")
        if data is None:
            try:
                info = elfscan.scan_extension(path)
                data = {"schemas": list(info.schemas), "namespaces": list(info.namespaces), "mechanism": info.mechanism, "path": path}
            except Exception as e:
                data = {"schemas": [], "namespaces": [], "error": str(e), "path": path}
            self.r.index.cache.store_json("ext", f"{key}.json", data)
        self._ext_cache[key] = data
        return data

    # -- following ---------------------------------------------------------
    def follow_op(self, v, w, caller=None) -> Final:
        """The final of torch op ``v``; ``caller``: :meth:`calling_module` of ``w``, read before the op's walk
        began (the resolver's ``follow`` keys its memo by it)."""
        ns = v.extra.get("ns") or v.qual.split("::")[0]
        op = v.extra.get("op") or v.qual.split("::")[-1]
        qual = f"{ns}::{op}"
        w.add(Hop(HopKind.TORCH_OP, "", 0, qual, f"torch.ops.{ns}.{op}: dispatched by the torch dispatcher"))
        # Python registrations first: the op then runs Python code we can follow
        pyregs = self.python_registrations_all(ns, op)
        runnable = sorted(_runnable(pyregs), key=_run_rank)
        if runnable:
            pick = runnable[0]
            others = [r for r in pyregs if r is not pick and r.role != "def"]
            also = "; also " + ", ".join(f"{_role_word(r)} at line {r.line}" + ("" if r.module is pick.module else f" of {r.module.name}")
                                         for r in others) if others else ""
            m = pick.module
            w.add(Hop(HopKind.OP_REGISTRATION, m.path, pick.line, qual,
                      f"{pick.text} in {m.name} (dispatch key {self.key_of(pick)}){also}"))
            fv = self.r.resolve_dotted(m, pick.scope, pick.func, w, line=pick.line)
            rec = v.extra.get("args")
            if rec is not None and fv.kind == ValKind.FUNCTION:
                fv = self.r.with_args(fv, rec)  # (the op's arguments are its Python body's: Resolver.with_binds)
            fin = self.r.follow(fv, w)
            if fin.kind == FinalKind.PYTHON_FUNCTION:
                # the Python implementation reaches no kernel the analysis can see (communication through
                # torch.distributed, a weakref lookup): the op itself is what runs, implemented by that function
                fin = Final(FinalKind.TORCH_OP, fin.path, fin.line, qual, package=fin.package,
                            detail=f"implemented in Python by {fin.symbol}, whose body reaches no kernel the analysis can follow")
            # a copy: finals may be shared by the resolver's memo
            fin = dataclasses.replace(fin, registrations=list(fin.registrations) + [
                self._py_registration(r, fv if r is pick else None) for r in pyregs])
            if fin.kind == FinalKind.UNRESOLVED:
                fin.reason = (fin.reason or "") + f" (op_func of {qual})"
            return fin
        cpp = self.cpp()
        info = cpp.op(qual)
        regs: list[Registration] = [self._py_registration(r, None) for r in pyregs]  # fake impls / schemas only
        schema = next((r.schema for r in regs if r.schema), None)
        path = line = None
        if regs:
            path, line = regs[0].path, regs[0].line
        if info is not None:
            path = line = None
            for d in info.defs:
                regs.append(Registration(d.path, d.line, None, "cpp_def", schema=d.schema,
                                         condition=getattr(d, "condition", None)))
                schema = schema or d.schema
                if path is None:
                    path, line = d.path, d.line
            for im in info.impls:
                dfn = getattr(im, "definition", None)
                regs.append(Registration(im.path, im.line, im.dispatch_key, "cpp_impl", im.function,
                                         getattr(dfn, "path", None), getattr(dfn, "line", None),
                                         condition=getattr(im, "condition", None)))
            if path is None:
                first = next((r for r in regs if r.kind == "cpp_impl"), None)
                if first is not None:
                    path, line = first.path, first.line
            impl_with_fn = [r for r in regs if r.kind == "cpp_impl" and r.function_path]
            for r in regs:
                if r.kind == "cpp_def":
                    w.add(Hop(HopKind.OP_REGISTRATION, r.path, r.line, qual, f"ops.def schema: {r.schema}{_under(r.condition)}"))
            for r in regs:
                if r.kind == "cpp_impl":
                    w.add(Hop(HopKind.OP_REGISTRATION, r.path, r.line, qual,
                              f"ops.impl for {r.dispatch_key} binds {r.function}{_under(r.condition)}"))
            if impl_with_fn:
                r = impl_with_fn[0]
                w.add(Hop(HopKind.DEFINITION, r.function_path or "", r.function_line or 0, r.function or "", "C++ function bound by ops.impl"))
        provs = _for_namespace(self.providers(), ns, any(r.kind.startswith("cpp") for r in regs))
        providers = [f"{m} ({status}{', if ' + g if g else ''})" for m, g, status in provs]
        if not regs:
            ext = self.extension_schema(ns, op)
            if ext is not None:
                p, sch = ext
                regs.append(Registration(p, 0, None, "extension_schema", schema=sch))
                schema = sch
                path = p
                w.add(Hop(HopKind.EXTENSION, p, 0, qual, f"schema found in native extension {os.path.basename(p)} (no source in the workspace)"))
        pkg = provs[0][0].split(".", 1)[0] if provs else ns
        reason = None
        if any(r.kind.startswith("cpp") for r in regs):
            detail = "registered in C++"
        elif any(r.kind == "extension_schema" for r in regs):
            detail = "schema only from a native extension"
        elif regs:
            detail = "only a fake (meta) implementation or a schema is registered in Python"
        else:
            missing = self._missing_providers(ns, caller[:2] if caller is not None else None)
            if missing:
                names = [t for t, _g, _w in missing]
                for t, g, where in missing:
                    entry = f"{t} (not installed{', if ' + g if g else ''}{', imported in ' + where if where else ''})"
                    if not any(p.startswith(f"{t} (") for p in providers):
                        providers.append(entry)
                pkg = names[0].split(".", 1)[0]
                which = " or ".join(f"`{t}`" for t in names)
                reason = (f"no registration of {qual} in reach; it would come from {which}, which "
                          f"{'is' if len(names) == 1 else 'are'} not installed")
                detail = f"provided by {which} (not installed)"
            else:
                searched = self._searched_text(ns, op)
                reason = f"no registration of {qual} found (searched {searched})"
                detail = f"no registration found (searched {searched})"
        fin = Final(FinalKind.TORCH_OP, path, line, qual, package=pkg, detail=detail, registrations=regs, schema=schema,
                    providers=providers)
        if reason:
            fin.reason = reason
        return fin

    def key_of(self, r: "PyReg") -> str:
        """The dispatch key of a Python registration, the platform's own folded where it names none
        (``direct_register_custom_op`` registers for ``current_platform.dispatch_key``: "CUDA" on vLLM-MetaX, "CPU" on
        vLLM's CPU platform), said with the expression."""
        if r.key != _PLATFORM_KEY:
            return r.key
        from .profile import constant_of

        try:
            b = self.r.profile.platform_attr("dispatch_key", Walk()).extra.get("binding")  # (a class attribute's binding)
        except Exception:  # noqa: BLE001 - a key is a nicety of the answer: never fail it
            b = None
        v = constant_of(b.target) if b is not None and b.target else None
        return f"{v} (current_platform.dispatch_key)" if isinstance(v, str) and v else _PLATFORM_KEY

    def _py_registration(self, r: "PyReg", fv) -> Registration:
        """A :class:`Registration` for a Python registration; ``fv``: its function, when resolved."""
        kind = {"fake": "python_fake", "def": "python_def"}.get(r.role, "python")
        fpath = fline = None
        if r.func:
            if fv is None:
                f = r.module.summary.functions.get(r.func) if not r.scope else None
                if f is not None:
                    fpath, fline = r.module.path, f.line
                else:
                    try:
                        fv = self.r.resolve_dotted(r.module, r.scope, r.func, Walk(), line=r.line)
                    except RecursionError:
                        fv = None
            if fv is not None and fpath is None and fv.kind in (ValKind.FUNCTION, ValKind.CLASS):
                fpath, fline = fv.path, fv.line
        return Registration(r.module.path, r.line, self.key_of(r), kind, r.func or None, fpath, fline, schema=r.schema)

    def python_bodied(self, v) -> bool:
        """Does torch op ``v`` run a Python function registered for it (an ``impl`` or a ``custom_op`` body)?"""
        ns = v.extra.get("ns") or v.qual.split("::")[0]
        op = v.extra.get("op") or v.qual.split("::")[-1]
        return any(_runnable(self.python_registrations_all(ns, op)))

    def calling_module(self, w):
        """(module, line, scope) of the code that evaluates ``torch.ops...``: the last hop of the walk ``w`` in a
        Python file; None when there is none. What the answer then depends on is recorded with the resolver
        (``Resolver.read_before``): the hops from that one on."""
        hops = w.hops
        for i in range(len(hops) - 1, -1, -1):
            h = hops[i]
            if h.path and h.path.endswith(".py"):
                m = self.r.index.module_for_path(h.path)
                if m is not None:
                    self.r.read_before(w, i)
                    return m, h.line, m.summary.scope_at(h.line) if h.line else ""
        self.r.read_before(w, -1)
        return None

    def _missing_providers(self, ns: str, caller) -> list[tuple[str, str | None, str | None]]:
        """(module, guard, where imported) of the not-installed extension packages that could
        provide ops of namespace ``ns``: the platform's ``import_kernels`` imports whose package is
        not installed, and imports of the calling module (module level, or in the calling
        function) of a package that is not installed and whose name looks like an op provider (it
        shares a word with ``ns``, or a part is ``_C``-like / ``*ops*`` / ``*kernel*``). Those
        sharing a word with ``ns`` come first, then the platform's, then the others."""
        words = _ns_words(ns)
        out: list[tuple[int, str, str | None, str | None]] = []
        seen = set()
        for t, g, status in _for_namespace(self.providers(), ns, False):
            if status == "not installed" and t not in seen:
                seen.add(t)
                out.append((0 if words & _ns_words(t) else 1, t, g, None))
        if caller is not None:
            m, line = caller
            scope = m.summary.scope_at(line) if line else ""
            binds = [b for bs in m.summary.bindings.values() for b in bs]
            q = scope
            while q:
                f = m.summary.functions.get(q)
                if f is not None:
                    binds += [b for bs in f.locals.values() for b in bs]
                q = q.rpartition(".")[0]
            for b in sorted(binds, key=lambda b: b.line):
                if b.kind not in ("import", "from") or b.level:
                    continue
                t = b.alternatives[0] if b.kind == "import" and b.alternatives else b.target
                if b.kind == "from" and b.attr and b.attr != "*":
                    t = f"{b.target}.{b.attr}"
                if not t or t in seen:
                    continue
                top = t.split(".", 1)[0]
                if top in _NOT_PROVIDERS or top in self.r.stdlib or self.r.index.locate(top) is not None:
                    continue
                if not (words & _ns_words(t) or _looks_like_extension(t)):
                    continue
                seen.add(t)
                out.append((0 if words & _ns_words(t) else 2, t, self.r.guard_text(b.guards), f"{m.name}:{b.line}"))
        out.sort(key=lambda x: x[0])
        return [(t, g, where) for _r, t, g, where in out]

    def _searched_text(self, ns: str, op: str) -> str:
        """What was searched for ``ns::op``, in words (for a "no registration found")."""
        s = self._searched.get((ns, op)) or {}
        parts = []
        n_cpp = len(self._cpp_files)
        parts.append(f"workspace C++: {n_cpp} file{'s' if n_cpp != 1 else ''}" if not isinstance(self._cpp, _EmptyCpp)
                     else "workspace C++: index unavailable")
        n = s.get("ws_modules", 0)
        t = s.get("ws_registering", 0)
        parts.append(f"workspace Python: {t} module{'s' if t != 1 else ''} using a registration API, "
                     f"{n} of them mentioning `{op}`")
        pk = s.get("packages") or []
        if pk:
            k = s.get("installed_modules", 0)
            parts.append(f"installed Python: {', '.join(pk)} ({k} module{'s' if k != 1 else ''} mentioning `{op}`)")
        else:
            tried = ", ".join(f"`{p}`" for p in s.get("tried") or [])
            parts.append(f"installed Python: no installed package named after namespace `{ns}` (looked for {tried})")
        e = self._ext_searched_for.get((ns, op))
        if e is not None:
            parts.append(f"extension schemas: {e} installed .so file{'s' if e != 1 else ''} read, none defines it")
        else:
            parts.append("extension schemas: not read for it")
        return "; ".join(parts)


class _EmptyCpp:
    def op(self, qualname):
        return None

    def ops(self):
        return []

    def bound_function_names(self):
        return frozenset()


@dataclass
class PyReg:
    """One Python registration of a torch op (see :meth:`OpRegistry.python_registrations_all`)."""

    module: object  # the index Module it is in
    line: int  # the call or the decorator
    scope: str  # enclosing function of the call ('' at module level; for a decorator, the def's)
    func: str  # the registered function as written ('' for a schema)
    key: str | None  # dispatch key ("CUDA", "CompositeExplicitAutograd", "Meta" for a fake impl)
    text: str  # the registration as written, shortened
    role: str  # impl (a kernel for `key`) | default (custom_op's function) | fake | def (schema only)
    api: str = ""  # what registered it: custom_op, impl, register_kernel, Library.impl, ...
    schema: str | None = None


# device-type strings of torch.library (`"cuda"`) to dispatch keys
_DEVICE_TYPES = {"cuda": "CUDA", "cpu": "CPU", "xpu": "XPU", "mps": "MPS", "meta": "Meta", "hip": "HIP",
                 "hpu": "HPU", "mtia": "MTIA", "privateuseone": "PrivateUse1", "default": "CompositeExplicitAutograd"}
_DEFAULT_KEYS = frozenset({"CompositeExplicitAutograd", "CompositeImplicitAutograd", "triton_op", "?", ""})
_HOST_KEYS = frozenset({"CPU", "Meta", "BackendSelect", "Python", "Functionalize", "FuncTorchBatched"})
# packages imported next to torch ops that never provide them
_NOT_PROVIDERS = frozenset({"torch", "triton", "numpy", "einops", "transformers", "typing_extensions", "packaging",
                            "safetensors", "huggingface_hub", "pydantic", "regex", "msgspec", "cloudpickle",
                            "psutil", "zmq", "vllm"})
_GENERIC_WORDS = frozenset({"c", "ops", "op", "lib", "libs", "cache", "custom", "kernel", "kernels", "ext", "torch",
                            "vllm", "py", "cpp", "cuda", "stable", "libtorch", "abi3", "core", "utils"})


def _keys_of(text: str | None, default: str = "?") -> list[str]:
    """Dispatch keys of a ``types``/``device_types``/``dispatch_key`` argument as written:
    ``'cuda'`` -> ``["CUDA"]``, ``['cuda', 'cpu']`` -> ``["CUDA", "CPU"]``, a name -> itself."""
    t = (text or "").strip()
    if not t:
        return [default]
    vals: list = []
    if t[0] in "'\"[(":
        import ast

        try:
            v = ast.literal_eval(t)
        except (ValueError, SyntaxError):
            v = t
        vals = list(v) if isinstance(v, (list, tuple)) else [v]
    else:
        vals = [t]
    out = []
    for x in vals:
        s = str(x)
        s = _DEVICE_TYPES.get(s.lower(), s) if s.lower() in _DEVICE_TYPES else s
        if s and s not in out:
            out.append(s)
    return out or [default]


def _custom_op_key(api: str, kw: dict) -> str:
    """The dispatch key of a ``custom_op``/``triton_op`` function: its ``device_types`` when given,
    else CompositeExplicitAutograd (``triton_op`` for a triton op)."""
    dt = kw.get("device_types")
    if dt and dt != "None":
        return ", ".join(_keys_of(dt))
    return "CompositeExplicitAutograd" if api == "custom_op" else "triton_op"


def _runnable(regs):
    """The registrations of ``regs`` that run Python code for the op (an ``impl`` or a ``custom_op`` body)."""
    return (r for r in regs if r.role in ("impl", "default"))


def _run_rank(r: PyReg) -> tuple[int, int]:
    """Which registration runs on the accelerator: a device kernel (CUDA, PrivateUse1...) before
    the op's default (custom_op's function, Composite*), before host (CPU) and autograd ones; for
    one key, an explicit ``impl``/``register_kernel`` (which overrides) before the op's own function."""
    k = (r.key or "?").split(" ", 1)[0].split(",", 1)[0]
    if k.startswith("Autograd"):
        rank = 3
    elif k in _HOST_KEYS:
        rank = 2
    elif k in _DEFAULT_KEYS:
        rank = 1
    else:
        rank = 0
    return rank, 0 if r.role == "impl" else 1


def _role_word(r: PyReg) -> str:
    if r.role == "fake":
        return f"fake impl {r.func}"
    if r.role == "default":
        return f"default impl {r.func} ({r.api})"
    if r.role == "def":
        return "schema"
    return f"{r.key} impl {r.func}"


def _under(cond: str | None) -> str:
    return f" (under #if {cond})" if cond else ""


def _ns_words(name: str) -> set[str]:
    import re

    return {w for w in re.split(r"[^A-Za-z0-9]+", name.lower()) if w and w not in _GENERIC_WORDS and len(w) > 1}


def _for_namespace(provs: list, ns: str, built_here: bool) -> list:
    """Of the platform's kernel modules (``OpRegistry.providers()``), those that can hold torch-op namespace ``ns``:
    those named like it (:func:`model.extension_holds`: ``pkg._moe_C`` for ``_moe_C``; ``pkg._C`` and
    ``pkg._C_stable_libtorch`` for ``_C`` and ``_C_cache_ops``, sub-namespaces a ``_C`` module registers). When none is and the workspace's C++ registers the
    namespace (``built_here``), all of them: the plugin's extensions are built from that C++. Else those sharing a
    word with it: a namespace nothing here registers (``oink``, registered by an outside package) is not said to
    come from the platform's extensions."""
    named = [p for p in provs if extension_holds(p[0], ns)]
    if named or built_here:
        return named or list(provs)
    words = _ns_words(ns)
    return [p for p in provs if words & _ns_words(p[0])]


def _looks_like_extension(module: str) -> bool:
    """``pkg._C``, ``pkg._kernels``, ``pkg.ops``, ``pkg_kernels``: a module that registers ops."""
    import re

    parts = module.split(".")
    for i, p in enumerate(parts):
        if i and p.startswith("_") and not p.startswith("__"):
            return True
        if re.search(r"(?:^|_)(?:ops?|kernels?|C)(?:$|_)", p):
            return True
    return False
