"""A method whose return is a call of the same method on an attribute that may be an object of its own class
(a fallback wrapper: ``return self.inner.shapes(n)`` where ``inner`` is any subclass of the base, the wrapper
included) is a cycle through its returns. An abstract method of an ABC between them (``Routed.shapes``) is no
arm: no object is of a class that leaves it abstract. It ends in one unresolved arm that says so; it used to read the returns
again at each turn until Python's recursion limit (upstream vLLM's MoE ``workspace_shapes``: 85,000 reads and
1.5 s a site, and the sites reached through it were lost as "resolution recursed without end")."""

from __future__ import annotations

from tests.helpers import fixture_ws

PLUGIN = {
    "fx/__init__.py": "",
    "fx/experts.py": '''
        from abc import ABC, abstractmethod

        import triton

        @triton.jit
        def _fill(x):
            pass

        class Experts:
            def shapes(self, n):
                raise NotImplementedError

            def run(self, x):
                _fill[(1,)](x)

        class Dense(Experts):
            def shapes(self, n):
                return (n, n)

        class Grouped(Experts):
            def shapes(self, n):
                return (n, 2 * n)

        class Routed(Experts, ABC):
            @abstractmethod
            def shapes(self, n):
                ...

            def plan(self, x):
                return self.shapes(4)

        class RoutedDense(Routed):
            def shapes(self, n):
                return (n,)

        class WithFallback(Experts):
            def __init__(self, main: Experts, fallback: Experts):
                self.main = main
                self.fallback = fallback

            def shapes(self, n):
                if n <= 8:
                    return self.fallback.shapes(n)
                return self.main.shapes(n)

            def pick(self, n):
                if n <= 8:
                    return self.fallback
                return self.main

        def plan(e: Experts, n):
            ws = e.shapes(n)
            e.run(ws)
    ''',
}
SITE = {"triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n"}


def _trace(ws, scope, func):
    mod = ws.index.module("fx.experts")
    cs = next(c for c in mod.summary.calls if c.scope == scope and c.func == func)
    return ws.resolver.trace_call(mod, cs)


def test_a_method_returning_its_own_call_on_a_fork_of_subclasses_ends(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    chain = _trace(ws, "WithFallback.shapes", "self.fallback.shapes")
    leaves = [(lf.final.kind, lf.final.symbol, lf.conditions) for lf in chain.leaves()]
    assert leaves == [
        ("python_function", "fx.experts.Dense.shapes", ["n <= 8", "the object is a Dense"]),
        ("python_function", "fx.experts.Grouped.shapes", ["n <= 8", "the object is a Grouped"]),
        ("python_function", "fx.experts.RoutedDense.shapes", ["n <= 8", "the object is a RoutedDense"]),
        ("python_function", "fx.experts.WithFallback.shapes", ["n <= 8", "the object is a WithFallback"]),
    ]
    plan = _trace(ws, "plan", "e.shapes")
    assert [(lf.final.kind, lf.final.symbol, lf.conditions) for lf in plan.leaves()] == [
        ("python_function", "fx.experts.Dense.shapes", ["the object is a Dense"]),
        ("python_function", "fx.experts.Grouped.shapes", ["the object is a Grouped"]),
        ("python_function", "fx.experts.RoutedDense.shapes", ["the object is a RoutedDense"]),
        ("python_function", "fx.experts.WithFallback.shapes", ["the object is a WithFallback"]),
    ]
    assert "recursed without end" not in repr(chain.to_json()) + repr(plan.to_json())


def test_the_cycle_through_returns_is_cut_where_it_closes(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    r = ws.resolver
    mod = ws.index.module("fx.experts")
    f = mod.summary.functions["WithFallback.shapes"]
    from attnlens.walk import ValKind, Walk

    target = r.resolve_dotted(mod, "", "WithFallback.shapes", Walk())
    assert target.kind == ValKind.FUNCTION and target.func is f
    v = r.result_of_call(mod, "plan", "ws", 0, "WithFallback.shapes", target, Walk(), None, ("8",))
    # the two returns give what the subclasses' `shapes` return; the wrapper's own arm is the cut
    reasons = sorted({a.val.reason or "" for arm in v.extra["alts"] for a in arm.val.extra.get("alts", [arm])
                      if a.val.kind == ValKind.UNKNOWN and "cycle" in (a.val.reason or "")})
    assert reasons == ["cycle: `self.fallback.shapes` returns the result of a call that reaches it again",
                       "cycle: `self.main.shapes` returns the result of a call that reaches it again"]


def test_an_abstract_method_called_on_self_is_what_the_subclasses_implement(tmp_path):
    """``self.shapes(4)`` in a base that leaves ``shapes`` abstract runs a subclass's ``shapes`` (vLLM-MetaX's
    ``self.get_padded_num_q_heads(...)`` in ``MacaDeepseekV4Attention.__init__`` ended in the upstream abstract
    method, a "dummy" that raises, instead of the MetaX subclass's implementation)."""
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    chain = _trace(ws, "Routed.plan", "self.shapes")
    assert [(lf.final.kind, lf.final.symbol, lf.conditions) for lf in chain.leaves()] == [
        ("python_function", "fx.experts.RoutedDense.shapes", ["the object is a RoutedDense"])]
