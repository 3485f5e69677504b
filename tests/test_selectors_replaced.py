"""Selectors replaced by assignment (`mod.select = lambda cfg: X`, `mod.f = my_f`, `setattr(mod, "f", lambda ...)`,
at module level or inside a patch function) and the MLA prefill backends vLLM's own selector can choose.

Fixtures: `tests/fixtures/replaced_selectors` (a stand-in upstream package on the target's search path and a
plugin that replaces its selectors; see its README for what runs) and `tests/fixtures/prefill_plugin` (an
out-of-tree platform with an MLA prefill backend, against the installed vLLM 0.26.0)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from attnlens import model as M
from attnlens.pyindex import summarize
from attnlens.target import TargetInfo
from attnlens.workspace import Workspace
from tests.helpers import REPO, find, have_vllm

FX = REPO / "tests" / "fixtures" / "replaced_selectors"
PLUG = FX / "plugin" / "rsplug"
LAYER = FX / "site" / "uplib" / "layer.py"
BACKENDS = PLUG / "backends.py"
KERNELS = PLUG / "kernels.py"
PATCHES = PLUG / "patches.py"
PFX = REPO / "tests" / "fixtures" / "prefill_plugin"


def _ws(tmp_path, cache: bool = False) -> Workspace:
    target = TargetInfo(python=sys.executable, sys_path=[str(FX / "site")], stdlib=sorted(sys.stdlib_module_names))
    return Workspace(FX / "plugin", target=target, cache_dir=tmp_path / "cache", use_cache=cache)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return _ws(tmp_path_factory.mktemp("rs"))


def _line(path: Path, text: str) -> int:
    return find(path, text)[1]


def _trace(ws, modname: str, func: str, nth: int = 0):
    mod = ws.index.module(modname)
    return ws.resolver.trace_call(mod, [cs for cs in mod.summary.calls if cs.func == func][nth])


def _leaves(chain):
    return [(lf.final.kind, lf.final.symbol, lf.final.line, lf.reachable, lf.conditions) for lf in chain.leaves()]


# -- summaries: lambdas are functions of one return; assignments onto imported modules are patches ----------

def test_summary_reads_lambda_and_function_replacements():
    s = summarize(PATCHES.read_text(), str(PATCHES), "sha")
    assert [(a.target, a.value, a.line, a.guards, a.scope) for a in s.attr_patches] == [
        ("sel.get_backend", "<lambda:9:18>", 9, (), ""),
        ("uk.has_fast_path", "<lambda:10:19>", 10, (), ""),
        ("sel.get_prefill", "<lambda:13:22>", 13, (("if", "envs.PREFILL_B", 12),), ""),
        ("sel.get_prefill", "<lambda:15:32>", 15, (("else", "envs.PREFILL_B", 12),), ""),
        ("sel.get_other", "<lambda:18:20>", 18, (("if", "USE_B", 17),), ""),
        ("k.fast_gemm", "plug_gemm", 24, (), "apply"),  # inside a function: its root is a local import
    ]
    assert {q: ([p.name for p in f.params], f.return_alts, f.returns_const) for q, f in s.lambdas.items()} == {
        "<lambda:9:18>": (["cfg"], (("PlugBackend", (), 9),), None),
        "<lambda:10:19>": ([], (("False", (), 10),), ("const", False)),
        "<lambda:13:22>": (["cfg"], (("PlugPrefillB", (), 13),), None),
        "<lambda:15:32>": (["cfg"], (("pick_prefill(cfg)", (), 15),), None),
        "<lambda:18:20>": (["cfg"], (("PlugPrefillB", (), 18),), None),
    }
    # the call in a lambda's body belongs to the lambda (its scope), not to the module
    assert [(c.func, c.scope, c.in_return) for c in s.calls if c.func == "pick_prefill"] == [("pick_prefill", "<lambda:15:32>", True)]


def test_assignment_to_a_parameter_attribute_in_a_function_is_no_patch():
    s = summarize("import m\n\ndef f(obj, cfg):\n    obj.fn = g\n    cfg.a.b = m.X\n    m.fn = g\n", "x.py", "sha")
    assert [(a.target, a.value, a.scope) for a in s.attr_patches] == [("m.fn", "g", "f")]
    assert s.functions["f"].attr_sets == (("obj.fn", "g", 4, ()), ("cfg.a.b", "m.X", 5, ()))


# -- calls of a replaced selector resolve to what the replacement returns -----------------------------------

def test_lambda_replacing_a_selector_gives_the_class_it_returns(ws):
    c = _trace(ws, "uplib.layer", "selector.get_backend")
    assert [(h.kind, h.symbol, h.line) for h in c.hops if h.kind in ("patch", "selection")] == [
        ("patch", "rsplug.patches.<lambda:9:18>", 9), ("selection", "rsplug.patches.<lambda:9:18>", 9)]
    assert _leaves(c) == [(M.PYTHON_CLASS, "rsplug.backends.PlugBackend", _line(BACKENDS, "class PlugBackend"), True, [])]
    # the instance built from it: `self.backend.run(x)` runs the plugin backend's kernel
    run = _trace(ws, "uplib.layer", "self.backend.run")
    assert _leaves(run) == [(M.TRITON_KERNEL, "rsplug.kernels._plug_kernel", _line(KERNELS, "def _plug_kernel"), True, [])]


def test_constant_lambda_folds_the_guards_that_call_it(ws):
    mod = ws.index.module("uplib.layer")
    assert ws.resolver.profile.evaluate(mod, "Layer.forward", "has_fast_path()") is False
    c = _trace(ws, "uplib.layer", "has_fast_path")
    assert _leaves(c) == [(M.PYTHON_FUNCTION, "rsplug.patches.<lambda:10:19>", 10, True, [])]
    assert c.final.detail == "lambda: False (returns False)"
    # fast_gemm sits under `if has_fast_path():` (dead) and is replaced inside rsplug.patches.apply()
    g = _trace(ws, "uplib.layer", "fast_gemm")
    assert g.hops[0].condition == "has_fast_path()" and g.hops[0].reachable is False
    assert [(h.symbol, h.detail) for h in g.hops if h.kind == "patch"] == [
        ("rsplug.backends.plug_gemm", "k.fast_gemm = plug_gemm (in apply(), when it runs) replaces uplib.kernels.fast_gemm at import time")]
    assert _leaves(g) == [(M.TRITON_KERNEL, "rsplug.kernels._gemm_kernel", _line(KERNELS, "def _gemm_kernel"), False, ["has_fast_path()"])]


def test_replacements_under_if_and_else_are_a_fork_without_the_original(ws):
    c = _trace(ws, "uplib.layer", "selector.get_prefill")
    assert c.final.fork.kind == M.ForkKind.PATCHED
    assert [(b.label, b.condition, b.reachable) for b in c.final.fork.branches] == [
        ("sel.get_prefill = lambda cfg: PlugPrefillB", "envs.PREFILL_B", None),
        ("sel.get_prefill = lambda cfg: pick_prefill(cfg)", "not (envs.PREFILL_B)", None),
    ]
    b_line, a_line = _line(BACKENDS, "class PlugPrefillB"), _line(BACKENDS, "class PlugPrefillA")
    assert _leaves(c) == [
        (M.PYTHON_CLASS, "rsplug.backends.PlugPrefillB", b_line, None, ["envs.PREFILL_B"]),
        (M.PYTHON_CLASS, "rsplug.backends.PlugPrefillB", b_line, None, ["not (envs.PREFILL_B)", "cfg.use_b"]),
        (M.PYTHON_CLASS, "rsplug.backends.PlugPrefillA", a_line, None, ["not (envs.PREFILL_B)", "not (cfg.use_b)"]),
    ]
    run = _trace(ws, "uplib.layer", "backend.run", 0)
    assert _leaves(run) == [
        (M.TRITON_KERNEL, "rsplug.kernels._prefill_b_kernel", _line(KERNELS, "def _prefill_b_kernel"), None, ["envs.PREFILL_B"]),
        (M.TRITON_KERNEL, "rsplug.kernels._prefill_b_kernel", _line(KERNELS, "def _prefill_b_kernel"), None,
         ["not (envs.PREFILL_B)", "cfg.use_b"]),
        (M.TRITON_KERNEL, "rsplug.kernels._prefill_a_kernel", _line(KERNELS, "def _prefill_a_kernel"), None,
         ["not (envs.PREFILL_B)", "not (cfg.use_b)"]),
    ]


def test_a_dead_replacement_leaves_the_original_running(ws):
    c = _trace(ws, "uplib.layer", "selector.get_other")
    assert [(b.label, b.condition, b.reachable) for b in c.final.fork.branches] == [
        ("sel.get_other = lambda cfg: PlugPrefillB", "USE_B", False),
        ("the original uplib.selector.get_other", "not (USE_B)", True),
    ]
    run = _trace(ws, "uplib.layer", "backend.run", 1)
    assert [(k, s, r, cond) for k, s, _l, r, cond in _leaves(run)] == [
        (M.TRITON_KERNEL, "rsplug.kernels._prefill_b_kernel", False, ["USE_B"]),
        (M.NOT_INSTALLED, "refkern", True, ["not (USE_B)"]),
    ]


def test_the_patch_table_reads_back_from_the_cache(tmp_path):
    first = _ws(tmp_path, cache=True)
    before = _leaves(_trace(first, "uplib.layer", "selector.get_prefill"))
    second = _ws(tmp_path, cache=True)  # the frozen table of the first workspace, thawed
    assert second.resolver.patches().get(("uplib.selector", "get_prefill"))[0].extra["fork_kind"] == M.ForkKind.PATCHED
    assert _leaves(_trace(second, "uplib.layer", "selector.get_prefill")) == before


def test_schema_lists_every_fork_kind_for_tree_nodes():
    s = json.loads((REPO / "server/attnlens/schema/trace.schema.json").read_text())
    assert s["$defs"]["fork_node"]["properties"]["fork"]["properties"]["kind"]["enum"] == list(M.ForkKind)


# -- vLLM's MLA prefill selector, against the installed vLLM ------------------------------------------------

needs_vllm = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")

SEL = "vllm.v1.attention.backends.mla.prefill"
CHOSEN = "not (device_capability is None) and attention_config.mla_prefill_backend is not None and not (invalid_reasons)"
AUTO = "not (device_capability is None) and not (attention_config.mla_prefill_backend is not None)"
CFG = "vllm_config.attention_config.mla_prefill_backend is MLAPrefillBackendEnum."
BLACKWELL = "not (current_platform.is_rocm()) and device_capability.major == 10 and backend_enum is MLAPrefillBackendEnum."
PFX_PREFILL = "pfx.prefill.PfxPrefill"
FLASHINFER = f"{SEL}.flashinfer.FlashInferPrefillBackend"
TRTLLM = f"{SEL}.trtllm_ragged.TrtllmRaggedPrefillBackend"
TOKENSPEED = f"{SEL}.tokenspeed_mla.TokenspeedMLAPrefillBackend"
AITER = f"{SEL}.aiter_flash_attn.AiterFlashAttnPrefillBackend"


def _pfx(tmp_path, platform_tail: str = "", patches: str = "") -> Workspace:
    root = tmp_path / "pfx_plugin"
    shutil.copytree(PFX, root)
    if platform_tail:
        p = root / "pfx" / "platform.py"
        p.write_text(p.read_text().replace('    device_type = "pfx"\n', '    device_type = "pfx"\n' + platform_tail))
    if patches:
        (root / "pfx" / "patches.py").write_text(patches)
    return Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache")


def _pick(leaves):
    return [(k, s, r, cond) for k, s, _l, r, cond in leaves]


@needs_vllm
def test_mla_prefill_selector_lists_every_candidate_with_its_condition(tmp_path):
    ws = _pfx(tmp_path)
    c = _trace(ws, "pfx.layer", "get_mla_prefill_backend")
    assert c.final.fork.kind == M.ForkKind.FACTORY and c.final.fork.symbol == f"{SEL}.selector.get_mla_prefill_backend"
    assert _pick(_leaves(c)) == [
        (M.PYTHON_CLASS, PFX_PREFILL, None, ["device_capability is None"]),
        (M.PYTHON_CLASS, PFX_PREFILL, None, [CHOSEN, CFG + "FLASH_ATTN"]),
        (M.PYTHON_CLASS, FLASHINFER, None, [CHOSEN, CFG + "FLASHINFER"]),
        (M.PYTHON_CLASS, TRTLLM, None, [CHOSEN, CFG + "TRTLLM_RAGGED"]),
        (M.PYTHON_CLASS, TOKENSPEED, None, [CHOSEN, CFG + "TOKENSPEED_MLA"]),
        (M.PYTHON_CLASS, AITER, None, [CHOSEN, CFG + "ROCM_AITER_FA"]),
        (M.PYTHON_CLASS, AITER, False, [AUTO, "current_platform.is_rocm() and backend_enum is MLAPrefillBackendEnum.ROCM_AITER_FA "
                                              "(item 0 of priorities)"]),
        (M.PYTHON_CLASS, PFX_PREFILL, False, [AUTO, "current_platform.is_rocm() and backend_enum is MLAPrefillBackendEnum.FLASH_ATTN "
                                                    "(item 1 of priorities)"]),
        (M.PYTHON_CLASS, PFX_PREFILL, None, [AUTO, BLACKWELL + "FLASH_ATTN (item 0 of priorities)"]),
        (M.PYTHON_CLASS, TRTLLM, None, [AUTO, BLACKWELL + "TRTLLM_RAGGED (item 1 of priorities)"]),
        (M.PYTHON_CLASS, FLASHINFER, None, [AUTO, BLACKWELL + "FLASHINFER (item 2 of priorities)"]),
        (M.PYTHON_CLASS, TOKENSPEED, None, [AUTO, BLACKWELL + "TOKENSPEED_MLA (item 3 of priorities)"]),
        (M.PYTHON_CLASS, PFX_PREFILL, None, [AUTO, "not (current_platform.is_rocm()) and not (device_capability.major == 10) and "
                                                   "backend_enum is MLAPrefillBackendEnum.FLASH_ATTN (item 0 of priorities)"]),
    ]
    # the registration names the plugin's class for FLASH_ATTN (a `registry` hop on that branch)
    reg = c.final.fork.branches[0].chain.hops
    assert [(h.kind, h.symbol, h.line) for h in reg if h.kind == "registry"] == [
        ("registry", PFX_PREFILL, _line(PFX / "pfx" / "platform.py", "register_mla_prefill_backend(backend="))]
    # the backend built from the chosen class: each candidate's run_prefill_new_tokens ends in a kernel or a missing package
    run = _trace(ws, "pfx.layer", "self.prefill_backend.run_prefill_new_tokens")
    assert [(k, s, r) for k, s, r, _c in _pick(_leaves(run))] == [
        (M.TRITON_KERNEL, "pfx.prefill._pfx_prefill_kernel", None), (M.TRITON_KERNEL, "pfx.prefill._pfx_prefill_kernel", None),
        (M.NOT_INSTALLED, "flashinfer", None), (M.NOT_INSTALLED, "flashinfer", None), (M.NOT_INSTALLED, "tokenspeed_mla", None),
        (M.NOT_INSTALLED, "aiter", None), (M.NOT_INSTALLED, "aiter", False), (M.TRITON_KERNEL, "pfx.prefill._pfx_prefill_kernel", False),
        (M.TRITON_KERNEL, "pfx.prefill._pfx_prefill_kernel", None), (M.NOT_INSTALLED, "flashinfer", None),
        (M.NOT_INSTALLED, "flashinfer", None), (M.NOT_INSTALLED, "tokenspeed_mla", None),
        (M.TRITON_KERNEL, "pfx.prefill._pfx_prefill_kernel", None),
    ]


FORCING = """
    @classmethod
    def check_and_update_config(cls, vllm_config):
        if attention_config := vllm_config.attention_config:
            attention_config.mla_prefill_backend = MLAPrefillBackendEnum.FLASH_ATTN
"""


@needs_vllm
def test_a_prefill_backend_the_platform_forces_decides_the_selector(tmp_path):
    ws = _pfx(tmp_path, platform_tail=FORCING)
    assert ws.resolver.profile.config_overrides() == {
        "attention_config.mla_prefill_backend": ("MLAPrefillBackendEnum.FLASH_ATTN", str(tmp_path / "pfx_plugin/pfx/platform.py"), 13)}
    c = _trace(ws, "pfx.layer", "get_mla_prefill_backend")
    runs = [(k, s, r, cond) for k, s, r, cond in _pick(_leaves(c)) if r is not False]
    assert runs == [
        (M.PYTHON_CLASS, PFX_PREFILL, None, ["device_capability is None"]),
        (M.PYTHON_CLASS, PFX_PREFILL, None, [CHOSEN, CFG + "FLASH_ATTN"]),
    ]
    # the forced member is taken; every other member, and the whole automatic path, is dead on this platform (what
    # stays open is vLLM's device query and the backend's own validation)
    assert [(b.label, b.reachable) for b in c.final.fork.branches] == [
        ("returns MLAPrefillBackendEnum.FLASH_ATTN.get_class()", None), ("returns backend_cls", None),
        ("returns _auto_select_mla_prefill_backend(device_capability, selector_config)", False)]
    assert [(b.label, b.reachable) for b in c.final.fork.branches[1].chain.final.fork.branches] == [
        ("FLASH_ATTN: PfxPrefill", True), ("FLASHINFER: FlashInferPrefillBackend", False),
        ("TRTLLM_RAGGED: TrtllmRaggedPrefillBackend", False), ("TOKENSPEED_MLA: TokenspeedMLAPrefillBackend", False),
        ("ROCM_AITER_FA: AiterFlashAttnPrefillBackend", False)]


PATCHES_PFX = """import os

import vllm.utils.import_utils as iu
import vllm.v1.attention.backends.mla.prefill.selector as prefill_selector

from pfx.prefill import PfxPrefill

iu.has_triton_kernels = lambda: False

if os.environ.get("PFX_OWN_PREFILL"):
    prefill_selector.get_mla_prefill_backend = lambda vllm_config: PfxPrefill
"""


@needs_vllm
def test_upstream_selector_replaced_under_a_flag(tmp_path):
    base = _pfx(tmp_path / "base")
    moe = "vllm.model_executor.layers.fused_moe.config"
    assert base.resolver.profile.evaluate(base.index.module(moe), "", "has_triton_kernels()") is None
    ws = _pfx(tmp_path / "patched", patches=PATCHES_PFX)
    # the real shape of vLLM-MetaX's platform.py: `iu.has_triton_kernels = lambda: False` folds vLLM's own guards
    assert ws.resolver.profile.evaluate(ws.index.module(moe), "", "has_triton_kernels()") is False
    c = _trace(ws, "pfx.layer", "get_mla_prefill_backend")
    assert c.final.fork.kind == M.ForkKind.PATCHED
    assert [(b.label, b.condition, b.reachable) for b in c.final.fork.branches] == [
        ("prefill_selector.get_mla_prefill_backend = lambda vllm_config: PfxPrefill", 'os.environ.get("PFX_OWN_PREFILL")', None),
        (f"the original {SEL}.selector.get_mla_prefill_backend", 'not (os.environ.get("PFX_OWN_PREFILL"))', None),
    ]
    leaves = _pick(_leaves(c))
    assert leaves[0] == (M.PYTHON_CLASS, PFX_PREFILL, None, ['os.environ.get("PFX_OWN_PREFILL")'])
    # the original's thirteen candidates follow, under the negated flag
    assert [s for _k, s, _r, _c in leaves[1:]] == [s for _k, s, _r, _c in _pick(_leaves(_trace(base, "pfx.layer", "get_mla_prefill_backend")))]
    assert all(cond[0] == 'not (os.environ.get("PFX_OWN_PREFILL"))' for _k, _s, _r, cond in leaves[1:])
