"""An abstract (or no-op) method of an installed base class, called on an object declared as that base, is what
the subclasses implement: the workspace's subclasses when one overrides it, else the installed package's own
(vLLM-MetaX's MoE kernels call ``self.prepare_finalize.prepare(...)`` on a ``FusedMoEPrepareAndFinalizeModular``,
abstract in vLLM and implemented by vLLM's prepare-finalize classes; the trace ended in a "dummy" leaf that
raises ``NotImplementedError``, which never runs)."""

from __future__ import annotations

from tests.helpers import fixture_ws

SITE = {
    "triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n",
    "up/__init__.py": "",
    "up/base.py": '''
        from abc import ABC, abstractmethod

        class Stage(ABC):
            @abstractmethod
            def prepare(self, x):
                raise NotImplementedError

            def other(self, x):
                pass
    ''',
    "up/kernels.py": '''
        import triton

        @triton.jit
        def _gather(x):
            pass

        @triton.jit
        def _scatter(x):
            pass
    ''',
    "up/impls/__init__.py": "",
    "up/impls/gather.py": '''
        from up.base import Stage
        from up.kernels import _gather

        class GatherStage(Stage):
            def prepare(self, x):
                _gather[(1,)](x)
    ''',
    "up/impls/scatter.py": '''
        from up.impls.gather import GatherStage
        from up.kernels import _scatter

        class ScatterStage(GatherStage):  # (a subclass of a subclass)
            def prepare(self, x):
                _scatter[(1,)](x)

        class Unrelated:
            def prepare(self, x):
                pass
    ''',
    "up/runner.py": '''
        from up.base import Stage

        class Runner:
            def __init__(self, stage: Stage):
                self.stage = stage

            def run(self, x):
                return self.stage.prepare(x)
    ''',
}

PLUGIN = {
    "px/__init__.py": "",
    "px/use.py": '''
        from up.runner import Runner

        def go(r: Runner, x):
            r.run(x)
    ''',
}


def _leaves(ws, modname: str, func: str):
    mod = ws.index.module(modname)
    cs = next(c for c in mod.summary.calls if c.func == func)
    ch = ws.resolver.trace_call(mod, cs)
    return sorted((lf.final.kind, lf.final.symbol, tuple(lf.conditions), lf.reachable) for lf in ch.leaves())


def test_an_installed_abstract_method_is_a_fork_over_the_installed_subclasses(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    assert _leaves(ws, "px.use", "r.run") == [
        ("triton_kernel", "up.kernels._gather", ("the object is a GatherStage",), None),
        ("triton_kernel", "up.kernels._scatter", ("the object is a ScatterStage",), None),
    ]


def test_a_workspace_subclass_that_overrides_it_is_the_only_arm(tmp_path):
    plugin = dict(PLUGIN)
    plugin["px/stage.py"] = '''
        import triton
        from up.base import Stage

        @triton.jit
        def _mine(x):
            pass

        class MyStage(Stage):
            def prepare(self, x):
                _mine[(1,)](x)
    '''
    ws = fixture_ws(tmp_path, plugin, SITE)
    assert _leaves(ws, "px.use", "r.run") == [("triton_kernel", "px.stage._mine", ("the object is a MyStage",), None)]


def test_the_def_table_names_the_files_and_a_name_defined_too_widely_is_not_searched(tmp_path, monkeypatch):
    ws = fixture_ws(tmp_path, PLUGIN, SITE, cache=True)
    folder = str(tmp_path / "site" / "up")
    got = ws.index.installed_def_files(folder, ("tests",), "prepare")
    assert sorted(p[len(folder) + 1:] for p in got) == ["base.py", "impls/gather.py", "impls/scatter.py"]
    assert ws.index.installed_def_files(folder, ("tests",), "missing") == ()
    # a second workspace reads the table from the cache folder (the same answer)
    ws2 = fixture_ws(tmp_path, PLUGIN, SITE, cache=True)
    assert ws2.index.installed_def_files(folder, ("tests",), "prepare") == got
    monkeypatch.setattr(type(ws2.resolver), "INSTALLED_DEFINING_MAX", 2)
    assert _leaves(ws2, "px.use", "r.run") == [("dummy", "up.base.Stage.prepare", (), True)]
