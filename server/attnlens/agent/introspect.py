"""Runtime introspection of a final target, inside the target interpreter.

Standalone (stdlib only at import time).  Kinds:

* ``python``         signature, source file and def line, docstring, module file,
                     sha256 of a native extension module, ``__wrapped__`` chain,
                     whether the callable swallows keywords in ``**kwargs``
* ``torch_op``       schema per overload, ``_dispatch_dump`` parsed per key with
                     file:line, has-kernel per dispatch key, ``custom_op``'s user
                     function, and which loaded library carries the op
* ``triton_kernel``  autotune/heuristics wrappers, parameters and constexprs,
                     def line, source hash
* ``extension``      a module name or a ``.so`` path: file, size, sha256, the
                     registration mechanism (stable ABI vs classic libtorch vs
                     plain CPython), ops the import registered

Import errors are findings: they come back as ``status: "import_error"`` with
the verbatim message and traceback.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys

from . import targets as T

_SKIP_TOP = {"torch", "numpy", "triton", "_ctypes", "_socket", "_ssl", "_hashlib", "_decimal", "_json",
             "_pickle", "_struct", "_bz2", "_lzma", "_sqlite3", "yaml", "_yaml", "sympy", "mpmath", "markupsafe"}
KEYS = ["CPU", "CUDA", "HIP", "PrivateUse1", "Meta", "CompositeExplicitAutograd",
        "CompositeImplicitAutograd", "Autograd", "AutogradCUDA", "AutogradPrivateUse1"]


def introspect(params: dict) -> dict:
    symbol = params.get("symbol") or ""
    kind = params.get("kind") or "auto"
    base = {"symbol": symbol, "kind": kind}
    try:
        pre = T.prepare(params.get("module"), params.get("load_library"))
        base.update({"prepared": pre} if pre else {})
        if kind == "extension":
            return {**base, "status": "ok", **introspect_extension(symbol, load=bool(params.get("load")))}
        if kind == "torch_op" or (kind == "auto" and T.is_op_symbol(symbol)):
            return {**base, "kind": "torch_op", "status": "ok", **introspect_op(symbol)}
        obj, mod_name, attr = T.resolve_python(symbol)
    except T.TargetImportError as e:
        return {**base, "status": "import_error", "import_error": e.to_dict()}
    except T.TargetNotFound as e:
        return {**base, "status": "not_found", "message": str(e)}
    kern, chain = T.triton_unwrap(obj)
    if kind == "triton_kernel" or (kind == "auto" and kern is not None):
        if kern is None:
            return {**base, "status": "not_found",
                    "message": f"{symbol} is a {type(obj).__module__}.{type(obj).__qualname__}, not a Triton kernel"}
        return {**base, "kind": "triton_kernel", "status": "ok", **introspect_triton(kern, chain)}
    return {**base, "kind": "python", "status": "ok", "module": mod_name, "attr": attr, **introspect_python(obj)}


# ---------------------------------------------------------------------------


def _params(sig: inspect.Signature) -> list:
    out = []
    for p in sig.parameters.values():
        d = {"name": p.name, "kind": p.kind.name}
        if p.default is not inspect.Parameter.empty:
            d["default"] = _short_repr(p.default)
        if p.annotation is not inspect.Parameter.empty:
            d["annotation"] = _ann(p.annotation)
        out.append(d)
    return out


def _ann(a) -> str:
    if isinstance(a, str):
        return a
    return getattr(a, "__qualname__", None) or repr(a)


def _short_repr(v, n: int = 120) -> str:
    try:
        r = repr(v)
    except Exception:  # noqa: BLE001
        r = f"<{type(v).__name__}>"
    return r if len(r) <= n else r[: n - 3] + "..."


def introspect_python(obj) -> dict:
    out: dict = {"type": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    chain = []
    cur = obj
    for _ in range(16):
        w = getattr(cur, "__wrapped__", None)
        if w is None or w is cur:
            break
        chain.append(getattr(cur, "__qualname__", None) or type(cur).__name__)
        cur = w
    if chain:
        out["wrapped_by"] = chain
    target = cur
    out["qualname"] = getattr(target, "__qualname__", None)
    out["defined_in"] = getattr(target, "__module__", None)
    try:
        sig = inspect.signature(obj)
        out["signature"] = str(sig)
        out["parameters"] = _params(sig)
        out["var_keyword"] = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
        out["var_positional"] = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
    except (TypeError, ValueError) as e:
        out["signature"] = None
        out["signature_error"] = f"{type(e).__name__}: {e}"
    doc = inspect.getdoc(target) or ""
    out["doc"] = doc[:4000]
    if out.get("signature") is None and doc:
        # pybind11 / nanobind put the signature on the docstring's first line
        out["doc_signature"] = doc.splitlines()[0]
    self_obj = getattr(target, "__self__", None)
    if self_obj is not None and not inspect.ismodule(self_obj):
        out["bound_to_type"] = type(self_obj).__name__  # pybind11 function record type carries the ABI id
    try:
        src = inspect.getsourcefile(target)
    except TypeError:
        src = None
    out["source_file"] = src
    out["line"] = T.def_line(target) if src else None
    if src:
        try:
            lines, _ = inspect.getsourcelines(target)
            out["source_lines"] = len(lines)
        except (OSError, TypeError):
            pass
        out["source_sha256"] = T.file_sha256(src)
    mod = sys.modules.get(out["defined_in"] or "")
    mfile = getattr(mod, "__file__", None) if mod else None
    out["module_file"] = mfile
    if T.is_extension_file(mfile):
        out["extension"] = _file_facts(mfile)
    return out


def introspect_op(symbol: str) -> dict:
    import torch

    obj, qual, overload = T.resolve_op(symbol)
    ns, op = qual.split("::")
    packet = getattr(getattr(torch.ops, ns), op)
    res: dict = {"qualname": qual, "namespace": ns, "op": op}
    ovs = list(packet.overloads())
    res["overloads"] = ovs
    wanted = [overload] if overload else ovs
    per = {}
    for ov in wanted:
        name = qual if ov == "default" else f"{qual}.{ov}"
        entry: dict = {}
        try:
            o = getattr(packet, ov)
            sch = o._schema
            entry["schema"] = str(sch)
            entry["is_mutable"] = bool(getattr(sch, "is_mutable", False))
            entry["arguments"] = [
                {"name": a.name, "type": str(a.type),
                 "mutable": bool(a.alias_info is not None and a.alias_info.is_write),
                 **({"default": _short_repr(a.default_value)} if a.has_default_value() else {})}
                for a in sch.arguments
            ]
            entry["returns"] = [str(r.type) for r in sch.returns]
            entry["tags"] = [str(t) for t in getattr(o, "tags", [])]
        except Exception as e:  # noqa: BLE001
            entry["schema_error"] = f"{type(e).__name__}: {e}"
        try:
            entry["dispatch"] = T.parse_dispatch_dump(torch._C._dispatch_dump(name))
        except Exception as e:  # noqa: BLE001
            entry["dispatch_error"] = f"{type(e).__name__}: {e}"
        has = {}
        for k in KEYS:
            try:
                has[k] = bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, k))
            except Exception:  # noqa: BLE001
                pass
        entry["has_kernel"] = has
        per[ov] = entry
    res["per_overload"] = per
    # torch.library.custom_op: the dump points into torch; the user function is in OPDEFS
    try:
        from torch._library import custom_ops as _co

        opdef = _co.OPDEFS.get(qual)
        if opdef is not None:
            fn = getattr(opdef, "_init_fn", None)
            if fn is not None:
                res["custom_op"] = {"function": getattr(fn, "__qualname__", None),
                                    "module": getattr(fn, "__module__", None),
                                    "file": _safe(lambda: inspect.getsourcefile(fn)),
                                    "line": T.def_line(fn)}
    except Exception:  # noqa: BLE001
        pass
    libs = sorted(getattr(torch.ops, "loaded_libraries", set()) or [])
    res["loaded_libraries"] = libs
    res["providers"] = _op_providers(op, ns, res, libs)
    return res


def _op_providers(op: str, ns: str, res: dict, libs: list) -> list:
    """Which file registered each kernel: a Python file, or a loaded library carrying the op."""
    provs = []
    files = set()
    for entry in res.get("per_overload", {}).values():
        for k in (entry.get("dispatch") or {}).get("kernels", []):
            files.add(k["file"])
        dbg = (entry.get("dispatch") or {}).get("debug")
        if dbg and "registered at " in dbg:
            files.add(dbg.split("registered at ", 1)[1].rsplit(":", 1)[0])
    for f in sorted(files):
        if f.endswith(".py"):
            provs.append({"kind": "python", "file": f, "exists": os.path.exists(f)})
    # libraries whose read-only data carries the op name next to the namespace
    cands = list(libs)
    for name, m in list(sys.modules.items()):
        if name.split(".")[0] in _SKIP_TOP:
            continue
        mf = getattr(m, "__file__", None)
        if T.is_extension_file(mf) and mf not in cands:
            cands.append(mf)
    needle_op = op.encode() + b"("
    needle_ns = ns.encode()
    for lib in cands[:32]:
        try:
            if os.path.getsize(lib) > (1 << 29):
                continue
            with open(lib, "rb") as f:
                data = f.read()
        except OSError:
            continue
        if needle_op in data and needle_ns in data:
            provs.append({"kind": "library", "file": lib, "sha256": T.file_sha256(lib), "size": len(data)})
    return provs


def introspect_triton(kern, chain: list) -> dict:
    fn = kern.fn
    out: dict = {"wrappers": chain, "object_type": type(kern).__name__,
                 "interpreted": type(kern).__name__ == "InterpretedFunction"}
    out["name"] = getattr(fn, "__name__", None)
    out["qualname"] = getattr(fn, "__qualname__", None)
    out["module"] = getattr(fn, "__module__", None)
    out["file"] = _safe(lambda: inspect.getsourcefile(fn))
    out["decorator_line"] = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
    out["line"] = T.def_line(fn)
    params = []
    if hasattr(kern, "params") and kern.params and hasattr(kern.params[0], "is_constexpr"):
        for p in kern.params:
            d = {"name": p.name, "is_constexpr": bool(p.is_constexpr)}
            ann = getattr(p, "annotation", None)
            if ann:
                d["annotation"] = str(ann)
            if getattr(p, "has_default", False):
                d["default"] = _short_repr(p.default)
            params.append(d)
    else:
        sig = inspect.signature(fn)
        for p in sig.parameters.values():
            ann = p.annotation
            ann_s = None if ann is inspect.Parameter.empty else (ann if isinstance(ann, str) else
                                                                   getattr(ann, "__name__", None) or repr(ann))
            d = {"name": p.name, "is_constexpr": bool(ann_s and "constexpr" in ann_s)}
            if ann_s:
                d["annotation"] = ann_s
            if p.default is not inspect.Parameter.empty:
                d["default"] = _short_repr(p.default)
            params.append(d)
    out["parameters"] = params
    out["arg_names"] = [p["name"] for p in params]
    out["constexprs"] = [p["name"] for p in params if p["is_constexpr"]]
    if out["file"]:
        out["source_sha256"] = T.file_sha256(out["file"])
    return out


_MARKERS = {
    "stable_abi": [b"aoti_torch_library_init_fragment", b"aoti_torch_library_init_impl", b"aoti_torch_library_def"],
    "libtorch": [b"_ZN5torch7LibraryC1E", b"_ZN5torch7Library4_defE", b"_ZN5torch7Library5_implE",
                 b"_ZN5torch7Library5_implEPKcONS_"],
    "pybind11": [b"pybind11"],
    "nanobind": [b"nanobind"],
}


def _file_facts(path: str) -> dict:
    d: dict = {"file": path}
    try:
        st = os.stat(path)
        d["size"] = st.st_size
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        d["error"] = f"{type(e).__name__}: {e}"
        return d
    import hashlib

    d["sha256"] = hashlib.sha256(data).hexdigest()
    mech = [k for k, ms in _MARKERS.items() if any(m in data for m in ms)]
    d["mechanisms"] = mech
    d["exports_pyinit"] = b"PyInit_" in data
    return d


def introspect_extension(symbol: str, load: bool = False) -> dict:
    out: dict = {}
    before = _all_ops()
    if os.path.sep in symbol or T.is_extension_file(symbol):
        path = os.path.abspath(symbol)
        out["file_facts"] = _file_facts(path)
        if load:
            import torch

            try:
                torch.ops.load_library(path)
                out["loaded"] = True
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                raise T.TargetImportError(path, e) from e
    else:
        try:
            mod = importlib.import_module(symbol)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            raise T.TargetImportError(symbol, e) from e
        mfile = getattr(mod, "__file__", None)
        out["module_file"] = mfile
        out["doc"] = (getattr(mod, "__doc__", None) or "")[:2000]
        out["public_names"] = sorted(n for n in dir(mod) if not n.startswith("_"))[:300]
        if mfile:
            out["file_facts"] = _file_facts(mfile)
    after = _all_ops()
    if before is not None and after is not None:
        out["ops_registered"] = sorted(set(after) - set(before))[:2000]
    return out


def _all_ops():
    if "torch" not in sys.modules:
        return None
    try:
        return list(sys.modules["torch"]._C._dispatch_get_all_op_names())
    except Exception:  # noqa: BLE001
        return None


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None
