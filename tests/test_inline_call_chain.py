"""A method called on the result of a call written inline: ``get_dcp_group().all_gather(x)``.

vLLM reaches its collectives through ``get_tp_group().all_reduce(...)``, ``get_dcp_group().all_gather(...)``: the
callee is the method of what the call returns. Before, such a call ended in "dynamic call: the callee is not a plain
name or attribute chain" (vLLM-MetaX's ``flash_attn.py:1498``). The summary writes the callee with the arguments
elided (``get_dcp_group().all_gather``); the resolver reads each ``()`` as the call's result (what a binding of the
call gives)."""

from __future__ import annotations

import ast

from attnlens.pyindex import _chain_text
from tests.helpers import fixture_ws
from tests.test_resolver_hops import PLUGIN, UPSTREAM

SITE = dict(UPSTREAM)
SITE.update({
    "triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n",
    "up/groups.py": """
        from typing import Callable

        import triton

        from up import codec

        from up.platforms import current_platform


        @triton.jit
        def _gather_kernel(x):
            pass


        @triton.jit
        def _fallback_kernel(x):
            pass


        class Group:
            def all_gather(self, x):
                if current_platform.is_cuda():
                    _gather_kernel[(1,)](x)
                else:
                    _fallback_kernel[(1,)](x)

            def sub(self):
                return Sub()


        class Sub:
            def send(self, x):
                _gather_kernel[(2,)](x)


        _GROUP = Group()
        _groups: dict[str, Callable[[], "Group | None"]] = {}
        _plain = {}


        def gather(x, name):
            group = _groups[name]()
            if group is None:
                raise ValueError(name)
            return group.all_gather(x)


        def get_group() -> Group:
            return _GROUP


        def rotate(x):
            _fallback_kernel[(3,)](x)
            return x


        def _launch(kernel, *, x, n):
            kernel[(n,)](x)


        def _gemm_cuda(x):
            _gather_kernel[(5,)](x)


        def _gemm_default(x):
            _fallback_kernel[(5,)](x)


        def dispatch_gemm():
            if current_platform.is_cuda():
                return _gemm_cuda
            return _gemm_default


        class Comm:
            def __init__(self, use_quick):
                self.quick = None
                if use_quick and current_platform.is_cuda():
                    self.quick = Sub()

            def reduce(self, x):
                quick = self.quick
                if quick is not None:
                    quick.send(x)


        def quantize(x):
            _launch(_gather_kernel, x=x, n=4)


        def pack(x):
            y = rotate(x.float()).to(x.dtype)
            return y


        class Layer:
            def helper(self):
                return Group()

            def forward(self, x):
                get_group().all_gather(x)
                self.helper().all_gather(x)
                get_group().sub().send(x)
                len(x).bit_length()
                pack(x)
                gather(x, "tp")
                _groups[x]().sub().send(x)
                _plain[x]().send(x)
                codec.encode(x).decode()
                quantize(x)
                dispatch_gemm()(x)
                Comm(True).reduce(x)
    """,
    "up/codec.py": """
        def encode(b):
            return bytes(b)
    """,
})


def _leaves(ws, func):
    mod = ws.index.module("up.groups")
    cs = next(c for c in mod.summary.calls if c.scope == "Layer.forward" and c.func == func)
    ch = ws.resolver.trace_call(mod, cs)
    return [(str(lf.final.kind), lf.final.symbol, lf.reachable) for lf in ch.leaves()], ch


def test_the_summary_writes_a_call_in_a_chain_with_its_arguments_elided():
    def text(src):
        return _chain_text(ast.parse(src, mode="eval").body.func)

    assert text("get_group(a, b=1).all_gather(x)") == "get_group().all_gather"
    assert text("self.helper(y).run(x)") == "self.helper().run"
    assert text("a.b(1).c(2).d(x)") == "a.b().c().d"
    assert text("tables[k].get(1).run(x)") == "tables[].get().run"
    assert text("super().forward.inner(x)") == ""  # (super() is the summary's own form, `super().f` alone)
    assert text("f()().g(x)") == ""  # (a call of a call's result: not written)
    assert text("a.b.c(x)") == ""  # (a plain dotted callee is `dotted`'s)
    assert text("torch.ops.oink.rmsnorm(x, w).view_as(x)") == ""  # (a tensor's method)
    assert text("dispatch_gemm()(layer, x)") == "dispatch_gemm()"  # (what a call returns, called)
    assert text("torch.compile(fn)(x)") == ""


def test_a_method_of_a_call_result_is_what_runs(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, ch = _leaves(ws, "get_group().all_gather")
    # the plugin's platform is out of tree: `is_cuda()` is false, the fallback kernel runs
    assert got == [("triton_kernel", "up.groups._gather_kernel", False),
                   ("triton_kernel", "up.groups._fallback_kernel", True)]
    assert [h.detail for h in ch.hops if h.kind == "alias"] == ["get_group() = get_group(...) returns _GROUP"]
    got, _ch = _leaves(ws, "self.helper().all_gather")
    assert got == [("triton_kernel", "up.groups._gather_kernel", False),
                   ("triton_kernel", "up.groups._fallback_kernel", True)]
    got, _ch = _leaves(ws, "get_group().sub().send")
    assert got == [("triton_kernel", "up.groups._gather_kernel", True)]


def test_a_method_of_a_builtin_call_result_says_so(tmp_path):
    from attnlens.registry import is_kernel_chain

    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, ch = _leaves(ws, "len().bit_length")
    assert [k for k, _s, _r in got] == ["unresolved"]
    assert not is_kernel_chain(ch)  # (no kernel site)
    line = next(c.line for c in ws.index.module("up.groups").summary.calls if c.func == "len().bit_length")
    assert ch.final.reason == f"`len()` is the result of calling `len` at groups.py:{line}"


def test_a_call_and_the_call_its_callee_holds_are_two_sites(tmp_path):
    """`rotate(x.float()).to(x.dtype)` and `rotate(x.float())` start at the same column: the memos of a body's calls
    (hopeless, kernel argument) keep them apart (`pyindex.call_id`). Before, the first answer stood for both and
    `pack` lost its kernel (vLLM's INT4 `reshape_and_cache_int4` lost its Hadamard kernels)."""
    from attnlens.pyindex import call_id

    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    mod = ws.index.module("up.groups")
    outer, inner = (next(c for c in mod.summary.calls if c.scope == "pack" and c.func == f) for f in ("rotate().to", "rotate"))
    assert (outer.line, outer.col) == (inner.line, inner.col) and call_id(outer) != call_id(inner)
    got, _ch = _leaves(ws, "pack")
    assert got == [("triton_kernel", "up.groups._fallback_kernel", True)]


def test_an_item_of_a_global_known_by_its_declared_type(tmp_path):
    """vLLM's Python-bodied collectives (`torch.ops.vllm.all_gather`) look their group up in `_groups: dict[str,
    Callable[[], "GroupCoordinator | None"]] = {}` and call it: the item is a callable, calling it gives a
    GroupCoordinator, whose method is what runs (before: "`_groups` is bound to a computed value"; vLLM-MetaX's
    all-gather went on to MCCL through there, and the answer listed MCCL as not taken)."""
    from attnlens import render

    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    mod = ws.index.module("up.groups")
    assert mod.summary.global_ann["_groups"] == 'dict[str, Callable[[], "Group | None"]]'
    got, ch = _leaves(ws, "gather")
    # (run time: `if group is None: raise` before the call)
    assert got == [("triton_kernel", "up.groups._gather_kernel", False),
                   ("triton_kernel", "up.groups._fallback_kernel", None)]
    assert 'group = _groups[...](...): a up.groups.Group by the type of _groups[...] (Callable[[], "Group | None"])' in \
        [h.detail for lp in render.leaf_paths(ch) for h in lp.hops]
    got, _ch = _leaves(ws, "_groups[]().sub().send")
    assert got == [("triton_kernel", "up.groups._gather_kernel", True)]
    # a global with no declared type: its items are not known
    got, ch = _leaves(ws, "_plain[]().send")
    line = next(b.line for b in mod.summary.bindings["_plain"])
    assert [k for k, _s, _r in got] == ["unresolved"] and ch.final.reason == f"`_plain` is bound to a computed value at groups.py:{line}"


def test_the_unknown_result_of_an_imported_function_is_no_kernel_site(tmp_path):
    """`codec.encode(b).decode()` comes through an import, of a function whose result is not known (vLLM's
    `base64.b64encode(...).decode("utf-8")`): no kernel call site (an unresolved call through an import of a
    missing kernel package still is)."""
    from attnlens.registry import Registry

    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    mod = ws.index.module("up.groups")
    reg = Registry(ws.resolver)
    sites = {r.call for c in mod.summary.calls if (r := reg.kernel_call(mod, c)) is not None}
    cs = next(c for c in mod.summary.calls if c.func == "codec.encode().decode")
    ch = ws.resolver.trace_call(mod, cs)
    assert (ch.final.kind, ch.final.symbol) == ("unresolved", "codec.encode()") and "import" in [h.kind for h in ch.hops]
    assert "codec.encode().decode" not in sites
    assert {"get_group().all_gather", "gather", "pack"} <= sites


def test_a_kernel_passed_to_a_function_that_only_launches_its_parameter(tmp_path):
    """`_run_reshape_kernel(_reshape_cache_int4_kernel, key=..., ...)` whose body is `kernel[grid](...)`: the kernel
    passed is what runs (before: the callee's tree ended at its parameter `kernel`, and vLLM's INT4 cache write lost
    its kernel)."""
    from attnlens import render

    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, ch = _leaves(ws, "quantize")
    assert got == [("triton_kernel", "up.groups._gather_kernel", True)]
    assert "_gather_kernel is passed to up.groups._launch, which launches it" in \
        [h.detail for lp in render.leaf_paths(ch) for h in lp.hops]


def test_the_function_a_call_returns_called_at_once(tmp_path):
    """`dispatch_unquantized_gemm()(layer, x, weight, bias)` (vLLM's default GEMM in `UnquantizedLinearMethod.apply`):
    the functions the dispatcher returns are the branches, each under its return's condition (before: no callee
    text, the call was not followed)."""
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, ch = _leaves(ws, "dispatch_gemm()")
    # the plugin's platform is out of tree: `is_cuda()` is false
    assert got == [("triton_kernel", "up.groups._gather_kernel", False),
                   ("triton_kernel", "up.groups._fallback_kernel", True)]
    assert ch.final.fork is not None and str(ch.final.fork.kind) == "factory_return"


def test_an_attribute_set_only_under_a_guard_false_here_is_dead(tmp_path):
    """`self.qr_comm = QuickAllReduce(...)` only `if use_custom_allreduce and ... and current_platform.is_rocm()` (vLLM's
    `CudaCommunicator`), else None: on vLLM-MetaX a call through it is not taken. Before, the one assignment was
    followed as if it could run ("decided at run time", and `qr_all_reduce` was listed as running)."""
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, _ch = _leaves(ws, "Comm().reduce")
    assert got == [("triton_kernel", "up.groups._gather_kernel", False)]


def test_a_python_registration_says_the_platform_dispatch_key(tmp_path):
    """`direct_register_custom_op(...)` without `dispatch_key=` registers for `current_platform.dispatch_key`: the
    registration says the platform's key where its class sets one (before: "CUDA" whatever the platform; vLLM's CPU
    platform registers for "CPU")."""
    from tests.test_resolver_hops import trace

    plugin = dict(PLUGIN)
    plugin["fx/platform.py"] = PLUGIN["fx/platform.py"].replace(
        "            _enum = PlatformEnum.OOT\n", "            _enum = PlatformEnum.OOT\n            dispatch_key = \"PrivateUse1\"\n")
    for plug, key in ((PLUGIN, "current_platform.dispatch_key"), (plugin, "PrivateUse1 (current_platform.dispatch_key)")):
        ws = fixture_ws(tmp_path / key.split()[0], plug, UPSTREAM)
        c = trace(ws, "torch.ops.vllm.fx_attention(", offset=len("torch.ops.vllm."))
        reg = next(h for h in c.hops if h.kind == "op_registration")
        assert reg.detail.endswith(f"(dispatch key {key})"), reg.detail
