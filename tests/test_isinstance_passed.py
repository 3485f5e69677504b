"""``isinstance`` of an object a call passes as ``self``.

A layer hands itself to a factory (``quant_config.get_quant_method(self, prefix)``) whose returns are chosen by
``isinstance(layer, LinearBase)``, ``isinstance(layer, FusedMoE)``...: for an embedding layer the linear and MoE
returns never run. The factory's arms were evaluated without the object, so every arm was "decided at run time"
(upstream vLLM: ~22,000 leaves of `QuantizeMethodBase.embedding` dummies and MoE kernels under embedding and
logits-processor calls)."""

from __future__ import annotations

from tests.helpers import fixture_ws

PLUGIN = {
    "ix/__init__.py": "",
    "ix/layers.py": '''
        import triton


        @triton.jit
        def _lin(x):
            pass


        @triton.jit
        def _moe(x):
            pass


        @triton.jit
        def _emb(x):
            pass


        @triton.jit
        def _tied(x):
            pass


        class LayerBase:
            pass


        class LinearBase(LayerBase):
            pass


        class Experts(LayerBase):
            pass


        class LinMethod:
            def apply(self, x):
                _lin[(1,)](x)


        class MoEMethod:
            def apply(self, x):
                _moe[(1,)](x)


        class TiedMethod:
            def apply(self, x):
                _tied[(1,)](x)


        class EmbMethod:
            def apply(self, x):
                _emb[(1,)](x)


        class Config:
            def get_method(self, layer):
                if isinstance(layer, LinearBase):
                    return LinMethod()
                if isinstance(layer, Experts):
                    return MoEMethod()
                if isinstance(layer, (LMHead, LayerBase)) and layer.tied:
                    return TiedMethod()
                return EmbMethod()


        class Embedding(LayerBase):
            def __init__(self, cfg: Config):
                self.method = cfg.get_method(self)

            def forward(self, x):
                self.method.apply(x)


        class LMHead(Embedding):
            pass


        class Both(Embedding, Experts):
            pass


        class Router(LayerBase):
            def __init__(self, cfg: Config):
                self.method = cfg.get_method(self)

            def forward(self, x):
                self.method.apply(x)

            def route(self, x):
                run_layer(self, x)


        def run_layer(layer, x):
            if isinstance(layer, Experts):
                _moe[(1,)](x)
            else:
                _emb[(1,)](x)
    ''',
}
SITE = {"triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n"}


def _leaves(ws, scope):
    mod = ws.index.module("ix.layers")
    cs = next(c for c in mod.summary.calls if c.scope == scope and c.func == "self.method.apply")
    ch = ws.resolver.trace_call(mod, cs)
    return [(lf.final.symbol, lf.to_json()["reachability"]) for lf in ch.leaves()]


def test_isinstance_of_the_object_passed_as_self_decides_the_factorys_returns(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got = _leaves(ws, "Embedding.forward")
    # an Embedding is no LinearBase (unrelated: dead); it may be an Experts (the workspace's `Both` derives from
    # both: decided at run time); `(LMHead, LayerBase)` holds (LayerBase is its base) and the rest reads
    # `layer.tied`; the last return runs where none of those does
    assert got == [("ix.layers._lin", "dead"), ("ix.layers._moe", "runtime"), ("ix.layers._tied", "runtime"),
                   ("ix.layers._emb", "runtime")]


def test_an_unrelated_class_with_no_common_subclass_is_false(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got = _leaves(ws, "Router.forward")
    # a Router is neither a LinearBase nor an Experts, and no class derives from Router and either
    assert got == [("ix.layers._lin", "dead"), ("ix.layers._moe", "dead"), ("ix.layers._tied", "runtime"),
                   ("ix.layers._emb", "runtime")]


def test_the_profile_folds_isinstance_only_for_a_bound_object(tmp_path):
    from attnlens.profile import InstanceOf

    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    mod = ws.index.module("ix.layers")
    prof = ws.resolver.profile
    router, emb = InstanceOf("ix.layers", "Router"), InstanceOf("ix.layers", "Embedding")
    assert prof.value_of(mod, "Config.get_method", "isinstance(layer, LinearBase)", (("layer", router),)) is False
    assert prof.value_of(mod, "Config.get_method", "isinstance(layer, LayerBase)", (("layer", router),)) is True
    # LMHead is a subclass of Embedding: an Embedding may be one
    assert prof.value_of(mod, "Config.get_method", "isinstance(layer, LMHead)", (("layer", emb),)) is None
    assert prof.value_of(mod, "Config.get_method", "isinstance(layer, LinearBase)") is None
    assert prof.value_of(mod, "Config.get_method", "layer is not None", (("layer", router),)) is True


def test_a_function_handed_self_folds_isinstance_of_it_in_its_body(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    mod = ws.index.module("ix.layers")
    cs = next(c for c in mod.summary.calls if c.scope == "Router.route" and c.func == "run_layer")
    ch = ws.resolver.trace_call(mod, cs)
    assert [(lf.final.symbol, lf.conditions, lf.to_json()["reachability"]) for lf in ch.leaves()] == [
        ("ix.layers._moe", ["isinstance(layer, Experts)"], "dead"),
        ("ix.layers._emb", ["not (isinstance(layer, Experts))"], "live")]
