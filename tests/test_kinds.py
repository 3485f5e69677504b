"""The kinds are str enums that behave as their plain strings wherever output or a comparison sees them (issue 12)."""

from __future__ import annotations

import json
import pickle

import pytest

from attnlens import model as M
from attnlens.walk import ValKind

ENUMS = [M.FinalKind, M.ForkKind, M.HopKind, M.Reach, ValKind]
MEMBERS = [m for e in ENUMS for m in e]


@pytest.mark.parametrize("k", MEMBERS, ids=[f"{type(m).__name__}.{m.name}" for m in MEMBERS])
def test_a_kind_is_its_plain_string(k):
    s = k.value
    assert type(s) is str
    assert k == s and s == k and not (k != s)
    assert hash(k) == hash(s) and {s: 1}[k] == 1 and {k: 1}[s] == 1 and k in {s} and s in (k,)
    assert str(k) == s and type(str(k)) is str
    assert f"{k}|{k:>30}|{k!s}|{k!r}" == f"{s}|{s:>30}|{s!s}|{s!r}"
    assert "%s %r" % (k, k) == "%s %r" % (s, s)
    assert repr(k) == repr(s) and str((k, 1)) == str((s, 1))  # (ids and memo keys built from tuples)
    assert json.dumps({"kind": k, k: [k]}, sort_keys=True) == json.dumps({"kind": s, s: [s]}, sort_keys=True)
    assert json.JSONEncoder(indent=1).encode([k]) == json.JSONEncoder(indent=1).encode([s])  # (the pure-Python encoder)
    assert type(k)(s) is k  # a plain string read back (JSON, an older cache) names its member
    assert pickle.loads(pickle.dumps(k)) is k


def test_kinds_sort_and_group_as_strings():
    mixed = [M.HopKind.PATCH, "alias", M.HopKind.CALL, "zzz"]
    assert sorted(mixed) == sorted(str(x) for x in mixed)
    assert sorted({M.FinalKind.TORCH_OP: 1, "dummy": 2}) == ["dummy", "torch_op"]


def test_hop_kinds_are_what_the_analysis_produces():
    """Every HopKind member is produced somewhere (no stale kind), and every literal kind handed to Hop(...) in the
    package is a member (an AST scan of the server, the editor included)."""
    import ast

    from tests.helpers import REPO

    used = set()
    for py in sorted((REPO / "server" / "attnlens").rglob("*.py")):
        for node in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and node.args and ast.unparse(node.func) in ("Hop", "M.Hop")):
                continue
            a = node.args[0]
            for x in (a.body, a.orelse) if isinstance(a, ast.IfExp) else (a,):
                if isinstance(x, ast.Constant) and isinstance(x.value, str):
                    used.add(x.value)
                elif isinstance(x, ast.Attribute) and ast.unparse(x.value) in ("HopKind", "M.HopKind"):
                    used.add(M.HopKind[x.attr].value)
    # kinds made from a variable: the import hops of Resolver.binding_value
    used |= {M.HopKind.IMPORT, M.HopKind.CONDITIONAL_IMPORT, M.HopKind.LAZY_IMPORT}
    assert used == {k.value for k in M.HopKind}


def test_frozen_patches_hold_plain_strings():
    """The patch table's on-disk form carries kinds as plain strings (an enum member would pickle as a reference
    to attnlens' classes), and thawing gives the members back."""
    from attnlens.patches import _freeze_val
    from attnlens.walk import Alt, Val, alts_value

    v = alts_value(M.ForkKind.PATCHED, "c", None, "x", 1, [Alt(Val(ValKind.FUNCTION, None, "f"), "c", None, "f")])
    frozen = _freeze_val(v)
    assert b"attnlens" not in pickle.dumps(frozen)
    assert frozen[0] == "alts" and type(frozen[0]) is str and type(frozen[8]) is str
