"""Class hierarchies for the rules, including subscripted generic bases.

The core summary records a base only when it is a plain dotted name, so
``class FlashAttentionMetadataBuilder(AttentionMetadataBuilder[FlashAttentionMetadata])``
loses its base. Here such bases are read back from the class statement
(the subscript dropped), so hooks declared on generic upstream bases
(``AttentionMetadataBuilder``, ``AttentionImplBase``) are visible.
"""

from __future__ import annotations

import ast

from ..walk import Val, ValKind
from .api import content_memo

TRIVIAL_BASES = {"object", "Generic", "typing.Generic", "ABC", "abc.ABC", "Protocol", "typing.Protocol"}


from ..pyindex import dotted as _dotted  # one implementation of Name/Attribute chains


def _source_bases(engine, mod, cls) -> list | None:
    """Base texts of one class statement, read from its header lines (subscripts dropped)."""
    key = ("srcbases", mod.path, mod.summary.sha, cls.line, cls.name)

    def compute():
        text = engine.ws.index.source_text(mod.path) or ""
        lines = text.splitlines()
        header = []
        depth = 0
        for ln in range(cls.line - 1, min(cls.line + 40, len(lines))):
            line = lines[ln]
            header.append(line)
            code = line.split("#", 1)[0]
            depth += code.count("(") + code.count("[") - code.count(")") - code.count("]")
            if depth <= 0 and code.rstrip().endswith(":"):
                break
        src = "\n".join(header)
        indent = len(src) - len(src.lstrip())
        src = "\n".join(l[indent:] if l[:indent].isspace() or not l[:indent] else l for l in header) + "\n    pass\n"
        try:
            node = ast.parse(src).body[0]
        except (SyntaxError, ValueError, IndexError, RecursionError):
            return None
        if not isinstance(node, ast.ClassDef) or node.name != cls.name:
            return None
        bases = []
        for b in node.bases:
            if isinstance(b, ast.Subscript):
                b = b.value
            bases.append(_dotted(b))
        return bases

    return content_memo(key, compute)  # keyed by path and content sha


def class_bases(engine, cv: Val):
    """(resolved bases, complete?) of a class value."""
    c = cv.cls
    mod = cv.module
    if c is None or mod is None:
        return [], False
    texts = list(c.bases)
    if any(not t for t in texts):
        src = _source_bases(engine, mod, c)
        if src is not None and len(src) == len(texts):
            texts = [t or s for t, s in zip(texts, src)]
    scope = cv.qual.rpartition(".")[0] if "." in cv.qual else ""
    scope = scope if scope in mod.summary.functions else ""
    out = []
    complete = True
    for t in texts:
        if not t:
            complete = False
            continue
        if t in TRIVIAL_BASES:
            continue
        try:
            v = engine.ws.query.resolve_dotted(mod, scope, t, line=c.line)
        except RecursionError:
            complete = False
            continue
        if v.kind != ValKind.CLASS:
            complete = False
            continue
        out.append(v)
    return out, complete


def mro(engine, cv: Val, limit: int = 40):
    """(linearised classes starting with ``cv``, complete?) -- depth-first, de-duplicated."""
    key = ("mro", cv.module.name if cv.module else None, cv.qual)

    def compute():
        out: list[Val] = []
        seen = set()
        complete = True
        stack = [cv]
        while stack and len(out) < limit:
            v = stack.pop(0)
            k = (v.module.name if v.module else None, v.qual)
            if k in seen:
                continue
            seen.add(k)
            out.append(v)
            bases, ok = class_bases(engine, v)
            complete = complete and ok
            stack[0:0] = bases
        return out, complete

    return engine.memo(key, compute)


def mro_complete(engine, cv: Val):
    m, ok = mro(engine, cv)
    return m if ok else None


def class_attr(engine, cv: Val, name: str):
    """(function Val, owner class Val) of the first class in the MRO defining method ``name``."""
    m, _ok = mro(engine, cv)
    for c in m:
        ci = c.cls
        if ci is not None and name in ci.methods:
            fq = ci.methods[name]
            f = c.module.summary.functions.get(fq)
            if f is not None:
                return Val(ValKind.FUNCTION, c.module, fq, c.module.path, f.line, owner=c.qual), c
    return None, None
