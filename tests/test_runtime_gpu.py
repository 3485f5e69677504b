"""GPU probes (marked ``gpu``): the same families natively on a CUDA/MACA device.

Skipped cleanly when no GPU is visible.  With one, the fixtures' Triton kernels are
compiled for the device (no interpreter), and, when the target interpreter can
import vLLM, vLLM's own kernels are probed too (an import error skips with the
verbatim message).
"""

from __future__ import annotations

import glob
import os
import shutil

import pytest

from attnlens.cache import Cache
from attnlens.runtime import environment as envmod
from attnlens.runtime import probes
from tests.probe_fixtures.runtime_support import fixture_env, require_target, shared_pool

pytestmark = pytest.mark.gpu


def _gpu_visible() -> bool:
    return bool(shutil.which("nvidia-smi") or shutil.which("mx-smi") or glob.glob("/dev/nvidia[0-9]*")
                or glob.glob("/dev/mxcd*") or os.environ.get("ATTNLENS_TEST_GPU"))


@pytest.fixture(scope="module")
def gpu(request):
    if not _gpu_visible():
        pytest.skip("no GPU visible (nvidia-smi, mx-smi, /dev/nvidia*, /dev/mxcd*)")
    py = require_target(triton=True)
    pool = shared_pool(request.config)
    rec = envmod.collect(py, fixture_env(), pool=pool)
    if not (rec.get("gpu") or {}).get("count"):
        pytest.skip(f"the target interpreter sees no GPU: {envmod.summary(rec)}")
    return {"python": py, "pool": pool, "env": fixture_env(), "record": rec}


def _run(gpu, tmp_path, family, target, **kw):
    return probes.run_probe(gpu["python"], family, target, "cuda", Cache(tmp_path / "cache"), kw.pop("timeout", 300),
                            env=gpu["env"], pool=gpu["pool"], **kw)


CASES = [
    ("varlen", "probefix.varlen:flash_attn_varlen_func", "probefix.varlen:flash_attn_varlen_func_ignores_sinks"),
    ("kv_cache_write", "probefix.kv_cache:reshape_and_cache_flash_triton",
     "probefix.kv_cache:reshape_and_cache_flash_writes_padding"),
    ("lse_merge", "probefix.lse_merge:merge_attn_states", "probefix.lse_merge:merge_attn_states_exp2"),
    ("decode", "probefix.decode:decode_attention_fwd", "probefix.decode:decode_attention_fwd_ignores_page_table"),
    ("topk", "probefix.topk:top_k_per_row_prefill", "probefix.topk:top_k_per_row_prefill_ignores_padding"),
]


@pytest.mark.parametrize("family, good, bad", CASES)
def test_fixtures_on_gpu(gpu, tmp_path, family, good, bad):
    ok = _run(gpu, tmp_path, family, good)
    assert ok.verdict == "pass", [(c["name"], c["status"], c.get("note")) for c in ok.cases]
    assert ok.device.startswith("cuda") and ok.interpret is False
    broken = _run(gpu, tmp_path, family, bad)
    assert broken.verdict == "fail"


VLLM = [
    ("varlen", "vllm.v1.attention.ops.triton_unified_attention:unified_attention", {"convention": "unified_attention"}),
    ("decode", "vllm.v1.attention.ops.triton_decode_attention:decode_attention_fwd", {}),
    ("lse_merge", "vllm.v1.attention.ops.triton_merge_attn_states:merge_attn_states", {}),
]


@pytest.mark.parametrize("family, target, options", VLLM)
def test_vllm_kernels_on_gpu(gpu, tmp_path, family, target, options):
    rec = _run(gpu, tmp_path, family, target, options=options)
    if rec.verdict == "import_error":
        pytest.skip(f"{target}: {rec.details['import_error']['type']}: {rec.details['import_error']['message']}")
    assert rec.verdict == "pass", [(c["name"], c["status"], c.get("note")) for c in rec.cases]


# torch ops of vLLM's compiled extension, loaded directly (importing vllm._custom_ops needs vLLM's deps)
VLLM_OPS = [
    ("kv_cache_write", "_C_cache_ops::reshape_and_cache_flash", {}),
    ("topk", "_C::top_k_per_row_prefill", {}),
]


@pytest.mark.parametrize("family, target, options", VLLM_OPS)
def test_vllm_extension_ops_on_gpu(gpu, tmp_path, family, target, options):
    loc = ((gpu["record"].get("packages") or {}).get("vllm") or {}).get("location")
    so = os.path.join(os.path.dirname(loc), "_C_stable_libtorch.abi3.so") if loc else None
    if not so or not os.path.exists(so):
        pytest.skip("vLLM's _C_stable_libtorch.abi3.so is not installed in the target")
    rec = _run(gpu, tmp_path, family, target, options=options, load_library=so)
    if rec.verdict == "import_error":
        pytest.skip(f"{so}: {rec.details['import_error']['type']}: {rec.details['import_error']['message']}")
    assert rec.provider["kind"] == "torch_op" and rec.provider["device_key"] == "CUDA"
    assert "CUDA" in [k["key"] for k in rec.provider["dispatch"]["kernels"]]
    assert rec.verdict == "pass", [(c["name"], c["status"], c.get("note")) for c in rec.cases]
