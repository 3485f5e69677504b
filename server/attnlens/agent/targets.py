"""Resolve a target symbol to a live object inside the target interpreter.

Standalone (stdlib only at import time); runs inside the agent.

Accepted spellings:

* ``package.module:attr.path``   explicit module / attribute split
* ``package.module.attr``        dotted; the longest importable module prefix wins
* ``ns::op`` / ``ns::op.overload``            a torch op
* ``torch.ops.ns.op`` / ``torch.ops.ns.op.overload``

An ImportError raised *by the code being imported* (a backend whose native
library is missing, say) is not a failure of the tool: it is evidence, so it is
raised as :class:`TargetImportError` carrying the verbatim message and traceback.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import re
import sys
import traceback

_OP_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?$")
_TORCH_OPS_RE = re.compile(
    r"^torch\.ops\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?$"
)


class TargetImportError(Exception):
    """The target (or a module it needs) failed to import: a finding, not a tool error."""

    def __init__(self, module: str, exc: BaseException):
        self.module = module
        self.exc = exc
        self.type = type(exc).__name__
        self.message = str(exc)
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        super().__init__(f"importing {module} failed: {self.type}: {self.message}")

    def to_dict(self) -> dict:
        return {
            "module": self.module,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback[-8000:],
        }


class TargetNotFound(Exception):
    """The module imported but the attribute / op does not exist."""


def parse_op(symbol: str):
    """Return (namespace, op, overload|None) for a torch-op spelling, else None."""
    m = _OP_RE.match(symbol) or _TORCH_OPS_RE.match(symbol)
    if not m:
        return None
    return m.group(1), m.group(2), m.group(3)


def is_op_symbol(symbol: str) -> bool:
    return parse_op(symbol) is not None


def _import(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        # Only "this very module (or a parent of it) does not exist" means
        # "try a shorter prefix"; a missing dependency inside it is evidence.
        missing = e.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            return None
        raise TargetImportError(name, e) from e
    except BaseException as e:  # noqa: BLE001 - anything raised at import time is evidence
        if isinstance(e, KeyboardInterrupt):
            raise
        raise TargetImportError(name, e) from e


def prepare(module: str | None = None, load_library: str | None = None) -> dict:
    """Import a provider module and/or load a torch extension library first."""
    done: dict = {}
    if load_library:
        import torch  # noqa: F401

        try:
            torch.ops.load_library(load_library)
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            raise TargetImportError(load_library, e) from e
        done["load_library"] = os.path.abspath(load_library)
    if module:
        mod = _import(module)
        if mod is None:
            raise TargetImportError(module, ModuleNotFoundError(f"No module named {module!r}", name=module))
        done["module"] = module
        done["module_file"] = getattr(mod, "__file__", None)
    return done


def resolve_python(symbol: str):
    """Resolve ``mod:attr.path`` or dotted ``mod.attr`` to (object, module_name, attr_path)."""
    if ":" in symbol and "::" not in symbol:
        mod_name, _, attr_path = symbol.partition(":")
        mod = _import(mod_name)
        if mod is None:
            raise TargetImportError(mod_name, ModuleNotFoundError(f"No module named {mod_name!r}", name=mod_name))
        return _getattr_path(mod, attr_path, mod_name), mod_name, attr_path
    # the longest importable module prefix, found by importing prefixes from the shortest up, so that
    # an error raised inside ``pkg.mod`` is blamed on ``pkg.mod`` (evidence), not on ``pkg.mod.attr``
    parts = symbol.split(".")
    mod, mod_name, i = None, "", 0
    while i < len(parts):
        name = ".".join(parts[: i + 1])
        m = _import(name)
        if m is None:
            break
        mod, mod_name, i = m, name, i + 1
    if mod is None:
        raise TargetImportError(parts[0], ModuleNotFoundError(f"No module named {parts[0]!r}", name=parts[0]))
    attr_path = ".".join(parts[i:])
    if not attr_path:
        return mod, mod_name, ""
    return _getattr_path(mod, attr_path, mod_name), mod_name, attr_path


def _getattr_path(obj, attr_path: str, mod_name: str):
    cur = obj
    walked = mod_name
    for part in [p for p in attr_path.split(".") if p]:
        try:
            cur = getattr(cur, part)
        except AttributeError as e:
            raise TargetNotFound(f"{walked} has no attribute {part!r}") from e
        walked += "." + part
    return cur


def resolve_op(symbol: str):
    """Return (packet_or_overload, qualname, overload)."""
    parsed = parse_op(symbol)
    if parsed is None:
        raise TargetNotFound(f"not a torch op spelling: {symbol}")
    ns, op, overload = parsed
    import torch

    qual = f"{ns}::{op}"
    try:
        torch._C._dispatch_find_schema_or_throw(qual, overload or "")
    except Exception as e:  # noqa: BLE001
        raise TargetNotFound(f"torch op {qual}{'.' + overload if overload else ''} is not registered: {e}") from e
    packet = getattr(getattr(torch.ops, ns), op)
    obj = getattr(packet, overload) if overload else packet
    return obj, qual, overload


def resolve(symbol: str, module: str | None = None, load_library: str | None = None):
    """Resolve any target spelling.  Returns (object, info dict)."""
    info: dict = {"symbol": symbol}
    info.update(prepare(module, load_library))
    if is_op_symbol(symbol):
        obj, qual, overload = resolve_op(symbol)
        info.update({"kind": "torch_op", "qualname": qual, "overload": overload})
        return obj, info
    obj, mod_name, attr_path = resolve_python(symbol)
    info.update({"kind": "python", "module": mod_name, "attr": attr_path})
    return obj, info


# ---------------------------------------------------------------------------
# describing what answered


def file_sha256(path: str, limit: int | None = None) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


_EXT_RE = re.compile(r"\.(so|pyd|dylib)(\.[0-9]+)*$")


def is_extension_file(path: str | None) -> bool:
    return bool(path) and bool(_EXT_RE.search(os.path.basename(str(path))))


def def_line(fn) -> int | None:
    """The line of the ``def`` itself (``co_firstlineno`` is the first decorator line)."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    first = code.co_firstlineno
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return first
    pat = re.compile(r"^\s*(async\s+)?def\s+" + re.escape(getattr(fn, "__name__", "")) + r"\b")
    for i, line in enumerate(lines):
        if pat.match(line):
            return start + i
    return first


def triton_unwrap(obj):
    """Follow Autotuner/Heuristics ``.fn`` down to the JIT/Interpreted function.

    Returns (innermost kernel object, [wrapper descriptions]) or (None, []) when
    ``obj`` is not a Triton kernel.
    """
    chain = []
    cur = obj
    for _ in range(8):
        cls = type(cur).__name__
        mod = type(cur).__module__ or ""
        if not mod.startswith("triton"):
            return None, []
        if cls == "Autotuner":
            configs = []
            for c in getattr(cur, "configs", []) or []:
                d = {"kwargs": dict(getattr(c, "kwargs", {}) or {})}
                for attr in ("num_warps", "num_stages", "num_ctas"):
                    if hasattr(c, attr):
                        d[attr] = getattr(c, attr)
                configs.append(d)
            chain.append({"wrapper": "autotune", "keys": list(getattr(cur, "keys", []) or []), "configs": configs})
            cur = cur.fn
        elif cls == "Heuristics":
            chain.append({"wrapper": "heuristics", "values": sorted((getattr(cur, "values", {}) or {}).keys())})
            cur = cur.fn
        elif cls in ("JITFunction", "InterpretedFunction") or hasattr(cur, "arg_names"):
            return cur, chain
        else:
            return None, []
    return None, []


def describe(obj, info: dict | None = None, device_key: str | None = None) -> dict:
    """A short provider description of a resolved callable, for evidence records."""
    info = dict(info or {})
    out: dict = {"symbol": info.get("symbol")}
    for k in ("module", "attr", "load_library", "module_file"):
        if info.get(k):
            out[k] = info[k]
    if info.get("kind") == "torch_op":
        out["kind"] = "torch_op"
        out.update(describe_op(info["qualname"], info.get("overload"), device_key))
        return out
    kern, chain = triton_unwrap(obj)
    if kern is not None:
        fn = kern.fn
        out.update(
            {
                "kind": "triton_kernel",
                "wrappers": [c["wrapper"] for c in chain],
                "qualname": getattr(fn, "__qualname__", None),
                "file": _safe(lambda: inspect.getsourcefile(fn)),
                "line": def_line(fn),
                "interpreted": type(kern).__name__ == "InterpretedFunction",
            }
        )
        if out.get("file"):
            out["file_sha256"] = file_sha256(out["file"])
        return out
    target = inspect.unwrap(obj) if callable(obj) else obj
    mod_name = getattr(target, "__module__", None) or info.get("module")
    mod = sys.modules.get(mod_name) if mod_name else None
    mod_file = getattr(mod, "__file__", None) if mod else None
    src = _safe(lambda: inspect.getsourcefile(target))
    out.update(
        {
            "kind": "extension" if (src is None and is_extension_file(mod_file)) else "python",
            "qualname": getattr(target, "__qualname__", None) or type(target).__name__,
            "defined_in": mod_name,
            "file": src or mod_file,
            "line": def_line(target) if src else None,
        }
    )
    if target is not obj:
        out["unwrapped_from"] = getattr(obj, "__qualname__", repr(obj)[:80])
    if out.get("file"):
        out["file_sha256"] = file_sha256(out["file"])
    return out


def describe_op(qual: str, overload: str | None, device_key: str | None = None) -> dict:
    import torch

    name = qual + (f".{overload}" if overload and overload != "default" else "")
    d: dict = {"qualname": qual, "overload": overload}
    try:
        packet = getattr(getattr(torch.ops, qual.split("::")[0]), qual.split("::")[1])
        ov = overload or "default"
        d["schema"] = str(getattr(packet, ov)._schema)
    except Exception as e:  # noqa: BLE001
        d["schema_error"] = f"{type(e).__name__}: {e}"
    try:
        dump = torch._C._dispatch_dump(name)
        d["dispatch"] = parse_dispatch_dump(dump)
        d["dispatch"].pop("raw", None)  # the parsed form is enough in an evidence record
        if device_key:
            d["device_key"] = device_key
            d["device_kernel"] = _safe(
                lambda: str(torch._C._dispatch_get_computed_kernel_for_dispatch_key(name, device_key))
            )
    except Exception as e:  # noqa: BLE001
        d["dispatch_error"] = f"{type(e).__name__}: {e}"
    d["loaded_libraries"] = sorted(getattr(torch.ops, "loaded_libraries", set()) or [])
    return d


_DUMP_LINE = re.compile(
    r"^(?P<key>[A-Za-z0-9_]+(?:\[alias\])?)(?P<inactive> \(inactive\))?: "
    r"(?P<what>fallthrough )?registered at (?P<file>.+?):(?P<line>\d+)(?P<rest>.*)$"
)


def parse_dispatch_dump(dump: str) -> dict:
    """Parse ``torch._C._dispatch_dump`` text into {schema, debug, kernels: [...]}."""
    res: dict = {"raw": dump, "kernels": []}
    for line in dump.splitlines():
        line = line.rstrip()
        if line.startswith("schema: "):
            res["schema"] = line[len("schema: "):]
        elif line.startswith("debug: "):
            res["debug"] = line[len("debug: "):]
        elif line.startswith("name: "):
            res["name"] = line[len("name: "):]
        elif line.startswith("alias analysis kind: "):
            res["alias_analysis"] = line[len("alias analysis kind: "):]
        else:
            m = _DUMP_LINE.match(line)
            if m:
                rest = m.group("rest").strip()
                sig = None
                if rest.startswith("::"):
                    sig = rest[2:].strip()
                res["kernels"].append(
                    {
                        "key": m.group("key"),
                        "file": m.group("file"),
                        "line": int(m.group("line")),
                        "inactive": bool(m.group("inactive")),
                        "fallthrough": bool(m.group("what")),
                        "signature": sig,
                    }
                )
    return res


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None
