"""What a call of a function that returns an inner def, or an item of a table, gives.

* A decorator applied by call (``run = timed(work)``) runs its argument: only when the argument is a name, and the
  def it returns calls the parameter or the argument is a function (``make_async(fn)`` hands it to ``partial``). A kernel factory called with sizes (``k = make_kernel(n, h)`` returning its
  inner ``@prim_func``) is the inner def, whatever its first argument is: vLLM-MetaX's ``_mhc_post_fwd(mhc, hidden)``
  was read as "the wrapper calls mhc" and ended at the integer ``mhc``; upstream vLLM's
  ``_lazy_import_wrapper("flashinfer", "fp4_quantize")`` at the name ``'flashinfer'``.
* ``return TABLE[key]``: an entry of a literal dict of callables (a fork by the key); a memo hit of a table the
  function fills with a value it also returns is no arm (vLLM's ``get_rope``: ``_ROPE_DICT[key] = rotary_emb``);
  an item of anything else is said as an item (it was looked up as one name: "name `_ROPE_DICT[key]` is not
  bound").
"""

from __future__ import annotations

from tests.helpers import fixture_ws

PLUGIN = {
    "fx/__init__.py": "",
    "fx/kern.py": '''
        import functools
        import importlib

        import triton

        @triton.jit
        def _post(x):
            pass

        @triton.jit
        def _pre(x):
            pass

        def make_kernel(mhc, hidden):
            def _kernel(x):
                _post[(1,)](x)
            return _kernel

        def timed(fn):
            def wrapper(*args):
                return fn(*args)
            return wrapper

        def in_executor(fn):
            def _w(*args):
                p = functools.partial(fn, *args)
                return p
            return _w

        def lazy(pkg, attr):
            def wrapper(*args):
                return None
            return wrapper

        def work(x):
            _pre[(1,)](x)

        def _load_module(name):
            try:
                return importlib.import_module(name)
            except ImportError:
                return None

        def lazy_symbol(module_name, symbol, fallback=None):
            def _resolve():
                m = _load_module(module_name)
                return getattr(m, symbol, None) if m else None

            def call(*args):
                fn = _resolve()
                if fn is None:
                    return fallback(*args)
                return fn(*args)
            return call

        fast_quant = lazy_symbol("fastkern.ops", "quant")
        local_work = lazy_symbol("fx.kern", "work")

        _TABLE = {"post": _post, "pre": _pre}
        _CACHE = {}

        def pick(name):
            return _TABLE[name]

        def cached(key):
            if key in _CACHE:
                return _CACHE[key]
            return work

        _MEMO = {}

        def get_impl(key):
            if key in _MEMO:
                return _MEMO[key]
            impl = work
            _MEMO[key] = impl
            return impl

        _SLOTS = {}

        def get_slot(key):
            if key not in _SLOTS:
                impl = work
                _SLOTS[key] = impl
            return _SLOTS[key]

        def work_post(x):
            _post[(1,)](x)

        _PICKS = {}

        def get_pick(key, mode):
            if key in _PICKS:
                return _PICKS[key]
            if mode:
                impl = work
            else:
                impl = work_post
            _PICKS[key] = impl
            return impl

        class KA:
            def __call__(self, x):
                _pre[(1,)](x)

        class KB:
            def __call__(self, x):
                _post[(1,)](x)

        _NEST = {}

        def get_nested(key, fast):
            if key in _NEST:
                return _NEST[key]
            if fast:
                cls = KA
            else:
                cls = KB
            obj = cls()
            _NEST[key] = obj
            return obj

        def run(x, name, key):
            k = make_kernel(4, 128)
            k(x)
            t = timed(work)
            t(x)
            a = in_executor(work)
            a(x)
            q = lazy("somepkg", "quant")
            q(x)
            fast_quant(x)
            local_work(x)
            kfn = pick(name)
            kfn[(1,)](x)
            c = cached(key)
            c(x)
            g = get_impl(key)
            g(x)
            s = get_slot(key)
            s(x)
            p = get_pick(key, name)
            p(x)
            n = get_nested(key, name)
            n(x)
    ''',
}
SITE = {"triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n"}


def _leaves(ws, func):
    mod = ws.index.module("fx.kern")
    cs = next(c for c in mod.summary.calls if c.scope == "run" and c.func == func)
    ch = ws.resolver.trace_call(mod, cs)
    return [(str(lf.final.kind), lf.final.symbol, lf.conditions, lf.final.reason) for lf in ch.leaves()], ch


def test_a_factory_called_with_sizes_is_its_inner_def_and_a_decorator_by_call_runs_its_argument(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, ch = _leaves(ws, "k")
    assert got == [("triton_kernel", "fx.kern._post", [], None)]
    assert [h.detail for h in ch.hops if h.kind == "alias"] == ["k = make_kernel(...) returns _kernel"]
    got, ch = _leaves(ws, "t")
    assert got == [("triton_kernel", "fx.kern._pre", [], None)]
    assert [h.detail for h in ch.hops if h.kind == "wrapper"] == ["t = timed(work): the wrapper calls work"]
    # a function handed on inside the wrapper (`make_async(fn)`: `partial(fn, ...)` run in an executor)
    got, ch = _leaves(ws, "a")
    assert got == [("triton_kernel", "fx.kern._pre", [], None)]
    assert [h.detail for h in ch.hops if h.kind == "wrapper"] == ["a = in_executor(work): the wrapper calls work"]
    # string arguments are not a wrapped function: the wrapper returned is what runs
    got, _ch = _leaves(ws, "q")
    assert got == [("dummy", "fx.kern.lazy.wrapper", [], "fx.kern.lazy.wrapper returns None and does nothing else")]


def test_an_item_of_a_table_returned(tmp_path):
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, _ch = _leaves(ws, "kfn")
    assert got == [("triton_kernel", "fx.kern._post", ['name == "post"'], None),
                   ("triton_kernel", "fx.kern._pre", ['name == "pre"'], None)]
    # a memo hit returns what the function stored, which another return gives: no arm of its own
    got, _ch = _leaves(ws, "g")
    assert got == [("triton_kernel", "fx.kern._pre", [], None)]
    # a table's item read back where the function only stores one name in it: that name's value
    got, ch = _leaves(ws, "s")
    assert got == [("triton_kernel", "fx.kern._pre", [], None)]
    assert [h.detail for h in ch.hops if h.kind == "alias"] == ["s = get_slot(...) returns _SLOTS[key]"]
    # its bindings on branches are read under the last return's guards: the memo test is no condition of theirs
    got, _ch = _leaves(ws, "p")
    assert got == [("triton_kernel", "fx.kern._pre", ["mode"], None),
                   ("triton_kernel", "fx.kern._post", ["not (mode)"], None)]
    # a local the built value's binding reads (`obj = cls()`) is read under that binding's own guards: its arms say only
    # what chose them (before: `not (key in _NEST) and fast`, the memo test and the guards the two share)
    got, _ch = _leaves(ws, "n")
    assert got == [("triton_kernel", "fx.kern._pre", ["fast"], None),
                   ("triton_kernel", "fx.kern._post", ["not (fast)"], None)]
    got, _ch = _leaves(ws, "c")
    assert got == [("unresolved", "_CACHE[key]", ["key in _CACHE"], "`_CACHE[key]` is an item of `_CACHE` at kern.py:67"),
                   ("triton_kernel", "fx.kern._pre", ["not (key in _CACHE)"], None)]


def test_a_lazy_import_factory_called_with_literal_names_is_the_symbol_it_imports(tmp_path):
    """``lazy_symbol("pkg.mod", "name")`` returns a closure that imports ``pkg.mod`` when first called and calls its
    ``name`` (upstream vLLM's ``vllm.utils.flashinfer`` makes 20 such symbols: they ended at the name
    ``'flashinfer'``, then at the closure)."""
    ws = fixture_ws(tmp_path, PLUGIN, SITE)
    got, ch = _leaves(ws, "fast_quant")
    assert got == [("not_installed", "fastkern", [], "package `fastkern` is not installed in the target environment")]
    assert [h.detail for h in ch.hops if h.kind == "dynamic_import"] == [
        "fast_quant = lazy_symbol(...): imports fastkern.ops when first called and calls its quant"]
    got, _ch = _leaves(ws, "local_work")
    assert got == [("triton_kernel", "fx.kern._pre", [], None)]
