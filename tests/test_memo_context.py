"""An answer that reads where it was reached from is never memoised as if it did not.

Two readers of the walk's context (the hops before the value being resolved) made answers depend on what was
asked before, in the editor and in `attnlens sites` alike (upstream vLLM: 280 of 22,888 sites changed with the
fix; `sites` in one process and in two now give the same bytes, and 240 sampled sites equal their fresh traces):

* a layer looked up by name in a helper (``forward_context.no_compile_layers[name]`` in a
  ``get_attention_context``) is one of the *caller's* module's layer classes when the caller's module defines
  any (an MLA op's helper call returns an MLA layer): the helper's value was memoised with the first caller's
  layers;
* a torch op with no registration names the not-installed packages the *calling* function's module imports
  as its providers: the op's final was memoised with the first caller's imports.
"""

from __future__ import annotations

import json

from tests.helpers import fixture_ws

SITE = {"triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n"}

LAYERS = {
    "lx/__init__.py": "",
    "lx/base.py": """
        class AttentionLayerBase:
            pass
    """,
    "lx/ctx.py": """
        import triton
        from lx.base import AttentionLayerBase


        @triton.jit
        def _plain_kernel(x):
            pass


        class PlainAttention(AttentionLayerBase):
            def run(self, x):
                _plain_kernel[(1,)](x)


        def get_forward_context():
            return _forward_context


        def get_layer(layer_name):
            forward_context = get_forward_context()
            meta = forward_context.attn_metadata
            layer = forward_context.no_compile_layers[layer_name]
            return meta, layer


        def plain_op(x, layer_name):
            _, layer = get_layer(layer_name)
            layer.run(x)
    """,
    "lx/mla.py": """
        import triton
        from lx.base import AttentionLayerBase
        from lx.ctx import get_layer


        @triton.jit
        def _mla_kernel(x):
            pass


        class MlaAttention(AttentionLayerBase):
            def run(self, x):
                _mla_kernel[(1,)](x)


        def mla_op(x, layer_name):
            meta, layer = get_layer(layer_name)
            layer.run(x)
    """,
}

OPS = {
    "vx/__init__.py": "",
    "vx/one.py": """
        import torch
        import vxkern._C  # noqa: F401


        def first(x):
            return torch.ops._vxkern_C.gemm(x)
    """,
    "vx/two.py": """
        import torch
        import vxkern_lite._C  # noqa: F401


        def second(x):
            return torch.ops._vxkern_C.gemm(x)
    """,
}


def _layer_leaves(ws, order):
    out = {}
    for name in order:
        mod = ws.index.module(name)
        cs = next(c for c in mod.summary.calls if c.func == "layer.run")
        out[name] = [(lf.final.kind, lf.final.symbol) for lf in ws.resolver.trace_call(mod, cs).leaves()]
    return out


def _op_providers(ws, order):
    out = {}
    for name in order:
        mod = ws.index.module(name)
        cs = next(c for c in mod.summary.calls if c.func.startswith("torch.ops."))
        out[name] = ws.resolver.trace_call(mod, cs).final.providers
    return out


def test_a_layer_looked_up_in_a_helper_is_the_callers_whatever_was_asked_first(tmp_path):
    want = {"lx.ctx": [("triton_kernel", "lx.ctx._plain_kernel")], "lx.mla": [("triton_kernel", "lx.mla._mla_kernel")]}
    fresh = fixture_ws(tmp_path / "fresh", LAYERS, SITE)
    fresh.resolver.memo_enabled = False
    assert _layer_leaves(fresh, ["lx.ctx", "lx.mla"]) == want
    for i, order in enumerate((["lx.ctx", "lx.mla"], ["lx.mla", "lx.ctx"])):
        assert _layer_leaves(fixture_ws(tmp_path / f"o{i}", LAYERS, SITE), order) == want, order


def test_an_unregistered_ops_providers_are_its_callers_whatever_was_asked_first(tmp_path):
    want = {"vx.one": ["vxkern._C (not installed, imported in vx.one:2)"],
            "vx.two": ["vxkern_lite._C (not installed, imported in vx.two:2)"]}
    fresh = fixture_ws(tmp_path / "fresh", OPS)
    fresh.resolver.memo_enabled = False
    assert _op_providers(fresh, ["vx.one", "vx.two"]) == want
    for i, order in enumerate((["vx.one", "vx.two"], ["vx.two", "vx.one"])):
        ws = fixture_ws(tmp_path / f"o{i}", OPS)
        assert _op_providers(ws, order) == want, order
        # each caller's answer is memoised under its own key (asked again: from the memo, the same)
        assert _op_providers(ws, order) == want, order
        assert sum(1 for k in ws.resolver._follow_memo if k[0][0].name == "TORCH_OP") == 2


# upstream vLLM's `merge_attn_states`: the name is imported on both branches and called right after each import
MERGE = {
    "mx/__init__.py": "",
    "mx/tri_a.py": """
        import triton


        @triton.jit
        def _kern_a(x):
            pass


        def merge(x):
            _kern_a[(1,)](x)
    """,
    "mx/tri_b.py": """
        import triton


        @triton.jit
        def _kern_b(x):
            pass


        def merge(x):
            _kern_b[(1,)](x)
    """,
    "mx/ops.py": """
        def use_a(x):
            return x.is_cuda


        def merge(x):
            if use_a(x):
                from mx.tri_a import merge

                return merge(x)
            else:
                from mx.tri_b import merge

                return merge(x)
    """,
    "mx/layer.py": """
        from mx.ops import merge


        def forward(x):
            merge(x)
    """,
}


def _merge_leaves(ws, order):
    out = {}
    for name, line in order:
        mod = ws.index.module(name)
        cs = next(c for c in mod.summary.calls if c.line == line and c.func == "merge")
        out[(name, line)] = sorted((lf.final.symbol, tuple(lf.conditions), lf.reachable) for lf in ws.resolver.trace_call(mod, cs).leaves())
    return out


def test_a_name_bound_on_both_branches_is_resolved_for_the_guards_of_its_use_whatever_was_asked_first(tmp_path):
    """The value memo kept a local's value per line: the `else` call's own trace (its guards pick the `else`
    import) stood for the wrapper's look at the same line without those guards (both imports)."""
    sites = [("mx.ops", 13), ("mx.layer", 5)]
    fresh = fixture_ws(tmp_path / "fresh", MERGE, SITE)
    fresh.resolver.memo_enabled = False
    want = _merge_leaves(fresh, sites)
    assert want[("mx.ops", 13)] == [("mx.tri_b._kern_b", ("not (use_a(x))",), None)]
    assert [s for s, _c, _r in want[("mx.layer", 5)]] == ["mx.tri_a._kern_a", "mx.tri_b._kern_b"]
    for i, order in enumerate((sites, sites[::-1])):
        assert _merge_leaves(fixture_ws(tmp_path / f"o{i}", MERGE, SITE), order) == want, order


def test_emptying_the_memos_between_modules_changes_no_site(tmp_path, monkeypatch):
    """Answers do not depend on what was traced before, so `sites` may empty the memos as it goes (its memory on
    upstream vLLM: 467 -> 348 MB) and prints the same."""
    plugin = {**LAYERS, **OPS, **MERGE}
    want = [json.dumps(s.to_json()).replace(str(tmp_path / "a"), "") for s in fixture_ws(tmp_path / "a", plugin, SITE).kernel_sites()]
    ws = fixture_ws(tmp_path / "b", plugin, SITE)
    monkeypatch.setattr(type(ws), "SITES_MEMO_MODULES", 1)
    emptied = []
    clear = ws.resolver.clear_memos
    monkeypatch.setattr(ws.resolver, "clear_memos", lambda: (emptied.append(len(ws.resolver._follow_memo)), clear()))
    got = [json.dumps(s.to_json()).replace(str(tmp_path / "b"), "") for s in ws.kernel_sites()]
    assert len(want) == 11 and got == want
    assert len(emptied) == len(list(ws.index.workspace_modules())) - 1 and any(emptied)


def _room_fixture() -> dict:
    """``inner`` forks twice (6 kernels); ``lvl1`` reaches it under seven forks, where the fork-depth limit cuts
    its second fork (each level's other branch is dead: the leaves are not what runs out); ``wide`` under one fork of twelve branches (eleven of four kernels each), where its share of
    the leaves is too small for its first pass; ``near`` under one fork of two."""
    kernels = "\n".join(f"@triton.jit\ndef k{i}(x):\n    pass\n" for i in range(1, 60))
    pairs = "\n".join(f"def pair_{n}(x, c):\n    if c:\n        k{a}[(1,)](x)\n    else:\n        k{a + 1}[(1,)](x)\n"
                      for n, a in (("a", 1), ("b", 3), ("c", 5)))
    levels = "\n".join(f"def lvl{n}(x, c):\n    if c:\n        {'inner(x, c, c)' if n == 7 else f'lvl{n + 1}(x, c)'}\n"
                       f"    if False:\n        k7[(1,)](x)\n" for n in range(1, 8))
    quads = "\n".join(f"def quad{i}(x, c):\n" + "".join(f"    {'if' if j == 0 else 'elif'} c == {j}:\n        k{8 + 4 * i + j}[(1,)](x)\n"
                                                         for j in range(4)) for i in range(1, 12))
    wide = "def wide(x, c):\n    if c == 0:\n        inner(x, c, c)\n" + "".join(
        f"    elif c == {i}:\n        quad{i}(x, c)\n" for i in range(1, 12))
    near = "def near(x, c):\n    if c:\n        inner(x, c, c)\n    else:\n        k8[(1,)](x)\n"
    inner = ("def inner(x, c, d):\n    if d == 1:\n        pair_a(x, c)\n    elif d == 2:\n        pair_b(x, c)\n"
             "    else:\n        pair_c(x, c)\n")
    # (the sites pass their own parameters: nothing the guards test is fixed by a call)
    sites = "def site_inner(x, c):\n    inner(x, c, c)\n\ndef site_deep(x, c):\n    lvl1(x, c)\n\n" \
            "def site_wide(x, c):\n    wide(x, c)\n\ndef site_near(x, c):\n    near(x, c)\n"
    return {"rx/__init__.py": "", "rx/deep.py": "import triton\n\n" + "\n\n".join((kernels, pairs, inner, levels, quads, wide, near, sites))}


def _room_leaves(ws, order):
    mod = ws.index.module("rx.deep")
    out = {}
    for scope in order:
        cs = next(c for c in mod.summary.calls if c.scope == scope)
        ch = ws.resolver.trace_call(mod, cs)
        out[scope] = (sorted((lf.final.kind, lf.final.symbol, tuple(lf.conditions), lf.reachable) for lf in ch.leaves()),
                      json.dumps(ch.to_json(), sort_keys=True).replace(str(ws.index.root), ""))
    return out


def test_a_complete_subtree_stands_for_a_walk_with_less_room_only_where_it_fits(tmp_path, monkeypatch):
    """A complete subtree is reused where a walk has less room than where it was made, when every fork in it is
    still above the fork-depth limit and each branch still gets its whole subtree at the first pass (upstream
    vLLM: 37,847 subtrees traced again for want of room, 17,115 now); where it does not fit, it is traced again."""
    from attnlens.resolver import Resolver

    plugin = _room_fixture()
    scopes = ["site_inner", "site_deep", "site_wide", "site_near"]
    fresh = fixture_ws(tmp_path / "fresh", plugin, SITE)
    fresh.resolver.memo_enabled = False
    want = _room_leaves(fresh, scopes)
    # (what makes each case: the deep site's inner is cut by the fork-depth limit, the wide one's by the leaf
    # limit, the near one's is whole)
    assert len(want["site_inner"][0]) == 6 and ("triton_kernel", "rx.deep.k1", ("d == 1", "c"), None) in want["site_inner"][0]
    assert not any(s.startswith("rx.deep.k1") for _k, s, _c, _r in want["site_deep"][0])
    assert sum(1 for _k, s, _c, _r in want["site_wide"][0] if s in {f"rx.deep.k{i}" for i in range(1, 7)}) == 4
    assert len(want["site_near"][0]) == 7
    for i, order in enumerate((scopes, scopes[::-1], ["site_inner", "site_wide", "site_deep", "site_near"])):
        assert _room_leaves(fixture_ws(tmp_path / f"o{i}", plugin, SITE), order) == {s: want[s] for s in order}, order
    # and it is reused: after the whole subtree, `near` (a fork deeper, 24 leaves instead of 48) traces no
    # function of it again
    ws = fixture_ws(tmp_path / "reuse", plugin, SITE)
    _room_leaves(ws, ["site_inner"])
    followed = []
    orig = Resolver.follow_function
    monkeypatch.setattr(Resolver, "follow_function", lambda self, v, w, launch: followed.append(v.qual) or orig(self, v, w, launch))
    assert _room_leaves(ws, ["site_near"]) == {"site_near": want["site_near"]}
    assert "inner" not in followed and "pair_a" not in followed, followed


def test_trimming_the_work_memos_between_files_keeps_every_answer(tmp_path, monkeypatch):
    """An editor's server empties the memos behind the answers between two files' work once the traced values
    pass ``Resolver.TRIM_VALUES`` (upstream vLLM with 100 files open: 340 -> 286 MB at the peak); the site memo
    stays, and every file's sites are what a fresh workspace gives."""
    plugin = {**LAYERS, **OPS, **MERGE}
    base_a, base_b = str(tmp_path / "a"), str(tmp_path / "b")
    fresh = fixture_ws(tmp_path / "a", plugin, SITE)
    want = [json.dumps(s.to_json()).replace(base_a, "") for s in fresh.kernel_sites()]
    ws = fixture_ws(tmp_path / "b", plugin, SITE)
    r = ws.resolver
    monkeypatch.setattr(type(r), "TRIM_VALUES", 0)
    got, trims = [], []
    for mod in list(ws.index.workspace_modules()):
        got += [json.dumps(s.to_json()).replace(base_b, "") for s in ws.kernel_sites([mod.path])]
        had = len(r.site_memo)
        trims.append(ws.query.trim_memos())
        if trims[-1]:
            assert not r._val_memo and not r._follow_memo and not r._reach_memo
            assert len(r.site_memo) == had
    assert len(want) == 11 and sorted(got) == sorted(want)
    assert any(trims) and not ws.query.trim_memos()  # (nothing traced since: nothing to empty)


HELPER = {
    "hx/__init__.py": "",
    "hx/kern.py": """
        import triton


        @triton.jit
        def _k(x):
            pass


        def launch(x):
            _k[(1,)](x)


        class Base:
            def size(self):
                return 1


        class A(Base):
            def run(self, x):
                launch(x)


        class B(Base):
            def run(self, x):
                launch(x)


        def go(x):
            a = A()
            a.run(x)
            b = B()
            b.run(x)
    """,
}


def test_a_function_outside_any_class_is_followed_once_whatever_method_called_it(tmp_path, monkeypatch):
    """A module-level function has no `self`: the object of the method that called it is not part of what it runs
    (it split the memos of a helper by each calling class: upstream vLLM's `is_list_of`, 48 keys in 600 modules)."""
    from attnlens import resolver as R

    ws = fixture_ws(tmp_path, HELPER, SITE)
    explored = []
    orig = R.Resolver.body_branches

    def spy(self, v, f, w):
        explored.append((v.qual, w.receiver))
        return orig(self, v, f, w)

    monkeypatch.setattr(R.Resolver, "body_branches", spy)
    mod = ws.index.module("hx.kern")
    got = []
    for func in ("a.run", "b.run"):
        cs = next(c for c in mod.summary.calls if c.scope == "go" and c.func == func)
        ch = ws.resolver.trace_call(mod, cs)
        got.append([(str(lf.final.kind), lf.final.symbol, lf.conditions) for lf in ch.leaves()])
    assert got == [[("triton_kernel", "hx.kern._k", [])]] * 2
    assert [q for q, _recv in explored if q == "launch"] == ["launch"]
    assert [recv for q, recv in explored if q == "launch"] == [None]
