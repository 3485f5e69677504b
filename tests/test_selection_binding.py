"""Selection and binding: which backends vLLM can pick, and what `self`, layers and metadata are bound to.

Against the real vllm 0.26.0: the bundled examples (mini-metax, tiny-npu) and inline fixtures."""

from __future__ import annotations

import re

import pytest

from attnlens import model as M
from tests.helpers import EXAMPLE, example_ws, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    return example_ws(tmp_path_factory.mktemp("mini"))


def _selected(entry):
    return [(" and ".join(s["conditions"]), s["reachability"], s["via"]) for s in entry.selected]


def test_mini_selector_candidates_with_conditions(mini):
    entries = {(e.kind, e.name): e for e in mini.backends(with_call_sites=False)}
    user = "selected_backend.get_path() of the requested backend"
    prio = "backend.get_path() over _get_backend_priorities()"
    assert _selected(entries[("attention", "FLASH_ATTN")]) == [
        ("selected_backend is not None and selected_backend is FLASH_ATTN (chosen by the user)", "runtime", user),
        ("not (selected_backend is not None) and not (use_mla) and item 0 of the priority list is FLASH_ATTN (`backend`)",
         "runtime", prio),
    ]
    # TRITON_ATTN is second in its list: only an explicit choice selects it
    assert _selected(entries[("attention", "TRITON_ATTN")]) == [
        ("selected_backend is not None and selected_backend is TRITON_ATTN (chosen by the user)", "runtime", user),
    ]
    assert _selected(entries[("attention", "TRITON_MLA")])[1] == (
        "not (selected_backend is not None) and use_mla and item 0 of the priority list is TRITON_MLA (`backend`)", "runtime", prio)
    # the MLA prefill registry is read by vLLM's own selector (get_mla_prefill_backend), not by get_attn_backend_cls
    chosen = "not (device_capability is None) and attention_config.mla_prefill_backend is not None and not (invalid_reasons)"
    auto = "not (device_capability is None) and not (attention_config.mla_prefill_backend is not None)"
    via = "get_mla_prefill_backend(...) of vllm.v1.attention.backends.mla.prefill"
    assert _selected(entries[("mla_prefill", "FLASH_ATTN")]) == [
        ("device_capability is None", "runtime", via),
        (f"{chosen} and vllm_config.attention_config.mla_prefill_backend is MLAPrefillBackendEnum.FLASH_ATTN", "runtime", via),
        (f"{auto} and current_platform.is_rocm() and backend_enum is MLAPrefillBackendEnum.FLASH_ATTN (item 1 of priorities)",
         "dead", via),
        (f"{auto} and not (current_platform.is_rocm()) and device_capability.major == 10 and backend_enum is "
         "MLAPrefillBackendEnum.FLASH_ATTN (item 0 of priorities)", "runtime", via),
        (f"{auto} and not (current_platform.is_rocm()) and not (device_capability.major == 10) and backend_enum is "
         "MLAPrefillBackendEnum.FLASH_ATTN (item 0 of priorities)", "runtime", via),
    ]


def test_register_oot_name_and_counterpart(mini):
    entries = {(e.kind, e.name): e for e in mini.backends(with_call_sites=False, include_custom_ops=True)}
    e = entries[("custom_op", "SparseAttnIndexer")]
    assert e.cls == "mini_metax.registry.sparse_indexer.MiniSparseAttnIndexer"
    assert e.registered_at[0]["form"] == "@CustomOp.register_oot(...)"
    assert e.upstream.cls == "vllm.model_executor.layers.sparse_attn_indexer.SparseAttnIndexer"


# -- the second example plugin: selection only through code, a broken CUSTOM registration, layer binding --

TINY = EXAMPLE.parent / "tiny-npu"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import sys

    from attnlens.workspace import Workspace

    return Workspace(TINY, python=sys.executable, cache_dir=tmp_path_factory.mktemp("tiny") / "cache")


def _leaves(c):
    return [(lf.final.kind, lf.final.symbol, lf.reachable) for lf in c.leaves()]


def _trace(ws, modname, func, nth=0):
    mod = ws.index.module(modname)
    calls = [cs for cs in mod.summary.calls if cs.func == func]
    return ws.resolver.trace_call(mod, calls[nth])


def test_tiny_backends_come_from_the_selector(tiny):
    entries = {e.cls: e for e in tiny.backends(with_call_sites=False) if e.kind == "attention"}
    sel = {cls: [(" and ".join(s["conditions"]), s["via"]) for s in e.selected] for cls, e in entries.items()}
    nosink = "not (attn_selector_config.has_sink) and not (selected_backend == AttentionBackendEnum.CUSTOM)"
    key = "(attn_selector_config.use_mla, attn_selector_config.use_sparse)"
    assert sel == {
        "tiny_npu.attention.sink.TinySinkBackend": [("attn_selector_config.has_sink", "literal")],
        "TINY_CUSTOM": [("not (attn_selector_config.has_sink) and selected_backend == AttentionBackendEnum.CUSTOM",
                         "AttentionBackendEnum.CUSTOM.get_path()")],
        "tiny_npu.attention.paged.TinyPagedBackend": [(f"{nosink} and {key} == (False, False)", "backends[(False, False)]")],
        "tiny_npu.attention.mla.TinyMLABackend": [(f"{nosink} and {key} == (True, False)", "backends[(True, False)]")],
        "tiny_npu.attention.sparse_mla.TinySparseMLABackend": [(f"{nosink} and {key} == (True, True)", "backends[(True, True)]")],
    }
    paged = entries["tiny_npu.attention.paged.TinyPagedBackend"]
    assert (paged.impl.cls, paged.builder.cls, paged.metadata.cls) == (
        "tiny_npu.attention.paged.TinyPagedImpl", "tiny_npu.attention.paged.TinyPagedMetadataBuilder",
        "tiny_npu.attention.paged.TinyPagedMetadata")


def test_tiny_custom_decorator_with_positional_string_is_reported_once(tiny):
    e = next(e for e in tiny.backends(with_call_sites=False) if e.name == "CUSTOM")
    assert e.cls == "TINY_CUSTOM"  # the string vLLM stores as the class path
    assert len(e.warnings) == 1 and "tiny_npu.attention.custom.TinyCustomBackend is not registered" in e.warnings[0]
    assert "registered twice" not in (e.error or "")


def test_tiny_inherited_call_sites_bind_self_to_the_concrete_impl(tiny):
    entries = {e.cls: e for e in tiny.backends(with_call_sites=True) if e.kind == "attention"}
    sink = entries["tiny_npu.attention.sink.TinySinkBackend"]
    by_line = {(s.path.rpartition("tiny_npu/")[2], s.call): s.chain for s in sink.call_sites}
    # TinyImplBase.forward (common.py) calls self._attend: the sink impl's override, through the import hook
    attend = by_line[("attention/common.py", "self._attend")]
    # (decided at run time: the call sits under `if attn_metadata is None: return` in forward)
    assert _leaves(attend) == [(M.TRITON_KERNEL, "tiny_npu.ops.kernels._paged_sink_attn_kernel", None)]
    assert any(h.kind == "patch" and "serves `flash_attn` from `tiny_npu.compat.flash_attn`" in h.detail for h in attend.hops)


def test_tiny_factory_singleton_and_inherited_method(tiny):
    c = _trace(tiny, "tiny_npu.attention.mla", "NpuOps.mla_decode")
    assert c.final.fork.kind == M.ForkKind.FACTORY
    assert _leaves(c) == [(M.TORCH_OP, "_tiny_C::mla_decode", False), (M.TORCH_OP, "_tiny_C::mla_decode", True),
                          (M.TORCH_OP, "_tiny_C::mla_decode", False)]


def test_tiny_layer_impl_fans_out_over_non_mla_backends(tiny):
    c = _trace(tiny, "tiny_npu.layers.attention", "self.impl.forward")
    assert c.final.fork.kind == M.ForkKind.SELECTED_BACKEND
    assert [b.label for b in c.final.fork.branches] == ["TinyPagedBackend: TinyPagedImpl", "TinySinkBackend: TinySinkImpl"]
    sink = c.final.fork.branches[1].chain
    assert [(k, s) for k, s, _r in _leaves(sink)] == [
        (M.TRITON_KERNEL, "tiny_npu.ops.kernels._write_kv_kernel"), (M.TORCH_OP, "_tiny_C::reshape_and_cache_fp8"),
        (M.TRITON_KERNEL, "tiny_npu.ops.kernels._paged_sink_attn_kernel")]
    paged_live = [(k, s) for k, s, r in _leaves(c.final.fork.branches[0].chain) if r is not False]
    assert (M.TORCH_OP, "_tiny_C::paged_attention") in paged_live
    assert not any(s.startswith("vllm.") for _k, s in paged_live)  # upstream CUDA kernels only on dead branches


def test_tiny_custom_ops_registered_in_a_loop_and_without_name(tiny):
    ops = {e.name: e for e in tiny.backends(with_call_sites=False, include_custom_ops=True) if e.kind == "custom_op"}
    assert {n: (e.cls, e.upstream.cls) for n, e in ops.items()} == {
        "RMSNorm": ("tiny_npu.layers.rms_norm.TinyRMSNorm", "vllm.model_executor.layers.layernorm.RMSNorm"),
        "RotaryEmbedding": ("tiny_npu.layers.rotary.TinyRotaryEmbedding",
                            "vllm.model_executor.layers.rotary_embedding.base.RotaryEmbedding"),
        "SiluAndMul": ("tiny_npu.layers.activation.TinySiluAndMul", "vllm.model_executor.layers.activation.SiluAndMul"),
    }


def test_tiny_patched_upstream_method_runs_the_plugin_function(tiny):
    c = tiny.trace_symbol("vllm.v1.attention.backends.flash_attn.FlashAttentionImpl.do_kv_cache_update")
    assert [h.symbol for h in c.hops if h.kind == "patch"] == ["tiny_npu.patches._tiny_do_kv_cache_update"]
    # the patch is made under `if current_platform.is_out_of_tree()` (True here): the upstream body is the dead branch
    assert c.final.fork.kind == M.ForkKind.PATCHED
    assert [(k, s, r) for k, s, r in _leaves(c)] == [(M.TRITON_KERNEL, "tiny_npu.ops.kernels._write_kv_kernel", None),
                                                     (M.TORCH_OP, "_tiny_C::reshape_and_cache_fp8", None),
                                                     (M.TORCH_OP, "_C_cache_ops::reshape_and_cache_flash", False)]


def test_tiny_torch_library_impl_decorator_is_the_device_kernel(tiny):
    c = _trace(tiny, "tiny_npu.layers.rotary", "torch.ops.tiny.rope")
    assert _leaves(c) == [(M.TRITON_KERNEL, "tiny_npu.ops.kernels._rope_kernel", True)]


def test_backend_whose_module_cannot_be_imported_is_never_selected(tmp_path):
    import shutil
    import sys

    from attnlens.workspace import Workspace

    root = tmp_path / "plugin"
    shutil.copytree(EXAMPLE, root)
    tri = root / "mini_metax/attention/backends/triton_attn.py"
    tri.write_text("from vllm.v1.attention.backend import NoSuchAttentionImpl  # gone upstream\n" + tri.read_text()
                   + "\n\ndef _module_helper(x):\n    return torch.ops._C_cache_ops.reshape_and_cache_flash(x)\n")
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache")
    e = next(e for e in ws.backends(with_call_sites=False) if e.name == "TRITON_ATTN")
    assert e.loads is False
    assert "cannot be imported with the installed vLLM" in e.error and "NoSuchAttentionImpl" in e.error
    assert e.selected and all(s["reachability"] == "dead" for s in e.selected)
    assert "TRITON_ATTN" not in [name for name, _v, _mla in ws._backend_impls()]
    dead = [s for s in ws.kernel_sites() if s.path.endswith("backends/triton_attn.py")]
    assert dead and all(s.chain.reachable is False and s.chain.hops[1].kind == "selection" for s in dead)
    # code outside the backend's classes is dead too: the module itself cannot be imported
    helper = [s for s in dead if s.scope == "_module_helper"]
    assert [(s.call, s.chain.hops[1].symbol) for s in helper] == [
        ("torch.ops._C_cache_ops.reshape_and_cache_flash", "mini_metax.attention.backends.triton_attn")]
    assert helper[0].chain.hops[1].condition.startswith("triton_attn.py cannot be imported with the installed vLLM: "
                                                     "`vllm.v1.attention.backend.NoSuchAttentionImpl`")


def test_reachability_follows_selection(tiny):
    never = tiny.never_selected()
    assert set(never) == {("tiny_npu.attention.custom", q) for q in ("TinyCustomBackend", "TinyCustomImpl", "TinyCustomMetadataBuilder")}
    sites = [s for s in tiny.kernel_sites() if s.path.endswith("attention/custom.py")]
    assert [(s.call, s.chain.reachable, [lf.reachable for lf in s.chain.leaves()]) for s in sites] == [
        ("torch.ops._tiny_C.paged_attention", False, [False])]
    assert sites[0].chain.hops[1].kind == "selection"
    # every other backend of the plugin stays reachable
    assert all(s.chain.hops[1].kind != "selection" for s in tiny.kernel_sites() if not s.path.endswith("custom.py")
               if len(s.chain.hops) > 1)


def test_layer_looked_up_by_name_in_a_vllm_custom_op_binds_its_impl(tiny):
    # upstream unified_attention: `attn_metadata, self, kv_cache, _ = get_attention_context(layer_name)`, where
    # get_attention_context reads `forward_context.no_compile_layers[layer_name]`
    c = _trace(tiny, "vllm.model_executor.layers.attention.attention", "self.impl.forward")
    assert c.final.fork.kind == M.ForkKind.SUBCLASS
    assert [b.label for b in c.final.fork.branches] == ["Attention", "TinyAttention"]
    live = {(lf.final.kind, lf.final.symbol) for lf in c.leaves() if lf.reachable is not False}
    assert {(M.TORCH_OP, "_tiny_C::paged_attention"), (M.TRITON_KERNEL, "tiny_npu.ops.kernels._paged_sink_attn_kernel")} <= live


def test_saved_original_on_an_upstream_class_is_the_upstream_method(tiny):
    from attnlens.walk import Walk

    v = tiny.resolver.resolve_symbol("vllm.v1.attention.backends.flash_attn.FlashAttentionImpl")
    got = tiny.resolver.attr(v, "_tiny_orig_forward", Walk())
    assert (got.kind, got.dotted) == ("function", "vllm.v1.attention.backends.flash_attn.FlashAttentionImpl.forward")


def test_sys_modules_assignment_is_an_import_hook(tmp_path):
    import shutil
    import sys

    from attnlens.workspace import Workspace

    root = tmp_path / "plugin"
    shutil.copytree(EXAMPLE, root)
    init = root / "mini_metax/__init__.py"
    init.write_text(init.read_text() + "\n\nimport sys\nimport importlib\n"
                    "sys.modules[\"minifast\"] = importlib.import_module(\"mini_metax.attention.ops.dispatch\")\n")
    use = root / "mini_metax/attention/ops/use_hook.py"
    use.write_text("from minifast import write_cache\n\n\ndef go(*a):\n    write_cache(*a)\n")
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache")
    c = ws.trace_symbol("mini_metax.attention.ops.use_hook.go")
    assert [(lf.final.kind, lf.final.symbol) for lf in c.leaves()] == [
        (M.TORCH_OP, "_C_cache_ops::reshape_and_cache_flash"),
        (M.TRITON_KERNEL, "mini_metax.attention.ops.dispatch._scale_kernel")]


def test_never_selected_survives_body_edits_and_follows_import_edits(tmp_path):
    import sys

    from attnlens.workspace import Workspace

    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "cache")
    first = ws.never_selected()
    assert first == {}
    path = str(EXAMPLE / "mini_metax/attention/backends/triton_attn.py")
    text = (EXAMPLE / "mini_metax/attention/backends/triton_attn.py").read_text()
    calls = []
    orig = ws.backends
    ws.backends = lambda *a, **k: calls.append(1) or orig(*a, **k)
    ws.index.set_overlay(path, text + "\n\ndef _helper():\n    return 1\n")  # no selection fact changes
    assert ws.never_selected() is first and calls == []
    ws.index.set_overlay(path, "from vllm.v1.attention.backend import NoSuchImpl\n" + text)
    again = ws.never_selected()
    assert calls and ("mini_metax.attention.backends.triton_attn", "MiniTritonAttentionBackend") in again


def test_layer_looked_up_by_a_helper_of_another_module_is_that_modules_layer(tmp_path):
    """Upstream `unified_mla_kv_cache_update` (mla_attention.py) unpacks `get_attention_context(layer_name)`,
    which looks the layer up in attention.py: the layer is an MLA layer (the caller's module's layer class),
    so the cache write is the MLA impls' `concat_and_cache_mla`, not the other backends' writes."""
    import sys

    from attnlens.workspace import Workspace

    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "cache")
    c = _trace(ws, "vllm.model_executor.layers.attention.mla_attention", "attn_layer.impl.do_kv_cache_update")
    assert [b.label for b in c.final.fork.branches] == ["MLAAttention"]
    assert sorted({(lf.final.kind, lf.final.symbol) for lf in c.leaves()}) == [
        (M.TORCH_OP, "_C_cache_ops::concat_and_cache_mla")]
    # the non-MLA op (attention.py, the helper's own module) keeps the attention layers
    c2 = _trace(ws, "vllm.model_executor.layers.attention.attention", "self.impl.forward")
    assert "MLAAttention" not in ([b.label for b in c2.final.fork.branches] if c2.final.fork else [])
    assert c2.leaves() and (M.TORCH_OP, "_C_cache_ops::concat_and_cache_mla") not in {
        (lf.final.kind, lf.final.symbol) for lf in c2.leaves()}


def _counting_backends(ws) -> list:
    calls = []
    orig = ws.backends
    ws.backends = lambda *a, **k: calls.append(1) or orig(*a, **k)
    return calls


def _tiny_with_a_dead_backend(tmp_path):
    """tiny-npu's workspace with its never-selected set computed: (workspace, set, the dead backend's key, its module's
    path and text)."""
    import sys

    from attnlens.workspace import Workspace

    ws = Workspace(TINY, python=sys.executable, cache_dir=tmp_path / "cache")
    first = ws.never_selected()
    dead = ("tiny_npu.attention.custom", "TinyCustomBackend")
    assert dead in first
    path = str(TINY / "tiny_npu/attention/custom.py")
    return ws, first, dead, path, (TINY / "tiny_npu/attention/custom.py").read_text()


def test_never_selected_survives_edits_of_the_dead_class_own_module(tmp_path):
    """A dead class's own module mentions it (its definition): an edit there that adds no use keeps the set
    without recomputing the registry; a read of it outside its methods, or a mention in another module,
    recomputes (and it is then reachable)."""
    ws, first, dead, path, text = _tiny_with_a_dead_backend(tmp_path)
    calls = _counting_backends(ws)
    body = text.replace("        return TinyCustomImpl\n", "        _edit = 1\n        return TinyCustomImpl\n", 1)
    assert body != text
    ws.index.set_overlay(path, body)
    assert ws.never_selected() is first and calls == []
    ws.index.set_overlay(path, body + "\n\ndef _pick():\n    return TinyCustomBackend\n")
    assert dead not in ws.never_selected() and calls == [1]
    ws.index.set_overlay(path, None)  # the use removed: dead again
    assert ws.never_selected() == first and calls == [1, 1]
    other = str(TINY / "tiny_npu/attention/common.py")
    ws.index.set_overlay(other, (TINY / "tiny_npu/attention/common.py").read_text() + "\n# see TinyCustomBackend\n")
    assert dead not in ws.never_selected() and calls == [1, 1, 1]


def test_a_backend_that_cannot_be_imported_stays_dead_through_body_edits(tmp_path):
    """Its module's entry ("(module, ''): cannot be imported") made every edit recompute the registry (the
    empty class name matched any text); a body edit now keeps it, and a module-level name removed from a
    module it imports from recomputes."""
    import shutil
    import sys

    from attnlens.workspace import Workspace

    root = tmp_path / "plugin"
    shutil.copytree(EXAMPLE, root)
    tri = root / "mini_metax/attention/backends/triton_attn.py"
    tri.write_text("from vllm.v1.attention.backend import NoSuchAttentionImpl  # gone upstream\n" + tri.read_text())
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache")
    first = ws.never_selected()
    mod = "mini_metax.attention.backends.triton_attn"
    assert (mod, "") in first and (mod, "MiniTritonAttentionBackend") in first
    calls = _counting_backends(ws)
    ws.index.set_overlay(str(tri), tri.read_text() + "\n\ndef _helper():\n    return 1\n")
    assert ws.never_selected() is first and calls == []
    # a name another workspace module imports from it disappears: whether that import loads may change
    fa = root / "mini_metax/attention/backends/fa_utils.py"
    fa_text = fa.read_text()
    ws.index.set_overlay(str(fa), fa_text + "\n\ndef _new_top_level():\n    return 1\n")  # imported by nobody
    assert ws.never_selected() is first and calls == []
    gone = re.search(r"(?m)^def (\w+)", fa_text).group(1)
    assert gone in (root / "mini_metax/attention/backends/flash_attn.py").read_text()  # imported at module level
    ws.index.set_overlay(str(fa), fa_text.replace(f"def {gone}(", f"def {gone}_renamed(", 1))
    again = ws.never_selected()
    assert calls == [1]
    assert ("mini_metax.attention.backends.flash_attn", "") in again  # flash_attn's import of it fails now


def test_a_request_with_a_budget_answers_with_the_set_of_before_the_edit_until_it_is_checked(tmp_path):
    """After an edit that makes a dead backend class reachable, a budgeted trace (an editor request) does not
    wait for the edited module's summary or the registry: it answers with the set of before the edit, marked
    provisional; the background steps check the set again, and the next trace is the checked one."""
    ws, first, dead, path, text = _tiny_with_a_dead_backend(tmp_path)
    mod = ws.index.module_for_path(path)
    line = mod.summary.classes["TinyCustomBackend"].line + 1
    calls = _counting_backends(ws)
    ws.index.set_overlay(path, text + "\n\ndef _pick():\n    return TinyCustomBackend\n")  # now used elsewhere
    assert not ws.index.summary_ready(path)
    assert ws.never_selected(provisional=True) is first and ws._never_stale and calls == []
    assert not ws.index.summary_ready(path)  # the edited module's summary is what a request did not wait for
    stale = ws.mark_selection(mod, line, M.Chain([], M.Final(M.PYTHON_FUNCTION, None, None, "x"), True), provisional=True)
    assert stale.provisional and [h.kind for h in stale.hops] == [M.HopKind.SELECTION]  # still marked dead
    assert ws.never_selected(provisional=True) is first and ws._never_stale  # not checked yet: unchanged
    steps = list(ws.never_selected_steps())
    assert steps == [0] and calls == [1]  # the summary in a step of its own, then the set computed again
    checked = ws.never_selected(provisional=True)
    assert dead not in checked and not ws._never_stale
    fresh = ws.mark_selection(ws.index.module_for_path(path), line, M.Chain([], M.Final(M.PYTHON_FUNCTION, None, None, "x"), True),
                              provisional=True)
    assert not fresh.provisional and fresh.hops == []
    # without a budget (the CLI, the background) nothing is provisional: the set is checked at once
    ws.index.set_overlay(path, None)
    assert ws.never_selected() == first and not ws._never_stale and calls == [1, 1]
