"""Findings a maintainer acts on: one finding per cause with its other places as related locations,
short Problems-panel messages, probe routing by what a call passes (issue: findings quality)."""

from __future__ import annotations

from pathlib import Path

import pytest
from attnlens.rules.engine import Engine
from attnlens.rules.probe_routing import route

from .conftest import fixture_roots, make_workspace

ROOTS = {r.name: r for r in fixture_roots()}


@pytest.fixture(scope="module")
def calls(cache_root):
    ws = make_workspace(ROOTS["calls"], cache_root)
    return ws, Engine(ws).check_paths(None)


def _line_of(path: Path, text: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(text)


def test_not_installed_package_is_one_finding_at_its_import(calls):
    ws, findings = calls
    py = ROOTS["calls"] / "fxcalls" / "calls.py"
    got = [f for f in findings if f.rule == "AL107" and Path(f.path).name == "calls.py"]
    assert len(got) == 1
    f = got[0]
    assert f.line == _line_of(py, "from notinstalledpkg import fast_kernel")
    assert py.read_text().splitlines()[f.line - 1][f.col:f.end_col] == "fast_kernel"
    call_lines = [i for i, line in enumerate(py.read_text().splitlines(), 1) if line.strip().startswith("fast_kernel(")]
    assert [r["line"] for r in f.related] == call_lines
    assert [r["message"] for r in f.related] == ["call of fast_kernel", "call of fast_kernel with out=, s_aux="]
    assert f.message == "`notinstalledpkg` is not installed: 2 calls via this import are unchecked (fast_kernel ×2)."
    assert f.data["calls"] == 2 and f.data["package"] == "notinstalledpkg"


def test_messages_are_short(calls):
    _ws, findings = calls
    assert findings
    assert max(len(f.message) for f in findings) <= 300


def test_json_carries_related_with_one_based_columns(calls):
    ws, findings = calls
    f = next(f for f in findings if f.rule == "AL107" and Path(f.path).name == "calls.py")
    j = f.to_json(ws.root)
    assert j["related"][0]["path"] == "fxcalls/calls.py"
    assert j["related"][0]["col"] == f.related[0]["col"] + 1


def test_probe_routing_by_name_and_keywords():
    # the varlen family drives flash_attn_varlen_func and passes these keywords
    r = route("varlen_attention", ["q", "causal", "softcap", "cu_seqlens_k"], "flash_attn_varlen_func")
    assert (r.probe, r.uncovered) == ("varlen_attention", ("cu_seqlens_k",))
    assert r.text("x") == "Decide with the `varlen_attention` probe (it passes no cu_seqlens_k=)."
    # a metadata helper in a package whose contract names the decode probe: not something it drives
    r = route("decode_attention", ["cache_seqlens", "topk"], "get_mla_metadata")
    assert r.probe is None and r.needs == ("cache_seqlens", "topk")
    assert r.text("get_mla_metadata") == "No probe family covers `get_mla_metadata` yet (needs: cache_seqlens=, topk=)."
    # the right name but mostly foreign keywords: another calling convention
    r = route("decode_attention", ["q", "block_table", "cache_seqlens", "head_dim_v"], "decode_attention_fwd")
    assert r.probe is None
    # positional-only call of a name the family drives
    assert route("decode_attention", [], "decode_attention_fwd").probe == "decode_attention"


@pytest.fixture(scope="module")
def platform(cache_root):
    ws = make_workspace(ROOTS["platform"], cache_root)
    return ws, Engine(ws).check_paths(None)


def test_capability_tests_of_one_expression_are_one_finding_with_the_documented_value(platform):
    _ws, findings = platform
    py = ROOTS["platform"] / "fxplat" / "checks.py"
    line = _line_of(py, "return capability >= DeviceCapability(7, 5) and capability <= DeviceCapability(12, 1)")
    got = [f for f in findings if f.rule == "AL105" and f.line == line]
    assert len(got) == 1
    f = got[0]
    assert f.message == ("`capability >= DeviceCapability(7, 5) and capability <= DeviceCapability(12, 1)` is True on this "
                         f"platform: it compares NVIDIA SM numbers and the platform reports 8.0 (checks.py:{line - 2}).")
    assert [r["message"] for r in f.related] == ["`capability <= DeviceCapability(12, 1)`"]
    assert f.data["documented"] == "8.0" and f.data["constant"] is True
    # the other comparison of the file now evaluates with the documented value too
    line2 = _line_of(py, "return capability.major in [9, 10]")
    f2 = next(f for f in findings if f.rule == "AL105" and f.line == line2)
    assert f2.data["constant"] is False
    # the detail names who passes the `capability` parameter: the platform's get_attn_backend_cls, not "upstream"
    plat = ROOTS["platform"] / "fxplat" / "platform.py"
    src = _line_of(plat, "device_capability = cls.get_device_capability()")
    for x in (f, f2):
        assert (f"The capability is what FxPlatform.get_attn_backend_cls (fxplat/platform.py:{src}) obtains and passes to the "
                "backend's checks." in x.detail)


def test_folded_assert_is_stated(platform):
    _ws, findings = platform
    assert all(len(f.message) <= 300 for f in findings)


def test_capability_evaluator_takes_tuple_literals():
    from attnlens.rules.capability_eval import Cap, evaluate

    c = Cap(8, 0)
    assert evaluate("capability >= (8, 0)", c) is True
    assert evaluate("capability < (9, 0)", c) is True
    assert evaluate("capability in [(8, 0), (9, 0)]", c) is True
    assert evaluate("capability.major in (9, 10)", c) is False
    assert evaluate("capability.major in [9, 10]", c) is False
    assert evaluate("capability >= DeviceCapability(7, 5)", c) is True
    assert evaluate("x.foo == 3", c) is None
