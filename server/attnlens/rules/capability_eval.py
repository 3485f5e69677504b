"""Evaluate an NVIDIA capability test with the capability a platform documents it reports.

A plugin often says what its device reports (``# On MACA it's 8.0`` above a ``supports_compute_capability``);
with that value, ``capability.major in [9, 10]`` is no longer "taken or skipped for the wrong reason" but
False, and a finding can say what that means ("FLASHMLA is never selected on this platform"). The evaluator
is a small AST interpreter over the test's text: names that hold a capability (``capability``,
``device_capability``, ``current_platform.get_device_capability()``) become the documented value; anything
else makes the answer unknown (None).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..pyindex import compare

_CAP_NAME = re.compile(r"(^|_)(cap|capability|device_capability|compute_capability)$")
# a documented value: `8.0` in a comment that mentions the device/platform reporting it
_DOC = re.compile(r"#.*?\b(?:it'?s|is|reports?|returns?|=)\s*(?:sm[_ ]?)?(\d{1,2})\.(\d)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Cap:
    major: int
    minor: int

    def tup(self) -> tuple:
        return (self.major, self.minor)


def documented_capability(lines: list[str], near: int, window: int = 3) -> tuple[Cap, int] | None:
    """A capability stated in a comment within ``window`` lines above (or on) line ``near`` (1-based)."""
    for ln in range(near, max(0, near - window - 1), -1):
        if 0 < ln <= len(lines):
            m = _DOC.search(lines[ln - 1])
            if m:
                return Cap(int(m.group(1)), int(m.group(2))), ln
    return None


def evaluate(text: str, cap: Cap, method: str = "") -> bool | None:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    try:
        v = _ev(node, cap, method)
    except (TypeError, ValueError, _Unknown):
        return None
    return v if isinstance(v, bool) else None


class _Unknown(Exception):
    pass


def _is_cap_ref(node) -> bool:
    if isinstance(node, ast.Name):
        return bool(_CAP_NAME.search(node.id))
    if isinstance(node, ast.Attribute):
        return bool(_CAP_NAME.search(node.attr))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_device_capability":
        return True
    return False


def _ev(node, cap: Cap, method: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.Tuple):
        return tuple(_ev(e, cap, method) for e in node.elts)  # `(8, 0)`: compares like a capability
    if isinstance(node, (ast.List, ast.Set)):
        return [_ev(e, cap, method) for e in node.elts]
    if _is_cap_ref(node):
        return cap
    if isinstance(node, ast.Attribute):
        base = _ev(node.value, cap, method)
        if isinstance(base, Cap) and node.attr in ("major", "minor"):
            return getattr(base, node.attr)
        raise _Unknown
    if isinstance(node, ast.Subscript):
        base = _ev(node.value, cap, method)
        idx = _ev(node.slice, cap, method)
        if isinstance(base, Cap) and idx in (0, 1):
            return base.tup()[idx]
        raise _Unknown
    if isinstance(node, ast.Call):
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")
        args = [_ev(a, cap, method) for a in node.args]
        if name == "DeviceCapability" and len(args) == 2:
            return Cap(int(args[0]), int(args[1]))
        if name == "to_int" and isinstance(f, ast.Attribute):
            base = _ev(f.value, cap, method)
            if isinstance(base, Cap):
                return base.major * 10 + base.minor
        if name in ("has_device_capability", "is_device_capability") and len(args) == 1:
            want = args[0]
            have = cap.major * 10 + cap.minor if isinstance(want, int) else cap.tup()
            want = want.tup() if isinstance(want, Cap) else (tuple(want) if isinstance(want, list) else want)
            return have >= want if name == "has_device_capability" else have == want
        raise _Unknown
    if isinstance(node, ast.BoolOp):
        vals = [_ev(v, cap, method) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return not _ev(node.operand, cap, method)
    if isinstance(node, ast.Compare):
        left = _norm(_ev(node.left, cap, method))
        for op, comp in zip(node.ops, node.comparators):
            right = _norm(_ev(comp, cap, method))
            if not _cmp(op, left, right):
                return False
            left = right
        return True
    raise _Unknown


def _norm(v):
    if isinstance(v, Cap):
        return v.tup()
    return v


def _cmp(op, a, b) -> bool:
    if isinstance(op, (ast.In, ast.NotIn)):
        if not isinstance(b, (list, tuple)):
            raise _Unknown
        return compare(op, a, [_norm(x) for x in b])
    if isinstance(op, (ast.Is, ast.IsNot)) or isinstance(a, tuple) != isinstance(b, tuple):
        raise _Unknown
    return compare(op, a, b)


def reduce(test: str, use: str, value: bool) -> str | None:
    """``test`` with the sub-expression ``use`` replaced by ``value`` and the boolean structure simplified
    (``c or not x`` with c False -> ``not x``): the folded outcome a finding states. None when nothing is
    left to say (the whole test is the use) or the texts do not parse."""
    try:
        t = ast.parse(test.strip(), mode="eval").body
        target = ast.dump(ast.parse(use.strip(), mode="eval").body)
    except SyntaxError:
        return None
    if ast.dump(t) == target:
        return None
    out = _simplify(_subst(t, target, value))
    return ast.unparse(out)


def _subst(node, target: str, value: bool):
    if ast.dump(node) == target:
        return ast.Constant(value)
    for name, field_value in ast.iter_fields(node):
        if isinstance(field_value, ast.AST):
            setattr(node, name, _subst(field_value, target, value))
        elif isinstance(field_value, list):
            setattr(node, name, [_subst(x, target, value) if isinstance(x, ast.AST) else x for x in field_value])
    return node


def _simplify(node):
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = _simplify(node.operand)
        if isinstance(inner, ast.Constant) and isinstance(inner.value, bool):
            return ast.Constant(not inner.value)
        node.operand = inner
        return node
    if isinstance(node, ast.BoolOp):
        is_and = isinstance(node.op, ast.And)
        kept = []
        for v in (_simplify(x) for x in node.values):
            if isinstance(v, ast.Constant) and isinstance(v.value, bool):
                if v.value is (not is_and):
                    return ast.Constant(v.value)  # `x or True`, `x and False`
                continue  # `x and True`, `x or False`: the constant drops out
            kept.append(v)
        if not kept:
            return ast.Constant(is_and)
        return kept[0] if len(kept) == 1 else ast.BoolOp(op=node.op, values=kept)
    return node
