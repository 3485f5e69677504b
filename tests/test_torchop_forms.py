"""Torch op forms: the decorator forms of ``torch.library`` (the decorated function is the kernel),
fake impls that are never followed, ops whose provider is a package that is not installed, and
build-flag conditions (``#ifdef``/``#if``/``#else``/``#elif``) around C++ registrations.
Small inline workspaces, no interpreter subprocess."""

from __future__ import annotations

import textwrap

from attnlens import model as M
from attnlens.cppindex import FileSummary, build_index, summarize_cpp
from tests.helpers import find, fixture_ws, kinds
from tests.test_resolver_hops import UPSTREAM


def trace(ws, rel, text, nth=0, offset=0):
    path, line, col = find(ws.root / rel, text, nth, offset)
    chain = ws.trace_at(path, line, col)
    assert chain is not None, f"nothing at {text!r}"
    return chain


def regs(final):
    """(kind, dispatch key, function, line, function line, condition) of each registration."""
    return [(r.kind, r.dispatch_key, r.function, r.line, r.function_line, r.condition) for r in final.registrations]


# -- decorator forms -------------------------------------------------------------------------

DECORATED = {
    "vx/__init__.py": "",
    "vx/ops.py": """
        import torch
        import triton


        @triton.jit
        def _fused_kernel(out_ptr, x_ptr):
            pass


        @torch.library.custom_op("vx::fused", mutates_args=("out",))
        def fused(out: torch.Tensor, x: torch.Tensor) -> None:
            out.copy_(x)


        @torch.library.impl("vx::fused", "CUDA")
        def fused_cuda(out, x):
            _fused_kernel[(1,)](out, x)


        @torch.library.register_fake("vx::fused")
        def _fused_fake(out, x):
            return None


        def caller(out, x):
            torch.ops.vx.fused(out, x)
    """,
}


def test_decorator_impl_is_the_kernel_and_custom_op_stays(tmp_path):
    ws = fixture_ws(tmp_path, DECORATED)
    c = trace(ws, "vx/ops.py", "torch.ops.vx.fused(", offset=len("torch.ops.vx."))
    f = c.final
    # the CUDA impl runs on the device: its body is followed, not the dispatch-key string
    assert f.kind == M.TRITON_KERNEL and f.symbol == "vx.ops._fused_kernel"
    assert regs(f) == [
        ("python", "CompositeExplicitAutograd", "fused", 10, 11, None),
        ("python", "CUDA", "fused_cuda", 15, 16, None),
        ("python_fake", "Meta", "_fused_fake", 20, 21, None),
    ]
    assert all(r.function_path == str(ws.root / "vx/ops.py") for r in f.registrations)
    ks = kinds(c)
    assert ks[:3] == ["call", "torch_op", "op_registration"]
    reg = c.hops[2]
    assert reg.line == 15
    assert reg.detail == ('@torch.library.impl("vx::fused", "CUDA") in vx.ops (dispatch key CUDA); '
                          "also default impl fused (custom_op) at line 10, fake impl _fused_fake at line 20")
    # what the rules read: kernels only, the device one first, never the fake
    py = ws.resolver.ops.python_registrations("vx", "fused")
    assert [(line, func, key) for _m, line, _s, func, key, _t in py] == [
        (15, "fused_cuda", "CUDA"), (10, "fused", "CompositeExplicitAutograd")]


def test_custom_op_alone_is_the_default_impl(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/ops.py": """
            import torch


            @torch.library.custom_op("vx::solo", mutates_args=())
            def solo(x: torch.Tensor) -> torch.Tensor:
                return torch.ops._vx_C.solo_kernel(x)


            def caller(x):
                return torch.ops.vx.solo(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/ops.py", "torch.ops.vx.solo(", offset=len("torch.ops.vx."))
    reg = c.hops[kinds(c).index("op_registration")]
    assert reg.line == 4 and reg.detail == ('@torch.library.custom_op("vx::solo") in vx.ops '
                                            "(dispatch key CompositeExplicitAutograd)")
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_vx_C::solo_kernel"
    assert regs(f) == [("python", "CompositeExplicitAutograd", "solo", 4, 5, None)]


def test_aliased_decorators_and_op_methods(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/norm.py": """
            import torch
            from torch.library import custom_op, impl


            @custom_op("vx::rms", mutates_args=(), device_types="cuda")
            def rms(x: torch.Tensor) -> torch.Tensor:
                return x


            @impl("vx::rms", "cuda")
            def rms_cuda(x):
                return rms_device(x)


            @rms.register_kernel("cpu")
            def rms_cpu(x):
                return x


            @rms.register_fake
            def rms_fake(x):
                return x


            def rms_device(x):
                return torch.ops._vx_C.rms_kernel(x)


            def caller(x):
                return torch.ops.vx.rms(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/norm.py", "torch.ops.vx.rms(", offset=len("torch.ops.vx."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_vx_C::rms_kernel"
    assert regs(f) == [
        ("python", "CUDA", "rms", 5, 6, None),  # device_types="cuda"
        ("python", "CUDA", "rms_cuda", 10, 11, None),
        ("python", "CPU", "rms_cpu", 15, 16, None),
        ("python_fake", "Meta", "rms_fake", 20, 21, None),
    ]
    # two CUDA kernels: the explicit impl (which overrides the custom_op's own) is followed
    reg = c.hops[kinds(c).index("op_registration")]
    assert reg.line == 10
    assert reg.detail == ('@impl("vx::rms", "cuda") in vx.norm (dispatch key CUDA); also default impl rms '
                          "(custom_op) at line 5, CPU impl rms_cpu at line 15, fake impl rms_fake at line 20")


def test_library_object_decorator_legacy_impl_and_define(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/scale.py": """
            import torch

            lib = torch.library.Library("vx", "FRAGMENT")
            lib.define("scale(Tensor x) -> Tensor")


            @torch.library.impl(lib, "scale", "CPU")
            def scale_cpu(x):
                return x


            @lib.impl("scale", "CUDA")
            def scale_cuda(x):
                return torch.ops._vx_C.scale_kernel(x)


            def caller(x):
                return torch.ops.vx.scale(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/scale.py", "torch.ops.vx.scale(", offset=len("torch.ops.vx."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_vx_C::scale_kernel"
    assert regs(f) == [
        ("python_def", None, None, 4, None, None),
        ("python", "CPU", "scale_cpu", 7, 8, None),
        ("python", "CUDA", "scale_cuda", 12, 13, None),
    ]
    assert f.registrations[0].schema == "scale(Tensor x) -> Tensor"
    reg = c.hops[kinds(c).index("op_registration")]
    assert reg.line == 12 and reg.detail.startswith('@lib.impl("scale", "CUDA") in vx.scale (dispatch key CUDA)')


def test_call_forms_of_torch_library(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/add.py": """
            import torch


            def add_cuda(x):
                return torch.ops._vx_C.add_kernel(x)


            def add_fake(x):
                return x


            torch.library.define("vx::add", "(Tensor x) -> Tensor")
            torch.library.impl("vx::add", "CUDA", add_cuda)
            torch.library.register_fake("vx::add", add_fake)


            def caller(x):
                return torch.ops.vx.add(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/add.py", "torch.ops.vx.add(", offset=len("torch.ops.vx."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_vx_C::add_kernel"
    assert regs(f) == [
        ("python_def", None, None, 12, None, None),
        ("python", "CUDA", "add_cuda", 13, 4, None),
        ("python_fake", "Meta", "add_fake", 14, 8, None),
    ]
    assert f.registrations[0].schema == "add(Tensor x) -> Tensor"


def test_fake_impl_alone_is_never_followed(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/fk.py": """
            import torch


            @torch.library.register_fake("vx::only_fake")
            def only_fake_meta(x):
                return torch.empty_like(x)


            def caller(x):
                return torch.ops.vx.only_fake(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/fk.py", "torch.ops.vx.only_fake(", offset=len("torch.ops.vx."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "vx::only_fake"
    assert regs(f) == [("python_fake", "Meta", "only_fake_meta", 4, 5, None)]
    assert f.reason is None
    assert f.detail == "only a fake (meta) implementation or a schema is registered in Python"
    assert ws.resolver.ops.python_registrations("vx", "only_fake") == []


# -- ops whose provider is not installed -----------------------------------------------------


def test_calling_module_imports_a_package_that_is_not_installed(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/gemm.py": """
            import torch
            import einops
            import vxkern._C  # noqa: F401


            def caller(x):
                return torch.ops._vxkern_C.gemm(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/gemm.py", "torch.ops._vxkern_C.gemm(", offset=len("torch.ops._vxkern_C."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_vxkern_C::gemm"
    assert f.registrations == []
    assert f.reason == "no registration of _vxkern_C::gemm in reach; it would come from `vxkern._C`, which is not installed"
    assert f.providers == ["vxkern._C (not installed, imported in vx.gemm:3)"]  # einops is no op provider
    assert f.package == "vxkern"
    assert f.detail == "provided by `vxkern._C` (not installed)"


PLATFORM_PLUGIN = {
    "pyproject.toml": """
        [project]
        name = "vq"
        [project.entry-points."vllm.platform_plugins"]
        vq = "vq:register"
    """,
    "vq/__init__.py": """
        def register():
            return "vq.platform.VqPlatform"
    """,
    "vq/platform.py": """
        from up.platforms.interface import Platform, PlatformEnum
        import vq.envs as envs


        class VqPlatform(Platform):
            _enum = PlatformEnum.OOT

            @classmethod
            def import_kernels(cls):
                if envs.USE_PRECOMPILED:
                    import vqprebuilt._C  # noqa
                else:
                    import vq._C  # noqa
    """,
    "vq/envs.py": "USE_PRECOMPILED = True\n",
    "vq/attn.py": """
        import torch


        def decode(q):
            return torch.ops._C.vq_decode(q)
    """,
}


def test_platform_kernel_import_names_the_missing_provider(tmp_path):
    ws = fixture_ws(tmp_path, PLATFORM_PLUGIN, UPSTREAM)
    c = trace(ws, "vq/attn.py", "torch.ops._C.vq_decode(", offset=len("torch.ops._C."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_C::vq_decode" and f.registrations == []
    assert f.reason == "no registration of _C::vq_decode in reach; it would come from `vqprebuilt._C`, which is not installed"
    assert f.providers == ["vqprebuilt._C (not installed, if envs.USE_PRECOMPILED)",
                           "vq._C (not built in this checkout, if not (envs.USE_PRECOMPILED))"]
    assert f.package == "vqprebuilt"


def test_a_provider_imported_on_two_paths_is_there_under_either_guard(tmp_path):
    """`import_kernels` imports one extension in two branches (`vq._C` when the arch is "x86" with the fast path,
    and on every other arch): its guard is the `or` of both, not the first one's."""
    plugin = dict(PLATFORM_PLUGIN)
    plugin["vq/platform.py"] = """
        from up.platforms.interface import Platform, PlatformEnum
        import vq.envs as envs


        class VqPlatform(Platform):
            _enum = PlatformEnum.OOT

            @classmethod
            def import_kernels(cls):
                if envs.ARCH == "x86":
                    if envs.FAST:
                        import vq._C  # noqa
                    else:
                        import vq._C_slow  # noqa
                else:
                    import vq._C  # noqa
    """
    plugin["vq/envs.py"] = "import os\nARCH = os.environ.get('ARCH', 'x86')\nFAST = os.environ.get('FAST') == '1'\n"
    ws = fixture_ws(tmp_path, plugin, UPSTREAM)
    c = trace(ws, "vq/attn.py", "torch.ops._C.vq_decode(", offset=len("torch.ops._C."))
    assert c.final.providers == [
        'vq._C (not built in this checkout, if (envs.ARCH == "x86" and envs.FAST) or not (envs.ARCH == "x86"))',
        'vq._C_slow (not built in this checkout, if envs.ARCH == "x86" and not (envs.FAST))']


def test_no_provider_to_name_lists_what_was_searched(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/none.py": """
            import torch


            def caller(x):
                return torch.ops._vx_C.nothing(x)
        """,
        "csrc/ops.cpp": """
            #include <torch/library.h>
            TORCH_LIBRARY(_vx_C, ops) {
              ops.def("something(Tensor x) -> ()");
            }
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/none.py", "torch.ops._vx_C.nothing(", offset=len("torch.ops._vx_C."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.registrations == [] and f.providers == []
    assert f.reason == (
        "no registration of _vx_C::nothing found (searched workspace C++: 1 file; workspace Python: "
        "0 modules using a registration API, 0 of them mentioning `nothing`; installed Python: no installed package named after "
        "namespace `_vx_C` (looked for `vx`); extension schemas: 0 installed .so files read, none defines it)")


# -- build-flag conditions around C++ registrations --------------------------------------------

BINDINGS = textwrap.dedent("""
    #include <torch/library.h>
    #ifndef VX_BINDINGS_H
    #define VX_BINDINGS_H

    TORCH_LIBRARY(_vx_C, ops) {
      ops.def("always(Tensor x) -> ()");
    #ifdef USE_ROCM
      ops.def("rocm_only(Tensor x) -> ()");
    #else
      ops.def("not_rocm(Tensor x) -> ()");
    #endif
    #if defined(VX_FP8) && VX_ARCH >= 3
      ops.def("fp8(Tensor x) -> ()");
    #elif VX_ARCH == 2
      ops.def("arch2(Tensor x) -> ()");
    #else
      ops.def("fallback(Tensor x) -> ()");
    #endif
    }

    #ifndef USE_ROCM
    TORCH_LIBRARY_IMPL(_vx_C, CUDA, ops) {
      ops.impl("not_rocm", &not_rocm);
    #if defined(A) || B
      ops.impl("always", torch::kCUDA, &always_ab);
    #endif
    }
    #endif

    #endif
""").lstrip("\n")


def test_cpp_conditions_in_the_summary():
    s = summarize_cpp(BINDINGS.encode(), "/x/bindings.h")
    assert [(d.op, d.line, d.condition) for d in s.defs] == [
        ("_vx_C::always", 6, None),  # the include guard is no condition
        ("_vx_C::rocm_only", 8, "defined(USE_ROCM)"),
        ("_vx_C::not_rocm", 10, "!defined(USE_ROCM)"),
        ("_vx_C::fp8", 13, "defined(VX_FP8) && VX_ARCH >= 3"),
        ("_vx_C::arch2", 15, "!(defined(VX_FP8) && VX_ARCH >= 3) && VX_ARCH == 2"),
        ("_vx_C::fallback", 17, "!(defined(VX_FP8) && VX_ARCH >= 3) && !(VX_ARCH == 2)"),
    ]
    assert [(i.op, i.line, i.dispatch_key, i.function, i.condition) for i in s.impls] == [
        ("_vx_C::not_rocm", 23, "CUDA", "not_rocm", "!defined(USE_ROCM)"),
        ("_vx_C::always", 25, "CUDA", "always_ab", "!defined(USE_ROCM) && (defined(A) || B)"),
    ]
    assert [(b.macro, b.line, b.condition) for b in s.blocks] == [
        ("TORCH_LIBRARY", 5, None), ("TORCH_LIBRARY_IMPL", 22, "!defined(USE_ROCM)")]
    back = FileSummary.from_json(s.to_json())
    assert [d.condition for d in back.defs] == [d.condition for d in s.defs]
    assert [i.condition for i in back.impls] == [i.condition for i in s.impls]


def test_cpp_conditions_read_from_text_when_the_tree_is_broken():
    # an #if that splits braces leaves ERROR nodes: the directives are read from the text
    src = textwrap.dedent("""
        TORCH_LIBRARY(_vx_C, ops) {
        #ifdef VX_NEW_API
          ops.def("split(Tensor x) -> ()");
          if (true) {
        #else
          if (false) {
        #endif
          }
        #ifndef VX_NO_IMPL
          ops.impl("split", torch::kCUDA, &split);
        #endif
        }
    """).lstrip("\n")
    s = summarize_cpp(src.encode(), "/x/split.cpp")
    assert [(d.op, d.line, d.condition) for d in s.defs] == [("_vx_C::split", 3, "defined(VX_NEW_API)")]
    assert [(i.op, i.line, i.condition) for i in s.impls] == [("_vx_C::split", 10, "!defined(VX_NO_IMPL)")]


def test_cpp_condition_reaches_the_registration(tmp_path):
    plugin = {
        "vx/__init__.py": "",
        "vx/attn.py": """
            import torch


            def caller(x):
                return torch.ops._vx_C.not_rocm(x)
        """,
        "csrc/bindings.h": BINDINGS,
        "csrc/kernels.cu": """
            #include <torch/all.h>
            void not_rocm(at::Tensor& x) {}
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/attn.py", "torch.ops._vx_C.not_rocm(", offset=len("torch.ops._vx_C."))
    f = c.final
    assert f.kind == M.TORCH_OP and f.symbol == "_vx_C::not_rocm"
    assert regs(f) == [
        ("cpp_def", None, None, 10, None, "!defined(USE_ROCM)"),
        ("cpp_impl", "CUDA", "not_rocm", 23, 2, "!defined(USE_ROCM)"),
    ]
    details = [h.detail for h in c.hops if h.kind == "op_registration"]
    assert details == ["ops.def schema: not_rocm(Tensor x) -> () (under #if !defined(USE_ROCM))",
                       "ops.impl for CUDA binds not_rocm (under #if !defined(USE_ROCM))"]
    # the index keeps both sides of the #ifdef
    idx = build_index([ws.root / "csrc"])
    assert idx.op("_vx_C::rocm_only").defs[0].condition == "defined(USE_ROCM)"


def test_a_partial_of_direct_register_custom_op_registers_in_its_library(tmp_path):
    """`reg = functools.partial(direct_register_custom_op, target_lib=lib)` with `lib = Library("vx_fast", ...)`:
    `reg(op_name="norm", op_func=_norm)` registers `vx_fast::norm`, whose kernel is `_norm`'s (vLLM's
    `direct_register_aiter_op`)."""
    plugin = {
        "vx/__init__.py": "",
        "vx/fast.py": """
            import functools

            import torch
            from torch.library import Library

            from vllm.utils.torch_utils import direct_register_custom_op

            fast_lib = Library("vx_fast", "FRAGMENT")
            reg = functools.partial(direct_register_custom_op, target_lib=fast_lib)


            def _norm(x):
                return torch.ops._vx_C.norm_kernel(x)


            reg(op_name="norm", op_func=_norm)


            def caller(x):
                return torch.ops.vx_fast.norm(x)
        """,
    }
    ws = fixture_ws(tmp_path, plugin)
    c = trace(ws, "vx/fast.py", "torch.ops.vx_fast.norm(", offset=len("torch.ops.vx_fast."))
    reg = c.hops[kinds(c).index("op_registration")]
    assert (reg.line, reg.detail.split(" in ")[0]) == (16, 'reg(op_name="norm")')
    assert c.final.kind == M.TORCH_OP and c.final.symbol == "_vx_C::norm_kernel"


def test_the_extensions_that_can_hold_a_namespace_are_read_from_their_names():
    """Which of the platform's kernel modules can provide ops of a namespace: those whose name has the namespace's
    stem up to its `C` part; when none has and the workspace's C++ registers the namespace, all of them (built from
    that C++); else only those sharing a word with it (an outside namespace is not said to come from them)."""
    from attnlens.torchops import _for_namespace

    provs = [(m, None, "not installed") for m in
             ("vendlib._C", "vendlib._moe_C", "vendlib.sgl_kernel", "plug._C_stable_libtorch", "plug._moe_C_stable_libtorch")]
    names = lambda ns, built: [p[0] for p in _for_namespace(provs, ns, built)]
    assert names("_C", True) == ["vendlib._C", "plug._C_stable_libtorch"]
    assert names("_C_cache_ops", True) == ["vendlib._C", "plug._C_stable_libtorch"]
    assert names("_moe_C", False) == ["vendlib._moe_C", "plug._moe_C_stable_libtorch"]
    assert names("sgl_kernel", False) == ["vendlib.sgl_kernel"]
    assert names("_plug_C", True) == [p[0] for p in provs]
    assert names("oink", False) == []
    assert names("vendlib", False) == ["vendlib._C", "vendlib._moe_C", "vendlib.sgl_kernel"]


def test_find_spec_of_a_package_folds_to_whether_the_target_has_it(tmp_path):
    """`supported = find_spec("pkg") is not None` (vLLM's AITER_SUPPORTED, XPU_KERNELS_SUPPORTED) folds from the
    target interpreter's packages, also behind a function that returns the comparison."""
    plugin = {
        "vz/__init__.py": "",
        "vz/flags.py": """
            from importlib.util import find_spec


            def has_fast():
                return find_spec("fastlib") is not None


            def has_slow():
                from importlib.util import find_spec as fs

                return fs("slowlib") is not None


            FAST = has_fast()
            SLOW = has_slow()
            BOTH = find_spec("fastlib") is not None and find_spec("slowlib") is not None
        """,
    }
    ws = fixture_ws(tmp_path, plugin, {"fastlib/__init__.py": ""})
    mod = ws.index.module("vz.flags")
    ev = lambda text: ws.resolver.profile.evaluate(mod, "", text)
    assert (ev("FAST"), ev("SLOW"), ev("BOTH"), ev("not SLOW")) == (True, False, False, True)


def test_a_capability_check_on_a_platform_without_a_capability_is_false(tmp_path):
    """vLLM's `has_device_capability` starts with `cap = cls.get_device_capability(...)`; `if cap is None: return
    False`: on a platform class whose `get_device_capability` is the inherited `return None` (the CPU platform) the
    check folds False (`OINK_AVAILABLE = has_device_capability(100) and ...`); a platform that reads its capability
    at run time leaves it unknown."""
    plugin = dict(PLATFORM_PLUGIN)
    plugin["vq/attn.py"] = "from up.platforms import current_platform\n\nFAST = current_platform.has_device_capability(90) and FLAG\n"
    check = "current_platform.has_device_capability(90)"
    ws = fixture_ws(tmp_path / "a", plugin, UPSTREAM)
    mod = ws.index.module("vq.attn")
    assert (ws.resolver.profile.evaluate(mod, "", check), ws.resolver.profile.value_of(mod, "", "FAST")) == (False, False)
    plugin["vq/platform.py"] = PLATFORM_PLUGIN["vq/platform.py"] + """

            @classmethod
            def get_device_capability(cls, device_id=0):
                return read_capability(device_id)
    """
    ws = fixture_ws(tmp_path / "b", plugin, UPSTREAM)
    mod = ws.index.module("vq.attn")
    assert (ws.resolver.profile.evaluate(mod, "", check), ws.resolver.profile.value_of(mod, "", "FAST")) == (None, None)
