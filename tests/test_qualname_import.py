"""A class the platform names by its qualified name.

vLLM asks the platform for a class as a string and imports it: ``resolve_obj_by_qualname(
current_platform.get_punica_wrapper())``, ``get_device_communicator_cls()``, ``get_static_graph_wrapper_cls()``.
A function that imports the module of a "module.attr" name and returns the attribute, called with what folds to such
a name on this platform, gives that attribute (before: an unknown value, then every subclass of the declared base)."""

from __future__ import annotations

from tests.helpers import fixture_ws
from tests.test_resolver_hops import PLUGIN, UPSTREAM

SITE = dict(UPSTREAM)
SITE.update({
    "triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n",
    "up/loader.py": """
        import importlib


        def resolve_obj_by_qualname(qualname):
            module_name, obj_name = qualname.rsplit(".", 1)
            module = importlib.import_module(module_name)
            return getattr(module, obj_name)


        def by_partition(name):
            head, _dot, tail = name.rpartition(".")
            mod = importlib.import_module(head)
            return getattr(mod, tail)
    """,
    "up/wrappers.py": """
        import triton

        from up.loader import by_partition, resolve_obj_by_qualname
        from up.platforms import current_platform


        @triton.jit
        def _gpu_kernel(x):
            pass


        @triton.jit
        def _xpu_kernel(x):
            pass


        class WrapperBase:
            def add(self, x):
                raise NotImplementedError


        class WrapperGPU(WrapperBase):
            def add(self, x):
                _gpu_kernel[(1,)](x)


        class WrapperXPU(WrapperBase):
            def add(self, x):
                _xpu_kernel[(1,)](x)


        def get_wrapper() -> WrapperBase:
            qualname = current_platform.get_wrapper()
            cls = resolve_obj_by_qualname(qualname)
            return cls()


        def get_other() -> WrapperBase:
            cls = by_partition(current_platform.get_wrapper())
            return cls()


        def run(x):
            w = get_wrapper()
            w.add(x)
            o = get_other()
            o.add(x)
    """,
})
_BASE = "            _enum: PlatformEnum\n"
SITE["up/platforms/interface.py"] = UPSTREAM["up/platforms/interface.py"].replace(_BASE, _BASE + """
            @classmethod
            def get_wrapper(cls) -> str:
                return "up.wrappers.WrapperXPU"
""")
_FX = "            _enum = PlatformEnum.OOT\n"
FX = dict(PLUGIN)
FX["fx/platform.py"] = PLUGIN["fx/platform.py"].replace(_FX, _FX + """
            @classmethod
            def get_wrapper(cls) -> str:
                return "up.wrappers.WrapperGPU"
""")
assert "WrapperXPU" in SITE["up/platforms/interface.py"] and "WrapperGPU" in FX["fx/platform.py"]


def _leaves(ws, func):
    mod = ws.index.module("up.wrappers")
    cs = next(c for c in mod.summary.calls if c.scope == "run" and c.func == func)
    ch = ws.resolver.trace_call(mod, cs)
    return [(str(lf.final.kind), lf.final.symbol) for lf in ch.leaves()], ch


def test_the_class_the_platform_names_is_what_runs(tmp_path):
    ws = fixture_ws(tmp_path, FX, SITE)
    assert ws.resolver.profile.info.classes[0].qual == "FxPlatform"
    got, ch = _leaves(ws, "w.add")
    assert got == [("triton_kernel", "up.wrappers._gpu_kernel")]
    assert [h.detail for h in ch.hops if h.kind == "alias"] == ["w = get_wrapper(...) returns cls()"]
    mod = ws.index.module("up.wrappers")
    assert ws.resolver.profile.value_of(mod, "get_wrapper", "qualname") == "up.wrappers.WrapperGPU"
    # the same through `rpartition(".")`
    got, _ch = _leaves(ws, "o.add")
    assert got == [("triton_kernel", "up.wrappers._gpu_kernel")]


def test_a_name_that_does_not_fold_names_no_class(tmp_path):
    site = dict(SITE)
    site["up/wrappers.py"] = SITE["up/wrappers.py"].replace("qualname = current_platform.get_wrapper()",
                                                            "qualname = input()")
    ws = fixture_ws(tmp_path, FX, site)
    got, _ch = _leaves(ws, "w.add")
    # (what the call gives is not known: the object's class is not either wrapper's)
    assert got == [("unresolved", "w")]
