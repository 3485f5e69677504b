"""The rules on the example plugin: each planted shape (README call texts) gets its finding."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import MINI

# (rule, file, call text from examples/mini-metax/README.md or the file)
EXPECTED = [
    ("AL102", "mini_metax/attention/backends/flash_attn.py",
     "decode_attention_fwd(q, key_cache, value_cache, o, md.block_table, md.seq_lens, self.scale, softcap=self.logits_soft_cap)"),
    ("AL104", "mini_metax/attention/backends/flash_attn.py", "# softcap is applied inside the mini decode kernel"),
    ("AL104", "mini_metax/patch/attention.py", "FP8 shares this API"),
    ("AL104", "mini_metax/attention/backends/fa_utils.py", "# mini fa2 supports sinks"),
    ("AL104", "mini_metax/attention/backends/fa_utils.py", "all sinks supported"),
    ("AL104", "mini_metax/attention/backends/flash_attn.py", "# mini fa2 supports 512"),
    ("AL104", "mini_metax/attention/backends/flash_attn.py", "# cache is contiguous, no need to check strides"),
    ("AL103", "mini_metax/attention/backends/flash_attn.py", "def supports_sink(cls) -> bool:"),
    ("AL105", "mini_metax/attention/backends/flash_attn.py", "current_platform.has_device_capability(89)"),
    ("AL105", "mini_metax/attention/backends/mla/triton_mla.py", "current_platform.is_device_capability(100)"),
    ("AL105", "mini_metax/attention/backends/mla/triton_mla.py", "cap >= DeviceCapability(9, 0)"),
    ("AL106", "mini_metax/attention/backends/flash_attn.py", "scheduler_metadata = get_scheduler_metadata("),
    # one finding per missing package and the import that binds it (fa_utils' re-export): kept at the first module's
    # own import, mla/prefill_flash_attn.py's finding and calls are its related locations
    ("AL107", "mini_metax/attention/backends/flash_attn.py", "    from mini_metax.attention.backends.fa_utils import ("),
    ("AL108", "mini_metax/attention/backends/flash_attn.py",
     "from vllm.v1.attention.backends.fa_utils import flash_attn_supports_fp8"),
    ("AL114", "mini_metax/attention/backends/flash_attn.py", "query[:n].view(num_reqs, -1, self.num_heads, self.head_size)"),
]


# shapes that must NOT be reported: branches the platform profile folds
NOT_EXPECTED = [
    # `get_flash_attn_version() == 3 and is_device_capability_family(90)`: the version is the constant 2, so the
    # family test never runs (short-circuit by a folded constant)
    ("AL105", "mini_metax/attention/backends/flash_attn.py", "current_platform.is_device_capability_family(90)"),
]


def _line_of(path: Path, text: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    hits = [i for i, line in enumerate(lines, 1) if text in line and not line.lstrip().startswith("from miniflash")]
    # "flash_attn_varlen_func(" also matches the def-free call line only once per file in the README's sense
    assert hits, f"{text!r} not found in {path}"
    return hits[0]


@pytest.fixture(scope="module")
def mini(checked):
    ws, eng, findings = checked(MINI)
    assert not eng.errors, eng.errors
    return ws, findings


@pytest.mark.parametrize("rule,rel,text", EXPECTED, ids=[f"{r}:{t[:40]}" for r, _f, t in EXPECTED])
def test_planted_shape_found(mini, rule, rel, text):
    _ws, findings = mini
    path = MINI / rel
    line = _line_of(path, text)
    got = [f for f in findings if f.rule == rule and Path(f.path).resolve() == path.resolve() and f.line == line]
    assert got, f"{rule} not reported at {rel}:{line} ({text!r}); got there: " + repr(
        [(f.rule, f.line) for f in findings if Path(f.path).resolve() == path.resolve()])


def test_swallowed_softcap_names_the_path(mini):
    _ws, findings = mini
    f = next(f for f in findings if f.rule == "AL102")
    assert "_decode_impl" in f.message and f.data["keyword"] == "softcap"
    assert f.data["chain"]["final"]["kind"] == "triton_kernel"


def test_fp8_claim_names_unread_parameters(mini):
    _ws, findings = mini
    f = next(f for f in findings if f.rule == "AL104" and "FP8" in f.message)
    assert f.severity == "warning"
    for p in ("kv_cache_dtype", "k_scale", "v_scale"):
        assert p in f.message


def test_sinks_claims_name_a_probe(mini):
    _ws, findings = mini
    sinks = [f for f in findings if f.rule in ("AL103", "AL104") and f.data.get("capability") == "sinks"]
    assert sinks
    for f in sinks:
        assert f.data["probe"] in ("varlen", "decode")


def test_no_false_schema_or_keyword_errors(mini):
    """mini-metax calls its ops with matching schemas and passes accepted keywords."""
    _ws, findings = mini
    assert not [f for f in findings if f.rule in ("AL101", "AL109", "AL113")]
    # the dead NVIDIA branch (is_cuda() is False on Mini) is not checked
    assert not [f for f in findings if "merge_attn_states.py" in f.path and f.rule == "AL113"]


@pytest.mark.parametrize("rule,rel,text", NOT_EXPECTED, ids=[f"{r}:{t[:40]}" for r, _f, t in NOT_EXPECTED])
def test_folded_shape_not_reported(mini, rule, rel, text):
    _ws, findings = mini
    path = MINI / rel
    line = _line_of(path, text)
    assert not [f for f in findings if f.rule == rule and Path(f.path).resolve() == path.resolve() and f.line == line]


def test_calls_of_a_missing_package_are_related_locations(mini):
    """flash_attn.py and mla/prefill_flash_attn.py reach `miniflash` through fa_utils' re-export: one cause (the
    import in fa_utils that binds it). The report keeps flash_attn.py's finding, at its own import, with its calls
    and the other module's finding as related locations."""
    _ws, findings = mini
    path = MINI / "mini_metax/attention/backends/flash_attn.py"
    prefill = MINI / "mini_metax/attention/backends/mla/prefill_flash_attn.py"
    got = [f for f in findings if f.rule == "AL107" and f.data.get("package") == "miniflash"]
    assert [(Path(f.path).resolve(), f.line) for f in got] == [
        (path.resolve(), _line_of(path, "    from mini_metax.attention.backends.fa_utils import ("))]
    f = got[0]
    assert f.data["cause"] == "AL107:miniflash@mini_metax/attention/backends/fa_utils.py:18"
    assert f.message.endswith("(also reached from 1 other place).")
    lines = path.read_text(encoding="utf-8").splitlines()
    calls = [i for i, t in enumerate(lines, 1) if "flash_attn_varlen_func(" in t and not t.lstrip().startswith("def ")]
    assert [r["line"] for r in f.related if Path(r["path"]).resolve() == path.resolve()
            and r["message"].startswith("call of flash_attn_varlen_func")] == calls
    assert [(Path(r["path"]).resolve(), r["line"]) for r in f.related if r["message"] == "same cause"] == [
        (prefill.resolve(), _line_of(prefill, "from mini_metax.attention.backends.fa_utils import flash_attn_varlen_func"))]
