"""The precompiled provider a torch-op namespace comes from (AL113's schema-of-record sentence): the platform's
``import_kernels`` loads several extension modules by default, each holding its own namespaces."""

from __future__ import annotations

from attnlens.envflags import DefaultProvider, provider_for_namespace


def _p(module):
    return DefaultProvider(module, "not installed", "USE_PRECOMPILED_KERNEL", ())


def test_the_module_named_like_the_namespace_wins():
    provs = [_p("vendorlib._C"), _p("vendorlib._moe_C"), _p("vendorlib.sgl_kernel")]
    assert provider_for_namespace(provs, "_moe_C").module == "vendorlib._moe_C"
    assert provider_for_namespace(provs, "sgl_kernel").module == "vendorlib.sgl_kernel"
    assert provider_for_namespace(provs, "_C").module == "vendorlib._C"


def test_a_sub_namespace_comes_from_the_module_of_its_stem_and_no_module_holds_a_foreign_one():
    provs = [_p("vendorlib._C"), _p("vendorlib._moe_C")]
    assert provider_for_namespace(provs, "_C_cache_ops").module == "vendorlib._C"
    assert provider_for_namespace(provs, "_moe_C_extra").module == "vendorlib._moe_C"
    assert provider_for_namespace(provs, "other_ns") is None  # (not "the first one loaded": it does not hold it)
    assert provider_for_namespace([_p("vendorlib._C_stable_libtorch")], "_C").module == "vendorlib._C_stable_libtorch"
    assert provider_for_namespace([], "_C") is None
