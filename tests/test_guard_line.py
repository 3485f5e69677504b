"""A guard reads the locals bound before its line.

The profile evaluated a guard's text without its line, so a local the function binds again later (``x = f(); if
x.ok(): x = g(x)``) read as its last binding. That is the wrong value, and where the last binding is made from the
one the guard reads, each evaluation met itself: upstream vLLM's ``prepare_fp8_layer_for_marlin`` took 0.4 s of
such cycles for one call (docs/performance.md)."""

from __future__ import annotations

from tests.helpers import find, fixture_ws

PLUGIN = {
    "gl/__init__.py": "",
    "gl/kern.py": '''
        import triton

        @triton.jit
        def _post(x):
            pass

        @triton.jit
        def _pre(x):
            pass

        def two():
            return 2

        def three():
            return 3

        def run(x):
            n = two
            if n() == 2:
                k = _post
            else:
                k = _pre
            n = three
            k[(1,)](x)

        def scaled(x, s):
            s = s.view(1)
            if s.numel() == 1:
                s = s.repeat(4)
            elif s.numel() == 2:
                s = s.repeat(2)
            if s.numel() == 4:
                s = s.view(2, 2)
            s = s.contiguous()
            _pre[(1,)](x, s)
    ''',
}
SITE = {"triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n"}


def _leaves(ws, scope, func):
    mod = ws.index.module("gl.kern")
    cs = next(c for c in mod.summary.calls if c.scope == scope and c.func == func)
    ch = ws.resolver.trace_call(mod, cs)
    return [(str(lf.final.kind), lf.final.symbol, lf.conditions, lf.to_json()["reachability"]) for lf in ch.leaves()]


def test_a_guard_reads_the_binding_before_its_line(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    # `n() == 2` reads `n = two`, not the later `n = three`: the `if` side runs, the `else` never does (a dead
    # assignment is not followed: it stays as the name)
    assert _leaves(ws, "run", "k") == [("triton_kernel", "gl.kern._post", ["n() == 2"], "live"),
                                       ("unresolved", "k", ["not (n() == 2)"], "dead")]
    mod = ws.index.module("gl.kern")
    line = find(mod.path, "if n() == 2")[1]
    assert ws.resolver.profile.value_of(mod, "run", "n() == 2", (), line) is True
    # without its line the text reads the function's last `n`
    assert ws.resolver.profile.value_of(mod, "run", "n() == 2") is False


def test_guards_on_a_local_made_from_itself_meet_no_cycle(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    r = ws.resolver
    before = r.cuts
    assert _leaves(ws, "scaled", "_pre") == [("triton_kernel", "gl.kern._pre", [], "live")]
    mod = ws.index.module("gl.kern")
    # each guard's `s` is one of the bindings above it: none is "defined in terms of itself"
    for c in mod.summary.calls:
        for kind, text, gline in c.guards:
            r.guard_value(mod, ((kind, text, gline),), "scaled")
    assert r.cuts == before
