"""Source-level facts for comparing two versions of a symbol.

The resolver's summaries say *where* a symbol is; comparing versions needs a little
more: default values, normalised bodies and the text itself. Files are parsed with the
stdlib ``ast`` once per content (memoised by path + mtime + size) and never imported.

* :func:`signature` - parameters with kind, default text and annotation, the method
  kind (static/class/property) and the return annotation;
* :func:`body_hash` - a hash of the normalised AST of a body: positions, comments,
  formatting and docstrings do not count;
* :func:`class_shape` - bases, methods, class attributes and dataclass fields;
* :func:`describe_signature_change` - a sentence per difference;
* :func:`segment` / :func:`unified_diff` - the text of a symbol and a diff of two.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import os
import threading
from dataclasses import dataclass, field

from ..pyindex import decode_source


@dataclass(frozen=True)
class SigParam:
    """A parameter as two versions' signatures are compared: its default's *source text* (the index's
    ``pyindex.Param`` keeps only whether there is one, which is all resolution needs)."""

    name: str
    kind: str  # posonly | pos | vararg | kwonly | kwarg
    default: str | None  # source text of the default, None when required
    annotation: str | None


@dataclass(frozen=True)
class Signature:
    params: tuple
    method_kind: str = "function"  # function | staticmethod | classmethod | property | abstract flags appended
    returns: str | None = None
    is_async: bool = False
    abstract: bool = False

    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def text(self, name: str = "") -> str:
        out = []
        star_done = False
        for p in self.params:
            if p.kind == "kwonly" and not star_done:
                out.append("*")
                star_done = True
            s = ("*" if p.kind == "vararg" else "**" if p.kind == "kwarg" else "") + p.name
            if p.kind == "vararg":
                star_done = True
            if p.annotation:
                s += f": {p.annotation}"
            if p.default is not None:
                s += f" = {p.default}" if p.annotation else f"={p.default}"
            out.append(s)
        r = f" -> {self.returns}" if self.returns else ""
        return f"{'async ' if self.is_async else ''}{name}({', '.join(out)}){r}"


@dataclass
class ClassShape:
    bases: tuple
    methods: dict  # name -> FunctionDef node
    attrs: dict  # name -> normalised value text
    fields: tuple  # (name, annotation, default) of dataclass-style annotated fields
    is_dataclass: bool
    decorators: tuple = ()


@dataclass
class ParsedFile:
    path: str
    text: str
    lines: list
    tree: ast.Module | None
    defs: dict = field(default_factory=dict)  # qualname -> FunctionDef/ClassDef node
    error: str | None = None


class SourceStore:
    """Parsed files memoised by (path, mtime, size); thread-safe."""

    def __init__(self):
        self._files: dict[str, tuple] = {}
        self._lock = threading.Lock()

    def get(self, path: str | None, text: str | None = None) -> ParsedFile | None:
        if not path:
            return None
        if text is None:
            try:
                st = os.stat(path)
            except OSError:
                return None
            stamp = (st.st_mtime_ns, st.st_size)
        else:
            stamp = ("text", hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest())
        with self._lock:
            hit = self._files.get(path)
            if hit is not None and hit[0] == stamp:
                return hit[1]
        if text is None:
            try:
                with open(path, "rb") as f:
                    text = decode_source(f.read())
            except OSError:
                return None
            if text is None:
                return None
        pf = parse_text(path, text)
        with self._lock:
            self._files[path] = (stamp, pf)
        return pf

    def node(self, path: str | None, qualname: str):
        pf = self.get(path)
        if pf is None:
            return None
        return pf.defs.get(qualname)


def parse_text(path: str, text: str) -> ParsedFile:
    lines = text.splitlines()
    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return ParsedFile(path, text, lines, None, {}, f"{type(e).__name__}: {e}")
    defs: dict = {}

    def walk(body, prefix):
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                q = f"{prefix}{st.name}"
                defs.setdefault(q, st)
                walk(st.body, q + ".")
            elif isinstance(st, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(st).__name__ == "TryStar":
                for attr in ("body", "orelse", "finalbody"):
                    walk(getattr(st, attr, []) or [], prefix)
                for h in getattr(st, "handlers", []) or []:
                    walk(h.body, prefix)

    walk(tree.body, "")
    return ParsedFile(path, text, lines, tree, defs)


# ----------------------------------------------------------------------------- texts


def unparse(node) -> str | None:
    if node is None:
        return None
    try:
        return " ".join(ast.unparse(node).split())
    except Exception:  # pragma: no cover - exotic nodes
        return ast.dump(node)


def _deco_name(d) -> str:
    from ..pyindex import dotted

    f = d.func if isinstance(d, ast.Call) else d
    got = dotted(f)
    if got is not None:
        return got
    parts = []  # a chain that does not start at a plain name: keep its attribute part
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    return ".".join(reversed(parts))


def signature(fn) -> Signature | None:
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    a = fn.args
    params = []
    allpos = list(a.posonlyargs) + list(a.args)
    nd = len(a.defaults)
    for i, p in enumerate(allpos):
        d = a.defaults[i - (len(allpos) - nd)] if i >= len(allpos) - nd else None
        params.append(SigParam(p.arg, "posonly" if i < len(a.posonlyargs) else "pos", unparse(d), unparse(p.annotation)))
    if a.vararg:
        params.append(SigParam(a.vararg.arg, "vararg", None, unparse(a.vararg.annotation)))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        params.append(SigParam(p.arg, "kwonly", unparse(d) if d is not None else None, unparse(p.annotation)))
    if a.kwarg:
        params.append(SigParam(a.kwarg.arg, "kwarg", None, unparse(a.kwarg.annotation)))
    kind = "function"
    abstract = False
    for d in fn.decorator_list:
        n = _deco_name(d).rpartition(".")[2]
        if n in ("staticmethod", "classmethod", "property", "cached_property"):
            kind = n
        elif n == "abstractmethod":
            abstract = True
    return Signature(tuple(params), kind, unparse(fn.returns), isinstance(fn, ast.AsyncFunctionDef), abstract)


def _is_trivial_body(body) -> bool:
    """Only a docstring, ``pass``, ``...`` or ``raise NotImplementedError``."""
    rest = [s for s in body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not rest:
        return True
    if len(rest) == 1 and isinstance(rest[0], ast.Pass):
        return True
    if len(rest) == 1 and isinstance(rest[0], ast.Raise):
        exc = rest[0].exc
        exc = exc.func if isinstance(exc, ast.Call) else exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def is_trivial(fn) -> bool:
    return isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_trivial_body(fn.body)


_HASHES: dict = {}  # id(node) -> (node, hash): nodes live in SourceStore's parsed files
_HASH_LOCK = threading.Lock()


def _is_doc(st) -> bool:
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)


def _norm_stmts(body, h) -> None:
    for i, st in enumerate(body):
        if i == 0 and _is_doc(st):
            continue
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            # nested definitions: everything but their body, then their body without its docstring
            h.update(type(st).__name__.encode())
            h.update(st.name.encode())
            for d in st.decorator_list:
                h.update(ast.dump(d, include_attributes=False).encode())
            if isinstance(st, ast.ClassDef):
                for b in st.bases + st.keywords:
                    h.update(ast.dump(b, include_attributes=False).encode())
            else:
                h.update(ast.dump(st.args, include_attributes=False).encode())
                if st.returns is not None:
                    h.update(ast.dump(st.returns, include_attributes=False).encode())
            h.update(b"{")
            _norm_stmts(st.body, h)
            h.update(b"}")
        else:
            h.update(ast.dump(st, include_attributes=False).encode())
        h.update(b";")


def body_hash(node) -> str | None:
    """Hash of the normalised body (no positions, comments, formatting or docstrings)."""
    if node is None:
        return None
    body = getattr(node, "body", None)
    if body is None:
        return None
    key = id(node)
    hit = _HASHES.get(key)
    if hit is not None and hit[0] is node:
        return hit[1]
    h = hashlib.sha1()
    _norm_stmts(body, h)
    out = h.hexdigest()[:16]
    with _HASH_LOCK:
        if len(_HASHES) > 200_000:
            _HASHES.clear()
        _HASHES[key] = (node, out)
    return out


def class_shape(node) -> ClassShape | None:
    if not isinstance(node, ast.ClassDef):
        return None
    methods = {}
    attrs = {}
    fields = []
    decos = tuple(_deco_name(d) for d in node.decorator_list)
    bases = tuple(unparse(b) or "" for b in node.bases)
    # dataclasses, NamedTuples and TypedDicts declare fields; other classes declare attributes
    has_fields = any(d.rpartition(".")[2] == "dataclass" for d in decos) or any(
        b.rpartition(".")[2] in ("NamedTuple", "TypedDict", "BaseModel") for b in bases)
    for st in node.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            methods[st.name] = st
        elif isinstance(st, ast.Assign):
            for t in st.targets:
                if isinstance(t, ast.Name):
                    attrs[t.id] = unparse(st.value)
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            ann = unparse(st.annotation) or ""
            if "ClassVar" in ann or not has_fields:
                if st.value is not None:
                    attrs[st.target.id] = unparse(st.value)
            else:
                fields.append((st.target.id, ann, unparse(st.value) if st.value is not None else None))
    is_dc = any(d.rpartition(".")[2] == "dataclass" for d in decos)
    return ClassShape(bases, methods, attrs, tuple(fields), is_dc, decos)


# ----------------------------------------------------------------------------- differences


def describe_signature_change(old: Signature, new: Signature, name: str = "") -> list[str]:
    out = []
    o = {p.name: p for p in old.params}
    n = {p.name: p for p in new.params}
    label = f"{name}()" if name else "the signature"
    if old.method_kind != new.method_kind:
        out.append(f"{label} became a {new.method_kind} (was {old.method_kind})")
    if old.is_async != new.is_async:
        out.append(f"{label} is {'now' if new.is_async else 'no longer'} async")
    added = [p for p in new.params if p.name not in o]
    removed = [p for p in old.params if p.name not in n]
    for p in added:
        kind = {"kwonly": "keyword-only", "posonly": "positional-only", "vararg": "*args", "kwarg": "**kwargs"}.get(p.kind, "")
        bits = ", ".join(x for x in (kind, f"default {p.default}" if p.default is not None else "required") if x)
        out.append(f"{label} gained `{p.name}` ({bits})")
    for p in removed:
        out.append(f"{label} lost `{p.name}`")
    for name_, po in o.items():
        pn = n.get(name_)
        if pn is None:
            continue
        if (po.default is None) != (pn.default is None):
            out.append(f"`{name_}` is now {'required' if pn.default is None else f'optional (default {pn.default})'}")
        elif po.default != pn.default:
            out.append(f"`{name_}` default {po.default} -> {pn.default}")
        if po.kind != pn.kind:
            out.append(f"`{name_}` became {pn.kind} (was {po.kind})")
        if po.annotation != pn.annotation:
            out.append(f"`{name_}` annotation {po.annotation or '-'} -> {pn.annotation or '-'}")
    common_old = [p.name for p in old.params if p.name in n and p.kind in ("posonly", "pos")]
    common_new = [p.name for p in new.params if p.name in o and p.kind in ("posonly", "pos")]
    if common_old != common_new:
        out.append(f"positional order {', '.join(common_old)} -> {', '.join(common_new)}")
    if old.returns != new.returns:
        out.append(f"return annotation {old.returns or '-'} -> {new.returns or '-'}")
    if old.abstract != new.abstract:
        out.append(f"{label} is {'now' if new.abstract else 'no longer'} abstract")
    return out


def signature_breaks_call(sig: Signature, nargs: int, keywords: tuple, star_args: bool, star_kwargs: bool,
                          bound: bool = False) -> list[str]:
    """Reasons why a call with ``nargs`` positionals and ``keywords`` would not bind to ``sig``."""
    params = list(sig.params)
    if bound and params and params[0].kind in ("pos", "posonly") and sig.method_kind != "staticmethod":
        params = params[1:]
    has_var = any(p.kind == "vararg" for p in params)
    has_kw = any(p.kind == "kwarg" for p in params)
    positional = [p for p in params if p.kind in ("posonly", "pos")]
    out = []
    if not star_args and not has_var and nargs > len(positional):
        out.append(f"passes {nargs} positional arguments, the callee takes {len(positional)}")
    names = {p.name for p in params if p.kind in ("pos", "kwonly")}
    for k in keywords:
        if k not in names and not has_kw:
            out.append(f"passes `{k}=`, which the callee no longer accepts")
    if not star_args and not star_kwargs:
        for i, p in enumerate(positional):
            if p.default is None and i >= nargs and p.name not in keywords:
                out.append(f"does not pass required `{p.name}`")
        for p in params:
            if p.kind == "kwonly" and p.default is None and p.name not in keywords:
                out.append(f"does not pass required keyword `{p.name}`")
    return out


def segment(pf: ParsedFile | None, node) -> list[str]:
    if pf is None or node is None:
        return []
    start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    end = getattr(node, "end_lineno", None) or node.lineno
    return pf.lines[start - 1:end]


def unified_diff(a: list[str], b: list[str], a_name: str, b_name: str, context: int = 3, max_lines: int = 400) -> str:
    out = list(difflib.unified_diff(a, b, a_name, b_name, n=context, lineterm=""))
    if len(out) > max_lines:
        out = out[:max_lines] + [f"... ({len(out) - max_lines} more diff lines)"]
    return "\n".join(out)


def changed_ranges(upstream: list[str], plugin: list[str]) -> list[tuple[int, int]]:
    """0-based [start, end) line ranges of ``plugin`` that differ from ``upstream`` (whitespace ignored)."""
    norm = lambda ls: [" ".join(x.split()) for x in ls]  # noqa: E731
    sm = difflib.SequenceMatcher(None, norm(upstream), norm(plugin), autojunk=False)
    out = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        if j1 == j2:  # a deletion: anchor at the line after
            out.append((j1, j1))
        else:
            out.append((j1, j2))
    return out
