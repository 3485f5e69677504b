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
                if dim == 0:
                    _symm_kernel[(1,)](x)
                else:
                    _ring_kernel[(1,)](x)

            def scatter(self, x, dim=-1):
                dim = dim % 4
                if dim == 0:
                    _symm_kernel[(2,)](x)
                else:
                    _ring_kernel[(2,)](x)


        _COMM = Comm()


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
    assert got == [("_symm_kernel", False), ("_ring_kernel", True)]
    labels = [b.label for fk in ch.forks() for b in fk.branches]
    assert labels == ["line 22: _symm_kernel[(1,)](...) (decided by the call into all_gather: dim=1)",
                      "line 24: _ring_kernel[(1,)](...) (decided by the call into all_gather: dim=1)"]
    got, _ch = _leaves(ws, "g.all_gather", 1)  # dim=0
    assert got == [("_symm_kernel", True), ("_ring_kernel", False)]


def test_a_reassignment_the_value_may_take_keeps_the_parameter_open(tmp_path):
    ws = fixture_ws(tmp_path, PLUG, SITE)
    # the default -1: `if dim < 0: dim += x.dim()` runs, what `dim` is after it is not known
    got, _ch = _leaves(ws, "g.all_gather", 2)
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]
    # a value not known where the call is
    got, _ch = _leaves(ws, "g.all_gather", 3)
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]
    # assigned again under no guard: never bound
    got, _ch = _leaves(ws, "g.scatter")
    assert got == [("_symm_kernel", None), ("_ring_kernel", None)]


def test_a_guarded_reassignment_ruled_out_without_an_op(tmp_path):
    ws = fixture_ws(tmp_path, PLUG, SITE)
    got, _ch = _leaves(ws, "_COMM.all_gather")
    assert got == [("_symm_kernel", False), ("_ring_kernel", True)]


def test_which_parameters_a_call_may_bind(tmp_path):
    """A parameter assigned again only under an `if` may be bound (the value then decides whether the assignment
    runs); one assigned again under no guard never is."""
    ws = fixture_ws(tmp_path, PLUG, SITE)
    mod = ws.index.module("fx.coll")
    fs = mod.summary.functions
    assert ws.resolver._tested_params(mod, fs["Comm.all_gather"]) == {"x", "dim"}
    assert ws.resolver._tested_params(mod, fs["Comm.scatter"]) == {"x"}
    assert ws.resolver._tested_params(mod, fs["all_gather"]) == {"x", "dim"}
