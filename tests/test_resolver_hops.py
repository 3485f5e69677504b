"""Every hop kind on small inline fixtures: a fake upstream in a fake site-packages
and a tiny plugin. Pure functions, no LSP, no interpreter subprocess."""

from __future__ import annotations

import pytest

from attnlens import model as M
from tests.helpers import find, fixture_ws, kinds

UPSTREAM = {
    "up/__init__.py": "",
    "up/platforms/__init__.py": """
        def __getattr__(name):
            if name == "current_platform":
                return _resolve()
            raise AttributeError(name)
    """,
    "up/platforms/interface.py": """
        import enum

        class PlatformEnum(enum.Enum):
            CUDA = enum.auto()
            OOT = enum.auto()

        class Platform:
            _enum: PlatformEnum

            def is_cuda(self) -> bool:
                return self._enum == PlatformEnum.CUDA

            def is_out_of_tree(self) -> bool:
                return self._enum == PlatformEnum.OOT

            @classmethod
            def get_device_capability(cls, device_id=0):
                return None

            @classmethod
            def has_device_capability(cls, capability, device_id=0):
                current = cls.get_device_capability(device_id=device_id)
                if current is None:
                    return False
                return current >= capability
    """,
    "up/registry.py": """
        import enum

        class BackendEnum(enum.Enum):
            FLASH = "up.backends.flash.FlashBackend"
            TRITON = "up.backends.tri.TriBackend"

        def register_backend(backend, class_path=None):
            def deco(cls):
                return cls
            return deco
    """,
    "up/backends/__init__.py": "",
    "up/backends/flash.py": """
        class FlashImpl:
            def forward(self, q):
                return q

        class FlashBuilder:
            def build(self):
                return None

        class FlashBackend:
            @staticmethod
            def get_impl_cls():
                return FlashImpl

            @staticmethod
            def get_builder_cls():
                return FlashBuilder
    """,
    "up/backends/tri.py": """
        class TriBuilder:
            pass

        class TriBackend:
            @staticmethod
            def get_builder_cls():
                return TriBuilder
    """,
    "up/_custom_ops.py": """
        import torch

        def reshape_and_cache(key, value, cache, slots):
            torch.ops._C_cache.reshape_and_cache(key, value, cache, slots)
    """,
    "up/ops/__init__.py": "from up.ops.merge import merge_states\n",
    "up/ops/merge.py": """
        def merge_states(a, b):
            return a
    """,
    "up/utils.py": """
        def direct_register_custom_op(op_name, op_func, mutates_args=None, fake_impl=None):
            pass
    """,
    "up/kern.cpython-311-x86_64-linux-gnu.so": b"\x7fELF\x00\x00binary",
}

PLUGIN = {
    "pyproject.toml": """
        [project]
        name = "fx"
        [project.entry-points."vllm.platform_plugins"]
        fx = "fx:register"
    """,
    "fx/__init__.py": """
        def register():
            return "fx.platform.FxPlatform"
    """,
    "fx/platform.py": """
        from up.platforms.interface import Platform, PlatformEnum
        from up.registry import BackendEnum, register_backend

        class FxPlatform(Platform):
            _enum = PlatformEnum.OOT

            @classmethod
            def get_device_capability(cls, device_id=0):
                import fxsmi
                return fxsmi.capability(device_id)

            @classmethod
            def is_device_capability_family(cls, capability, device_id=0):
                return False

            @classmethod
            def import_kernels(cls):
                try:
                    import fx._C  # noqa
                except ImportError:
                    pass

        def register_backends():
            register_backend(BackendEnum.FLASH, class_path="fx.backends.flash.FxFlashBackend")
    """,
    "fx/_dummy.py": """
        import logging
        logger = logging.getLogger(__name__)

        class _Dummy:
            def sched_meta(self, *args, **kwargs):
                logger.warning("sched_meta is not supported")
                return None

            def gather(self, *args):
                raise NotImplementedError("no gather")

        dummy_ops = _Dummy()
    """,
    "fx/utils.py": """
        import functools

        def timed(fn):
            @functools.wraps(fn)
            def wrapper(*args, **kwargs):
                return fn(*args, **kwargs)
            return wrapper

        def fa_version():
            return 2

        def varlen_available():
            return True
    """,
    "fx/backends/__init__.py": "",
    "fx/backends/fa_utils.py": """
        from up.platforms import current_platform

        if current_platform.is_out_of_tree():
            from up import _custom_ops as ops
            from fx._dummy import dummy_ops
            from vendorflash import varlen_fwd  # noqa: F401
            reshape_and_cache = ops.reshape_and_cache
            sched_meta = dummy_ops.sched_meta
    """,
    "fx/backends/flash.py": """
        import importlib
        import torch
        from up.backends.flash import FlashBackend, FlashImpl, FlashBuilder
        from up.registry import BackendEnum, register_backend
        from up.platforms import current_platform
        from up.ops import merge_states
        from up.kern import native_fn
        from fx.utils import fa_version, varlen_available
        from fx.ops.decode import decode_fwd
        from fx.ops.rope import rope
        if varlen_available():
            from fx.backends.fa_utils import reshape_and_cache, sched_meta, varlen_fwd
        try:
            from up.missing_mod import fast_path
        except ImportError:
            from fx.ops.decode import decode_fwd as fast_path

        class FxFlashBackend(FlashBackend):
            @staticmethod
            def get_impl_cls() -> type["FxFlashImpl"]:
                return FxFlashImpl

            @staticmethod
            def get_builder_cls() -> type["FxBuilder"]:
                return FxBuilder

            @classmethod
            def supports_fp8(cls, dtype):
                if fa_version() == 3 and current_platform.is_device_capability_family(90):
                    return True
                return False

        class FxBuilder(FlashBuilder):
            def build(self):
                return sched_meta(1, 2)

        class FxFlashImpl(FlashImpl):
            def forward(self, q, k, v, cache, slots, name):
                reshape_and_cache(k, v, cache, slots)
                out = varlen_fwd(q, k, v)
                decode_fwd(q, k, v, out)
                from fx.ops.lazy import lazy_kernel
                lazy_kernel(q)
                mod = importlib.import_module("fx.ops.rope")
                fn = getattr(mod, "rope")
                fn(q)
                rope(q)
                merge_states(q, k)
                native_fn(q)
                torch.ops._fx_C.paged_attention(out, q, cache)
                torch.ops.vllm.fx_attention(out, q)
                fast_path(q)
                self.helper(q)
                dyn = getattr(mod, name)
                dyn(q)
                if current_platform.is_cuda():
                    torch.ops._C.cuda_only(q)
                if current_platform.has_device_capability(89):
                    torch.ops._C.sm89_only(q)
                return out

            def helper(self, q):
                return torch.ops._fx_C.paged_attention(q, q, q)
    """,
    "fx/ops/__init__.py": "",
    "fx/ops/decode.py": """
        import triton
        import triton.language as tl

        @triton.autotune(configs=[], key=["n"])
        @triton.heuristics({"EVEN": lambda a: True})
        @triton.jit
        def _decode_kernel(q_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            pass

        def _decode_impl(q, k, v, out, softcap=None):
            grid = (1,)
            _decode_kernel[grid](q, 1, BLOCK=16)

        def decode_fwd(*args, **kwargs):
            return _decode_impl(*args, **kwargs)
    """,
    "fx/ops/lazy.py": """
        import torch

        def lazy_kernel(q):
            return torch.ops._fx_C.lazy_op(q)
    """,
    "fx/ops/rope.py": """
        import torch
        from fx.utils import timed

        class RopeFn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, q):
                torch.ops._fx_C.rotary(q)
                return q

        @timed
        def rope(q):
            return RopeFn.apply(q)
    """,
    "fx/ops/registered.py": """
        import torch
        from up.utils import direct_register_custom_op

        def fx_attention(out, q):
            torch.ops._fx_C.paged_attention(out, q, q)

        direct_register_custom_op(op_name="fx_attention", op_func=fx_attention, mutates_args=["out"])
    """,
    "fx/patch/__init__.py": "",
    "fx/patch/utils.py": """
        import importlib

        def patch(module, attr=None):
            def deco(fn):
                mod = importlib.import_module(module)
                setattr(mod, attr or fn.__name__, fn)
                return fn
            return deco
    """,
    "fx/patch/merge.py": """
        import torch
        from fx.patch.utils import patch
        import up.ops.merge as um

        @patch("up.ops.merge", "merge_states")
        def fx_merge_states(a, b):
            return torch.ops._fx_C.merge(a, b)

        um.other = None
    """,
    "csrc/torch_bindings.cpp": """
        #include <torch/library.h>
        void paged_attention(at::Tensor& out, const at::Tensor& q, const at::Tensor& cache);
        TORCH_LIBRARY_FRAGMENT(_fx_C, ops) {
          ops.def("paged_attention(Tensor! out, Tensor q, Tensor cache) -> ()");
          ops.def("rotary(Tensor! q) -> ()");
        }
        TORCH_LIBRARY_IMPL(_fx_C, CUDA, ops) {
          ops.impl("paged_attention", &paged_attention);
          ops.impl("rotary", &rotary);
        }
    """,
    "csrc/attention.cu": """
        #include <torch/all.h>
        __global__ void paged_attention_kernel(float* out) {}
        void paged_attention(at::Tensor& out, const at::Tensor& q, const at::Tensor& cache) {
          paged_attention_kernel<<<1, 1>>>(nullptr);
        }
        void rotary(at::Tensor& q) {}
    """,
}


@pytest.fixture()
def ws(tmp_path):
    return fixture_ws(tmp_path, PLUGIN, UPSTREAM)


def trace(ws, text, nth=0, offset=0, rel="fx/backends/flash.py"):
    path, line, col = find(ws.root / rel, text, nth, offset)
    chain = ws.trace_at(path, line, col)
    assert chain is not None, f"nothing at {text!r}"
    return chain


def test_platform_profile_from_entry_point(ws):
    info = ws.resolver.profile.summary()
    assert info["entry_point"] == "fx:register"
    assert info["classes"] == ["fx.platform.FxPlatform"]
    assert info["enum"] == "OOT"
    assert info["facts"]["is_out_of_tree"] is True
    assert info["facts"]["is_cuda"] is False
    assert info["facts"]["is_device_capability_family"] is False


def test_conditional_import_alias_to_torch_op_with_cpp_registration(ws):
    c = trace(ws, "reshape_and_cache(k")
    ks = kinds(c)
    assert ks[:3] == ["call", "conditional_import", "alias"]
    cond = c.hops[1]
    assert cond.condition == "varlen_available()" and cond.reachable is True
    assert c.hops[2].condition == "current_platform.is_out_of_tree()" and c.hops[2].reachable is True
    assert "torch_op" in ks
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_C_cache::reshape_and_cache"
    # no registration for this op anywhere: said plainly
    assert f.reason and "no registration" in f.reason


def test_torch_op_cpp_def_impl_and_definition(ws):
    c = trace(ws, "torch.ops._fx_C.paged_attention(out", offset=len("torch.ops._fx_C."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_fx_C::paged_attention"
    assert f.schema.startswith("paged_attention(Tensor! out")
    impls = [r for r in f.registrations if r.kind == "cpp_impl"]
    assert impls and impls[0].dispatch_key == "CUDA" and impls[0].function == "paged_attention"
    assert impls[0].function_path.endswith("csrc/attention.cu") and impls[0].function_line == 3
    assert f.path.endswith("csrc/torch_bindings.cpp") and f.line == 4
    assert "definition" in kinds(c)
    # the provider comes from the platform's import_kernels
    assert any("fx._C" in p and "not built" in p for p in f.providers)


def test_not_installed_package(ws):
    c = trace(ws, "varlen_fwd(q")
    assert c.final.kind == M.NOT_INSTALLED
    assert c.final.symbol == "vendorflash" and c.final.package == "vendorflash"
    assert "reexport" in kinds(c) or "conditional_import" in kinds(c)


def test_dummy_through_alias(ws):
    c = trace(ws, "sched_meta(1")
    assert c.final.kind == M.DUMMY
    assert c.final.symbol == "fx._dummy._Dummy.sched_meta"
    assert "logs" in c.final.reason


def test_args_kwargs_wrapper_to_autotuned_triton_kernel(ws):
    c = trace(ws, "decode_fwd(q")
    ks = kinds(c)
    assert "wrapper" in ks and "decorator" in ks
    w = c.hops[ks.index("wrapper")]
    assert "*args/**kwargs" in w.detail
    f = c.final
    assert f.kind == M.TRITON_KERNEL and f.symbol == "fx.ops.decode._decode_kernel"
    assert f.constexprs == ["BLOCK", "EVEN"]
    assert f.line == 7  # the def line, not the first decorator line


def test_lazy_import_inside_function(ws):
    c = trace(ws, "lazy_kernel(q")
    assert kinds(c)[1] == "lazy_import"
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_fx_C::lazy_op"


def test_importlib_and_getattr_literal_strings(ws):
    c = trace(ws, "fn(q)")
    ks = kinds(c)
    assert ks.count("dynamic_import") == 2
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_fx_C::rotary"


def test_functools_wraps_decorator_and_autograd_apply(ws):
    c = trace(ws, "rope(q)", nth=0)
    ks = kinds(c)
    assert "wrapper" in ks and "autograd_apply" in ks
    assert ks.index("wrapper") < ks.index("autograd_apply")
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_fx_C::rotary"
    assert any(r.function == "rotary" for r in c.final.registrations)


def test_reexport_then_monkey_patch(ws):
    c = trace(ws, "merge_states(q")
    ks = kinds(c)
    assert "reexport" in ks and "patch" in ks
    p = c.hops[ks.index("patch")]
    assert p.path.endswith("fx/patch/merge.py") and "up.ops.merge" in p.detail
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_fx_C::merge"


def test_native_extension_module(ws):
    c = trace(ws, "native_fn(q")
    assert c.final.kind == M.EXTENSION_FUNCTION
    assert c.final.symbol == "up.kern.native_fn" and c.final.path.endswith(".so")


def test_python_registered_op_followed_to_its_function(ws):
    c = trace(ws, "torch.ops.vllm.fx_attention(", offset=len("torch.ops.vllm."))
    ks = kinds(c)
    assert "torch_op" in ks and "op_registration" in ks
    reg = c.hops[ks.index("op_registration")]
    assert reg.path.endswith("fx/ops/registered.py")
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_fx_C::paged_attention"


def test_try_except_importerror_picks_the_installed_branch(ws):
    c = trace(ws, "fast_path(q")
    assert c.final.kind == M.TRITON_KERNEL and c.final.symbol == "fx.ops.decode._decode_kernel"


def test_self_method_and_class_mro(ws):
    c = trace(ws, "self.helper(q", offset=5)
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_fx_C::paged_attention"


def test_unresolved_has_a_reason(ws):
    c = trace(ws, "dyn(q")
    assert c.final.kind == M.UNRESOLVED
    assert "non-literal" in c.final.reason
    assert c.hops[-1].kind == "unresolved"


def test_dead_branch_on_platform(ws):
    c = trace(ws, "torch.ops._C.cuda_only(", offset=len("torch.ops._C."))
    assert c.hops[0].condition == "current_platform.is_cuda()"
    assert c.hops[0].reachable is False and c.reachable is False


def test_nvidia_capability_guard_unknown_not_hidden(ws):
    c = trace(ws, "torch.ops._C.sm89_only(", offset=len("torch.ops._C."))
    # has_device_capability depends on the vendor query: not constant, kept as a visible condition
    assert c.hops[0].condition == "current_platform.has_device_capability(89)"
    assert c.hops[0].reachable is None


def test_constant_function_and_capability_family_evaluate(ws):
    mod = ws.index.module("fx.backends.flash")
    prof = ws.resolver.profile
    assert prof.evaluate(mod, "", "fa_version() == 3") is False
    assert prof.evaluate(mod, "", "current_platform.is_device_capability_family(90)") is False
    assert prof.evaluate(mod, "", "varlen_available()") is True
    assert prof.evaluate(mod, "", "not current_platform.is_cuda()") is True
    assert prof.evaluate(mod, "", "some_env_flag") is None


def test_registry_call_form_impl_builder_and_upstream(ws):
    entries = ws.backends()
    assert [e.name for e in entries] == ["FLASH"]
    e = entries[0]
    assert e.cls == "fx.backends.flash.FxFlashBackend"
    assert e.registered_at[0]["form"] == "call" and e.registered_at[0]["path"].endswith("fx/platform.py")
    assert e.impl.cls == "fx.backends.flash.FxFlashImpl"
    assert e.builder.cls == "fx.backends.flash.FxBuilder"
    assert e.upstream.cls == "up.backends.flash.FlashBackend" and e.upstream.line == 9
    finals = {(c.call, c.chain.final.kind) for c in e.call_sites}
    assert ("reshape_and_cache", "torch_op") in finals
    assert ("varlen_fwd", "not_installed") in finals
    assert ("sched_meta", "dummy") in finals
    assert ("decode_fwd", "triton_kernel") in finals


def test_registry_decorator_form_and_inherited_part(tmp_path):
    plugin = dict(PLUGIN)
    plugin["fx/backends/tri.py"] = """
        from up.backends.tri import TriBackend
        from up.registry import BackendEnum, register_backend

        @register_backend(BackendEnum.TRITON)
        class FxTriBackend(TriBackend):
            pass
    """
    ws = fixture_ws(tmp_path, plugin, UPSTREAM)
    entries = {e.name: e for e in ws.backends()}
    e = entries["TRITON"]
    assert e.registered_at[0]["form"] == "decorator"
    assert e.builder.cls == "up.backends.tri.TriBuilder"
    assert e.builder.inherited_from == "up.backends.tri.TriBackend.get_builder_cls"
    assert e.upstream.cls == "up.backends.tri.TriBackend"


def test_bad_input_never_raises(tmp_path):
    plugin = dict(PLUGIN)
    plugin["fx/broken.py"] = "def f(:\n    return torch.ops.x.y(\n"
    plugin["fx/binary.py"] = b"\x00\x01\x02\xff" * 100
    ws = fixture_ws(tmp_path, plugin, UPSTREAM)
    m = ws.index.module("fx.broken")
    # the broken def is left out (pyrecover); the error is recorded with its position
    assert m.summary.error is None and m.summary.functions == {}
    assert [(i.line, i.col, i.message) for i in m.summary.syntax_errors] == [(1, 6, "invalid syntax")]
    b = ws.index.module("fx.binary")
    assert b.summary.error and "binary" in b.summary.error
    assert ws.trace_at(str(ws.root / "fx/broken.py"), 1, 4) is None
    # the rest of the workspace still resolves
    assert ws.backends()[0].name == "FLASH"


def test_cache_roundtrip_gives_the_same_chain(tmp_path):
    ws1 = fixture_ws(tmp_path, PLUGIN, UPSTREAM, cache=True)
    c1 = trace(ws1, "rope(q)").to_json()
    ws1.close()
    ws2 = fixture_ws(tmp_path, {}, {}, cache=True)  # same folders, files unchanged
    c2 = trace(ws2, "rope(q)").to_json()
    assert c1 == c2
    assert list((tmp_path / "cache").rglob("*.pickle"))


def test_overlay_wins_over_disk(ws):
    path = ws.root / "fx/backends/flash.py"
    text = path.read_text().replace("decode_fwd(q, k, v, out)", "rope(q)                 ")
    ws.index.set_overlay(str(path), text)
    p, line, col = find(path, "decode_fwd(q, k, v, out)")
    chain = ws.trace_at(p, line, col)
    assert chain.final.symbol == "_fx_C::rotary"


def test_super_call_to_a_base_class_that_is_not_found_is_an_unresolved_branch(tmp_path):
    """An override that ends in `super().run(...)` whose base class's import names something the upstream module does
    not define: what the base class runs is unknown, a leaf that says why, not a branch dropped (the verdict would
    otherwise read as if the override's other branches were all it runs)."""
    plugin = dict(PLUGIN)
    plugin["fx/stage.py"] = """
        import torch
        from up.backends.tri import GoneStage

        class Stage(GoneStage):
            def run(self, x, fast: bool = False):
                if fast:
                    torch.ops._C.fast_stage(x)
                    return
                super().run(x)

        def go(x):
            s = Stage()
            s.run(x)
    """
    ws = fixture_ws(tmp_path, plugin, UPSTREAM)
    c = trace(ws, "s.run(x)", rel="fx/stage.py")
    assert [(lf.final.kind, lf.final.symbol, lf.final.reason, lf.conditions) for lf in c.leaves()] == [
        (M.TORCH_OP, "_C::fast_stage", c.leaves()[0].final.reason, ["fast"]),
        (M.UNRESOLVED, "super().run", "`super().run`: the base class GoneStage of Stage is not found", ["not (fast)"])]
