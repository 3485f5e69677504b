"""Every rule against Semgrep-style markers in the fixture plugins.

``# ruleid: AL1xx`` on the line before a finding that must be reported, ``# ok: AL1xx``
before a line that must not get that finding. Every finding in a fixture must be
expected by a ``ruleid`` marker (precision over volume).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from attnlens.rules.engine import RULES, Engine, rules_table

from .conftest import fixture_roots, make_workspace, markers

ROOTS = fixture_roots()


@pytest.fixture(scope="module")
def results(cache_root):
    out = {}
    for root in ROOTS:
        ws = make_workspace(root, cache_root)
        eng = Engine(ws)
        findings = eng.check_paths(None)
        out[root.name] = (ws, eng, findings)
    return out


def _expected(root: Path):
    exp = []
    for py in sorted(root.rglob("*.py")):
        for kind, rule, target, mline in markers(py):
            exp.append((kind, rule, str(py.resolve()), target, mline))
    return exp


@pytest.mark.parametrize("root", ROOTS, ids=[r.name for r in ROOTS])
def test_markers(results, root):
    _ws, eng, findings = results[root.name]
    assert not eng.errors, eng.errors
    got = {(f.rule, str(Path(f.path).resolve()), f.line) for f in findings}
    exp = _expected(root)
    missing = [(r, p, t, m) for k, r, p, t, m in exp if k == "ruleid" and (r, p, t) not in got]
    wrong = [(r, p, t, m) for k, r, p, t, m in exp if k == "ok" and (r, p, t) in got]
    wanted = {(r, p, t) for k, r, p, t, _m in exp if k == "ruleid"}
    unexpected = [(f.rule, f.path, f.line, f.message) for f in findings
                  if (f.rule, str(Path(f.path).resolve()), f.line) not in wanted]
    assert not missing, f"expected findings not reported: {missing}"
    assert not wrong, f"findings on `ok` lines: {wrong}"
    assert not unexpected, f"findings without a `ruleid` marker: {unexpected}"


def test_every_rule_has_positive_and_negative_fixtures():
    kinds = {}
    for root in ROOTS:
        for kind, rule, *_ in _expected(root):
            kinds.setdefault(rule, set()).add(kind)
    for r in rules_table():
        assert kinds.get(r.id, set()) >= {"ruleid", "ok"}, f"{r.id} needs a ruleid and an ok fixture, has {kinds.get(r.id)}"


def test_findings_carry_data(results):
    for _ws, _eng, findings in results.values():
        for f in findings:
            assert set(f.data) >= {"chain", "contract", "probe"}
            assert f.severity in ("error", "warning", "info")
            assert f.line >= 1 and f.col >= 0 and (f.end_line, f.end_col) >= (f.line, f.col)
            assert f.rule in RULES


def test_call_findings_have_chains(results):
    _ws, _eng, findings = results["calls"]
    for f in findings:
        if f.rule in ("AL101", "AL102", "AL106", "AL107", "AL113"):
            chain = f.data["chain"]
            assert chain and chain["hops"] and chain["final"]["kind"], f


def test_claim_findings_name_a_probe(results):
    for _ws, _eng, findings in results.values():
        for f in findings:
            if f.rule in ("AL103", "AL104") and f.severity == "info":
                assert f.data["probe"] in ("varlen", "kv_cache_write", "lse_merge", "decode", "topk")
                assert f.data["probe_agent_family"]
