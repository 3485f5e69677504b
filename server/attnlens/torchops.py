"""Torch custom ops: from ``torch.ops.<ns>.<op>`` to where the op is registered.

Sources, all static (nothing is loaded):

1. C++ in the workspace (``csrc/`` and any C++/CUDA file under the root):
   ``TORCH_LIBRARY*``/``STABLE_TORCH_LIBRARY*`` blocks, ``ops.def`` schemas and
   ``ops.impl`` bindings with the C++ function definition they bind
   (tree-sitter-cpp, :mod:`attnlens.cppindex`).
2. Python registrations in the workspace and in installed packages reached by
   the op's namespace: ``direct_register_custom_op(op_name=..., op_func=...)``
   (vLLM's helper, namespace ``vllm`` unless ``target_lib`` says otherwise),
   ``@torch.library.custom_op("ns::op")``, ``@torch.library.triton_op``,
   ``Library("ns", ...).define/impl``. Installed packages are pre-filtered by
   a byte search for the op name, so only a handful of files are parsed.
3. Schemas baked into native extensions (``.so`` ``.rodata``) when no source
   declares the op (:mod:`attnlens.elfscan`, cached by file stamp).

The *provider* of compiled ops is read from the platform's ``import_kernels``
(the modules it imports, with their guards): e.g. a workspace extension that
is not built in this checkout, or a precompiled package that is not installed.
"""

from __future__ import annotations

import os

from . import model as M
from .model import Final, Hop, Registration



class CppNotReady(BaseException):
    """The C++ index is being built by a worker process and is not ready yet.

    Raised by :meth:`TorchOps.cpp` only while a caller has set ``cpp_pending`` (the CLI's rules
    engine, which then checks the module again once the worker is done). A BaseException, so
    that no ``except Exception`` on the way turns it into a wrong answer: analysis state is
    only memoised after a computation completes, so an interrupted one leaves nothing behind.
    """


class OpRegistry:
    def __init__(self, resolver):
        self.r = resolver
        self._cpp = None
        self._cpp_gen = -1
        self._py_cache: dict = {}
        self._ext_cache: dict = {}
        self._cpp_files: list = []
        self._prefetch = None
        self._providers_gen = -1
        self._providers = None

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
        """Build the C++ index a few files at a time (yields the number of files done after each
        ``budget_s`` of work): background indexing in the server never holds its one analysis
        thread for the whole C++ tree. Afterwards :meth:`cpp` returns the index at once."""
        if self._cpp is None:
            yield from self._build_cpp(budget_s)

    def _build_cpp(self, budget_s: float | None):
        """Set ``self._cpp``: the whole index from the cache when no C++ file changed, else from
        per-file summaries (cached by content). Yields progress every ``budget_s`` (never when None)."""
        try:
            from . import cppindex
        except Exception:  # pragma: no cover - tree-sitter missing
            self._cpp = _EmptyCpp()
            return
        import hashlib
        import time

        cache = self.r.index.cache
        files = list(cppindex.iter_cpp_files(self.r.index.root))
        self._cpp_files = files
        h = hashlib.sha1()
        for f in sorted(files):
            try:
                st = os.stat(f)
                h.update(f"{f}|{st.st_mtime_ns}|{st.st_size}\n".encode())
            except OSError:
                pass
        fp = h.hexdigest()[:24]
        whole = cache.load_pickle("derived", f"cpp-{fp}")
        if whole is not None:
            self._cpp = whole
            return
        summaries = []
        t0 = time.perf_counter()
        try:
            for s in cppindex.iter_file_summaries(files, load=self._cpp_load, store=self._cpp_store):
                summaries.append(s)
                if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                    yield len(summaries)
                    t0 = time.perf_counter()
            index = cppindex.CppIndex(summaries)
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            self._cpp = _EmptyCpp()
            return
        self._cpp = index
        cache.store_pickle("derived", f"cpp-{fp}", index)

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
        from .resolver import Walk

        out = []
        seen = set()
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
                    if not target or target in seen:
                        continue
                    seen.add(target)
                    loc = self.r.index.locate(target)
                    if loc is None:
                        top = target.split(".", 1)[0]
                        status = "not built in this checkout" if self.r.index.locate(top) is not None and top in {m.split(".")[0] for m in self.r.index.ws_files} else "not installed"
                    else:
                        status = f"installed at {loc.path}"
                    out.append((target, self.r.guard_text(b.guards), status))
        self._providers = out
        return out

    # -- python registrations ----------------------------------------------------
    def python_registrations(self, ns: str, op: str) -> list[tuple]:
        """[(module, callsite-or-decorator, function text, dispatch key)]."""
        key = (ns, op, self.r.index.generation)
        if key in self._py_cache:
            return self._py_cache[key]
        if self._py_cache and next(iter(self._py_cache))[2] != self.r.index.generation:
            self._py_cache.clear()  # entries of older generations can never hit again
        found = []
        mods = []
        for name, path in sorted(self.r.index.ws_files.items()):
            text = self.r.index.source_text(path)
            if text is not None and op in text:
                m = self.r.index.module(name)
                if m is not None:
                    mods.append(m)
        mods += self._installed_candidates(ns, op)
        for m in mods:
            found.extend(self._scan_module(m, ns, op))
        self._py_cache[key] = found
        return found

    def _installed_candidates(self, ns: str, op: str):
        """Installed modules that mention the op name (byte pre-filter)."""
        pkgs = {"vllm"} if ns == "vllm" else set()
        pkgs.add(ns.lstrip("_").split("_")[0])
        out = []
        needle = op.encode()
        for pkg in sorted(pkgs):
            loc = self.r.index.locate(pkg)
            if loc is None or loc.kind != "py" or not loc.is_package or self.r.index.is_workspace_path(loc.path):
                continue
            from .index import iter_py_bytes

            for p, data in iter_py_bytes(os.path.dirname(loc.path), ("tests", "benchmarks")):
                if needle in data and (b"register_custom_op" in data or b"custom_op" in data or b"Library(" in data):
                    m = self.r.index.module_for_path(p)
                    if m is not None:
                        out.append(m)
        return out

    def _scan_module(self, m, ns: str, op: str) -> list[tuple]:
        out = []
        s = m.summary
        for cs in s.calls:
            last = cs.func.rpartition(".")[2]
            if last == "direct_register_custom_op":
                kw = dict(cs.kw_texts)
                name = (kw.get("op_name") or "").strip("'\"") or (cs.str_args[0] if cs.str_args else None)
                func = kw.get("op_func") or (cs.arg_texts[1] if len(cs.arg_texts) > 1 else "")
                lib_ns = "vllm"
                tl = kw.get("target_lib")
                if tl:
                    lib_ns = self._library_ns(m, cs.scope, tl) or "?"
                key = (kw.get("dispatch_key") or "").strip("'\"") or "CUDA (current_platform.dispatch_key)"
                if name == op and lib_ns == ns:
                    out.append((m, cs.line, cs.scope, func, key, f"direct_register_custom_op(op_name=\"{op}\")"))
            elif last == "impl" and cs.str_args and cs.str_args[0] in (op, f"{ns}::{op}"):
                base = cs.func.rpartition(".")[0]
                lib_ns = self._library_ns(m, cs.scope, base) if base else None
                if cs.str_args[0] == f"{ns}::{op}" or lib_ns == ns:
                    func = cs.arg_texts[1] if len(cs.arg_texts) > 1 else ""
                    key = (cs.str_args[2] if len(cs.str_args) > 2 and cs.str_args[2] else dict(cs.kw_texts).get("dispatch_key", "")).strip("'\"")
                    out.append((m, cs.line, cs.scope, func, key or "?", f"{cs.func}(\"{cs.str_args[0]}\")"))
        for q, f in s.functions.items():
            for d in f.decorators:
                last = d.func.rpartition(".")[2]
                if last in ("custom_op", "triton_op") and d.str_args and d.str_args[0] == f"{ns}::{op}":
                    out.append((m, d.line, "", q, "CompositeExplicitAutograd" if last == "custom_op" else "triton_op", f"@{d.func}(\"{ns}::{op}\")"))
        return out

    def _library_ns(self, m, scope: str, text: str) -> str | None:
        from .resolver import Walk

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
        cands = []
        for pkg in {"vllm", *(m.split(".")[0] for m in self.r.index.ws_files)}:
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
        for p in sorted(cands):
            info = self._ext_info(p, elfscan)
            if info is None:
                continue
            for sch in info.get("schemas", []):
                if sch.startswith(op + "(") or sch.startswith(op + "."):
                    if not info.get("namespaces") or ns in info.get("namespaces", []):
                        return p, sch
        return None

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
    def follow_op(self, v, w) -> Final:
        ns = v.extra.get("ns") or v.qual.split("::")[0]
        op = v.extra.get("op") or v.qual.split("::")[-1]
        qual = f"{ns}::{op}"
        w.add(Hop("torch_op", "", 0, qual, f"torch.ops.{ns}.{op}: dispatched by the torch dispatcher"))
        # Python registrations first: the op then runs Python code we can follow
        py = self.python_registrations(ns, op)
        if py:
            m, line, scope, func, key, text = py[0]
            w.add(Hop("op_registration", m.path, line, qual, f"{text} in {m.name} (dispatch key {key})"))
            if func:
                fv = self.r.resolve_dotted(m, scope, func, w, line=line)
                fin = self.r.follow(fv, w)
                fin.registrations.append(Registration(m.path, line, key, "python", func, fv.path, fv.line))
                if fin.kind == M.UNRESOLVED:
                    fin.reason = (fin.reason or "") + f" (op_func of {qual})"
                return fin
        cpp = self.cpp()
        info = cpp.op(qual)
        regs: list[Registration] = []
        schema = None
        path = line = None
        if info is not None:
            for d in info.defs:
                regs.append(Registration(d.path, d.line, None, "cpp_def", schema=d.schema))
                schema = schema or d.schema
                if path is None:
                    path, line = d.path, d.line
            for im in info.impls:
                dfn = getattr(im, "definition", None)
                regs.append(Registration(im.path, im.line, im.dispatch_key, "cpp_impl", im.function,
                                         getattr(dfn, "path", None), getattr(dfn, "line", None)))
            impl_with_fn = [r for r in regs if r.kind == "cpp_impl" and r.function_path]
            for r in regs:
                if r.kind == "cpp_def":
                    w.add(Hop("op_registration", r.path, r.line, qual, f"ops.def schema: {r.schema}"))
            for r in regs:
                if r.kind == "cpp_impl":
                    w.add(Hop("op_registration", r.path, r.line, qual, f"ops.impl for {r.dispatch_key} binds {r.function}"))
            if impl_with_fn:
                r = impl_with_fn[0]
                w.add(Hop("definition", r.function_path or "", r.function_line or 0, r.function or "", "C++ function bound by ops.impl"))
        providers = [f"{m} ({status}{', if ' + g if g else ''})" for m, g, status in self.providers()]
        if not regs:
            ext = self.extension_schema(ns, op)
            if ext is not None:
                p, sch = ext
                regs.append(Registration(p, 0, None, "extension_schema", schema=sch))
                schema = sch
                path = p
                w.add(Hop("extension", p, 0, qual, f"schema found in native extension {os.path.basename(p)} (no source in the workspace)"))
        detail = "registered in C++" if any(r.kind.startswith("cpp") for r in regs) else (
            "schema only from a native extension" if regs else "no registration found in the workspace or installed packages")
        pkg = self.providers()[0][0].split(".", 1)[0] if self.providers() else ns
        fin = Final(M.TORCH_OP, path, line, qual, package=pkg, detail=detail, registrations=regs, schema=schema,
                    providers=providers)
        if not regs:
            fin.reason = f"no registration of {qual} found (searched workspace C++/Python, installed Python, extension schemas)"
        return fin


class _EmptyCpp:
    def op(self, qualname):
        return None

    def ops(self):
        return []
