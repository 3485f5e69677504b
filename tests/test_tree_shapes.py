"""What runs is a tree: every choice point among visible alternatives becomes a fork.

Each test traces one call in ``examples/mini-metax/mini_metax/attention/ops/dispatch.py``
(the shapes of the tree issue) against the real vllm 0.26.0 and asserts the exact
leaves: kind, symbol, the conditions from the root and the reachability on the
example's platform (out of tree: ``is_cuda()`` False, ``is_out_of_tree()`` True).
"""

from __future__ import annotations

import os

import pytest

from attnlens import model as M
from tests.helpers import EXAMPLE, example_ws, find, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")

D = EXAMPLE / "mini_metax/attention/ops/dispatch.py"
P = "mini_metax.attention.ops.dispatch."
RESHAPE = (M.TORCH_OP, "_C_cache_ops::reshape_and_cache_flash")
SCALE = (M.TRITON_KERNEL, P + "_scale_kernel")
COPY = (M.TRITON_KERNEL, P + "_copy_kernel")


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return example_ws(tmp_path_factory.mktemp("tree"))


def trace(ws, text, nth=0):
    p, line, col = find(D, text, nth)
    c = ws.trace_at(p, line, col)
    assert c is not None
    return c


def leaves(c):
    return [(lf.final.kind, lf.final.symbol, lf.conditions, lf.reachable) for lf in c.leaves()]


def test_dict_of_callables_forks_on_the_key(ws):
    c = trace(ws, "_CACHE_WRITERS[kv_cache_dtype](")
    assert c.final.kind == M.FORK and c.final.fork.kind == M.ForkKind.DICT
    assert c.final.fork.decided_by == "kv_cache_dtype"
    assert leaves(c) == [
        (*RESHAPE, ['kv_cache_dtype == "auto"'], None),
        (*SCALE, ['kv_cache_dtype == "fp8"'], None),
    ]
    assert c.single_leaf() is None  # two can run: `final` in JSON stays the fork


def test_conditional_expression_of_callables(ws):
    c = trace(ws, "fn(src, dst)")
    assert c.final.fork.kind == M.ForkKind.IFEXP and c.final.fork.decided_by == "scaled"
    assert leaves(c) == [(*SCALE, ["scaled"], None), (*COPY, ["not (scaled)"], None)]


def test_conditional_constructors_on_self_called_through_module_call(ws):
    c = trace(ws, "self.cache_op(key")
    assert c.final.fork.kind == M.ForkKind.IFEXP
    assert leaves(c) == [
        (*SCALE, ['kv_cache_dtype.startswith("fp8")'], None),
        (*RESHAPE, ['not (kv_cache_dtype.startswith("fp8"))'], None),
    ]


def test_factory_singleton_forks_over_every_returned_class_with_inherited_methods(ws):
    c = trace(ws, "DeviceOps.copy_blocks(src")
    assert c.final.fork.kind == M.ForkKind.FACTORY
    got = leaves(c)
    assert [(k, s, cond, r) for k, s, cond, r in got] == [
        (M.TORCH_OP, "_C_cache_ops::copy_blocks", ["current_platform.is_cuda()"], False),
        # _OotOps inherits copy_blocks from _BaseOps: the launcher's kernel
        (*COPY, ["not (current_platform.is_cuda()) and current_platform.is_out_of_tree()"], True),
        # the fall-through return runs only when both earlier checks fail: dead out of tree
        (*COPY, ["not (current_platform.is_cuda()) and not (current_platform.is_out_of_tree())"], False),
    ]
    assert c.single_leaf() == c.leaves()[1].final


def test_several_returns_are_branches(ws):
    c = trace(ws, "writer(key")
    assert c.final.fork.kind == M.ForkKind.FACTORY
    assert leaves(c) == [
        (*RESHAPE, ['kv_cache_dtype == "auto"'], None),
        (*SCALE, ['not (kv_cache_dtype == "auto")'], None),
    ]


def test_lazily_filled_global_leads_to_the_imported_package(ws):
    c = trace(ws, "_fused_impl(*args")
    # the filling import runs under `if _fused_impl is None` in _lazy_init: part of the path
    assert leaves(c) == [(M.NOT_INSTALLED, "minivendor_ops", ["_fused_impl is None"], None)]
    dyn = [h for h in c.hops if h.kind == "dynamic_import"]
    assert dyn and dyn[0].symbol == "minivendor_ops" and "filled lazily in _lazy_init" in dyn[0].detail


def test_wrapper_of_lazy_global_follows_the_forwarded_call(ws):
    c = ws.trace_symbol(P + "fused_qk_norm")
    assert [(lf.final.kind, lf.final.symbol) for lf in c.leaves()] == [(M.NOT_INSTALLED, "minivendor_ops")]


@pytest.mark.parametrize("text, leaf", [
    ("compiled_copy(src", COPY),  # torch.compile(fn)
    ("half_scale(key", SCALE),  # functools.partial(fn)
    ("timed_write(key", RESHAPE),  # a decorator applied by call, without functools.wraps
])
def test_compiled_partial_and_decorated_callables(ws, text, leaf):
    c = trace(ws, text)
    assert leaves(c) == [(*leaf, [], True)]


def test_platform_query_helper_is_not_a_pass_through(ws):
    c = trace(ws, "_use_fnuz(0)")
    assert c.final.kind == M.PYTHON_FUNCTION and c.final.symbol == P + "_use_fnuz"
    assert not any("is_rocm" in h.symbol for h in c.hops)


def test_synchronising_helper_is_not_a_pass_through(ws):
    c = trace(ws, "swap_blocks(src")
    assert c.final.kind == M.PYTHON_FUNCTION and c.final.symbol == P + "swap_blocks"


def test_self_recursive_binding_ends_without_crash(ws):
    c = trace(ws, "collect(None")
    assert c.final.kind == M.PYTHON_FUNCTION and c.final.symbol == P + "collect"


def test_json_has_tree_leaves_and_final(ws):
    c = trace(ws, "DeviceOps.copy_blocks(src")
    d = c.to_json()
    assert [lf["reachability"] for lf in d["leaves"]] == ["dead", "live", "dead"]
    assert d["final"]["symbol"] == P + "_copy_kernel"  # exactly one live leaf
    assert d["tree"]["fork"]["kind"] == M.ForkKind.FACTORY
    assert [b["reachability"] for b in d["tree"]["branches"]] == ["dead", "live", "dead"]
    assert d["truncated"] is False


def test_constants_fold_into_branch_reachability(ws):
    c = ws.trace_symbol(P + "VersionedLauncher.launch")
    assert leaves(c) == [(*SCALE, ["self.version == 3"], False), (*COPY, ["not (self.version == 3)"], True)]


def test_upstream_platform_query_helper_is_its_own_node(ws):
    # vllm 0.26.0: `_use_fp8_e4b15` asks `current_platform.is_cuda_alike()` inside an `if` and returns its
    # own table entry; it used to be traced as "delegates to current_platform.is_cuda_alike"
    sym = "vllm.v1.attention.ops.triton_turboquant_decode._use_fp8_e4b15"
    c = ws.trace_symbol(sym)
    assert (c.final.kind, c.final.symbol) == (M.PYTHON_FUNCTION, sym)
    assert not any(h.kind == "platform" or "is_cuda_alike" in h.symbol for h in c.hops)


def test_flag_expression_in_init_and_gating_decorator_fold(ws):
    c = ws.trace_symbol(P + "FlaggedLauncher.launch")
    assert leaves(c) == [
        (*SCALE, ["self.use_scaled"], False),  # `n == 128 and not is_out_of_tree()` is False out of tree
        (*SCALE, ["not (self.use_scaled) and fast_path_enabled()"], False),  # @only_on_cuda returns None here
        (*COPY, ["not (self.use_scaled) and not (fast_path_enabled())"], True),
    ]


def test_a_platform_answer_cached_in_a_global_or_returned_by_a_helper_folds(ws):
    """`_fast_scale_available()` fills a module global once with `is_cuda() and ...` and returns it (upstream
    vLLM's `_hadacore_available`); `_scale_supported()` returns `is_rocm()`: both False out of tree."""
    c = ws.trace_symbol(P + "gated_launch")
    assert leaves(c) == [
        (*SCALE, ["_fast_scale_available() and n > 0"], False),
        (*SCALE, ["not (_fast_scale_available() and n > 0) and _scale_supported()"], False),
        (*COPY, ["not (_fast_scale_available() and n > 0) and not (_scale_supported())"], True),
    ]


def test_what_a_call_passes_or_leaves_to_the_default_decides_the_callees_guards(ws):
    """`_launch_by_mode(src, dst, mode="scale", exact=False)` forks on `mode == "scale" and not exact`: a call
    that leaves both to their defaults takes the scale kernel, `exact=True` the copy kernel, a caller's own
    parameter passed on is what the caller's call fixed (its default `exact=True`), and an argument the resolver
    cannot fold leaves the guard to run time."""
    cond = 'mode == "scale" and not exact'
    got = {}
    for fn in ("launch_defaults", "launch_exact", "launch_passing_on_caller", "launch_passing_on", "launch_unknown"):
        got[fn] = leaves(ws.trace_symbol(P + fn))
    assert got["launch_defaults"] == [(*SCALE, [cond], True), (*COPY, [f"not ({cond})"], False)]
    assert got["launch_exact"] == [(*SCALE, [cond], False), (*COPY, [f"not ({cond})"], True)]
    assert got["launch_passing_on_caller"] == [(*SCALE, [cond], False), (*COPY, [f"not ({cond})"], True)]
    # (traced from its definition, `launch_passing_on`'s own `exact` is unknown: so is the guard)
    assert got["launch_passing_on"] == [(*SCALE, [cond], None), (*COPY, [f"not ({cond})"], None)]
    assert got["launch_unknown"] == [(*SCALE, [cond], None), (*COPY, [f"not ({cond})"], None)]
    # each branch the call decided says what decided it
    c = ws.trace_symbol(P + "launch_exact")
    assert [b.label.split(": ", 1)[1] for b in c.final.fork.branches] == [
        "_scaled_launch(...) (decided by the call into _launch_by_mode: mode='scale', exact=True)",
        "_copy_launch(...) (decided by the call into _launch_by_mode: mode='scale', exact=True)"]
    assert [b.decided for b in c.final.fork.branches] == ["the call into _launch_by_mode: mode='scale', exact=True"] * 2
    assert [lf.dead_at_call for lf in c.leaves()] == [True, False]
    assert [b.label.split(": ", 1)[1] for b in ws.trace_symbol(P + "launch_unknown").final.fork.branches] == [
        "_scaled_launch(...)", "_copy_launch(...)"]
    # a `None` the call passes or leaves decides `is None` / `is not None` (any other constant the other way)
    sc = "scale is not None"
    assert leaves(ws.trace_symbol(P + "launch_no_scale")) == [(*SCALE, [sc], False), (*COPY, [f"not ({sc})"], True)]
    assert leaves(ws.trace_symbol(P + "launch_with_scale")) == [(*SCALE, [sc], True), (*COPY, [f"not ({sc})"], False)]
    # traced from its definition (no call), the guard is decided at run time
    assert leaves(ws.trace_symbol(P + "_launch_by_mode")) == [(*SCALE, [cond], None), (*COPY, [f"not ({cond})"], None)]


def test_constructor_argument_flows_into_the_base_class_attribute(ws):
    mod = ws.index.module("mini_metax.attention.ops.dispatch")
    cs = next(c for c in mod.summary.calls if c.scope == "_WriterBase.write" and c.func == "writer")
    sub = ws.resolver.trace_call(mod, cs, receiver=(mod, "Fp8Writer"))  # self is a Fp8Writer
    assert leaves(sub) == [(*SCALE, ["writer_cls is not None"], None), (*RESHAPE, ["not (writer_cls is not None)"], None)]
    base = ws.resolver.trace_call(mod, cs)  # self is the base class: the argument is unknown
    got = base.leaves()
    assert [(lf.final.kind, lf.final.symbol) for lf in got][1:] == [RESHAPE]
    assert got[0].final.kind == M.UNRESOLVED and "writer_cls" in got[0].final.reason


def test_one_name_returned_twice_forks_per_return_and_a_failing_try_import_is_not_taken(ws):
    """`module = import_module("minivendor_ops")` / `return module` in a `try`, then `module = import_module(
    "...vendored_block_ops")` / `return module`: each return is resolved with the binding that reaches it; the
    `try` arm returns a package this environment lacks, so its import raises and the vendored copy runs."""
    c = trace(ws, "block_ops.copy_blocks(src")
    assert c.final.kind == M.FORK and c.final.fork.kind == M.ForkKind.FACTORY
    assert leaves(c) == [
        (M.NOT_INSTALLED, "minivendor_ops", ["`minivendor_ops` imports (it is not installed here)"], False),
        (*COPY, [], True),
    ]


def test_when_every_try_import_is_missing_the_call_names_the_first_package(tmp_path):
    """Every return of the importer is a `try` import of a package this environment lacks: no arm can run, the call
    fails here, and it resolves to the first package (not installed), so AL107 still reports it."""
    from tests.helpers import fixture_ws

    ws = fixture_ws(tmp_path, {
        "plug/__init__.py": "",
        "plug/ops.py": (
            "import importlib\n\n\n"
            "def _import_ops():\n"
            "    try:\n"
            "        module = importlib.import_module(\"vendor_fast_ops\")\n"
            "        return module\n"
            "    except ImportError:\n"
            "        pass\n"
            "    try:\n"
            "        module = importlib.import_module(\"vendor_slow_ops\")\n"
            "        return module\n"
            "    except ImportError:\n"
            "        return None\n\n\n"
            "def run(x):\n"
            "    ops = _import_ops()\n"
            "    ops.fused_decode(x)\n"),
    })
    c = ws.trace_at(*find(ws.root / "plug/ops.py", "ops.fused_decode(", 0, len("ops.")))
    assert [(lf.final.kind, lf.final.symbol) for lf in c.leaves()] == [(M.NOT_INSTALLED, "vendor_fast_ops")]


def test_an_attribute_assigned_on_both_sides_of_an_if_forks_and_a_stored_flag_decides_the_class(ws):
    """`if exact: self.tail = _ExactStep() else: self.tail = _CopyStep()`: both assignments are branches (the
    first one alone took every leaf under `exact` before), and since both classes run `_CopyStep.__call__`, the
    verdict names the copy kernel once, under neither condition. `self.use_scaled = use_scaled` stores the local
    that chose `step_cls`: a call under `if self.use_scaled:` takes only `_ScaledStep`, its `else` only `_CopyStep`."""
    from attnlens import render

    tail = trace(ws, "self.tail(src")
    assert leaves(tail) == [(*COPY, ["exact"], None), (*COPY, ["not (exact)"], None)]
    live, dead = render.verdicts(tail)
    assert [(v.final.symbol, [c.text for c in v.own], v.paths) for v in live] == [(COPY[1], [], 2)]
    assert render.shared_conditions(live) == [] and dead == []
    on = trace(ws, "self.step(src", 0)
    assert leaves(on) == [(*SCALE, ["self.use_scaled", "use_scaled"], None),
                          (*COPY, ["self.use_scaled", "not (use_scaled)"], False)]
    assert [b.label.rsplit(" (", 1)[1] for b in on.final.fork.branches] == [
        "decided by the call's guards: use_scaled=True)"] * 2
    # what the call decided is said as such, not as a fact of the platform (the class runs elsewhere)
    assert [b.decided for b in on.final.fork.branches] == ["the call's guards: use_scaled=True"] * 2
    assert [lf.dead_at_call for lf in on.leaves()] == [False, True]
    assert render.verdict_text(on)[1:] == [
        "Not taken at this call: _copy_kernel (Triton, if not (use_scaled); decided by the call's guards: use_scaled=True)"]
    assert [b["decided"] for b in on.to_json()["tree"]["branches"]] == ["the call's guards: use_scaled=True"] * 2
    off = trace(ws, "self.step(src", 1)
    assert leaves(off) == [(*SCALE, ["not (self.use_scaled)", "use_scaled"], False),
                           (*COPY, ["not (self.use_scaled)", "not (use_scaled)"], None)]


def test_an_attribute_reassigned_from_itself_keeps_the_object_it_held(tmp_path):
    """`self.enc = Enc()` then `self.enc = self.enc.to(dtype)` (nn.Module.to returns the module): the second
    assignment is no value of its own, so the call runs `Enc.__call__`; `self.x = None` first and a class on each
    side of an `if` later is a fork over the two classes."""
    from tests.helpers import fixture_ws

    ws = fixture_ws(tmp_path, {
        "plug/__init__.py": "",
        "plug/k.py": (
            "import triton\n\n\n@triton.jit\ndef kern_a(x):\n    pass\n\n\n@triton.jit\ndef kern_b(x):\n    pass\n\n\n"
            "class Enc:\n    def __call__(self, x):\n        kern_a[(1,)](x)\n\n    def to(self, d):\n        return self\n\n\n"
            "class Other:\n    def __call__(self, x):\n        kern_b[(1,)](x)\n\n\n"
            "class Model:\n    def __init__(self, d, fast):\n        self.enc = Enc()\n        self.enc = self.enc.to(d)\n"
            "        self.alt = None\n        if fast:\n            self.alt = Enc()\n        else:\n            self.alt = Other()\n\n"
            "    def forward(self, x):\n        self.enc(x)\n        self.alt(x)\n\n\n"
            "class Lazy:\n    def __init__(self):\n        self.mgr: Enc\n\n    def setup(self, make):\n        if make is None:\n            raise ValueError(make)\n        self.mgr = make()\n\n"
            "    def forward(self, x):\n        self.mgr(x)\n\n\n"
            "class Base:\n    def __init__(self):\n        self.extra: Enc | None = None\n\n\n"
            "class Sub(Base):\n    def __init__(self, fast):\n        super().__init__()\n        if fast:\n            self.extra = Other()\n\n"
            "    def forward(self, x):\n        self.extra(x)\n"),
    })
    mod = ws.index.module("plug.k")
    got = {}
    for cs in mod.summary.calls:
        if cs.func in ("self.enc", "self.alt", "self.mgr", "self.extra"):
            got[cs.func] = [(lf.final.kind, lf.final.symbol, lf.conditions, lf.reachable) for lf in ws.resolver.trace_call(mod, cs).leaves()]
    # (`self.mgr: Enc` declared, then set past a guard to a value the analysis cannot name: the declared type says
    # what it is)
    assert got.pop("self.mgr") == [(M.TRITON_KERNEL, "plug.k.kern_a", [], True)]
    # (a subclass sets `self.extra` only `if fast:` over its base's `None`: no branch for the base's annotation)
    assert got.pop("self.extra") == [(M.TRITON_KERNEL, "plug.k.kern_b", ["fast"], None)]
    assert got == {"self.enc": [(M.TRITON_KERNEL, "plug.k.kern_a", [], True)],
                   "self.alt": [(M.TRITON_KERNEL, "plug.k.kern_a", ["fast"], None),
                                (M.TRITON_KERNEL, "plug.k.kern_b", ["not (fast)"], None)]}


def test_what_a_call_rules_out_itself_its_guards_its_arguments_and_a_base_class_value(ws):
    """`StagedRunner.run` calls `self.head(...)` under the same module-level condition that chose `self.head`'s
    class in `__init__`: only `_ScaledStep` runs there. `self.body(src, dst, wide=True)`: `_CopyStep.__call__` takes
    no `wide`, so that object would raise TypeError: only `_WideStep` runs. `_FastOp` replaces the `self.impl` its
    base sets only `if fast:`: the base's `_CopyStep` is the other branch (it was dropped)."""
    stage = 'os.environ.get("MINI_STAGE") == "first"'
    head = trace(ws, "self.head(src")
    assert leaves(head) == [(*SCALE, [stage], None), (*COPY, [stage, f"not ({stage})"], False)]
    assert [b.decided for b in head.final.fork.branches] == [f"the call's guards: {stage} is True"] * 2
    body = trace(ws, "self.body(src")
    assert leaves(body) == [(*SCALE, ["exact"], None), (*COPY, ["not (exact)"], False)]
    assert [b.decided for b in body.final.fork.branches] == [
        None, "the call's arguments: it passes `wide=`, which _CopyStep.__call__ does not take (TypeError)"]
    impl = trace(ws, "self.impl(src")
    assert leaves(impl) == [(*SCALE, ["fast"], None), (*COPY, ["not (fast)"], None)]
    assert [b.label for b in impl.final.fork.branches] == ["self.impl = _ScaledStep (dispatch.py:422)",
                                                           "self.impl as _BaseOp sets it"]


def test_a_flag_set_again_only_under_a_guard_the_platform_decides_false_stays_false(ws):
    """`self.allow_scaled = False`, then `if can_use_cuda: self.allow_scaled = ...` in `__init__` and `if
    self.allow_specialized:` (which copies `can_use_cuda`) in another method: `can_use_cuda` needs `is_cuda()`,
    False out of tree, so neither later assignment runs and the scaled branch is dead."""
    assert leaves(ws.trace_symbol(P + "GatedRouter.route")) == [(*SCALE, ["self.allow_scaled"], False),
                                                                 (*COPY, ["not (self.allow_scaled)"], True)]


def test_an_assert_isinstance_on_an_attribute_keeps_only_its_alternatives_of_that_class(ws):
    """`assert isinstance(self.impl, _FastImpl)` then `self.impl.run(...)`: the `_SlowImpl` alternative would have
    failed the assert, so at that call only `_FastImpl.run` runs; without the assert both can."""
    c = trace(ws, "self.impl.run(src", 0)
    assert leaves(c) == [(*SCALE, ["fast"], None), (*COPY, ["not (fast)"], False)]
    assert [b.decided for b in c.final.fork.branches] == [None, "the call's guards: isinstance(self.impl, _FastImpl) is True"]
    assert leaves(trace(ws, "self.impl.run(src", 1)) == [(*SCALE, ["fast"], None), (*COPY, ["not (fast)"], None)]


def test_an_object_called_binds_its_forwards_parameters_also_behind_a_forward_that_hands_them_on(ws):
    """`self.norm(x)` runs `_AddNorm.forward(x, residual=None)`: the default decides `if residual is None:` (the
    scale kernel is not taken at this call); `self.norm(x, r)` leaves it to run time. `_PickedNorm.forward(self,
    *args, **kwargs)` hands the arguments to whichever method `__init__` picked: each method's guards on
    `residual` are decided by what the call passed, through the hand-on (`residual=r`: run time)."""
    assert leaves(trace(ws, "self.norm(x)")) == [(*COPY, ["residual is None"], True), (*SCALE, ["not (residual is None)"], False)]
    c = trace(ws, "self.norm(x)")
    assert [lf.dead_at_call for lf in c.leaves()] == [False, True]
    assert c.final.fork.branches[0].decided == "the call into forward: residual=None"
    assert leaves(trace(ws, "self.norm(x, r)")) == [(*COPY, ["residual is None"], None),
                                                   (*SCALE, ["not (residual is None)"], None)]
    fast, plain = "current_platform.is_cuda()", "not (current_platform.is_cuda())"
    assert leaves(trace(ws, "self.picked(x)")) == [
        (*SCALE, [fast, "residual is not None"], False),
        (*SCALE, [plain, "residual is not None"], False),
        (*COPY, [plain, "not (residual is not None)"], True)]
    assert [lf.dead_at_call for lf in trace(ws, "self.picked(x)").leaves()] == [False, True, False]
    assert leaves(trace(ws, "self.picked(x, residual=r)")) == [
        (*SCALE, [fast, "residual is not None"], False),
        (*SCALE, [plain, "residual is not None"], None),
        (*COPY, [plain, "not (residual is not None)"], None)]


def test_a_callers_guard_on_a_name_it_passes_binds_the_callees_parameter(ws):
    """`if r is None: ... else: self.norm(x, r)`: the caller's guard says `r` is not None where it passes it, so
    `_AddNorm.forward`'s `if residual is None:` is not taken at this call ("residual is not None"); where the
    caller binds `r` again under the guard (`r = x`) nothing is known of it."""
    c = trace(ws, "self.norm(x, r)", nth=1)
    assert leaves(c) == [(*COPY, ["not (r is None)", "residual is None"], False),
                         (*SCALE, ["not (r is None)", "not (residual is None)"], None)]
    assert c.final.fork.branches[0].decided == "the call into forward: residual is not None"
    assert leaves(trace(ws, "self.norm(x, r)", nth=2)) == [(*COPY, ["r is None", "residual is None"], None),
                                                          (*SCALE, ["r is None", "not (residual is None)"], None)]
    # a loop under the guard that binds `r` again passes another value on its next turn; a comprehension's own `r`
    # is not the one tested: nothing is bound
    assert leaves(trace(ws, "self.norm(x, r)", nth=3)) == [(*COPY, ["r is not None", "residual is None"], None),
                                                          (*SCALE, ["r is not None", "not (residual is None)"], None)]
    assert leaves(trace(ws, "self.norm(x, r)", nth=4)) == [(*COPY, ["r is None", "residual is None"], None),
                                                          (*SCALE, ["r is None", "not (residual is None)"], None)]


def test_what_the_call_decided_is_said_as_the_calls_in_the_verdict_the_tree_and_the_leaves(ws):
    """A leaf that one path does not take on this platform and another only at this call gets a verdict line each;
    the hops under a branch the call decided, and the leaf lines, say "at this call" (the same code runs from
    other calls), not "on this platform"."""
    from attnlens import render

    c = trace(ws, "self.picked(x)")
    v = render.verdict_text(c)
    assert v[1:] == [
        "Not taken on this platform: _scale_kernel (Triton, if current_platform.is_cuda())",
        "Not taken at this call: _scale_kernel (Triton, if residual is not None; decided by the call into "
        "forward_plain: residual=None)"]
    text = render.chain_text(c)
    hops = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("0. call") and "_launch" in ln]
    assert [h.rsplit("[", 1)[1] for h in hops] == [
        "if residual is not None -> not taken at this call]", "if residual is not None -> not taken at this call]",
        "if not (residual is not None) -> taken at this call]"]
    assert [ln.rsplit("-> ", 1)[1] for ln in text.splitlines() if ln.startswith("  - triton_kernel")] == [
        render.DEAD, render.DEAD_AT_CALL, render.TAKEN]


def test_a_callers_guard_on_a_module_level_expression_decides_the_calls_inside_the_callee(ws):
    """`forward` calls `self.embed_input(...)` under `if os.environ.get("MINI_STAGE") == "first":`; inside,
    `self.embed(...)` is the `_ScaledStep` or `_CopyStep` that `__init__` chose by the same expression: the copy
    arm is not taken at this call (the caller's guards). Traced from `embed_input` itself, both can run."""
    cond = 'os.environ.get("MINI_STAGE") == "first"'
    c = trace(ws, "self.embed_input(src, dst)")
    assert leaves(c) == [(*SCALE, [cond], None), (*COPY, [cond, f"not ({cond})"], False)]
    assert [b.decided for b in c.final.fork.branches] == [f"the caller's guards: {cond} is True"] * 2
    assert [lf.dead_at_call for lf in c.leaves()] == [False, True]
    inner = trace(ws, "self.embed(src, dst)")
    assert leaves(inner) == [(*SCALE, [cond], None), (*COPY, [f"not ({cond})"], None)]


def test_a_vllm_ir_op_forks_over_its_registered_providers(ws):
    """`ir.ops.rms_norm(...)` is a vLLM IR op (`@register_op`): one branch per provider registered with
    `@ir.ops.rms_norm.register_impl(...)` (this plugin's three and vLLM's four), the op's own body ("native") last of
    those that can run. Each is decided at run time by the priority (`--kernel-config`, else the platform's
    `get_default_ir_op_priority`) and by what its `supports_args=` says of the arguments; the env-flag defaults read
    the platform's list: `mini_triton`, `vllm_c` listed, `oink` only under `if MINI_TRY_OINK == "1"` (not taken by
    default), `mini_wide` never (not taken by default). A provider whose `supported=` folds False is dead:
    `mini_rocm` (`is_rocm()`), `aiter` and `xpu_kernels` (`find_spec(...) is not None`: not installed here).
    `.maybe_inplace` is the same op."""
    from attnlens.render import verdict_text

    ir = EXAMPLE / "mini_metax/attention/ops/ir_norm.py"
    p, line, col = find(ir, "ir.ops.rms_norm(x, weight")
    c = ws.trace_at(p, line, col + 7)
    assert c.final.fork.kind == M.ForkKind.IR_PROVIDER
    assert c.final.fork.decided_by == "kernel_config.ir_op_priority.rms_norm"
    assert [b.label.split(":")[0] for b in c.final.fork.branches] == [
        "provider 'mini_triton'", "provider 'vllm_c'", "provider 'oink'", "provider 'mini_wide'", "provider 'native'",
        "provider 'mini_rocm'", "provider 'aiter'", "provider 'xpu_kernels'"]
    assert [b.reachable for b in c.final.fork.branches] == [None, None, None, None, None, False, False, False]
    assert [(os.path.basename(b.path), b.line) for b in c.final.fork.branches[:1]] == [("ir_norm.py", find(ir, '"mini_triton"')[1])]
    prio = "kernel_config.ir_op_priority.rms_norm"
    mini = (M.TRITON_KERNEL, "mini_metax.attention.ops.ir_norm._mini_rms_kernel")
    rocm = "IS_ROCM and (x.dim() > 2 or not x.is_contiguous())"
    # what the provider's `supports_args=` checks on the arguments (dtypes, variance_size) is decided at run time
    vllm_c = f'"vllm_c" in {prio} and rms_no_var_size(x, weight, epsilon, variance_size)'
    assert leaves(c) == [
        (*mini, [f'"mini_triton" in {prio}'], None),
        (M.TORCH_OP, "_C::rms_norm", [vllm_c, rocm], False),
        (M.TORCH_OP, "_C::rms_norm", [vllm_c, f"not ({rocm})"], None),
        (M.TORCH_OP, "oink::rmsnorm",
         [f'has_oink_op("rmsnorm") and "oink" in {prio} and oink_rms_supported(x, weight, epsilon, variance_size)'], None),
        (M.TRITON_KERNEL, "mini_metax.attention.ops.ir_norm._mini_rms_kernel_wide",
         [f'"mini_wide" in {prio} and _wide_ok(x, weight, epsilon, variance_size)'], None),
        (M.PYTHON_FUNCTION, "vllm.ir.ops.layernorm.rms_norm", [f"no provider before native in {prio} accepts the arguments"], None),
        (*mini, ["current_platform.is_rocm()"], False),
        (M.NOT_INSTALLED, "aiter", ["AITER_SUPPORTED", "x.dim() > 2"], False),
        (M.NOT_INSTALLED, "aiter", ["AITER_SUPPORTED", "not (x.dim() > 2)"], False),
        (M.TORCH_OP, "_C::rms_norm", ["XPU_KERNELS_SUPPORTED"], False)]
    assert "not in the platform's default IR op priority" in c.final.fork.branches[3].label
    # the default configuration: listed providers may run, the others are not taken by default
    said = {ln.split(" (")[0].removeprefix("Runs: "): ln for ln in verdict_text(c, ws.query.platform_defaults())
            if ln.startswith("Runs:")}
    assert said["_mini_rms_kernel_wide"].endswith("; not taken by default)")
    assert said["rmsnorm"].endswith("; not taken by default)")  # (oink: MINI_TRY_OINK is unset by default)
    # the first provider the default priority lists, supported, accepting any arguments: it is what runs by default;
    # one listed after it is not said to be taken (the ones before it win when they accept the arguments)
    assert said["_mini_rms_kernel"].endswith("; taken by default)")
    # native runs only when no provider before it accepts the arguments: never said to be taken by default
    native_line = next(ln for ln in verdict_text(c, ws.query.platform_defaults()) if "(Python, " in ln and "layernorm.py" in ln)
    assert native_line.endswith("decided at run time by no provider before native in kernel_config.ir_op_priority.rms_norm "
                                "accepts the arguments)")
    vllm_c_line = next(ln for ln in verdict_text(c, ws.query.platform_defaults()) if "(torch op _C::rms_norm" in ln)
    assert "by default" not in vllm_c_line  # (listed after mini_triton, a provider of rms_norm supported here)
    ops = {lf.final.symbol: lf.final for lf in c.leaves() if lf.final.kind == M.TORCH_OP}
    assert [p.split(" (")[0] for p in ops["_C::rms_norm"].providers] == ["minikern._C", "mini_metax._C"]
    assert ops["oink::rmsnorm"].providers == []
    assert ops["oink::rmsnorm"].reason.startswith("no registration of oink::rmsnorm found (searched ")
    p, line, col = find(ir, "ir.ops.fused_add_rms_norm.maybe_inplace(")
    c = ws.trace_at(p, line, col + 7)
    assert c.final.fork.kind == M.ForkKind.IR_PROVIDER
    assert [b.label.split(":")[0] for b in c.final.fork.branches] == [
        "provider 'vllm_c'", "provider 'oink'", "provider 'native'", "provider 'aiter'", "provider 'xpu_kernels'"]
    assert [lf.final.symbol for lf in c.leaves() if lf.reachable is not False] == [
        "_C::fused_add_rms_norm", "oink::fused_add_rms_norm", "vllm.ir.ops.layernorm.fused_add_rms_norm"]
    # P9: mini_triton, listed first, provides no fused_add_rms_norm: vllm_c is the first provider of this op the
    # default priority lists, so it is what runs by default whenever its argument check accepts the arguments
    lines = verdict_text(c, ws.query.platform_defaults())
    vllm_c_line = next(ln for ln in lines if "(torch op _C::fused_add_rms_norm" in ln)
    assert vllm_c_line.endswith("; taken by default when rms_add_no_var_size(x, x_residual, weight, epsilon, variance_size))")
    assert next(ln for ln in lines if "oink::fused_add_rms_norm" in ln).endswith("; not taken by default)")


def test_super_method_is_a_branch_of_the_override(ws):
    """`super().run(...)` in an override runs the base class's method: its kernel is a leaf, under the override's
    own guards (the call's default `skip=False` takes it)."""
    c = trace(ws, "stage.run(")
    assert leaves(c) == [(M.TRITON_KERNEL, P + "_scale_kernel", ["not (skip)"], True)]
    hops = [h for lf in c.final.fork.branches for h in lf.chain.hops]
    assert [(h.kind, h.symbol) for h in hops[:2]] == [
        (M.HopKind.CALL, "super().run"), (M.HopKind.ALIAS, P + "_ScaleStage.run")]


def test_super_call_shape_in_the_summary_and_the_resolver(ws):
    from attnlens.pyindex import summarize
    from attnlens.walk import ValKind, Walk

    s = summarize("class A(B):\n    def f(self):\n        super().g(1)\n        super().__init__()\n        super(A, self).h()\n",
                  "x.py", "sha")
    # (the two-argument form is not read: its callee is not a name chain)
    assert [cs.func for cs in s.calls] == ["super().g", "super().__init__", "", "super"]
    mod = ws.index.module("mini_metax.attention.ops.dispatch")
    v = ws.resolver.resolve_dotted(mod, "_CheckedScaleStage.run", "super().run", Walk())
    assert (v.kind, v.dotted) == (ValKind.FUNCTION, P + "_ScaleStage.run")
    # a `super().run(...)` call site is a site of the census like any call (a constructor's is not)
    from attnlens.registry import is_candidate

    calls = {cs.func: cs for cs in mod.summary.calls if cs.scope == "_CheckedScaleStage.run"}
    assert is_candidate(calls["super().run"])
    assert not is_candidate(summarize("class A(B):\n    def __init__(self):\n        super().__init__()\n", "x.py", "s").calls[0])
    miss = ws.resolver.resolve_dotted(mod, "_CheckedScaleStage.run", "super().absent", Walk())
    assert miss.kind == ValKind.UNKNOWN
    assert miss.reason == "`super().absent`: no base class of _CheckedScaleStage in the workspace or the target defines `absent`"


def test_verdict_when_no_kernel_of_the_tree_runs(ws):
    """No leaf taken: the function called still runs its other code (a PyTorch fallback), unless an `if c: raise`
    of its body is taken; "nothing" only where the call itself is not made."""
    from attnlens.render import verdict_text

    d = ws.query.platform_defaults()
    c = trace(ws, "_scale_or_torch(src, dst)")
    assert leaves(c) == [(M.TRITON_KERNEL, P + "_scale_kernel", ["scale is not None"], False)]
    assert verdict_text(c, d)[0] == ("Runs: other code of _scale_or_torch at this call, no kernel or op of its tree "
                                     "(decided by the call into _scale_or_torch: scale=None)")
    c = trace(ws, "_cuda_only_copy(src, dst)")
    assert leaves(c) == [(M.TRITON_KERNEL, P + "_copy_kernel", ["not (not current_platform.is_cuda())"], False)]
    assert c.final.fork.branches[0].raises is True
    assert verdict_text(c, d)[0] == ("Runs: nothing on this platform: _cuda_only_copy raises "
                                     "(current_platform.is_cuda() is false here)")


def test_a_loop_over_a_layer_stack_calls_each_kind_of_layer(ws):
    """`self.start, self.end, self.layers = _make_stack(n, lambda prefix: _ScaleLayer())`: the module list the helper
    builds holds `_PassLayer()` for indices 0..start and what the caller's lambda makes for start..end; a loop over
    the whole list calls either, one over `self.layers[self.start:self.end]` only the lambda's layers."""
    made = find(D, "lambda prefix: _ScaleLayer()")[1]
    built = find(D, "layers = torch.nn.ModuleList(")[1]
    c = trace(ws, "each(src, dst)")
    assert leaves(c) == [(M.PYTHON_FUNCTION, P + "_PassLayer.forward", [], None), (*SCALE, [], None)]
    assert [b.label for b in c.final.fork.branches] == ["_PassLayer()", f"_ScaleLayer() (layer_fn: the argument at dispatch.py:{made})"]
    assert c.hops[1].detail == f"for each in self.layers: an item of torch.nn.ModuleList(...) at dispatch.py:{built}"
    c = trace(ws, "layer(src, dst)")
    assert leaves(c) == [(*SCALE, [], True)]
    assert c.hops[1].detail == (f"for layer in self.layers: an item of torch.nn.ModuleList(...) at dispatch.py:{built} between "
                                f"self.start and self.end: _ScaleLayer() (layer_fn: the argument at dispatch.py:{made})")
    c = trace(ws, "block(src, dst)")  # (one built in place, looped over with enumerate)
    assert leaves(c) == [(*COPY, [], True)]
    # a module dict: an item called by key (a call, not a kernel launch on a grid), or its values looped over
    c = trace(ws, "self.heads[name](src, dst)")
    assert c.hops[0].kind == M.HopKind.CALL
    assert leaves(c) == [(*SCALE, [], None), (*COPY, [], None)]
    assert leaves(trace(ws, "head(src, dst)", 1)) == [(*SCALE, [], None), (*COPY, [], None)]
    c = trace(ws, "block.forward(src, dst)")  # (an item taken by index: `block = self.blocks[i]`)
    assert leaves(c) == [(*COPY, [], True)]
    assert c.hops[1].detail == f"block = self.blocks[i]: an item of torch.nn.ModuleList(...) at dispatch.py:{find(D, 'self.blocks = torch.nn.ModuleList(')[1]}"


def test_which_items_a_slice_of_a_sum_of_ranges_holds():
    import ast

    from attnlens.resolver import _container_elements

    def spans(text):
        return [(ast.unparse(e), lo, hi) for e, lo, hi in _container_elements(ast.parse(text, mode="eval").body)]

    assert spans("[A() for _ in range(s)] + wrap(f(i) for i in range(s, e)) + [A() for _ in range(e, n)]") == [
        ("A()", "0", "s"), ("f(i)", "s", "e"), ("A()", "e", "n")]
    assert spans("[B(), C()] + [D() for i in range(3)]") == [("B()", None, None), ("C()", None, None), ("D()", None, None)]
    assert spans("[A() for _ in range(s)] + [f(i) for i in range(t, e)]") == [("A()", "0", "s"), ("f(i)", None, None)]


def test_loop_items_through_enumerate_islice_and_slices():
    from attnlens.pyindex import summarize

    src = ("def f(self, xs, ys):\n"
           "    for i, a in enumerate(islice(self.layers, 1, 3), start=1):\n        pass\n"
           "    for b in self.blocks[1:]:\n        pass\n"
           "    for c in reversed(list(xs)):\n        pass\n"
           "    for d, e in ys:\n        pass\n"
           "    for g, (h, k) in enumerate(ys):\n        pass\n")
    f = summarize(src, "x.py", "sha").functions["f"]
    got = {n: [(b.kind, b.target) for b in bs] for n, bs in f.locals.items()}
    assert got == {"i": [("other", None)], "a": [("iter", "self.layers")], "b": [("iter", "self.blocks")],
                   "c": [("iter", "xs")], "d": [("other", None)], "e": [("other", None)], "g": [("other", None)],
                   "h": [("other", None)], "k": [("other", None)]}
    # the bounds of the one slice a loop takes (plain texts; an open end is no bound)
    assert [f.locals[n][0].str_args for n in ("a", "b", "c")] == [("1", "3"), (), ()]
