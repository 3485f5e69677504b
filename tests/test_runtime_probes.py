"""Every probe family end to end through the real agent on CPU.

Correct fixtures (torch reference-style and @triton.jit kernels under
TRITON_INTERPRET=1) must pass; a deliberately broken fixture per family must be
caught by the discriminating case(s) meant for that bug.  Crashing and hanging
targets must leave the host serving.  Evidence is written atomically and re-read.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest

from attnlens.cache import Cache, is_safe_id
from attnlens.runtime import evidence as ev
from attnlens.runtime import probes
from tests.probe_fixtures.runtime_support import (
    fixture_env,
    pid_alive,
    require_target,
    scratch_dir,
    shared_pool,
)

# family, correct targets, broken target, cases that must catch the bug
FAMILIES = {
    "varlen": (["probefix.varlen:flash_attn_varlen_func"], "probefix.varlen:flash_attn_varlen_func_ignores_sinks",
               {"sinks_large", "sinks_must_differ"}),
    "kv_cache_write": (["probefix.kv_cache:reshape_and_cache_flash_triton", "probefix.kv_cache:reshape_and_cache_flash"],
                       "probefix.kv_cache:reshape_and_cache_flash_writes_padding",
                       {"padding_and_holes", "fp8_per_tensor_scale"}),
    "lse_merge": (["probefix.lse_merge:merge_attn_states", "probefix.lse_merge:merge_attn_states_autotuned"],
                  "probefix.lse_merge:merge_attn_states_exp2", {"basic", "lse_base", "output_lse.lse"}),
    "decode": (["probefix.decode:decode_attention_fwd"], "probefix.decode:decode_attention_fwd_ignores_page_table",
               {"gqa_page16", "mha_page1"}),
    "topk": (["probefix.topk:top_k_per_row_prefill"], "probefix.topk:top_k_per_row_prefill_ignores_padding",
             {"short_rows_padded", "mixed"}),
}


@pytest.fixture(scope="module")
def env_(request):
    py = require_target(triton=True)
    return {"python": py, "pool": shared_pool(request.config), "env": fixture_env()}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    # one cache for the module: the environment record is collected once, then reused (fingerprint)
    return Cache(tmp_path_factory.mktemp("cache"))


def run(env_, cache, family, target, **kw):
    kw.setdefault("timeout", 120)
    return probes.run_probe(env_["python"], family, target, "auto", cache, kw.pop("timeout"), env=env_["env"],
                            pool=env_["pool"], **kw)


def _by_name(rec):
    return {c["name"]: c for c in rec.cases}


def _check_evidence(cache, rec):
    assert is_safe_id(rec.id) and "/" not in rec.id
    path = cache.folder / "evidence" / f"{rec.id}.json"
    assert path.is_file()
    on_disk = json.loads(path.read_text())
    assert on_disk == json.loads(rec.to_json())
    again = ev.read(cache, rec.id)
    assert again is not None and again.to_dict() == rec.to_dict()
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]  # no torn temp files left


@pytest.mark.parametrize("family", list(FAMILIES))
def test_correct_fixture_passes(env_, cache, family):
    for target in FAMILIES[family][0]:
        rec = run(env_, cache, family, target)
        bad = [(c["name"], c["status"], c.get("note")) for c in rec.cases if c["status"] != "pass"]
        assert rec.verdict == "pass", (target, rec.message, bad)
        assert rec.device == "cpu" and rec.interpret is True
        assert rec.environment.get("hash") and len(rec.environment["hash"]) == 16
        assert rec.provider.get("file", "").endswith(f"probefix/{target.split(':')[0].split('.')[1]}.py")
        for c in rec.cases:
            assert {"name", "shapes", "seed", "dtype", "max_abs_err", "max_rel_err", "passed", "note"} <= set(c)
        assert rec.exit_code == 0
        _check_evidence(cache, rec)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_broken_fixture_is_caught(env_, cache, family):
    _, broken, catching = FAMILIES[family]
    rec = run(env_, cache, family, broken)
    assert rec.verdict == "fail", rec.cases
    cases = _by_name(rec)
    for name in catching:
        assert cases[name]["status"] == "fail", (name, cases[name])
        assert cases[name]["passed"] is False
    # discrimination, not generic breakage: some cases of the same family still pass
    assert any(c["status"] == "pass" for c in rec.cases), [c["name"] for c in rec.cases]
    assert rec.exit_code == 1
    _check_evidence(cache, rec)


def test_kv_cache_write_catches_a_kernel_that_ignores_strides(env_, cache):
    """Issue 15 item 12: the packed K|V layout (views with head stride 2*D) decides a stride-blind kernel."""
    rec = run(env_, cache, "kv_cache_write", "probefix.kv_cache:reshape_and_cache_flash_assumes_contiguous")
    status = {c["name"]: c["status"] for c in rec.cases}
    assert status == {"nhd_bf16": "pass", "padding_and_holes": "pass", "hnd_strided": "fail", "kv_packed": "fail",
                      "kv_packed_head_stride": "fail", "head_size_80": "pass", "fp8_per_tensor_scale": "pass"}, rec.cases
    shapes = _by_name(rec)["kv_packed_head_stride"]["shapes"]
    assert shapes["layout"] == "KV_PACKED_HEAD_STRIDE"


def test_varlen_packed_head_stride_case(env_, cache):
    rec = run(env_, cache, "varlen", "probefix.varlen:flash_attn_varlen_func")
    c = _by_name(rec)["kv_packed_head_stride"]
    assert c["status"] == "pass", c
    kc = c["shapes"]["k_cache"]
    D = kc["shape"][-1]
    assert kc["stride"][-2:] == [2 * D, 1]  # head stride 2*D


def test_varlen_unified_attention_convention_and_sinks_evidence(env_, cache):
    rec = run(env_, cache, "varlen", "probefix.varlen:unified_attention", options={"convention": "unified_attention"})
    assert rec.verdict == "pass", rec.cases
    d = _by_name(rec)["sinks_must_differ"]
    assert d["observed_difference"] > 0.1 and d["observed_difference"] >= 0.5 * d["expected_difference"]
    broken = run(env_, cache, "varlen", "probefix.varlen:flash_attn_varlen_func_ignores_sinks")
    d = _by_name(broken)["sinks_must_differ"]
    assert d["observed_difference"] == 0.0 and "ignored" in d["note"]
    assert _by_name(broken)["sinks_neg_inf"]["status"] == "pass"  # sinks at -inf look like no sinks


def test_kv_cache_write_through_a_torch_op(env_, cache):
    rec = run(env_, cache, "kv_cache_write", "probefix_ops::reshape_and_cache_flash", module="probefix.ops")
    assert rec.verdict == "pass", rec.cases
    pv = rec.provider
    assert pv["kind"] == "torch_op" and pv["qualname"] == "probefix_ops::reshape_and_cache_flash"
    assert "Tensor(a!) key_cache" in pv["schema"]
    assert pv["device_key"] == "CPU" and "probefix/ops.py" in pv["device_kernel"]
    assert [k["key"] for k in pv["dispatch"]["kernels"]] == ["CPU"]


def test_topk_functional_convention(env_, cache):
    rec = run(env_, cache, "topk", "probefix.topk:topk_functional", options={"convention": "functional"})
    assert rec.verdict == "pass", rec.cases


def test_segfaulting_target_is_a_result_and_host_survives(env_, cache):
    rec = run(env_, cache, "lse_merge", "probefix.crash:crash_now")
    assert rec.verdict == "crashed"
    assert rec.message.startswith("probe crashed: signal 11 after ")
    assert "Segmentation fault" in rec.details["stderr_tail"]
    assert rec.exit_code == 1
    _check_evidence(cache, rec)
    rec2 = run(env_, cache, "lse_merge", "probefix.crash:crash_by_signal")
    assert rec2.verdict == "crashed" and "signal 11" in rec2.message
    ok = run(env_, cache, "topk", "probefix.topk:top_k_per_row_prefill")
    assert ok.verdict == "pass"


def test_hanging_target_times_out_and_host_survives(env_, cache):
    t0 = time.monotonic()
    rec = run(env_, cache, "decode", "probefix.crash:hang_forever", timeout=5)
    took = time.monotonic() - t0
    assert rec.verdict == "timeout" and rec.message == "probe timed out after 5 s"
    assert 5.0 <= rec.details["agent_elapsed_s"] < 7.0
    assert took < 15.0
    _check_evidence(cache, rec)
    # the child that the hanging target started died with the agent's process group
    for name in os.listdir(scratch_dir()):
        if name.startswith("hang-child-"):
            with open(os.path.join(scratch_dir(), name)) as f:
                child = int(f.read())
            deadline = time.monotonic() + 5
            while pid_alive(child) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not pid_alive(child)
            os.unlink(os.path.join(scratch_dir(), name))
    ok = run(env_, cache, "topk", "probefix.topk:top_k_per_row_prefill")
    assert ok.verdict == "pass"


def test_stdout_garbage_from_target_does_not_break_protocol(env_, cache):
    rec = run(env_, cache, "lse_merge", "probefix.crash:noisy_merge")
    assert rec.verdict == "pass", rec.cases
    agent = env_["pool"].get(env_["python"], {**env_["env"], "TRITON_INTERPRET": "1"})  # the CPU probe agent
    assert agent.garbage == []
    time.sleep(0.2)
    assert "GARBAGE {not json" in agent.stderr_tail(400)


def test_import_error_is_evidence_not_failure(env_, cache):
    rec = run(env_, cache, "varlen", "probefix.badimport:flash_attn_varlen_func")
    assert rec.verdict == "import_error"
    ie = rec.details["import_error"]
    assert ie["type"] == "ImportError"
    assert ie["message"] == "libmcruntime.so: cannot open shared object file: No such file or directory"
    assert "badimport.py" in ie["traceback"]
    _check_evidence(cache, rec)


def test_import_error_inside_the_call_is_evidence(env_, cache):
    rec = run(env_, cache, "lse_merge", "probefix.lazy_import:merge_attn_states")
    assert rec.verdict == "import_error", rec.cases
    assert rec.details["import_error"]["type"] == "ModuleNotFoundError"
    assert "mcoplib" in rec.message and all(c["status"] == "error" for c in rec.cases if c["required"])


def test_missing_attribute_and_unknown_family(env_, cache):
    rec = run(env_, cache, "topk", "probefix.topk:no_such_function")
    assert rec.verdict == "error" and "no_such_function" in rec.message and rec.exit_code == 2
    with pytest.raises(ValueError):
        run(env_, cache, "no_such_family", "probefix.topk:top_k_per_row_prefill")


def test_evidence_listing_and_latest(env_, cache):
    a = run(env_, cache, "topk", "probefix.topk:top_k_per_row_prefill")
    b = run(env_, cache, "topk", "probefix.topk:top_k_per_row_prefill_ignores_padding")
    c = run(env_, cache, "topk", "probefix.topk:top_k_per_row_prefill")
    # a torn / foreign file in the folder is skipped
    (cache.folder / "evidence" / "garbage.json").write_text("{not json")
    (cache.folder / "evidence" / ".x.json.123.tmp").write_text("{}")
    ids = [r.id for r in ev.list_records(cache, family="topk")]
    mine = [i for i in ids if i in (a.id, b.id, c.id)]
    assert mine == [a.id, b.id, c.id]  # oldest first
    assert all(r.family == "topk" for r in ev.list_records(cache, family="topk"))
    latest = ev.latest_for_target(cache, "probefix.topk:top_k_per_row_prefill")
    assert latest.id == c.id
    assert ev.latest_for_target(cache, "nothing:here") is None


def test_async_runner(env_, cache):
    async def main():
        return await probes.run_probe_async(env_["python"], "topk", "probefix.topk:top_k_per_row_prefill", "cpu",
                                            cache, 60, env=env_["env"], pool=env_["pool"])

    rec = asyncio.run(main())
    assert rec.verdict == "pass"


def test_catalog_is_complete_and_torch_free():
    import sys

    fams = probes.families()
    assert [f["name"] for f in fams] == ["varlen", "kv_cache_write", "lse_merge", "decode", "topk"]
    for f in fams:
        assert f["description"] if "description" in f else f["title"]
        assert f["component"] and f["convention"] and f["cases"] and f["tolerance"]
    assert "torch" not in sys.modules
