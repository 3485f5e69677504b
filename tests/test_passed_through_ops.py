"""What a call passes reaches the code it decides, through a torch op's Python body and past a guarded reassignment.

vLLM-MetaX's `get_dcp_group().all_gather(query, dim=1)` runs `torch.ops.vllm.all_gather(input_, dim, ...)`, whose
registered Python body hands `dim` on to the communicator's `all_gather(input_, dim)`, which starts with
`if dim < 0: dim += input_.dim()` and then picks the symmetric-memory path `if dim == 0 and ...`. Before, `dim=1`
stopped at the op (its arguments were not the body's parameters) and at the reassignment (a parameter assigned again
was never bound), so the symmetric-memory path was "decided at run time"; it is not taken at a `dim=1` call."""

from __future__ import annotations

from tests.helpers import fixture_ws
from tests.test_resolver_hops import PLUGIN, UPSTREAM

SITE = dict(UPSTREAM)
SITE["triton/__init__.py"] = "def jit(fn=None, **kw):\n    return fn\n"
PLUG = dict(PLUGIN)
PLUG.update({
    "fx/coll.py": """
        import torch
        import triton

        from up.platforms import current_platform
        from up.utils import direct_register_custom_op


        @triton.jit
        def _symm_kernel(x):
            pass


        @triton.jit
        def _ring_kernel(x):
            pass


        class Comm:
            def all_gather(self, x, dim=-1):
                if dim < 0:
                    dim += x.dim()
                if dim == 0 and x.is_cuda:
                    _symm_kernel[(1,)](x)
                elif x.is_contiguous():
                    _ring_kernel[(1,)](x)

            def scatter(self, x, dim=-1):
                dim = dim % 4
                if dim == 0:
                    _symm_kernel[(2,)](x)
                else:
                    _ring_kernel[(2,)](x)


        class Ring:
            def run(self, x):
                _ring_kernel[(3,)](x)


        class Early:
            def __init__(self):
                self.ring = Ring()

            def gather(self, x, dim=-1):
                if dim == 0 and x.is_cuda:
                    return _symm_kernel[(3,)](x)
                ring = self.ring
                if x.is_contiguous():
                    ring.run(x)


        _COMM = Comm()
        _EARLY = Early()


        def all_gather(x, dim, group_name):
            return _COMM.all_gather(x, dim)


        def scatter(x, dim, group_name):
            return _COMM.scatter(x, dim)


        direct_register_custom_op(op_name="all_gather", op_func=all_gather)
        direct_register_custom_op(op_name="scatter", op_func=scatter)


        class Group:
            def all_gather(self, x, dim=-1):
                return torch.ops.vllm.all_gather(x, dim, group_name="tp")

            def scatter(self, x, dim=-1):
                return torch.ops.vllm.scatter(x, dim, group_name="tp")


        def run(x, d):
            g = Group()
            g.all_gather(x, dim=1)
            g.all_gather(x, dim=0)
            g.all_gather(x)
            g.all_gather(x, d)
            g.scatter(x, dim=1)
            _COMM.all_gather(x, 2)
            _EARLY.gather(x, dim=1)
            if current_platform.is_cuda():
                g.all_gather(x, dim=1)
    """,
})


def _leaves(ws, func, nth=0):
    mod = ws.index.module("fx.coll")
    cs = [c for c in mod.summary.calls if c.scope == "run" and c.func == func][nth]
    ch = ws.resolver.trace_call(mod, cs)
    return [(lf.final.symbol.rpartition(".")[2], lf.reachable) for lf in ch.leaves()], ch


def test_an_argument_reaches_the_python_body_of_a_torch_op(tmp_path):
    ws = fixture_ws(tmp_path, PLUG, SITE)
    got, ch = _leaves(ws, "g.all_gather", 0)  # dim=1
    assert got == [("_symm_kernel", False), ("_ring_kernel", None)]
    symm, ring = (b for fk in ch.forks() for b in fk.branches)
    assert symm.label == "line 23: _symm_kernel[(1,)](...) (decided by the call into all_gather: dim=1)"
    # the ring path's run-time condition: what of it the call leaves open
    assert (ring.condition, ring.reachable, ring.held) == (
        "not (dim == 0 and x.is_cuda) and x.is_contiguous()", None, ("not (dim == 0 and x.is_cuda)",))
    got, ch = _leaves(ws, "g.all_gather", 1)  # dim=0
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]
    symm, ring = (b for fk in ch.forks() for b in fk.branches)
    assert (symm.held, ring.held) == (("dim == 0",), ())


def test_a_reassignment_the_value_may_take_keeps_the_parameter_open(tmp_path):
    ws = fixture_ws(tmp_path, PLUG, SITE)
    # the default -1: `if dim < 0: dim += x.dim()` runs, what `dim` is after it is not known
    got, ch = _leaves(ws, "g.all_gather", 2)
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]
    assert [b.held for fk in ch.forks() for b in fk.branches] == [(), ()]
    # a value not known where the call is
    got, _ch = _leaves(ws, "g.all_gather", 3)
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]
    # assigned again under no guard: never bound
    got, _ch = _leaves(ws, "g.scatter")
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]


def test_a_guarded_reassignment_ruled_out_without_an_op(tmp_path):
    ws = fixture_ws(tmp_path, PLUG, SITE)
    got, _ch = _leaves(ws, "_COMM.all_gather")
    assert got == [("_symm_kernel", False), ("_ring_kernel", None)]


def test_the_verdict_leaves_out_what_the_call_makes_true(tmp_path):
    """The ring path of a `dim=1` call runs "by x.is_contiguous()": `not (dim == 0 and x.is_cuda)` holds there, so
    neither the verdict nor the tree's "decided at run time by" names it."""
    from attnlens import render

    ws = fixture_ws(tmp_path, PLUG, SITE)
    _got, ch = _leaves(ws, "g.all_gather", 0)
    _symm, ring = (b for fk in ch.forks() for b in fk.branches)
    know_nothing = lambda text, path, line: None  # noqa: E731 (a platform that decides none of it)
    assert render.open_condition(ring.condition, ring.path, ring.line, know_nothing, ring.held) == "x.is_contiguous()"
    assert render.open_condition(ring.condition, ring.path, ring.line, know_nothing) is None  # (all of it open)
    lp = next(lp for lp in render.leaf_paths(ch) if lp.final.symbol.endswith("_ring_kernel"))
    assert [c.text for c in render._runtime_parts(lp.conds(), know_nothing)] == ["x.is_contiguous()"]
    import types

    text = render.chain_text(ch, types.SimpleNamespace(platform_fact=know_nothing, condition=lambda *a: None))
    ring_line = next(t for t in text.splitlines() if t.strip().startswith("[if not (dim == 0 and x.is_cuda)"))
    assert ring_line.strip().startswith("[if not (dim == 0 and x.is_cuda) and x.is_contiguous() -> decided at run time by "
                                        "x.is_contiguous()] line 25: _ring_kernel"), ring_line


def test_which_parameters_a_call_may_bind(tmp_path):
    """A parameter assigned again only under an `if` may be bound (the value then decides whether the assignment
    runs); one assigned again under no guard never is."""
    ws = fixture_ws(tmp_path, PLUG, SITE)
    mod = ws.index.module("fx.coll")
    fs = mod.summary.functions
    assert ws.resolver._tested_params(mod, fs["Comm.all_gather"]) == {"x", "dim"}
    assert ws.resolver._tested_params(mod, fs["Comm.scatter"]) == {"x"}
    assert ws.resolver._tested_params(mod, fs["all_gather"]) == {"x", "dim"}


def test_a_guard_after_an_early_return_is_read_with_what_the_call_passes(tmp_path):
    """`ring = self.ring` after `if dim == 0 and x.is_cuda: return ...` is bound under `not (dim == 0 and x.is_cuda)`
    (vLLM's `pynccl_comm = self.pynccl_comm` in `CudaCommunicator.all_gather`): at a `dim=1` call it holds, so the
    verdict says the ring kernel runs by `x.is_contiguous()` alone, and the binding's hop is taken at this call."""
    from attnlens import render

    ws = fixture_ws(tmp_path, PLUG, SITE)
    got, ch = _leaves(ws, "_EARLY.gather")
    assert got == [("_symm_kernel", False), ("_ring_kernel", None)]
    know_nothing = lambda text, path, line: None  # noqa: E731
    lp = next(lp for lp in render.leaf_paths(ch) if lp.final.symbol.endswith("_ring_kernel"))
    alias = next(h for h in lp.hops if h.kind == "alias" and h.symbol == "ring")
    assert (alias.condition, alias.reachable) == ("not (dim == 0 and x.is_cuda)", None)
    assert [c.text for c in render._runtime_parts(lp.conds(), know_nothing)] == ["x.is_contiguous()"]
    ring = next(b for fk in ch.forks() for b in fk.branches if b.label.startswith("line ") and "ring.run" in b.label)
    assert render._hop_reach(alias, ring) == render.TAKEN_AT_CALL
    other = next(b for fk in ch.forks() for b in fk.branches if b is not ring)
    assert render._hop_reach(alias, other) == render.RUNTIME  # (not that call's function's guard)


def test_a_dead_leaf_says_the_platform_reason_before_the_call_reason(tmp_path):
    """A leaf both the platform (`if current_platform.is_cuda():` around the call) and the call (`dim=1`) rule out is
    said to be dead by the platform: it is dead there whatever the call passes (vLLM-MetaX's `self.forward_impl` under
    `if self.use_direct_call`, false there, was said to be not taken "at this call" by a `dim=1` deep inside)."""
    from attnlens import render

    ws = fixture_ws(tmp_path, PLUG, SITE)
    got, ch = _leaves(ws, "g.all_gather", 4)
    assert got == [("_symm_kernel", False), ("_ring_kernel", False)]
    lp = next(lp for lp in render.leaf_paths(ch) if lp.final.symbol.endswith("_symm_kernel"))
    assert render._dead_reason(lp) == ("condition", "current_platform.is_cuda()", "")
