"""Every way a function binds a name is a binding of its summary (profile folds a local only when every
binding folds alike, so a loop, ``with``/``except ... as``, walrus, augmented or ``nonlocal`` assignment must
be there to stop the fold)."""

from __future__ import annotations

from attnlens.pyindex import summarize

SRC = '''\
class C:
    def m(self, items, ctx):
        flag = False
        for flag, other in items:
            pass
        with ctx as (fh, *rest):
            pass
        try:
            pass
        except ValueError as err:
            pass
        count = 0
        count += 1
        if (got := self.x):
            pass

        def inner():
            nonlocal flag
            flag = True
        return inner
'''


def _locals(f):
    return {name: [(b.kind, b.line, b.scope) for b in bs] for name, bs in f.locals.items()}


def test_loop_with_except_walrus_augmented_and_nonlocal_targets_are_bindings():
    s = summarize(SRC, "x.py", "sha")
    assert _locals(s.functions["C.m"]) == {
        "flag": [("other", 3, ""), ("other", 4, ""), ("other", 19, "C.m.inner")],
        "other": [("other", 4, "")],
        "fh": [("other", 6, "")],
        "rest": [("other", 6, "")],
        "err": [("other", 10, "")],
        "count": [("other", 12, ""), ("other", 13, "")],
        "got": [("other", 14, "")],
        "inner": [("def", 17, "")],
    }
    assert _locals(s.functions["C.m.inner"]) == {}
    assert s.functions["C.m"].locals["flag"][0].target == "False"


def test_a_class_body_loop_binds_no_module_name():
    s = summarize("class K:\n    for a, b in ():\n        pass\n    with c as d:\n        pass\n", "x.py", "sha")
    assert set(s.bindings) == {"K"}
