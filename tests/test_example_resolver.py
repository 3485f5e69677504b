"""The bundled example plugin against the real vllm 0.26.0 installed by the test set-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from attnlens import model as M
from tests.helpers import EXAMPLE, REPO, example_ws, find, have_vllm, kinds

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")

FA = EXAMPLE / "mini_metax/attention/backends/flash_attn.py"
TRI = EXAMPLE / "mini_metax/attention/backends/triton_attn.py"


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return example_ws(tmp_path_factory.mktemp("ex"))


def at(ws, path, text, nth=0, offset=0):
    p, line, col = find(path, text, nth, offset)
    c = ws.trace_at(p, line, col)
    assert c is not None
    return c


def test_profile_of_example(ws):
    s = ws.resolver.profile.summary()
    assert s["entry_point"] == "mini_metax:register"
    assert set(s["classes"]) == {"mini_metax.platform.SmiMiniPlatform", "mini_metax.platform.NoSmiMiniPlatform"}
    assert s["facts"]["is_out_of_tree"] is True and s["facts"]["is_cuda"] is False
    assert s["facts"]["is_device_capability_family"] is False


def test_backends_registry(ws):
    entries = {(e.kind, e.name): e for e in ws.backends(include_custom_ops=True)}
    # the MLA prefill classes vLLM's get_mla_prefill_backend can return besides the registered one are listed too
    upstream_prefill = {"FlashInferPrefillBackend", "TrtllmRaggedPrefillBackend", "TokenspeedMLAPrefillBackend",
                        "AiterFlashAttnPrefillBackend"}
    assert set(entries) == {("attention", "FLASH_ATTN"), ("attention", "TRITON_ATTN"), ("attention", "TRITON_MLA"),
                            ("mla_prefill", "FLASH_ATTN"), ("custom_op", "SparseAttnIndexer")} | {
                                ("mla_prefill", n) for n in upstream_prefill}
    assert all(entries[("mla_prefill", n)].registered_at == [] and len(entries[("mla_prefill", n)].selected) == 2
               for n in upstream_prefill)
    fa = entries[("attention", "FLASH_ATTN")]
    assert fa.impl.cls == "mini_metax.attention.backends.flash_attn.MiniFlashAttentionImpl"
    assert fa.builder.cls == "mini_metax.attention.backends.flash_attn.MiniFlashAttentionMetadataBuilder"
    assert fa.upstream.cls == "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"
    assert fa.upstream.path.endswith("vllm/v1/attention/backends/flash_attn.py")
    tri = entries[("attention", "TRITON_ATTN")]
    assert tri.registered_at[0]["form"] == "decorator"
    assert tri.builder.inherited_from  # not overridden: upstream builder is what runs
    assert entries[("mla_prefill", "FLASH_ATTN")].upstream.cls == "vllm.v1.attention.backends.mla.prefill.flash_attn.FlashAttnPrefillBackend"
    assert entries[("custom_op", "SparseAttnIndexer")].upstream.cls == "vllm.model_executor.layers.sparse_attn_indexer.SparseAttnIndexer"
    finals = {c.chain.final.kind for c in fa.call_sites}
    assert {M.TORCH_OP, M.TRITON_KERNEL, M.NOT_INSTALLED, M.DUMMY} <= finals


def test_upstream_op_served_by_plugin_csrc(ws):
    c = at(ws, FA, "reshape_and_cache_flash(key")
    ks = kinds(c)
    assert ks[:4] == ["call", "conditional_import", "alias", "conditional_import"]
    assert c.hops[3].symbol == "vllm._custom_ops"
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_C_cache_ops::reshape_and_cache_flash"
    impl = next(r for r in f.registrations if r.kind == "cpp_impl")
    assert impl.dispatch_key == "CUDA" and impl.function_path.endswith("csrc/cache_kernels.cu")
    assert any("minikern._C" in p and "not installed" in p for p in f.providers)


def test_not_installed_vendor_flash(ws):
    c = at(ws, FA, "flash_attn_varlen_func(")
    assert c.final.kind == M.NOT_INSTALLED and c.final.package == "miniflash"


def test_dummy_scheduler_metadata(ws):
    c = at(ws, FA, "scheduler_metadata = get_scheduler_metadata(", offset=len("scheduler_metadata = "))
    assert c.final.kind == M.DUMMY and "get_scheduler_metadata" in c.final.symbol


def test_importlib_getattr_wraps_autograd_to_cpp(ws):
    c = at(ws, FA, "apply_rotary(md.positions")
    ks = kinds(c)
    assert ks.count("dynamic_import") == 2 and "wrapper" in ks and "autograd_apply" in ks
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_mini_C::rotary_embedding"
    assert any(r.function_path and r.function_path.endswith("pos_encoding.cu") for r in c.final.registrations)


def test_lazy_import_args_kwargs_to_autotuned_kernel(ws):
    c = at(ws, FA, "decode_attention_fwd(q, key_cache")
    ks = kinds(c)
    assert "lazy_import" in ks and "wrapper" in ks and "decorator" in ks
    assert c.final.kind == M.TRITON_KERNEL and c.final.symbol == "mini_metax.attention.ops.decode._decode_kernel"
    assert "HEAD_SIZE" in c.final.constexprs


def test_direct_cpp_op(ws):
    c = at(ws, FA, "torch.ops._mini_C.paged_attention_v2(", offset=len("torch.ops._mini_C."))
    assert c.final.kind == M.TORCH_OP and c.final.path.endswith("csrc/torch_bindings.cpp")
    assert c.final.schema.startswith("paged_attention_v2(Tensor! out")


def test_python_registered_op_and_custom_op(ws):
    uni = EXAMPLE / "mini_metax/attention/ops/unified.py"
    c = at(ws, uni, "torch.ops.vllm.mini_unified_attention(", offset=len("torch.ops.vllm."))
    assert "op_registration" in kinds(c)
    assert c.final.kind == M.TRITON_KERNEL and c.final.symbol.endswith("_mini_unified_attention_kernel")
    c2 = at(ws, TRI, "torch.ops.mini.scale_cache(", offset=len("torch.ops.mini."))
    assert "op_registration" in kinds(c2)
    # a pure-PyTorch custom op body (`cache.mul_(...)`): the leaf is the op, located at the function that implements it
    assert (c2.final.kind, c2.final.symbol, c2.final.path, c2.final.line) == (M.TORCH_OP, "mini::scale_cache", str(uni), 130)
    assert c2.final.detail == ("implemented in Python by mini_metax.attention.ops.unified.scale_cache, whose body reaches "
                               "no kernel the analysis can follow")


def test_reexport_through_package_init(ws):
    c = at(ws, TRI, "mini_unified_attention_fwd(")
    assert "reexport" in kinds(c)


def test_merge_wrapper_skips_dead_cuda_branch(ws):
    c = at(ws, FA, "merge_attn_states(output")
    assert c.final.kind == M.FORK and c.final.fork.kind == M.ForkKind.CALLS
    leaves = [(lf.final.kind, lf.final.symbol, lf.conditions, lf.reachable) for lf in c.leaves()]
    assert leaves == [
        # the is_cuda() branch stays in the tree, marked dead on this platform
        (M.TORCH_OP, "_C::merge_attn_states", ["current_platform.is_cuda()"], False),
        (M.TRITON_KERNEL, "mini_metax.attention.ops.merge_attn_states.merge_attn_states_kernel",
         ["not (current_platform.is_cuda())"], True),
    ]
    assert c.single_leaf().symbol.endswith("merge_attn_states_kernel")


def test_monkey_patch_redirects_upstream(ws):
    loc = ws.index.locate("vllm.v1.attention.backends.triton_attn")
    c = at(ws, loc.path, "        triton_reshape_and_cache_flash(", offset=8)
    ks = kinds(c)
    assert "patch" in ks
    assert c.hops[ks.index("patch")].path.endswith("mini_metax/patch/attention.py")
    assert c.final.kind == M.TRITON_KERNEL and c.final.symbol == "mini_metax.patch.attention._mini_reshape_and_cache_kernel"


def test_nvidia_checks_are_evaluated(ws):
    mod = ws.index.module("mini_metax.attention.backends.flash_attn")
    prof = ws.resolver.profile
    text = "get_flash_attn_version() == 3 and current_platform.is_device_capability_family(90)"
    assert prof.evaluate(mod, "", text) is False


def _cli(*args):
    env = dict(os.environ)
    out = subprocess.run([sys.executable, "-m", "attnlens.cli", *args], capture_output=True, text=True, env=env, timeout=120)
    return out


def test_cli_trace_json_contract(tmp_path):
    p, line, col = find(FA, "reshape_and_cache_flash(key")
    out = _cli("trace", "--root", str(EXAMPLE), "--python", sys.executable, "--cache-dir", str(tmp_path), "--json",
               f"{p}:{line}:{col + 1}")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert set(d) >= {"hops", "final", "reachable"}
    for h in d["hops"]:
        assert set(h) >= {"kind", "path", "line", "symbol", "detail", "condition"}
    assert d["hops"][0]["path"] == str(FA) and d["hops"][0]["line"] == line
    f = d["final"]
    assert set(f) >= {"kind", "path", "line", "symbol", "package", "registrations"}
    assert f["kind"] == "torch_op" and f["symbol"] == "_C_cache_ops::reshape_and_cache_flash"
    assert os.path.isabs(f["path"])
    assert all(set(r) >= {"path", "line", "dispatch_key"} for r in f["registrations"])


def test_cli_backends_json_contract(tmp_path):
    out = _cli("backends", "--root", str(EXAMPLE), "--python", sys.executable, "--cache-dir", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    names = {(e["kind"], e["name"]) for e in d}
    assert ("attention", "FLASH_ATTN") in names and ("mla_prefill", "FLASH_ATTN") in names
    e = next(x for x in d if x["name"] == "FLASH_ATTN" and x["kind"] == "attention")
    assert set(e) >= {"name", "class", "path", "line", "registered_at", "impl", "builder", "upstream", "call_sites"}
    assert set(e["upstream"]) >= {"class", "path", "line"}
    cs = e["call_sites"][0]
    assert set(cs) >= {"path", "line", "col", "call", "final"}


def test_cli_bad_position_is_a_clear_error(tmp_path):
    out = _cli("trace", "--root", str(EXAMPLE), "--python", sys.executable, "--cache-dir", str(tmp_path), "nope.py:1")
    assert out.returncode != 0 and "FILE:LINE:COL" in out.stderr


def test_cli_missing_target_python_still_analyses(tmp_path):
    out = _cli("backends", "--root", str(EXAMPLE), "--python", "/nonexistent/python", "--cache-dir", str(tmp_path), "--no-call-sites")
    assert out.returncode == 0
    assert "target interpreter not found" in out.stderr


def _sites(entries):
    return sorted((e.kind, e.name, tuple(json.dumps(s.to_json(), sort_keys=True) for s in e.call_sites)) for e in entries)


def test_background_warm_steps_give_the_same_registry(tmp_path):
    """Server indexing traces call sites and C++ files a few at a time; the result equals a direct build."""
    from attnlens.lsp.analysis import Analysis
    from attnlens.registry import Registry

    direct = example_ws(tmp_path / "a")
    want = _sites(direct.backends(include_custom_ops=True))
    assert sum(len(x[2]) for x in want) > 10  # the example has call sites to compare
    want_ops = sorted(direct.resolver.ops.cpp().ops())
    assert want_ops

    ws = example_ws(tmp_path / "b")
    cpp_steps = list(ws.resolver.ops.cpp_warm_steps(0.0))
    assert cpp_steps and cpp_steps == list(range(1, len(cpp_steps) + 1))  # one file per step
    assert list(ws.resolver.ops.cpp_warm_steps(0.0)) == []  # the steps built the index: nothing left
    again = example_ws(tmp_path / "b")  # a new process over the same cache: the whole index is read back
    assert list(again.resolver.ops.cpp_warm_steps(0.0)) == [] and sorted(again.resolver.ops.cpp().ops()) == want_ops
    steps = list(Registry(ws.resolver).warm_steps(0.0))  # budget 0: a yield after every call site
    # 4 registered backends + 1 custom op + 4 upstream MLA prefill classes that vLLM's prefill selector can return
    assert len(steps) > 10 and set(steps) == {9}
    assert list(ws.resolver.ops.cpp_warm_steps(0.0)) == []  # the index is built: nothing left to warm
    assert _sites(ws.backends(include_custom_ops=True)) == want
    assert sorted(ws.resolver.ops.cpp().ops()) == want_ops

    a = Analysis(example_ws(tmp_path / "c"))
    messages = [m for m, _pct in a.indexing_steps()]
    assert messages[-1] == "symbols" and "backends" in messages and "C++ registrations" in messages
    assert _sites(a.backends()) == want
