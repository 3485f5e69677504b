"""Static index of C++/CUDA op registrations and function definitions.

This module answers "which C++ function runs for ``torch.ops.<ns>.<op>``" from
source code alone: no compiler, no torch, no language server.  It parses
``.cpp/.cc/.cu/.cuh/.h/.hpp`` (and ``.cxx/.hh/.hxx/.inl/.ipp/.hip``) files with the
tree-sitter C++ grammar (CUDA files too: the grammar copes with most CUDA
syntax, and the constructs it does not know only produce local ``ERROR`` nodes)
and extracts, per file:

* **registration blocks**: ``TORCH_LIBRARY(ns, m)``,
  ``TORCH_LIBRARY_FRAGMENT(ns, m)``, ``TORCH_LIBRARY_IMPL(ns, KEY, m)``, their
  ``STABLE_`` twins from ``torch/csrc/stable/library.h``, and vLLM's
  ``TORCH_LIBRARY_EXPAND(NAME, m)`` / ``TORCH_LIBRARY_IMPL_EXPAND(NAME, KEY, m)``
  where ``NAME`` may be ``TORCH_EXTENSION_NAME`` or
  ``CONCAT(TORCH_EXTENSION_NAME, _cache_ops)``; the raw expression is kept and
  resolved with the ``extension_name`` parameter (``"_C"`` by default, so the
  latter becomes ``_C_cache_ops``).  tree-sitter sees ``MACRO(a, b) { ... }``
  as a function definition; the macro is found by a text scan and its
  arguments are read textually, so odd shapes (``ERROR`` nodes, nested
  ``CONCAT``) do not matter.
* **op definitions** ``m.def("name(schema) -> ret")`` (adjacent string
  literals are joined, raw strings and ``TORCH_SELECTIVE_SCHEMA("...")`` are
  unwrapped), ``m.def("name", &fn)`` (which also registers ``fn`` as the
  ``CompositeImplicitAutograd`` kernel, as torch does);
* **op implementations** ``m.impl("name", &fn)``, ``m.impl("name",
  TORCH_BOX(&fn))``, ``m.impl("name", torch::kCUDA, &fn)``, ``m.impl("name",
  torch::dispatch(key, fn))``, ``m.impl("name", fn)``.  The dispatch key is
  the explicit one, else the ``*_IMPL`` block's key, else
  ``CompositeImplicitAutograd`` (torch's catch-all for an ``impl`` in a
  ``TORCH_LIBRARY``/``FRAGMENT`` block);
* **function definitions** (name, qualified name through enclosing
  namespaces/classes, 1-based line of the declarator, one-line signature,
  whether it is a ``__global__`` CUDA kernel).

**CUDA.**  Before parsing, CUDA-only syntax the grammar does not know
(``__global__``, ``__device__``, ``__launch_bounds__(...)``, ``<<<grid,
block>>>``, ``CUTLASS_DEVICE``...) is blanked with spaces of the same length, so
byte offsets and lines are unchanged; texts (signatures, the ``__global__``
test) are read from the original bytes.  A function whose braces are split by
``#if`` ends up inside an ``ERROR`` node; a ``function_declarator`` followed by
``{`` there is still recorded.  ``errors`` entries starting with ``syntax:``
only count the remaining ``ERROR``/``MISSING`` nodes and are informational.

**Preprocessor caveat.**  No preprocessing happens: both sides of every
``#if``/``#ifdef``/``#else`` are indexed, so an op defined differently for ROCm
and CUDA has two ``OpDef`` entries and a function may have several
definitions.  Each registration (``OpDef``, ``OpImpl``, ``RegistrationBlock``) carries
the build-flag ``condition`` it sits under, read from the tree-sitter
``preproc_ifdef``/``preproc_if``/``preproc_elif``/``preproc_elifdef``/``preproc_else``
nodes around it (inside the block or around the whole block), in C preprocessor
syntax, outermost first, joined by ``&&``: ``#ifndef USE_ROCM`` gives
``!defined(USE_ROCM)``, the ``#else`` of ``#ifdef USE_ROCM`` gives
``!defined(USE_ROCM)``, an ``#elif B`` after ``#if A`` gives ``!A && B``.  Include
guards (``#ifndef X`` directly followed by ``#define X``) are not conditions.  Where
the tree lost the directive structure (an ``ERROR`` node on the way up), the
directives are read from the text instead.  Commented-out code is ignored.  Macro-generated registrations
(a macro that expands to ``m.def``) are not seen.

Positions: ``line`` and ``col`` are 1-based; ``col`` counts Unicode code points
from the start of the line.

The per-file result (:class:`FileSummary`) is a plain, JSON-serialisable value
(``to_json()``/``from_json()``), so callers can cache it by content hash;
:func:`build_index` takes ``load``/``store`` callbacks for that.  Importing this
module is cheap: tree-sitter is imported on first parse, and one parser is
created per thread.
"""

from __future__ import annotations

import bisect
import hashlib
import os
import re
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

__all__ = [
    "SUMMARY_FORMAT",
    "CPP_SUFFIXES",
    "OpDef",
    "OpImpl",
    "CppFunction",
    "RegistrationBlock",
    "FileSummary",
    "SchemaArg",
    "Schema",
    "ResolvedImpl",
    "OpInfo",
    "CppIndex",
    "parse_schema",
    "summarize_cpp",
    "iter_cpp_files",
    "build_index",
    "resolve_namespace",
]

#: Bump when the extraction logic or the JSON layout changes (stale caches are refused).
SUMMARY_FORMAT = 2

CPP_SUFFIXES = frozenset(
    {".cpp", ".cc", ".cxx", ".c++", ".cu", ".cuh", ".hip", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp"}
)

#: Directory names never descended into by :func:`iter_cpp_files`.
SKIP_DIRS = frozenset(
    {
        ".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".tox",
        ".mypy_cache", ".pytest_cache", "build", "dist", "_build", ".cache", ".eggs",
        "site-packages", ".attnlens-cache",
    }
)
_SKIP_DIR_PREFIXES = ("build-", "build_", "cmake-build-")

#: Files larger than this are not parsed (an error is recorded instead).
MAX_FILE_BYTES = 16 * 1024 * 1024

#: ``impl`` without a dispatch key in a DEF/FRAGMENT block is torch's catch-all kernel.
CATCH_ALL_KEY = "CompositeImplicitAutograd"

_BLOCK_MACROS = {
    # name: (kind, number of arguments)
    "TORCH_LIBRARY": ("def", 2),
    "TORCH_LIBRARY_FRAGMENT": ("fragment", 2),
    "TORCH_LIBRARY_IMPL": ("impl", 3),
    "STABLE_TORCH_LIBRARY": ("def", 2),
    "STABLE_TORCH_LIBRARY_FRAGMENT": ("fragment", 2),
    "STABLE_TORCH_LIBRARY_IMPL": ("impl", 3),
    "TORCH_LIBRARY_EXPAND": ("def", 2),
    "TORCH_LIBRARY_FRAGMENT_EXPAND": ("fragment", 2),
    "TORCH_LIBRARY_IMPL_EXPAND": ("impl", 3),
}
_BLOCK_RE = re.compile(
    rb"\b((?:STABLE_)?TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?(?:_EXPAND)?)[ \t]*(?:\\\r?\n[ \t]*)?\("
)

_FUNC_WRAPPERS = {
    "TORCH_BOX", "TORCH_FN", "TORCH_FN_TYPE", "makeFromUnboxedFunction",
    "makeFromBoxedFunction", "makeFromUnboxedOnlyFunction", "makeUnboxedOnly",
    "makeFromUnboxedRuntimeFunction", "makeFromUnboxedLambda", "static_cast",
    "reinterpret_cast", "const_cast",
}
_STRING_WRAPPERS = {"TORCH_SELECTIVE_SCHEMA", "TORCH_SELECTIVE_NAME", "TORCH_SELECTIVE_NAME_IN_SCHEMA"}
_DEVICE_KEYS = {
    "kCPU": "CPU", "kCUDA": "CUDA", "kHIP": "HIP", "kXPU": "XPU", "kMPS": "MPS", "kMeta": "Meta",
    "kPrivateUse1": "PrivateUse1", "kLazy": "Lazy", "kIPU": "IPU", "kMTIA": "MTIA", "kHPU": "HPU",
    "kVE": "VE", "kXLA": "XLA", "kMAIA": "MAIA", "kFPGA": "FPGA",
}
_MACRO_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_COMMENT_RE = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_WS_RE = re.compile(r"\s+")


# --------------------------------------------------------------------------- data model


class _Json:
    """Mixin: dataclass <-> plain dict."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_json(cls, data: dict[str, Any]):
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclass
class OpDef(_Json):
    op: str  # "ns::name" or "ns::name.overload"
    schema: str  # normalised schema text as registered ("name(...) -> ..." or just "name")
    path: str
    line: int
    col: int
    block_line: int
    condition: str | None = None  # build-flag condition around it (``!defined(USE_ROCM)``), None: always


@dataclass
class OpImpl(_Json):
    op: str
    dispatch_key: str
    function: str | None  # bound C++ function as written (``&`` / ``TORCH_BOX`` stripped)
    path: str
    line: int
    col: int
    block_line: int
    condition: str | None = None  # build-flag condition around it, None: always


@dataclass
class CppFunction(_Json):
    name: str  # unqualified, template arguments stripped
    qualname: str  # enclosing namespaces/classes + name as written ("vllm::foo", "S::n")
    path: str
    line: int  # 1-based line of the declarator (the name)
    signature: str  # one line
    is_kernel: bool  # declared ``__global__``


@dataclass
class RegistrationBlock(_Json):
    macro: str  # e.g. "STABLE_TORCH_LIBRARY_IMPL"
    kind: str  # "def" | "fragment" | "impl"
    namespace: str  # resolved, e.g. "_C_cache_ops"
    namespace_expr: str  # as written, e.g. "CONCAT(TORCH_EXTENSION_NAME, _cache_ops)"
    dispatch_key: str | None  # IMPL blocks only
    module_var: str  # the ``m`` in ``TORCH_LIBRARY(ns, m)``
    path: str
    line: int
    end_line: int
    condition: str | None = None  # build-flag condition around the whole block, None: always


@dataclass
class FileSummary:
    path: str
    sha256: str
    defs: list[OpDef] = field(default_factory=list)
    impls: list[OpImpl] = field(default_factory=list)
    functions: list[CppFunction] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    blocks: list[RegistrationBlock] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": SUMMARY_FORMAT,
            "path": self.path,
            "sha256": self.sha256,
            "defs": [d.to_json() for d in self.defs],
            "impls": [i.to_json() for i in self.impls],
            "functions": [f.to_json() for f in self.functions],
            "errors": list(self.errors),
            "blocks": [b.to_json() for b in self.blocks],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | str | bytes) -> "FileSummary":
        """Inverse of :meth:`to_json`; raises ``ValueError`` on a foreign or stale record."""
        if isinstance(data, (str, bytes)):
            import json

            data = json.loads(data)
        if not isinstance(data, dict) or data.get("format") != SUMMARY_FORMAT:
            raise ValueError("not a FileSummary of format %d" % SUMMARY_FORMAT)
        try:
            return cls(
                path=str(data["path"]),
                sha256=str(data["sha256"]),
                defs=[OpDef.from_json(d) for d in data.get("defs", [])],
                impls=[OpImpl.from_json(d) for d in data.get("impls", [])],
                functions=[CppFunction.from_json(d) for d in data.get("functions", [])],
                errors=[str(e) for e in data.get("errors", [])],
                blocks=[RegistrationBlock.from_json(d) for d in data.get("blocks", [])],
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"malformed FileSummary: {exc}") from exc

    def with_path(self, path: str) -> "FileSummary":
        """The same summary for identical content found at another path."""
        if path == self.path:
            return self

        def rp(items, cls):
            return [cls(**{**asdict(x), "path": path}) for x in items]

        return FileSummary(
            path=path,
            sha256=self.sha256,
            defs=rp(self.defs, OpDef),
            impls=rp(self.impls, OpImpl),
            functions=rp(self.functions, CppFunction),
            errors=list(self.errors),
            blocks=rp(self.blocks, RegistrationBlock),
        )


# --------------------------------------------------------------------------- schema parsing


@dataclass
class SchemaArg(_Json):
    name: str  # "" for unnamed returns
    type: str  # type text as written, e.g. "Tensor(a!)", "int[]?", "ScalarType?"
    has_default: bool = False
    default: str | None = None
    is_mutable: bool = False  # ``Tensor!`` / ``Tensor(a!)`` / ``Tensor(a!)[]``
    alias: str | None = None  # alias set, "a" for ``Tensor(a!)``
    is_optional: bool = False  # type ends with ``?``
    kwarg_only: bool = False  # declared after ``*``


@dataclass
class Schema(_Json):
    name: str  # without namespace and overload
    overload: str  # "" for the default overload
    arguments: list[SchemaArg]
    returns: list[SchemaArg]
    namespace: str = ""  # when the schema text is qualified ("ns::name(...)")
    is_vararg: bool = False

    @property
    def qualified_name(self) -> str:
        base = f"{self.namespace}::{self.name}" if self.namespace else self.name
        return f"{base}.{self.overload}" if self.overload else base

    @property
    def positional(self) -> list[SchemaArg]:
        return [a for a in self.arguments if not a.kwarg_only]

    @property
    def required(self) -> list[SchemaArg]:
        return [a for a in self.arguments if not a.has_default]

    @property
    def mutable_arguments(self) -> list[SchemaArg]:
        return [a for a in self.arguments if a.is_mutable]

    def argument(self, name: str) -> SchemaArg | None:
        for a in self.arguments:
            if a.name == name:
                return a
        return None

    def check_call(self, n_positional: int, keywords: Iterable[str] = ()) -> list[str]:
        """Problems binding a call with ``n_positional`` positional arguments and the given
        keyword names to this schema (the rules of torch's Python binding: keyword-only
        arguments cannot be passed positionally, every argument without a default must
        be given exactly once).  Empty list: the call fits."""
        problems: list[str] = []
        if self.is_vararg:
            return problems
        pos = self.positional
        if n_positional > len(pos):
            problems.append(
                f"{self.qualified_name} takes at most {len(pos)} positional argument(s), "
                f"{n_positional} given"
            )
        bound = {a.name for a in pos[:n_positional]}
        for kw in keywords:
            arg = self.argument(kw)
            if arg is None:
                problems.append(f"{self.qualified_name} has no argument named '{kw}'")
            elif kw in bound:
                problems.append(f"{self.qualified_name}: argument '{kw}' given twice")
            else:
                bound.add(kw)
        missing = [a.name for a in self.arguments if not a.has_default and a.name not in bound]
        if missing:
            problems.append(
                f"{self.qualified_name}: missing required argument(s) " + ", ".join(missing)
            )
        return problems

    def __str__(self) -> str:
        def fmt(a: SchemaArg) -> str:
            s = f"{a.type} {a.name}".strip()
            return s + (f"={a.default}" if a.has_default else "")

        args: list[str] = []
        star = False
        for a in self.arguments:
            if a.kwarg_only and not star:
                args.append("*")
                star = True
            args.append(fmt(a))
        if self.is_vararg:
            args.append("...")
        rets = [fmt(r) for r in self.returns]
        ret = rets[0] if len(rets) == 1 and not self.returns[0].name else "(" + ", ".join(rets) + ")"
        return f"{self.qualified_name}({', '.join(args)}) -> {ret}"


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside (), [], {} and quotes."""
    parts: list[str] = []
    depth = 0
    quote = ""
    cur: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
            cur.append(c)
        elif c in "([{":
            depth += 1
            cur.append(c)
        elif c in ")]}":
            depth -= 1
            cur.append(c)
        elif c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def _matching(text: str, start: int, open_c: str = "(", close_c: str = ")") -> int:
    """Index of the bracket closing ``text[start]``, or -1."""
    depth = 0
    quote = ""
    i = start
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c == open_c:
            depth += 1
        elif c == close_c:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


_ALIAS_RE = re.compile(r"\(\s*([A-Za-z0-9_$]+)\s*(!?)")


def _parse_decl(text: str, kwarg_only: bool, is_return: bool) -> SchemaArg:
    text = text.strip()
    default: str | None = None
    parts = _split_top(text, "=")
    if len(parts) > 1:
        text = parts[0].strip()
        default = "=".join(parts[1:]).strip()
    # the name is the trailing identifier after a space at bracket depth 0
    typ, name = text, ""
    depth = 0
    cut = -1
    for i, c in enumerate(text):
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c.isspace() and depth == 0:
            cut = i
    if cut >= 0:
        cand = text[cut + 1 :].strip()
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", cand):
            typ, name = text[:cut].strip(), cand
    elif not is_return and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) is None:
        typ = text
    typ = _WS_RE.sub(" ", typ)
    m = _ALIAS_RE.search(typ)
    alias = m.group(1) if m else None
    mutable = "!" in typ
    return SchemaArg(
        name=name,
        type=typ,
        has_default=default is not None,
        default=default,
        is_mutable=mutable,
        alias=alias,
        is_optional=typ.endswith("?"),
        kwarg_only=kwarg_only,
    )


def parse_schema(schema: str) -> Schema:
    """Parse a torch function schema such as
    ``"reshape_and_cache_flash(Tensor key, Tensor! key_cache, *, int x=1) -> ()"``.

    Accepts a namespace prefix (``ns::name``), overloads (``name.out``), alias
    annotations (``Tensor(a!)``, ``Tensor($0! -> )``), defaults containing commas
    (``int[] s=[1, 2]``), ``*`` (keyword-only marker), ``...`` (varargs) and
    returns written as ``()``, ``Tensor``, ``(Tensor, Tensor)`` or ``(Tensor a, Tensor b)``;
    a missing ``-> ret`` is taken as ``()``.  Raises ``ValueError`` for a string that is
    not a schema (for example a bare op name).
    """
    if not isinstance(schema, str):
        raise ValueError("schema must be a string")
    s = _WS_RE.sub(" ", schema).strip()
    open_i = s.find("(")
    if open_i <= 0:
        raise ValueError(f"not a schema (no argument list): {schema!r}")
    head = s[:open_i].strip()
    if not re.fullmatch(r"(?:[A-Za-z_][A-Za-z0-9_]*::)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?", head):
        raise ValueError(f"not a schema (bad name {head!r}): {schema!r}")
    close_i = _matching(s, open_i)
    if close_i < 0:
        raise ValueError(f"not a schema (unbalanced parentheses): {schema!r}")
    namespace = ""
    if "::" in head:
        namespace, head = head.split("::", 1)
    name, _, overload = head.partition(".")
    arg_text = s[open_i + 1 : close_i].strip()
    rest = s[close_i + 1 :].strip()
    args: list[SchemaArg] = []
    kw = False
    vararg = False
    if arg_text:
        for piece in _split_top(arg_text):
            piece = piece.strip()
            if not piece:
                raise ValueError(f"not a schema (empty argument): {schema!r}")
            if piece == "*":
                kw = True
                continue
            if piece == "...":
                vararg = True
                continue
            args.append(_parse_decl(piece, kw, False))
    returns: list[SchemaArg] = []
    if rest:
        if not rest.startswith("->"):
            raise ValueError(f"not a schema (expected '->' after arguments): {schema!r}")
        ret = rest[2:].strip()
        if not ret:
            raise ValueError(f"not a schema (empty return): {schema!r}")
        if ret.startswith("(") and _matching(ret, 0) == len(ret) - 1:
            inner = ret[1:-1].strip()
            if inner:
                returns = [_parse_decl(p, False, True) for p in _split_top(inner) if p.strip()]
        else:
            returns = [_parse_decl(ret, False, True)]
    return Schema(
        name=name, overload=overload, arguments=args, returns=returns,
        namespace=namespace, is_vararg=vararg,
    )


def normalize_schema(text: str) -> str:
    """Collapse whitespace of a schema assembled from several literals."""
    s = _WS_RE.sub(" ", text).strip()
    s = re.sub(r"\(\s+", "(", s)
    s = re.sub(r"\s+\)", ")", s)
    s = re.sub(r"\s+,", ",", s)
    return s


# --------------------------------------------------------------------------- namespace resolution


def resolve_namespace(expr: str, extension_name: str = "_C") -> str:
    """Resolve a registration-macro namespace argument.

    ``_C`` -> ``_C``; ``TORCH_EXTENSION_NAME`` -> *extension_name*;
    ``CONCAT(TORCH_EXTENSION_NAME, _cache_ops)`` -> ``_C_cache_ops`` (also nested, and
    ``a ## b``).  Unknown macros are kept as written.
    """
    e = _WS_RE.sub("", expr)
    if e == "TORCH_EXTENSION_NAME":
        return extension_name
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\((.*)\)", e)
    if m and m.group(1) in ("CONCAT", "_CONCAT", "CONCAT_", "CONCATENATE", "TORCH_CONCAT", "C10_CONCATENATE"):
        return "".join(resolve_namespace(p, extension_name) for p in _split_top(m.group(2)))
    if "##" in e:
        return "".join(resolve_namespace(p, extension_name) for p in e.split("##"))
    return e


def _dispatch_key(text: str) -> str:
    t = _WS_RE.sub("", text)
    last = t.rsplit("::", 1)[-1]
    if last in _DEVICE_KEYS:
        return _DEVICE_KEYS[last]
    if re.fullmatch(r"k[A-Z][A-Za-z0-9]*", last) and ("DeviceType" in t or "::" in t or t == last):
        return last[1:]
    return last


# --------------------------------------------------------------------------- tree-sitter plumbing

_tls = threading.local()


def _parser():
    p = getattr(_tls, "parser", None)
    if p is None:
        import tree_sitter
        import tree_sitter_cpp

        lang = tree_sitter.Language(tree_sitter_cpp.language())
        try:
            p = tree_sitter.Parser(lang)
        except TypeError:  # pragma: no cover - tree-sitter < 0.22
            p = tree_sitter.Parser()
            p.set_language(lang)
        _tls.parser = p
    return p


def _row(node) -> int:
    return node.start_point[0]


class _Src:
    """Source bytes with cheap line/column lookups."""

    def __init__(self, data: bytes, masked: bytes | None = None):
        self.data = data
        self.masked = data if masked is None else masked
        self._starts: list[int] | None = None

    def head_start(self, byte: int) -> int:
        """Move ``byte`` back over whitespace that hides masked CUDA qualifiers, so
        that ``__global__`` in front of a declaration is part of its head."""
        m = self.masked
        i = byte
        while i > 0 and m[i - 1 : i] in (b" ", b"\t", b"\r", b"\n"):
            i -= 1
        j = i
        while j < byte and self.data[j : j + 1] in (b" ", b"\t", b"\r", b"\n"):
            j += 1
        return j if self.data[j:byte].strip() else byte

    def text(self, node) -> str:
        return self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def slice(self, a: int, b: int) -> str:
        return self.data[a:b].decode("utf-8", "replace")

    def line_of(self, byte: int) -> int:
        if self._starts is None:
            starts = [0]
            find = self.data.find
            i = find(b"\n")
            while i >= 0:
                starts.append(i + 1)
                i = find(b"\n", i + 1)
            self._starts = starts
        return bisect.bisect_right(self._starts, byte)  # 1-based

    def col_of(self, node) -> int:
        b = node.start_byte
        ls = self.data.rfind(b"\n", 0, b) + 1
        return len(self.data[ls:b].decode("utf-8", "replace")) + 1


def _skip_ws_comments(data: bytes, i: int) -> int:
    n = len(data)
    while i < n:
        c = data[i : i + 1]
        if c in (b" ", b"\t", b"\r", b"\n", b"\f", b"\v"):
            i += 1
        elif c == b"\\" and data[i + 1 : i + 2] in (b"\n", b"\r"):
            i += 2
        elif data.startswith(b"//", i):
            j = data.find(b"\n", i)
            i = n if j < 0 else j + 1
        elif data.startswith(b"/*", i):
            j = data.find(b"*/", i + 2)
            i = n if j < 0 else j + 2
        else:
            break
    return i


def _scan_balanced(data: bytes, i: int, open_b: int, close_b: int) -> int:
    """``data[i]`` is an opening bracket: index of its partner, skipping comments,
    strings, char literals and raw strings; -1 when unbalanced."""
    n = len(data)
    depth = 0
    while i < n:
        c = data[i]
        if c == 0x2F and data.startswith(b"//", i):  # '/'
            j = data.find(b"\n", i)
            i = n if j < 0 else j + 1
            continue
        if c == 0x2F and data.startswith(b"/*", i):
            j = data.find(b"*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if c == 0x22:  # '"'
            if i > 0 and data[i - 1] == 0x52:  # R"delim( ... )delim"
                p = data.find(b"(", i)
                if p > 0:
                    delim = b")" + data[i + 1 : p] + b'"'
                    j = data.find(delim, p)
                    if j >= 0:
                        i = j + len(delim)
                        continue
            j = i + 1
            while j < n and data[j] not in (0x22, 0x0A):
                j += 2 if data[j] == 0x5C else 1
            i = j + 1
            continue
        if c == 0x27:  # '\''
            j = i + 1
            while j < n and data[j] not in (0x27, 0x0A):
                j += 2 if data[j] == 0x5C else 1
            i = j + 1
            continue
        if c == open_b:
            depth += 1
        elif c == close_b:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _in_preproc_define(node) -> bool:
    q = node
    while q is not None:
        if q.type in ("preproc_def", "preproc_function_def", "preproc_arg", "comment",
                      "string_literal", "raw_string_literal", "char_literal"):
            return True
        q = q.parent
    return False


def _named_args(arglist) -> list:
    return [c for c in arglist.named_children if c.type != "comment"]


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'", "a": "\a",
            "b": "\b", "f": "\f", "v": "\v", "?": "?"}


def _string_value(node, src: _Src) -> str | None:
    t = node.type
    if t == "string_literal":
        out: list[str] = []
        for c in node.children:
            if c.type == "string_content":
                out.append(src.text(c))
            elif c.type == "escape_sequence":
                e = src.text(c)
                out.append(_ESCAPES.get(e[1:2], e[1:]) if len(e) == 2 else e)
        return "".join(out)
    if t == "raw_string_literal":
        for c in node.children:
            if c.type == "raw_string_content":
                return src.text(c)
        txt = src.text(node)
        m = re.match(r'(?:u8|u|U|L)?R"([^(]*)\((.*)\)\1"$', txt, re.S)
        return m.group(2) if m else None
    if t == "concatenated_string":
        parts = []
        for c in node.named_children:
            if c.type == "comment":
                continue
            v = _string_value(c, src)
            if v is None:
                if c.type == "identifier":  # a macro spliced into the literal
                    v = "{" + src.text(c) + "}"
                else:
                    return None
            parts.append(v)
        return "".join(parts)
    if t == "parenthesized_expression":
        inner = [c for c in node.named_children if c.type != "comment"]
        return _string_value(inner[0], src) if len(inner) == 1 else None
    if t == "call_expression":
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is not None and args is not None:
            name = _WS_RE.sub("", src.text(fn)).rsplit("::", 1)[-1]
            a = _named_args(args)
            if name in _STRING_WRAPPERS and a:
                return _string_value(a[0], src)
    return None


def _last_name(name: str) -> str:
    """``ns::foo<int>`` -> ``foo``."""
    s = _strip_template_args(name)
    return s.rsplit("::", 1)[-1].lstrip("&*")


def _strip_template_args(name: str) -> str:
    if "operator" in name or "<" not in name:
        return name
    out: list[str] = []
    depth = 0
    for c in name:
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(c)
    return "".join(out)


def _function_ref(node, src: _Src) -> tuple[bool, str | None, str | None]:
    """(recognised, dispatch key or None, function text or None) for an argument that
    binds a kernel: ``&fn``, ``fn``, ``ns::fn<T>``, ``TORCH_BOX(&fn)``, ``TORCH_FN(fn)``,
    ``torch::dispatch(key, fn)``, lambdas (function None)."""
    t = node.type
    if t in ("pointer_expression", "parenthesized_expression"):
        inner = [c for c in node.named_children if c.type != "comment"]
        if t == "pointer_expression" and not src.text(node).lstrip().startswith("&"):
            return False, None, None
        return _function_ref(inner[-1], src) if inner else (False, None, None)
    if t in ("identifier", "qualified_identifier", "template_function", "field_expression"):
        return True, None, _WS_RE.sub("", src.text(node))
    if t == "lambda_expression":
        return True, None, None
    if t == "cast_expression":
        v = node.child_by_field_name("value")
        return _function_ref(v, src) if v is not None else (False, None, None)
    if t == "call_expression":
        fn = node.child_by_field_name("function")
        args = node.child_by_field_name("arguments")
        if fn is None or args is None:
            return False, None, None
        a = _named_args(args)
        ftext = _WS_RE.sub("", src.text(fn))
        base = _strip_template_args(ftext).rsplit("::", 1)[-1]
        if base == "dispatch" and len(a) == 2:
            ok, _, f = _function_ref(a[1], src)
            return ok, _dispatch_key(src.text(a[0])), f
        if base in _FUNC_WRAPPERS:
            if a:
                return _function_ref(a[0], src)
            # makeFromBoxedFunction<&fn>()
            m = re.search(r"<&?(.+)>$", ftext)
            if m:
                return True, None, m.group(1)
            return True, None, None
    return False, None, None


# --------------------------------------------------------------------------- preprocessor conditions

_PP_COND_TYPES = frozenset({"preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef"})
_PP_DIRECTIVE_RE = re.compile(rb"^[ \t]*#[ \t]*(ifdef|ifndef|if|elifdef|elifndef|elif|else|endif)\b(.*)$")
_PP_DEFINE_RE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_PP_SIMPLE_RE = re.compile(r"!?(?:defined\s*\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)|[A-Za-z_][A-Za-z0-9_]*|\d+)")


def _pp_clean(text: str) -> str:
    return _WS_RE.sub(" ", _COMMENT_RE.sub(" ", text.replace("\\\n", " "))).strip()


def _pp_defined(name: str, negated: bool) -> str:
    return ("!" if negated else "") + f"defined({name.strip()})"


def _pp_negate(cond: str) -> str:
    c = cond.strip()
    if _PP_SIMPLE_RE.fullmatch(c):
        return c[1:] if c.startswith("!") else "!" + c
    return f"!({c})"


def _pp_join(parts: list[str]) -> str | None:
    """Conditions, outermost first, as one ``&&`` expression (None when there are none)."""
    parts = [p.strip() for p in parts if p and p.strip()]
    if len(parts) == 1:
        return parts[0]
    out = []
    for p in parts:
        wrapped = p.startswith("!(") and _matching(p, 1) == len(p) - 1
        if wrapped or ("||" not in p and "?" not in p):
            out.append(p)
        else:
            out.append(f"({p})")
    return " && ".join(out) if out else None


def _pp_node_condition(node, src: _Src) -> str | None:
    """The condition a ``preproc_if``/``preproc_ifdef``/``preproc_elif``/``preproc_elifdef``
    node tests, in C syntax (``defined(X)``, ``!defined(X)``, the ``#if`` expression)."""
    t = node.type
    if t in ("preproc_ifdef", "preproc_elifdef"):
        name = node.child_by_field_name("name")
        if name is None:
            return None
        head = node.children[0].type if node.child_count else ""
        return _pp_defined(src.text(name), head in ("#ifndef", "#elifndef"))
    cond = node.child_by_field_name("condition")
    return _pp_clean(src.text(cond)) if cond is not None else None


def _is_include_guard(node, src: _Src) -> bool:
    """``#ifndef X`` whose first item is ``#define X``: an include guard, not a build flag."""
    if node.type != "preproc_ifdef" or not node.child_count or node.children[0].type != "#ifndef":
        return False
    name = node.child_by_field_name("name")
    if name is None:
        return False
    for c in node.named_children:
        if c == name or c.type == "comment":
            continue
        if c.type == "preproc_def":
            dn = c.child_by_field_name("name")
            return dn is not None and src.text(dn) == src.text(name)
        return False
    return False


def _preproc_condition(node, src: _Src) -> str | None:
    """Build-flag condition around ``node``: every enclosing ``#if``/``#ifdef``/``#elif``/
    ``#else`` branch, outermost first (see the module docstring). Read from the text instead
    when an ``ERROR`` node on the way up may have lost the directive structure."""
    parts: list[str] = []  # innermost first
    child = node
    q = node.parent
    while q is not None:
        t = q.type
        if t == "ERROR":
            return _text_condition(src, node.start_byte)
        if t in _PP_COND_TYPES and not _is_include_guard(q, src):
            cond = _pp_node_condition(q, src) or "?"
            alt = q.child_by_field_name("alternative")
            if alt is not None and alt == child:
                parts.append(_pp_negate(cond))  # in the #else / #elif that follows this test
            else:
                parts.append(cond)
        child = q
        q = q.parent
    parts.reverse()
    return _pp_join(parts)


def _pp_directives(src: _Src) -> list[tuple[int, str, str]]:
    """(byte offset of the line, directive, argument text) of every conditional directive,
    from the text (continuation lines joined); include guards are dropped."""
    cached = getattr(src, "_pp_dirs", None)
    if cached is not None:
        return cached
    out: list[tuple[int, str, str]] = []
    data = src.data
    if b"#" not in data:
        src._pp_dirs = out
        return out
    lines = data.split(b"\n")
    pos = 0
    i = 0
    pending_guard: tuple[int, str] | None = None  # index in `out` and name of an `#ifndef X`
    while i < len(lines):
        start = pos
        line = lines[i]
        while line.endswith(b"\\") and i + 1 < len(lines):
            pos += len(lines[i]) + 1
            i += 1
            line = line[:-1] + b" " + lines[i]
        pos += len(lines[i]) + 1
        i += 1
        m = _PP_DIRECTIVE_RE.match(line.rstrip(b"\r"))
        if m:
            d = m.group(1).decode()
            arg = _pp_clean(m.group(2).decode("utf-8", "replace"))
            out.append((start, d, arg))
            pending_guard = (len(out) - 1, arg) if d == "ifndef" else None
            continue
        if pending_guard is not None:
            dm = _PP_DEFINE_RE.match(line)
            if dm and dm.group(1).decode() == pending_guard[1]:
                out[pending_guard[0]] = (out[pending_guard[0]][0], "guard", pending_guard[1])
            if line.strip() and not line.strip().startswith((b"//", b"/*")):
                pending_guard = None
    src._pp_dirs = out
    return out


def _text_condition(src: _Src, byte: int) -> str | None:
    """:func:`_preproc_condition` from the directives in the text before ``byte``."""
    frames: list[list[str] | None] = []  # per open #if: [earlier tests negated..., current test]; None: guard
    for off, d, arg in _pp_directives(src):
        if off >= byte:
            break
        if d == "guard":
            frames.append(None)
        elif d == "ifdef":
            frames.append([_pp_defined(arg, False)])
        elif d == "ifndef":
            frames.append([_pp_defined(arg, True)])
        elif d == "if":
            frames.append([arg])
        elif d in ("elif", "elifdef", "elifndef") and frames and frames[-1] is not None:
            f = frames[-1]
            f[-1] = _pp_negate(f[-1])
            f.append(arg if d == "elif" else _pp_defined(arg, d == "elifndef"))
        elif d == "else" and frames and frames[-1] is not None:
            frames[-1][-1] = _pp_negate(frames[-1][-1])
        elif d == "endif" and frames:
            frames.pop()
    return _pp_join([c for f in frames if f for c in f])


# --------------------------------------------------------------------------- extraction


def _extract_blocks(root, src: _Src, path: str, extension_name: str, summary: FileSummary) -> None:
    data = src.data
    for m in _BLOCK_RE.finditer(data):
        macro = m.group(1).decode()
        if macro not in _BLOCK_MACROS:
            continue
        try:
            node = root.descendant_for_byte_range(m.start(1), m.end(1))
            if node is not None and _in_preproc_define(node):
                continue
            open_i = m.end() - 1
            close_i = _scan_balanced(data, open_i, 0x28, 0x29)
            if close_i < 0:
                continue
            args = [a.strip() for a in _split_top(data[open_i + 1 : close_i].decode("utf-8", "replace"))]
            kind, nargs = _BLOCK_MACROS[macro]
            if len(args) != nargs or not all(args):
                continue
            brace = _skip_ws_comments(data, close_i + 1)
            if data[brace : brace + 1] != b"{":
                continue  # a declaration or something else, not a block
            end = -1
            bnode = root.descendant_for_byte_range(brace, brace + 1)
            if (
                bnode is not None
                and bnode.type == "{"
                and bnode.parent is not None
                and bnode.parent.type == "compound_statement"
                and bnode.parent.start_byte == brace
            ):
                cs = bnode.parent
                last = cs.children[-1] if cs.child_count else None
                if last is not None and last.type == "}" and not last.is_missing:
                    end = cs.end_byte
            if end < 0:
                close_b = _scan_balanced(data, brace, 0x7B, 0x7D)
                end = close_b + 1 if close_b >= 0 else len(data)
            ns = resolve_namespace(args[0], extension_name)
            key = _dispatch_key(args[1]) if kind == "impl" else None
            var = args[-1]
            block = RegistrationBlock(
                macro=macro, kind=kind, namespace=ns, namespace_expr=_WS_RE.sub(" ", args[0]),
                dispatch_key=key, module_var=var, path=path,
                line=src.line_of(m.start(1)), end_line=src.line_of(max(end - 1, 0)),
                condition=_preproc_condition(node, src) if node is not None else _text_condition(src, m.start(1)),
            )
            summary.blocks.append(block)
            _extract_calls(root, src, brace, end, block, summary)
        except Exception as exc:  # noqa: BLE001 - never let one block kill the file
            summary.errors.append(f"block at line {src.line_of(m.start())}: {type(exc).__name__}: {exc}")


def _receiver_root(node, src: _Src) -> tuple[str | None, bool]:
    """(identifier the call chain starts from, chained?) for ``m.def`` / ``m.def(..).impl``."""
    chained = False
    while node is not None:
        if node.type == "identifier":
            return src.text(node), chained
        if node.type == "call_expression":
            fn = node.child_by_field_name("function")
            if fn is None or fn.type != "field_expression":
                return None, chained
            node = fn.child_by_field_name("argument")
            chained = True
            continue
        if node.type == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            node = inner[0] if len(inner) == 1 else None
            continue
        return None, chained
    return None, chained


def _extract_calls(root, src: _Src, start: int, end: int, block: RegistrationBlock, summary: FileSummary) -> None:
    stack = [root]
    found = []
    while stack:
        n = stack.pop()
        if n.end_byte <= start or n.start_byte >= end:
            continue
        if n.type == "call_expression" and n.start_byte >= start:
            fn = n.child_by_field_name("function")
            if fn is not None and fn.type == "field_expression":
                fld = fn.child_by_field_name("field")
                if fld is not None and src.text(fld) in ("def", "impl"):
                    recv, chained = _receiver_root(fn.child_by_field_name("argument"), src)
                    if recv == block.module_var:
                        found.append((fld if chained else n, src.text(fld), n))
        if n.type in ("comment", "string_literal", "raw_string_literal"):
            continue
        stack.extend(n.children)
    found.sort(key=lambda x: x[0].start_byte)
    for pos_node, what, call in found:
        try:
            if what == "def":
                _handle_def(call, pos_node, src, block, summary)
            else:
                _handle_impl(call, pos_node, src, block, summary)
        except Exception as exc:  # noqa: BLE001
            summary.errors.append(f"{what} at line {_row(call) + 1}: {type(exc).__name__}: {exc}")


def _qualify(ns: str, name: str) -> str:
    return name if "::" in name else f"{ns}::{name}"


def _handle_def(call, pos_node, src: _Src, block: RegistrationBlock, summary: FileSummary) -> None:
    args_node = call.child_by_field_name("arguments")
    args = _named_args(args_node) if args_node is not None else []
    line = _row(pos_node) + 1
    if not args:
        summary.errors.append(f"def at line {line}: no arguments")
        return
    s = _string_value(args[0], src)
    if s is None:
        summary.errors.append(f"def at line {line}: schema is not a string literal: {src.text(args[0])[:80]!r}")
        return
    schema = normalize_schema(s)
    name = schema.split("(", 1)[0].strip()
    op = _qualify(block.namespace, name)
    col = src.col_of(pos_node)
    cond = _preproc_condition(call, src)
    summary.defs.append(OpDef(op=op, schema=schema, path=block.path, line=line, col=col, block_line=block.line,
                              condition=cond))
    for extra in args[1:]:
        ok, key, fn = _function_ref(extra, src)
        if ok:
            summary.impls.append(
                OpImpl(op=op, dispatch_key=key or block.dispatch_key or CATCH_ALL_KEY, function=fn,
                       path=block.path, line=line, col=col, block_line=block.line, condition=cond)
            )
            break


def _handle_impl(call, pos_node, src: _Src, block: RegistrationBlock, summary: FileSummary) -> None:
    args_node = call.child_by_field_name("arguments")
    args = _named_args(args_node) if args_node is not None else []
    line = _row(pos_node) + 1
    if len(args) < 2:
        summary.errors.append(f"impl at line {line}: expected a name and a function")
        return
    name = _string_value(args[0], src)
    if name is None:
        summary.errors.append(f"impl at line {line}: op name is not a string literal: {src.text(args[0])[:80]!r}")
        return
    name = _WS_RE.sub("", name)
    key: str | None = None
    fn: str | None = None
    if len(args) >= 3:
        key = _dispatch_key(src.text(args[1]))
        ok, k2, fn = _function_ref(args[-1], src)
        if not ok:
            fn = None
        key = k2 or key
    else:
        ok, k2, fn = _function_ref(args[1], src)
        key = k2
        if not ok:
            fn = None
            summary.errors.append(f"impl at line {line}: unrecognised kernel argument {src.text(args[1])[:80]!r}")
    summary.impls.append(
        OpImpl(
            op=_qualify(block.namespace, name),
            dispatch_key=key or block.dispatch_key or CATCH_ALL_KEY,
            function=fn, path=block.path, line=line, col=src.col_of(pos_node), block_line=block.line,
            condition=_preproc_condition(call, src),
        )
    )


_DECL_WRAPPERS = ("pointer_declarator", "reference_declarator", "attributed_declarator",
                  "parenthesized_declarator")
_SCOPE_TYPES = ("namespace_definition", "class_specifier", "struct_specifier", "union_specifier")


def _function_declarator(fdef):
    d = fdef.child_by_field_name("declarator")
    for _ in range(8):
        if d is None:
            return None
        if d.type == "function_declarator":
            return d
        if d.type in _DECL_WRAPPERS:
            nxt = d.child_by_field_name("declarator")
            if nxt is None:
                named = [c for c in d.named_children if c.type.endswith("declarator")]
                nxt = named[-1] if named else None
            d = nxt
            continue
        return None
    return None


def _scope(node, src: _Src) -> list[str]:
    parts: list[str] = []
    q = node.parent
    while q is not None:
        if q.type in _SCOPE_TYPES:
            nm = q.child_by_field_name("name")
            if nm is not None:
                parts.append(_strip_template_args(_WS_RE.sub("", src.text(nm))))
        q = q.parent
    parts.reverse()
    return parts


def _one_line(text: str, limit: int = 400) -> str:
    s = _WS_RE.sub(" ", text).strip()
    s = s.replace("( ", "(").replace(" )", ")")
    return s if len(s) <= limit else s[: limit - 1] + "\u2026"


def _drop_template_header(text: str) -> str:
    """``template <typename T> __global__ void k(`` -> ``__global__ void k(``."""
    t = text.lstrip()
    if not t.startswith("template"):
        return text
    i = t.find("<")
    if i < 0 or t[len("template"):i].strip():
        return text
    j = _matching(t, i, "<", ">")
    return t[j + 1 :] if j > 0 else text


_FUNCTIONS_QUERY = "(function_definition) @def (ERROR (function_declarator) @decl)"


def _query_nodes(root, source: str) -> list | None:
    """Nodes captured by a tree-sitter query (run in C, not a Python walk over every node);
    None when this tree-sitter has no usable query API (the caller walks instead)."""
    try:
        import tree_sitter

        q = getattr(_tls, "fn_query", None)
        if q is None:
            lang = tree_sitter.Language(__import__("tree_sitter_cpp").language())
            q = tree_sitter.Query(lang, source)
            _tls.fn_query = q
        cursor_cls = getattr(tree_sitter, "QueryCursor", None)
        caps = cursor_cls(q).captures(root) if cursor_cls is not None else q.captures(root)
    except Exception:  # noqa: BLE001 - older/newer bindings: fall back to the walk
        return None
    if isinstance(caps, dict):
        return [n for nodes in caps.values() for n in nodes]
    return [n for n, _name in caps]


def _extract_functions(root, src: _Src, path: str, summary: FileSummary) -> None:
    nodes = _query_nodes(root, _FUNCTIONS_QUERY)
    if nodes is None:
        _walk_functions(root, src, path, summary)
        return
    out: list[CppFunction] = []
    for n in nodes:
        try:
            f = _function_of(n, src, path) if n.type == "function_definition" else _recovered_function(n, src, path)
            if f is not None:
                out.append(f)
        except Exception as exc:  # noqa: BLE001
            summary.errors.append(f"function at line {_row(n) + 1}: {type(exc).__name__}: {exc}")
    out.sort(key=lambda f: (f.line, f.qualname))
    summary.functions.extend(out)


def _walk_functions(root, src: _Src, path: str, summary: FileSummary) -> None:
    stack = [root]
    out: list[CppFunction] = []
    while stack:
        n = stack.pop()
        t = n.type
        if t in ("comment", "string_literal", "raw_string_literal", "char_literal", "preproc_def",
                 "preproc_function_def", "preproc_include"):
            continue
        if t == "function_definition" or (t == "function_declarator" and n.parent is not None
                                           and n.parent.type == "ERROR"):
            try:
                f = _function_of(n, src, path) if t == "function_definition" else _recovered_function(n, src, path)
                if f is not None:
                    out.append(f)
            except Exception as exc:  # noqa: BLE001
                summary.errors.append(f"function at line {_row(n) + 1}: {type(exc).__name__}: {exc}")
        stack.extend(n.children)
    out.sort(key=lambda f: (f.line, f.qualname))
    summary.functions.extend(out)


def _function_of(fdef, src: _Src, path: str) -> CppFunction | None:
    decl = _function_declarator(fdef)
    if decl is None:
        return None
    name_node = decl.child_by_field_name("declarator")
    if name_node is None:
        return None
    written = _WS_RE.sub("", src.text(name_node))
    if not written or not re.match(r"[~A-Za-z_:]", written):
        return None
    name = _last_name(written)
    if name in _BLOCK_MACROS:
        return None
    has_type = fdef.child_by_field_name("type") is not None
    in_class = fdef.parent is not None and fdef.parent.type == "field_declaration_list"
    if not has_type and not in_class and "::" not in written and _MACRO_NAME_RE.match(name):
        return None  # ``SOME_MACRO(args) { ... }``: a macro invocation, not a function
    scope = _scope(fdef, src)
    qual = "::".join(scope + [_strip_template_args(written).lstrip(":")])
    head = _COMMENT_RE.sub(" ", src.slice(src.head_start(fdef.start_byte), decl.end_byte))
    is_kernel = bool(_KERNEL_RE.search(head))
    sig = _one_line(head)
    return CppFunction(
        name=name, qualname=qual, path=path, line=_row(decl) + 1, signature=sig, is_kernel=is_kernel
    )


_HEAD_TYPES = frozenset(
    {"type_identifier", "primitive_type", "ERROR", "storage_class_specifier", "type_qualifier",
     "template", "template_parameter_list", "qualified_identifier", "sized_type_specifier",
     "identifier", "virtual", "attribute_specifier", "attribute_declaration", "template_type",
     "placeholder_type_specifier", "comment", "inline", "static", "const", "constexpr",
     "explicit", "struct", "enum", "class", "typename", "*", "&", "&&", "<", ">", ","}
)


def _recovered_function(decl, src: _Src, path: str) -> CppFunction | None:
    """A ``function_declarator`` left inside an ``ERROR`` node and followed by ``{``: a
    function definition the grammar lost, typically because an ``#if`` splits braces."""
    nxt = decl.next_sibling
    while nxt is not None and nxt.type == "comment":
        nxt = nxt.next_sibling
    if nxt is None or nxt.type not in ("{", "compound_statement"):
        return None
    name_node = decl.child_by_field_name("declarator")
    if name_node is None:
        return None
    written = _WS_RE.sub("", src.text(name_node))
    if not written or not re.match(r"[~A-Za-z_:]", written):
        return None
    name = _last_name(written)
    if name in _BLOCK_MACROS:
        return None
    start = decl
    prev = decl.prev_sibling
    has_type = False
    while prev is not None and prev.type in _HEAD_TYPES and _row(decl) - prev.end_point[0] <= 3:
        if prev.type != "comment":
            start = prev
            has_type = True
        prev = prev.prev_sibling
    if not has_type and "::" not in written and _MACRO_NAME_RE.match(name):
        return None
    head = _COMMENT_RE.sub(" ", src.slice(src.head_start(start.start_byte), decl.end_byte))
    sig = _one_line(_drop_template_header(head))
    qual = "::".join(_scope(decl, src) + [_strip_template_args(written).lstrip(":")])
    return CppFunction(
        name=name, qualname=qual, path=path, line=_row(decl) + 1, signature=sig,
        is_kernel=bool(_KERNEL_RE.search(head)),
    )


_CUDA_MASK_RE = re.compile(
    rb"\b(?:__global__|__device__|__host__|__forceinline__|__noinline__|__shared__|__constant__"
    rb"|__managed__|__grid_constant__|__inline__|CUTLASS_DEVICE|CUTLASS_HOST_DEVICE|CUTLASS_HOST"
    rb"|CUTLASS_GLOBAL|CUTE_DEVICE|CUTE_HOST_DEVICE|CUTE_HOST|C10_HOST_DEVICE|C10_DEVICE|C10_HOST"
    rb"|C10_ALWAYS_INLINE|C10_NOINLINE|C10_LAUNCH_BOUNDS_0|HOST_DEVICE_INLINE|DEVICE_INLINE)\b"
    rb"|\b(?:__launch_bounds__|__align__|__cluster_dims__|__maxnreg__|__block_size__"
    rb"|C10_LAUNCH_BOUNDS_1|C10_LAUNCH_BOUNDS_2)[ \t]*\((?:[^()]|\([^()]*\))*\)"
    rb"|<<<(?:[^<>;{}]|<[^<>;{}]*>){0,400}?>>>"
)
_KERNEL_RE = re.compile(r"\b(?:__global__|CUTLASS_GLOBAL)\b")
_NOT_NL = re.compile(rb"[^\n]")


def _mask_cuda(data: bytes) -> bytes:
    """Blank CUDA-only syntax the C++ grammar does not know (``__global__``,
    ``__device__``, ``__launch_bounds__(...)``, ``<<<grid, block>>>``...) with spaces.
    Byte offsets and line numbers are unchanged, so positions and texts are read from
    the original source while the tree comes from the masked one."""
    if b"__" not in data and b"<<<" not in data:
        return data
    return _CUDA_MASK_RE.sub(lambda m: _NOT_NL.sub(b" ", m.group(0)), data)


def _looks_binary(data: bytes) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return True
    if not head:
        return False
    ctrl = len(head) - len(head.translate(None, _CTRL_BYTES))
    return ctrl > len(head) // 10


_CTRL_BYTES = bytes(b for b in range(32) if b < 9 or 13 < b)


def summarize_cpp(source: bytes, path: str, extension_name: str = "_C") -> FileSummary:
    """Summarise one C++/CUDA file.  Pure and total: any input (binary, non-UTF-8, empty,
    syntactically broken, huge) gives a :class:`FileSummary`; problems go to ``errors``."""
    if isinstance(source, str):
        source = source.encode("utf-8", "surrogateescape")
    sha = hashlib.sha256(source).hexdigest()
    summary = FileSummary(path=str(path), sha256=sha)
    if not source.strip():
        return summary
    if len(source) > MAX_FILE_BYTES:
        summary.errors.append(f"skipped: {len(source)} bytes is over the {MAX_FILE_BYTES} byte limit")
        return summary
    if _looks_binary(source):
        summary.errors.append("skipped: binary content")
        return summary
    masked = _mask_cuda(source)
    try:
        tree = _parser().parse(masked)
    except Exception as exc:  # noqa: BLE001
        summary.errors.append(f"parse failed: {type(exc).__name__}: {exc}")
        return summary
    root = tree.root_node
    src = _Src(source, masked)
    if root.has_error:
        n_err, first = _count_errors(root)
        if n_err:
            summary.errors.append(f"syntax: {n_err} error node(s), first at line {first}")
    try:
        _extract_blocks(root, src, summary.path, extension_name, summary)
    except Exception as exc:  # noqa: BLE001
        summary.errors.append(f"registrations: {type(exc).__name__}: {exc}")
    try:
        _extract_functions(root, src, summary.path, summary)
    except Exception as exc:  # noqa: BLE001
        summary.errors.append(f"functions: {type(exc).__name__}: {exc}")
    return summary


def _count_errors(root) -> tuple[int, int]:
    count = 0
    first = 0
    cursor = [root]
    while cursor:
        n = cursor.pop()
        if not n.has_error:
            continue
        if n.type == "ERROR" or n.is_missing:
            count += 1
            ln = _row(n) + 1
            first = ln if not first else min(first, ln)
            if n.type == "ERROR":
                continue
        cursor.extend(n.children)
    return count, first


# --------------------------------------------------------------------------- index


@dataclass
class ResolvedImpl(OpImpl):
    """An :class:`OpImpl` with the chosen definition of its bound function."""

    definition: CppFunction | None = None


@dataclass
class OpInfo:
    op: str
    defs: list[OpDef]
    impls: list[ResolvedImpl]

    @property
    def schema(self) -> str | None:
        for d in self.defs:
            if "(" in d.schema:
                return d.schema
        return None

    def parsed_schema(self) -> Schema | None:
        s = self.schema
        if s is None:
            return None
        try:
            return parse_schema(s)
        except ValueError:
            return None

    def impls_for(self, dispatch_key: str) -> list[ResolvedImpl]:
        return [i for i in self.impls if i.dispatch_key == dispatch_key]

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "defs": [asdict(d) for d in self.defs], "impls": [asdict(i) for i in self.impls]}


def _common_prefix_len(a: str, b: str) -> int:
    pa = Path(a).parent.parts
    pb = Path(b).parent.parts
    n = 0
    for x, y in zip(pa, pb):
        if x != y:
            break
        n += 1
    return n


def _rank_of(entry: tuple) -> tuple:
    return entry[0], entry[1]


class CppIndex:
    """Cross-file view over :class:`FileSummary` objects.

    Built with :func:`lazy_index`, only the files that register ops are summarised up front; a file
    that does not is summarised when a query asks for a function whose name its text contains (a
    function's name is always spelled in the file that defines it: this index sees no macro-made
    definitions), so the answers equal those of the index over every file. :meth:`complete_steps`
    summarises the rest (the server does it in the background)."""

    def __init__(self, summaries: Iterable[FileSummary], pending: dict | None = None, order: dict | None = None,
                 summarise: Callable[[str, bytes], FileSummary] | None = None):
        self.summaries: list[FileSummary] = []
        self._defs: dict[str, list[OpDef]] = {}
        self._impls: dict[str, list[OpImpl]] = {}
        # name -> (file's place in the walk, place in its file, function), kept sorted: a file summarised late (a
        # lazy index's) lands where the whole index lists its functions
        self._funcs: dict[str, list[tuple[int, int, CppFunction]]] = {}
        self._pending: dict[str, bytes] = dict(pending or {})  # path -> bytes of files not summarised yet
        self._order: dict[str, int] = dict(order or {})  # path -> position in the file walk
        self._probed: set[str] = set()  # function names whose defining files are summarised
        self.summarise = summarise  # (path, bytes) -> FileSummary, for the pending files (not pickled)
        for s in summaries:
            self._add(s)

    def _add(self, s: FileSummary) -> None:
        self.summaries.append(s)
        for d in s.defs:
            self._defs.setdefault(d.op, []).append(d)
        for i in s.impls:
            self._impls.setdefault(i.op, []).append(i)
        rank = self._order.get(s.path, len(self._order) + len(self.summaries))
        for i, f in enumerate(s.functions):
            bisect.insort(self._funcs.setdefault(f.name, []), (rank, i, f), key=_rank_of)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["summarise"] = None  # a callable of the process that built it: set again by the reader
        return state

    @property
    def pending_files(self) -> int:
        """How many files are not summarised yet."""
        return len(self._pending)

    def _summarise_pending(self, paths: list[str]) -> None:
        for path in paths:
            data = self._pending.pop(path)
            if self.summarise is not None:
                self._add(self.summarise(path, data))
            else:
                self._add(summarize_cpp(data, path))

    def _defining(self, base: str) -> None:
        """Summarise the pending files whose text contains ``base`` (they may define a function of that name)."""
        if base in self._probed:
            return
        if self._pending:
            key = base.encode("utf-8", "surrogateescape")
            self._summarise_pending([p for p, data in self._pending.items() if key in data])
        self._probed.add(base)

    def complete_steps(self, budget_s: float | None = None) -> Iterator[int]:
        """Summarise every pending file, yielding the number left after each ``budget_s`` of work."""
        t0 = time.perf_counter()
        while self._pending:
            self._summarise_pending([next(iter(self._pending))])
            if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                yield len(self._pending)
                t0 = time.perf_counter()

    # -- queries -----------------------------------------------------------
    def ops(self) -> list[str]:
        return sorted(set(self._defs) | set(self._impls))

    def blocks(self) -> list[RegistrationBlock]:
        return [b for s in self.summaries for b in s.blocks]

    def bound_function_names(self) -> frozenset:
        """The unqualified names of the C++ functions some ``ops.impl`` binds (any op, any namespace; registering
        files are summarised up front, lazy index or not)."""
        return frozenset(_last_name(i.function) for impls in self._impls.values() for i in impls if i.function)

    def functions_named(self, name: str) -> list[CppFunction]:
        """Definitions whose unqualified name is ``name`` (a qualified ``ns::f`` or
        ``f<T>`` is reduced to ``f`` and then filtered by the qualifier)."""
        base = _last_name(name)
        self._defining(base)
        cands = [f for _r, _i, f in self._funcs.get(base, ())]
        qual = _strip_template_args(_WS_RE.sub("", name)).lstrip(":").lstrip("&")
        if "::" in qual:
            narrowed = [f for f in cands if f.qualname == qual or f.qualname.endswith("::" + qual)]
            if narrowed:
                return narrowed
        return cands

    def schema(self, qualname: str) -> str | None:
        for d in self._defs.get(self._key(qualname), []):
            if "(" in d.schema:
                return d.schema
        return None

    def op(self, qualname: str) -> OpInfo | None:
        key = self._key(qualname)
        defs = self._defs.get(key, [])
        impls = self._impls.get(key, [])
        if not defs and not impls:
            return None
        resolved = [
            ResolvedImpl(**asdict(i), definition=self.best_definition(i.function, i.path) if i.function else None)
            for i in impls
        ]
        return OpInfo(op=key, defs=list(defs), impls=resolved)

    def best_definition(self, function: str, near_path: str | None = None) -> CppFunction | None:
        """Best definition of a bound function: non-kernel first, qualifier match,
        then the file sharing the longest directory prefix with ``near_path``
        (the registration site), then a source file over a header, then path/line."""
        cands = self.functions_named(function)
        if not cands:
            return None
        qual = _strip_template_args(_WS_RE.sub("", function)).lstrip(":").lstrip("&")

        def score(f: CppFunction):
            return (
                0 if not f.is_kernel else 1,
                0 if (f.qualname == qual or f.qualname.endswith("::" + qual)) else 1,
                -_common_prefix_len(f.path, near_path) if near_path else 0,
                0 if Path(f.path).suffix in (".cu", ".cpp", ".cc", ".cxx") else 1,
                f.path,
                f.line,
            )

        return min(cands, key=score)

    @staticmethod
    def _key(qualname: str) -> str:
        q = qualname.strip()
        if q.startswith("torch.ops."):
            q = q[len("torch.ops."):]
            ns, _, rest = q.partition(".")
            q = f"{ns}::{rest}"
        if q.endswith(".default"):
            q = q[: -len(".default")]
        return q


# --------------------------------------------------------------------------- files


def iter_cpp_files(root: Path) -> Iterator[Path]:
    """C++/CUDA source files under ``root`` (sorted per directory), skipping VCS and
    build folders, ``node_modules``, hidden folders and symlink loops."""
    root = Path(root)
    if root.is_file():
        if root.suffix.lower() in CPP_SUFFIXES:
            yield root
        return
    seen: set[tuple[int, int]] = set()

    def walk(d: Path) -> Iterator[Path]:
        try:
            st = d.stat()
        except OSError:
            return
        key = (st.st_dev, st.st_ino)
        if key in seen:
            return
        seen.add(key)
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            return
        subdirs = []
        for e in entries:
            try:
                if e.is_dir():
                    nm = e.name
                    if nm in SKIP_DIRS or nm.startswith(".") or nm.startswith(_SKIP_DIR_PREFIXES):
                        continue
                    subdirs.append(Path(e.path))
                elif e.is_file() and os.path.splitext(e.name)[1].lower() in CPP_SUFFIXES:
                    yield Path(e.path)
            except OSError:
                continue
        for sd in subdirs:
            yield from walk(sd)

    yield from walk(root)


def iter_file_summaries(
    paths: Iterable[Path],
    load: Callable[[str], FileSummary | None] | None = None,
    store: Callable[[str, FileSummary], None] | None = None,
    extension_name: str = "_C",
) -> Iterator[FileSummary]:
    """One :class:`FileSummary` per file of ``paths`` (files, or folders walked with
    :func:`iter_cpp_files`), in order. ``load(sha256)`` may return a cached summary for that
    content; ``store(sha256, summary)`` is called after each fresh parse. Cache errors are
    ignored; unreadable files are skipped. A cached summary is re-pathed when the same content
    is found at a different path."""
    for spath, data in _file_bytes(paths):
        yield summary_of(spath, data, load, store, extension_name)


def _file_bytes(paths: Iterable[Path]) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of each file of ``paths`` (files, or folders walked with :func:`iter_cpp_files`), once
    each, in order; unreadable files are skipped."""
    seen: set[str] = set()
    for p in paths:
        p = Path(p)
        for f in (iter_cpp_files(p) if p.is_dir() else [p]):
            spath = str(f)
            if spath in seen:
                continue
            seen.add(spath)
            try:
                yield spath, f.read_bytes()
            except OSError:
                continue


def summary_of(
    path: str,
    data: bytes,
    load: Callable[[str], FileSummary | None] | None = None,
    store: Callable[[str, FileSummary], None] | None = None,
    extension_name: str = "_C",
) -> FileSummary:
    """The :class:`FileSummary` of one file's bytes: ``load(sha256)``'s when it gives one for that content
    (re-pathed), else a fresh parse handed to ``store(sha256, summary)``. Cache errors are misses."""
    sha = hashlib.sha256(data).hexdigest()
    summary: FileSummary | None = None
    if load is not None:
        try:
            summary = load(sha)
        except Exception:  # noqa: BLE001 - a broken cache is a miss
            summary = None
        if summary is not None and (not isinstance(summary, FileSummary) or summary.sha256 != sha):
            summary = None
    if summary is None:
        summary = summarize_cpp(data, path, extension_name)
        if store is not None:
            try:
                store(sha, summary)
            except Exception:  # noqa: BLE001
                pass
    return summary.with_path(path)


def lazy_index(
    paths: Iterable[Path],
    load: Callable[[str], FileSummary | None] | None = None,
    store: Callable[[str, FileSummary], None] | None = None,
    extension_name: str = "_C",
) -> CppIndex:
    """A :class:`CppIndex` over the files of ``paths`` (as :func:`build_index`) that summarises only the
    files that register ops now (their text matches a registration block), the others when a query
    needs them (see :class:`CppIndex`): on the real vLLM-MetaX checkout 7 of 146 files up front, and a
    check asks for functions that 21 more define."""
    order: dict[str, int] = {}
    eager: list[FileSummary] = []
    pending: dict[str, bytes] = {}
    for spath, data in _file_bytes(paths):
        order[spath] = len(order)
        if _BLOCK_RE.search(data):
            eager.append(summary_of(spath, data, load, store, extension_name))
        else:
            pending[spath] = data

    def summarise(path: str, data: bytes) -> FileSummary:
        return summary_of(path, data, load, store, extension_name)

    return CppIndex(eager, pending=pending, order=order, summarise=summarise)


def build_index(
    paths: Iterable[Path],
    load: Callable[[str], FileSummary | None] | None = None,
    store: Callable[[str, FileSummary], None] | None = None,
    extension_name: str = "_C",
) -> CppIndex:
    """A :class:`CppIndex` over :func:`iter_file_summaries` of ``paths``.

    Note: summaries depend on ``extension_name``; callers caching across different
    extension names should fold it into the key."""
    return CppIndex(iter_file_summaries(paths, load, store, extension_name))
