"""Out-of-tree replacements: ``CustomOp.register_oot`` / ``PluggableLayer.register_oot`` in all forms.

vLLM keeps a registry ``op_registry_oot[name] = cls``; ``CustomOp.__new__`` (and
``PluggableLayer.__new__``) instantiate the registered class instead of the one named in the code
when the class's ``__name__`` is registered. The name is ``name=`` when given, else the ``__name__``
of the class whose ``register_oot`` was called (the *base* op, not the decorated class). Forms read:

* ``@Base.register_oot`` and ``@Base.register_oot()`` / ``@Base.register_oot(name="N")``;
* ``Base.register_oot(_decorated_op_cls=C, name="N")`` / ``Base.register_oot(C)`` (also
  ``_decorated_layer_cls=``);
* the call form in a ``for`` loop over a literal dict (``for n, c in {"A": CA}.items():``) or a
  literal list of pairs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from .pyindex import dotted
from .walk import Val, ValKind, Walk

METHOD = "register_oot"


@dataclass
class OotRegistration:
    name: str  # the registry key (a base op's __name__ or name=)
    replacement: Val  # the class vLLM instantiates instead
    base: Val | None  # the class whose register_oot was called
    path: str
    line: int
    form: str


def _base_name(r, mod, text: str, line: int) -> tuple[str, Val | None]:
    base_text = text.rpartition(".")[0]
    bv = r.resolve_dotted(mod, "", base_text, Walk(), line=line) if base_text else None
    if bv is not None and bv.kind == ValKind.CLASS:
        return bv.qual.rpartition(".")[2], bv
    return base_text.rpartition(".")[2], None


def collect(r) -> list[OotRegistration]:
    out: list[OotRegistration] = []
    for mod in r.index.workspace_modules_matching(rb"register_oot"):
        s = mod.summary
        text = None
        for q, c in s.classes.items():
            for d in c.decorators:
                if d.func.rpartition(".")[2] != METHOD:
                    continue
                name, bv = _base_name(r, mod, d.func, d.line)
                given = next((v for k, v in d.kw_texts if k == "name"), None) if d.is_call else None
                if given:
                    try:
                        name = ast.literal_eval(given)
                    except (ValueError, SyntaxError):
                        continue
                cv = Val(ValKind.CLASS, mod, q, mod.path, c.line)
                out.append(OotRegistration(name, cv, bv, mod.path, d.line, f"@{d.func}" + ("(...)" if d.is_call else "")))
        calls = [cs for cs in s.calls if cs.func.rpartition(".")[2] == METHOD and cs.func != METHOD]
        if not calls:
            continue
        if text is None:
            text = r.index.source_text(mod.path) or ""
        loops = _loop_bindings(text)
        for cs in calls:
            kw = dict(cs.kw_texts)
            cls_text = kw.get("_decorated_op_cls") or kw.get("_decorated_layer_cls") or (cs.arg_texts[0] if cs.arg_texts else "")
            name_text = kw.get("name")
            pairs = [(name_text, cls_text)]
            if cs.line in loops:
                var_name, var_cls, items = loops[cs.line]
                if cls_text == var_cls:
                    pairs = [(repr(n) if name_text == var_name else name_text, cv) for n, cv in items]
            for ntext, ctext in pairs:
                if not ctext:
                    continue
                cv = r.resolve_dotted(mod, cs.scope, ctext, Walk(), line=cs.line)
                if cv.kind != ValKind.CLASS:
                    continue
                name, bv = _base_name(r, mod, cs.func, cs.line)
                if ntext:
                    try:
                        name = ast.literal_eval(ntext)
                    except (ValueError, SyntaxError):
                        continue
                out.append(OotRegistration(name, cv, bv, mod.path, cs.line, f"{cs.func}(...)"))
    return out


def _loop_bindings(text: str) -> dict:
    """line of a call inside ``for a, b in {lit dict}.items():`` / ``in [(a, b), ...]`` ->
    (first var, second var, [(key literal value, value dotted text)])."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.For) or not isinstance(node.target, ast.Tuple) or len(node.target.elts) != 2:
            continue
        a, b = (e.id if isinstance(e, ast.Name) else None for e in node.target.elts)
        it = node.iter
        items = []
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "items" \
                and isinstance(it.func.value, ast.Dict):
            for k, v in zip(it.func.value.keys, it.func.value.values):
                if isinstance(k, ast.Constant) and dotted(v):
                    items.append((k.value, dotted(v)))
        elif isinstance(it, (ast.List, ast.Tuple)):
            for e in it.elts:
                if isinstance(e, ast.Tuple) and len(e.elts) == 2 and isinstance(e.elts[0], ast.Constant) and dotted(e.elts[1]):
                    items.append((e.elts[0].value, dotted(e.elts[1])))
        if not items or a is None or b is None:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == METHOD:
                out[sub.lineno] = (a, b, items)
    return out
