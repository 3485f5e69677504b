"""Who reads a metadata field: the upstream code that reads ``.field`` off an object of a class.

Shared by AL112 (metadata-field-drift: a field the plugin's class lacks matters only where some code
that runs with the plugin's metadata reads it) and the upgrade quick fix that adds such fields
(``upgrade.fixes``: the fix names the read). Files: the class's own module, and the modules of the
class's top package that name the class (a byte pre-filter). In each function of them, a read is
``x.field`` (loaded, not assigned) where ``x`` is known to hold the class: ``self`` in its own methods, a parameter or local
annotated with it (``attn_metadata: FlashAttentionMetadata``, ``X | None``, a string), assigned
from ``Cls(...)`` or ``cast(Cls, ...)``, tested with ``isinstance(x, Cls)``, or, in the class's own
module, an unannotated parameter named ``*metadata`` (the backend's own impl methods). Reads of the
same attribute name off other objects (``common_attn_metadata.seq_lens``) are not reads of this
class's field. Upstream sources do not change under a running server, so each question is
scanned once (keyed by the class module's mtime).
"""

from __future__ import annotations

import ast
import os
import re


def field_reads(ws, upath: str, cls: str, umod: str, names) -> dict[str, list[tuple[str, int]]]:
    """field -> every ``(path, line)`` reading ``.field`` in ``upath`` (the module defining class
    ``cls``) and in the modules of ``umod``'s top package that name ``cls`` (tests and benchmarks
    left out), ``upath`` first."""
    names = tuple(sorted(set(names)))
    if not names:
        return {}
    try:
        stamp = os.stat(upath).st_mtime_ns
    except OSError:
        stamp = 0
    key = (upath, stamp, cls, umod, names)
    memo = ws.query.state(__name__)  # the workspace's own: the scan locates packages on its target's path
    if key not in memo:
        if len(memo) > 256:
            memo.clear()
        memo[key] = _scan(ws, upath, cls, umod, names)
    return memo[key]


def reads_in(path: str, quals, cls: str, names) -> dict[str, list[tuple[str, int]]]:
    """field -> ``(path, line)`` of the reads of ``.field`` inside the functions ``quals`` (qualnames,
    nested functions included) of the module at ``path``, off a name holding ``cls`` (or, these being
    methods that run with the class's objects, an unannotated or TypeVar-annotated ``*metadata``)."""
    tree = _parsed(path)
    if tree is None or not names:
        return {}
    wanted, quals = set(names), set(quals)
    out: dict = {}
    for q, fn in _functions(tree):
        if q not in quals:
            continue
        _collect_reads(fn, _holders(fn, cls, own=True), frozenset(), wanted, path, out)
    return {n: sorted(v) for n, v in out.items()}


def _collect_reads(fn, held: set, attrs, wanted: set, path: str, out: dict) -> None:
    """Add to ``out`` (field -> {(path, line)}) the loads of ``x.field`` in ``fn`` whose ``x`` is a name in
    ``held`` or an attribute in ``attrs`` (declared with the class as its type)."""
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and node.attr in wanted):
            continue
        v = node.value
        if (isinstance(v, ast.Name) and v.id in held) or (isinstance(v, ast.Attribute) and v.attr in attrs):
            out.setdefault(node.attr, set()).add((path, node.lineno))


_TREES: dict = {}  # (path, mtime_ns) -> parsed tree: the file's content at that stamp, bounded (64)


def _parsed(path: str):
    try:
        key = (path, os.stat(path).st_mtime_ns)
    except OSError:
        return None
    if key not in _TREES:
        if len(_TREES) > 64:
            _TREES.clear()
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                _TREES[key] = ast.parse(fh.read(), path)
        except (OSError, SyntaxError, ValueError, RecursionError):
            _TREES[key] = None
    return _TREES[key]


def _functions(tree, prefix: str = ""):
    """(qualname, node) of every function and method of ``tree`` (classes and functions nested)."""
    for node in getattr(tree, "body", ()):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            q = prefix + node.name
            yield q, node
            yield from _functions(node, q + ".<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, prefix + node.name + ".")


def _scan(ws, upath: str, cls: str, umod: str, names) -> dict:
    files = [upath]
    loc = ws.index.locate(umod.split(".", 1)[0])
    if loc is not None and loc.kind == "py" and loc.is_package:
        from ..index import iter_py_bytes

        needle = cls.encode()
        files += sorted(p for p, data in iter_py_bytes(os.path.dirname(loc.path), ("tests", "benchmarks"))
                        if needle in data and p != upath)
    wanted = set(names)
    out: dict = {}
    for p in files:
        tree = _parsed(p)
        if tree is None:
            continue
        # the class's own methods: `self` holds it
        own_methods = {id(n) for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == cls
                       for n in c.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        # attributes declared with the class as their type (`chunked_context: ChunkedContextMetadata | None`):
        # `x.chunked_context.field` reads it too (nested metadata classes are reached that way)
        attrs = {n.target.id for c in ast.walk(tree) if isinstance(c, ast.ClassDef) for n in c.body
                 if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and _names_cls(n.annotation, cls)}
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                held = _holders(fn, cls, own=p == upath, attrs=attrs)
                if id(fn) in own_methods and fn.args.args:
                    held.add(fn.args.args[0].arg)
                if held or attrs:
                    _collect_reads(fn, held, attrs, wanted, p, out)
    return {n: sorted(v, key=lambda x: (x[0] != upath, x[0], x[1])) for n, v in out.items()}


def _names_cls(node, cls: str) -> bool:
    """Does the annotation / expression ``node`` name class ``cls`` (``Cls``, ``mod.Cls``, ``Cls | None``,
    ``Optional[Cls]``, ``"Cls"``)?"""
    for n in ast.walk(node):
        if (isinstance(n, ast.Name) and n.id == cls) or (isinstance(n, ast.Attribute) and n.attr == cls):
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.search(r"\b" + re.escape(cls) + r"\b", n.value):
            return True
    return False


def _holders(fn, cls: str, own: bool, attrs=frozenset()) -> set[str]:
    """The names in function ``fn`` known to hold an instance of ``cls`` (also assigned from an attribute in
    ``attrs``, declared with the class as its type); with ``own`` (a method that
    runs with the class's objects) also a ``*metadata`` parameter without an annotation or annotated
    with a TypeVar-like name (``attn_metadata: M``)."""
    held = set()
    a = fn.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs:
        ann = arg.annotation
        if ann is not None and _names_cls(ann, cls):
            held.add(arg.arg)
        elif own and arg.arg.endswith("metadata") and (
                ann is None or (isinstance(ann, ast.Name) and len(ann.id) <= 2)):
            held.add(arg.arg)
    for node in ast.walk(fn):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _names_cls(node.annotation, cls):
            held.add(node.target.id)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Attribute) and node.value.attr in attrs:
            held.update(t.id for t in node.targets if isinstance(t, ast.Name))  # `cc = prefill.chunked_context`
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            made = (isinstance(f, ast.Name) and f.id == cls) or (isinstance(f, ast.Attribute) and f.attr == cls)
            cast = (isinstance(f, ast.Name) and f.id == "cast" and node.value.args
                    and _names_cls(node.value.args[0], cls))
            if made or cast:
                held.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
              and len(node.args) == 2 and isinstance(node.args[0], ast.Name) and _names_cls(node.args[1], cls)):
            held.add(node.args[0].id)
    return held
