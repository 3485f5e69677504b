"""Answers are a function of the code, not of what was asked before: the resolver's memos
(values, followed finals, function-body forks) give the same trees as fresh resolution, in any order."""

from __future__ import annotations

import json

import pytest

from tests.helpers import example_ws, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")


def _all_sites(ws, reverse=False):
    mods = sorted(ws.index.workspace_modules(), key=lambda m: m.name, reverse=reverse)
    out = {}
    for mod in mods:
        calls = list(mod.summary.calls)
        for cs in (reversed(calls) if reverse else calls):
            if not cs.func:
                continue
            c = ws.resolver.trace_call(mod, cs)
            out[(mod.name, cs.line, cs.col, cs.func)] = json.dumps(c.to_json(), sort_keys=True)
    return out


def test_memoised_trees_equal_fresh_ones_in_any_order(tmp_path):
    fresh = example_ws(tmp_path / "fresh")
    fresh.resolver.memo_enabled = False
    want = _all_sites(fresh)
    fwd = _all_sites(example_ws(tmp_path / "fwd"))
    rev = _all_sites(example_ws(tmp_path / "rev"), reverse=True)
    assert len(want) > 250
    assert sorted(k for k in want if want[k] != fwd[k]) == []
    assert sorted(k for k in want if want[k] != rev[k]) == []
