"""Syntax-level checks of the second example plugin, examples/tiny-npu.

These tests do not use AttnLens's resolver: they only make sure the fixture
is well formed (Python parses, entry points are declared, the C++ registers
the ops, the README's file:line references point at real lines).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

TINY = Path(__file__).resolve().parent.parent / "examples" / "tiny-npu"
PKG = TINY / "tiny_npu"
PY_FILES = sorted(TINY.rglob("*.py"))


def _src(rel: str) -> str:
    return (TINY / rel).read_text()


def _tree(rel: str) -> ast.Module:
    return ast.parse(_src(rel), filename=rel, feature_version=(3, 10))


def test_layout():
    expected = {
        "tiny_npu/__init__.py", "tiny_npu/platform.py", "tiny_npu/patches.py",
        "tiny_npu/attention/__init__.py", "tiny_npu/attention/common.py", "tiny_npu/attention/paged.py",
        "tiny_npu/attention/sink.py", "tiny_npu/attention/mla.py", "tiny_npu/attention/sparse_mla.py",
        "tiny_npu/attention/custom.py", "tiny_npu/ops/__init__.py", "tiny_npu/ops/device.py",
        "tiny_npu/ops/cache.py", "tiny_npu/ops/rope.py", "tiny_npu/ops/kernels.py",
        "tiny_npu/layers/__init__.py", "tiny_npu/layers/rms_norm.py", "tiny_npu/layers/rotary.py",
        "tiny_npu/layers/activation.py", "tiny_npu/layers/attention.py",
        "tiny_npu/compat/__init__.py", "tiny_npu/compat/flash_attn.py",
    }
    assert {p.relative_to(TINY).as_posix() for p in PY_FILES} == expected
    for rel in ("README.md", "pyproject.toml", "csrc/ops.cpp", "csrc/ops.h", "csrc/paged_attention.cpp", "csrc/cache.cpp"):
        assert (TINY / rel).is_file(), rel


@pytest.mark.parametrize("path", PY_FILES, ids=lambda p: p.relative_to(TINY).as_posix())
def test_python_parses(path):
    ast.parse(path.read_text(), filename=str(path), feature_version=(3, 10))


def test_size_budget():
    lines = sum(len([ln for ln in p.read_text().splitlines() if ln.strip()]) for p in PY_FILES)
    assert lines < 800, lines


def test_pyproject_entry_points():
    data = tomllib.loads(_src("pyproject.toml"))
    eps = data["project"]["entry-points"]
    assert eps["vllm.platform_plugins"] == {"tiny": "tiny_npu:register"}
    assert eps["vllm.general_plugins"] == {"tiny_ops": "tiny_npu:register_ops"}
    assert data["project"]["dependencies"] == ["vllm==0.26.0"]


def test_entry_point_functions_exist():
    tree = _tree("tiny_npu/__init__.py")
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"register", "register_ops"} <= set(funcs)
    ret = funcs["register"].body[-1]
    assert isinstance(ret, ast.Return) and ast.literal_eval(ret.value) == "tiny_npu.platform.TinyNpuPlatform"
    imported = [a.name for n in ast.walk(funcs["register_ops"]) if isinstance(n, ast.Import) for a in n.names]
    assert imported == ["tiny_npu.compat", "tiny_npu.ops.rope", "tiny_npu.layers", "tiny_npu.patches",
                        "tiny_npu.attention.custom"]


def test_platform_selects_in_code_only():
    src = _src("tiny_npu/platform.py")
    for text in (
        "_enum = PlatformEnum.OOT",
        'device_name: str = "npu"',
        'device_type: str = "npu"',
        'dispatch_key: str = "PrivateUse1"',
        "if attn_selector_config.has_sink:",
        'return "tiny_npu.attention.sink.TinySinkBackend"',
        "if selected_backend == AttentionBackendEnum.CUSTOM:",
        "return AttentionBackendEnum.CUSTOM.get_path()",
        '(False, False): "tiny_npu.attention.paged.TinyPagedBackend"',
        '(True, False): "tiny_npu.attention.mla.TinyMLABackend"',
        '(True, True): "tiny_npu.attention.sparse_mla.TinySparseMLABackend"',
        "return backends[(attn_selector_config.use_mla, attn_selector_config.use_sparse)]",
    ):
        assert src.count(text) == 1, text
    # register_backend is used exactly once in the whole plugin: the broken decorator.
    users = [p.relative_to(TINY).as_posix() for p in PY_FILES
             if any(isinstance(n, ast.Name) and n.id == "register_backend" and isinstance(n.ctx, ast.Load)
                    for n in ast.walk(ast.parse(p.read_text())))]
    assert users == ["tiny_npu/attention/custom.py"]


def test_selector_fields_are_real_names():
    """The AttentionSelectorConfig fields read by the platform (checked against vLLM 0.26.0)."""
    tree = _tree("tiny_npu/platform.py")
    read = {n.attr for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "attn_selector_config"}
    assert read == {"has_sink", "use_mla", "use_sparse"}


def test_broken_register_backend_decorator():
    tree = _tree("tiny_npu/attention/custom.py")
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TinyCustomBackend")
    (dec,) = cls.decorator_list
    assert isinstance(dec, ast.Call) and dec.func.id == "register_backend"
    assert ast.unparse(dec.args[0]) == "AttentionBackendEnum.CUSTOM"
    assert ast.literal_eval(dec.args[1]) == "TINY_CUSTOM" and not dec.keywords


def test_backends_have_the_three_static_methods():
    for rel, backend in (("attention/paged.py", "TinyPagedBackend"), ("attention/sink.py", "TinySinkBackend"),
                         ("attention/mla.py", "TinyMLABackend"), ("attention/sparse_mla.py", "TinySparseMLABackend"),
                         ("attention/custom.py", "TinyCustomBackend")):
        tree = _tree(f"tiny_npu/{rel}")
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        methods = {m.name: m for m in classes[backend].body if isinstance(m, ast.FunctionDef)}
        assert {"get_name", "get_impl_cls", "get_builder_cls"} <= set(methods), rel
        for getter in ("get_impl_cls", "get_builder_cls"):
            ret = methods[getter].body[-1]
            assert isinstance(ret, ast.Return) and ret.value.id in classes, (rel, getter)
        dataclasses = [c for c in classes.values()
                       if any(ast.unparse(d) == "dataclass" for d in c.decorator_list)]
        assert len(dataclasses) == 1, rel


def test_template_method_and_override():
    tree = _tree("tiny_npu/attention/common.py")
    base = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TinyImplBase")
    methods = {m.name: m for m in base.body if isinstance(m, ast.FunctionDef)}
    calls = {ast.unparse(n.func) for n in ast.walk(methods["forward"]) if isinstance(n, ast.Call)}
    assert {"self._write_cache", "self._attend"} <= calls
    assert isinstance(methods["_attend"].body[-1], ast.Raise)
    for rel, impl in (("attention/paged.py", "TinyPagedImpl"), ("attention/sink.py", "TinySinkImpl")):
        cls = next(n for n in _tree(f"tiny_npu/{rel}").body if isinstance(n, ast.ClassDef) and n.name == impl)
        assert [ast.unparse(b) for b in cls.bases] == ["TinyImplBase"]
        assert {m.name for m in cls.body if isinstance(m, ast.FunctionDef)} == {"_attend"}
    mla = next(n for n in _tree("tiny_npu/attention/mla.py").body if isinstance(n, ast.ClassDef) and n.name == "TinyMLAImpl")
    assert {"forward_mqa", "forward_mha", "do_kv_cache_update"} <= {m.name for m in mla.body if isinstance(m, ast.FunctionDef)}


def test_ops_factory_and_dict_dispatch():
    dev = _src("tiny_npu/ops/device.py")
    assert "NpuOps = _make_ops()" in dev
    for text in ("if current_platform.is_cuda():", "return _CudaOps", "if current_platform.is_out_of_tree():",
                 "return _NpuOps", "return _RefOps", "class _NpuOps(_OpsBase):"):
        assert dev.count(text) == 1, text
    cache = _src("tiny_npu/ops/cache.py")
    assert '_WRITERS = {"auto": _write_auto, "fp8": _write_fp8}' in cache
    assert "_WRITERS[kv_cache_dtype](" in cache


def test_triton_kernels_and_launches():
    kernels = _tree("tiny_npu/ops/kernels.py")
    jitted = {n.name for n in kernels.body if isinstance(n, ast.FunctionDef)
              and any(ast.unparse(d) == "triton.jit" for d in n.decorator_list)}
    assert jitted == {"_write_kv_kernel", "_rms_norm_kernel", "_rope_kernel", "_paged_sink_attn_kernel"}
    assert "from vllm.triton_utils import tl, triton" in _src("tiny_npu/ops/kernels.py")
    launched = {}
    for p in PY_FILES:
        for n in ast.walk(ast.parse(p.read_text())):
            if (isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript) and isinstance(n.func.value, ast.Name)
                    and n.func.value.id in jitted):
                launched.setdefault(n.func.value.id, []).append(p.relative_to(TINY).as_posix())
    assert launched == {
        "_write_kv_kernel": ["tiny_npu/ops/cache.py"],
        "_rms_norm_kernel": ["tiny_npu/layers/rms_norm.py"],
        "_rope_kernel": ["tiny_npu/ops/rope.py"],
        "_paged_sink_attn_kernel": ["tiny_npu/compat/flash_attn.py"],
    }


def test_torch_library_op():
    src = _src("tiny_npu/ops/rope.py")
    assert '@torch.library.custom_op("tiny::rope", mutates_args=("q", "k"))' in src
    assert '@torch.library.impl("tiny::rope", "PrivateUse1")' in src
    assert "@rope.register_fake" in src
    assert "torch.ops.tiny.rope(" in _src("tiny_npu/layers/rotary.py")


def test_custom_op_registrations():
    src = _src("tiny_npu/layers/__init__.py")
    assert 'for name, op_cls in {"RMSNorm": TinyRMSNorm, "RotaryEmbedding": TinyRotaryEmbedding}.items():' in src
    assert "CustomOp.register_oot(_decorated_op_cls=op_cls, name=name)" in src
    act = _tree("tiny_npu/layers/activation.py")
    cls = next(n for n in act.body if isinstance(n, ast.ClassDef) and n.name == "TinySiluAndMul")
    assert [ast.unparse(d) for d in cls.decorator_list] == ["SiluAndMul.register_oot"]
    assert "from vllm.model_executor.layers.layernorm import RMSNorm" in _src("tiny_npu/layers/rms_norm.py")


def test_import_hook_and_patch_and_layer():
    compat = _src("tiny_npu/compat/__init__.py")
    assert '"flash_attn": "tiny_npu.compat.flash_attn"' in compat
    assert '"flash_attn.flash_attn_interface": "tiny_npu.compat.flash_attn"' in compat
    assert "def _tiny_import(name, globals=None, locals=None, fromlist=(), level=0):" in compat
    assert "builtins.__import__ = _tiny_import" in compat
    assert "def flash_attn_varlen_func(" in _src("tiny_npu/compat/flash_attn.py")
    assert "from flash_attn import flash_attn_varlen_func" in _src("tiny_npu/attention/sink.py")
    patches = _src("tiny_npu/patches.py")
    assert "from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl" in patches
    assert "FlashAttentionImpl._tiny_orig_forward = FlashAttentionImpl.forward" in patches
    assert "if current_platform.is_out_of_tree():\n    FlashAttentionImpl.do_kv_cache_update = _tiny_do_kv_cache_update" in patches
    layer = _src("tiny_npu/layers/attention.py")
    assert "class TinyAttention(Attention):" in layer
    assert "self.impl.forward(self, query, key, value, kv_cache, attn_metadata, output=output)" in layer


def test_cpp_registrations():
    ops = _src("csrc/ops.cpp")
    assert "TORCH_LIBRARY_FRAGMENT(_tiny_C, m) {" in ops
    assert ('m.def("paged_attention(Tensor! out, Tensor q, Tensor k_cache, Tensor v_cache, '
            'Tensor block_table, Tensor seq_lens, float scale) -> ()");') in ops
    assert 'm.def("mla_decode(' in ops and 'm.def("reshape_and_cache_fp8(' in ops
    assert "TORCH_LIBRARY_IMPL(_tiny_C, PrivateUse1, m) {" in ops
    assert 'm.impl("paged_attention", &paged_attention_npu);' in ops
    assert 'm.impl("mla_decode", &mla_decode_npu);' in ops
    fp8 = re.search(r"#ifdef TINY_USE_FP8\n(.*)\n#else\n(.*)\n#endif", ops)
    assert fp8 is not None
    assert fp8.group(1).strip() == 'm.impl("reshape_and_cache_fp8", &reshape_and_cache_fp8_npu);'
    assert fp8.group(2).strip() == 'm.impl("reshape_and_cache_fp8", &reshape_and_cache_fp8_unsupported);'
    defs = _src("csrc/paged_attention.cpp") + _src("csrc/cache.cpp")
    for fn in ("paged_attention_npu", "mla_decode_npu", "reshape_and_cache_fp8_npu", "reshape_and_cache_fp8_unsupported"):
        assert re.search(rf"^void {fn}\(", defs, re.M), fn
        assert f"{fn}(" in _src("csrc/ops.h"), fn
    # every torch.ops._tiny_C.<op> the Python calls is defined in ops.cpp
    called = set(re.findall(r"torch\.ops\._tiny_C\.(\w+)", "".join(p.read_text() for p in PY_FILES)))
    defined = set(re.findall(r'm\.def\("(\w+)\(', ops))
    assert called == defined == {"paged_attention", "mla_decode", "reshape_and_cache_fp8"}


def test_readme_references_point_at_real_lines():
    readme = _src("README.md")
    refs = re.findall(r"`((?:tiny_npu|csrc)/[\w/]+\.(?:py|cpp|h)|pyproject\.toml):(\d+)`", readme)
    assert len(refs) > 80
    for rel, line in refs:
        lines = _src(rel).splitlines()
        assert 1 <= int(line) <= len(lines), f"{rel}:{line}"
        assert lines[int(line) - 1].strip(), f"{rel}:{line} is blank"
