"""Per-file Python summaries: the symbol table the resolver walks.

A :class:`ModuleSummary` is computed from the stdlib ``ast`` (15-20x faster
than libcst, see docs/dependencies.md) and holds only plain data (strings,
ints, tuples), so it pickles quickly into the cache, keyed by the file's
content hash. Nothing here imports or executes analysed code.

What is recorded, per module:

* module-level *bindings* (imports, defs, classes, assignments), each with the
  stack of *guards* (``if``/``else``/``try``/``except ImportError``) it sits
  under, so conditional imports keep their condition;
* every function (methods and nested functions included) with its parameters,
  decorators, call sites, lazy (function-local) imports and local aliases,
  returns, whether it is a *dummy* (only logs / returns None / raises
  NotImplementedError) and which calls forward ``*args``/``**kwargs``;
* every class with bases, decorators, methods, class attributes, dataclass
  fields and ``self.x = ...`` instance attributes;
* module-level call sites (registrations live there) and attribute
  assignments to other modules (monkey patches by assignment);
* *refs*: every ``Name``/``Attribute`` chain with its range, so an editor
  position maps to an expression without re-parsing.

Positions are 1-based lines and 0-based *code point* columns (``ast`` gives
UTF-8 byte offsets; they are converted here once, so the LSP layer only has to
convert between code points and UTF-16).

The decorator names every reader of these summaries treats alike are named here
once: the pass-through decorators (``is_passthrough``) and Triton's kernel
decorators (``triton_decorated``).
"""

from __future__ import annotations

import ast
import functools
import operator
import sys
from dataclasses import dataclass, field, fields
from sys import intern as _intern

from .pyrecover import Parsed, parse_chunk, parse_tolerant, syntax_issue

# --------------------------------------------------------------------------
# data model (plain, picklable)
# --------------------------------------------------------------------------

Guard = tuple  # (kind, text, line): kind in if/else/try/except/typecheck


def _pickled_by_fields(cls=None, *, load=None):
    """Pickle ``cls`` as its constructor (or ``load``, a module-level function of the same fields) and the
    tuple of its field values: summaries are most of a cold check's cache writes and a warm start's reads,
    and the default (a dict of slot names per object) costs 1.5x the time to write, 2x to read and 1.7x the
    bytes (386 summaries of the real checkout: dumps 0.44 -> 0.29 s, loads 0.33 -> 0.15 s, 13.8 -> 8.2 MB)."""
    if cls is None:
        return functools.partial(_pickled_by_fields, load=load)
    get = operator.attrgetter(*(f.name for f in fields(cls)))
    make = cls if load is None else load

    def __reduce__(self):
        return make, get(self)

    cls.__reduce__ = __reduce__
    return cls


# Values shared by every summary read from the cache folder. Pickle shares an object only within one file, so
# each summary read brought its own copies of the line numbers past 256 (CPython caches smaller ints) and of
# the names and dotted texts every module repeats (``self``, ``torch.empty``, the names a body reads): upstream
# vLLM's 2,234 summaries held 19 MB of duplicate ints and 31 MB of duplicate strings in 211 MB. The loaders of
# the most numerous classes below share them: ints through one table of their values (a few thousand line
# numbers: it stays small), strings through ``sys.intern`` (freed with their last reference). Loading all of
# upstream vLLM's summaries: 216 -> 190 MB traced, 0.6 -> 1.0 s. (Sharing equal tuples across files as well
# saved 0.1 MB more: left out.)
_INTS: dict = {}
_int = _INTS.setdefault


def interned_names(items) -> tuple:
    """``items`` (names) sorted, each once and interned: how summaries and the per-text name scans keep sets of
    names that are only iterated or tested by ``in`` on a few dozen at most (``FunctionInfo.names_read``, the
    index's `def NAME` / `self.NAME =` names, the resolver's call keywords). Upstream vLLM's 27,000 ``names_read``
    frozensets were 18 MB (tuples: 2 MB); the name scans' frozensets of each file's own strings 11.3 MB (2.7 MB)."""
    return tuple(sorted({_intern(n) for n in items})) if items else ()


def _load_binding(name, kind, line, col, target, attr, level, guards, alternatives, str_args, end_col, scope,
                  _i=_intern, _n=_int):
    return Binding(_i(name), _i(kind), _n(line, line), col, target if target is None else _i(target),
                   attr if attr is None else _i(attr), level, guards, alternatives, str_args, end_col, scope)


def _load_callsite(line, col, end_line, end_col, fline, fcol, fend_line, fend_col, func, scope, launch, nargs,
                   keywords, star_args, star_kwargs, str_args, arg_texts, kw_texts, guards, forwards, in_return,
                   assigned_to, subscript, _i=_intern, _n=_int):
    return CallSite(_n(line, line), col, _n(end_line, end_line), end_col, _n(fline, fline), fcol,
                    _n(fend_line, fend_line), fend_col, _i(func), scope, launch, nargs, keywords, star_args, star_kwargs,
                    str_args, arg_texts, kw_texts, guards, forwards, in_return,
                    assigned_to if assigned_to is None else _i(assigned_to), subscript)


def _load_function(qualname, name, line, col, end_line, deco_line, params, decorators, calls, locals_, returns,
                   returns_const, dummy, docstring, class_name, is_async, significant, names_read, *rest,
                   _i=_intern, _n=_int):
    # (names_read was written sorted and each once, by interned_names: only the interning is redone here, on
    # every summary read from the cache folder and every one read back)
    return FunctionInfo(qualname, name, _n(line, line), col, _n(end_line, end_line), _n(deco_line, deco_line), params,
                        decorators, calls, locals_, returns, returns_const, dummy, docstring, class_name, is_async,
                        significant, tuple(map(_i, names_read)), *rest)


@_pickled_by_fields(load=_load_binding)
@dataclass(slots=True)
class Binding:
    name: str
    kind: str  # import | from | def | class | assign | call | ifexp | other
    line: int
    col: int
    target: str | None = None  # module (import/from) or rhs dotted text (assign/call)
    attr: str | None = None  # from-import attribute
    level: int = 0  # relative import level
    guards: tuple = ()
    alternatives: tuple = ()  # ifexp alternatives (dotted texts)
    str_args: tuple = ()  # literal string args of an assigned call
    end_col: int = 0
    scope: str = ""  # for a module global assigned inside a function (`global x`): that function


@_pickled_by_fields
@dataclass(slots=True)
class Param:
    name: str
    kind: str  # posonly | pos | vararg | kwonly | kwarg
    has_default: bool
    annotation: str | None = None
    default: str | None = None  # the default's text when it is a literal (`"softmax"`, `False`, `8`, `None`), else None


@_pickled_by_fields
@dataclass(slots=True)
class Decorator:
    func: str  # dotted text of the decorator callee ('' when complex)
    line: int
    col: int
    is_call: bool
    str_args: tuple = ()
    arg_texts: tuple = ()
    kw_texts: tuple = ()  # (name, text) pairs


# decorators that hand back the decorated function itself, or a plain accessor of it, without code of their own
# around its body (by the last part of the decorator's name): what a call runs is the decorated body. The one
# list of them; a reader that lets more through (signature-keeping registrations, say) adds its own names.
PASSTHROUGH_DECORATORS = frozenset({
    "staticmethod", "classmethod", "property", "cache", "lru_cache", "cached_property", "wraps", "abstractmethod",
    "override", "no_grad", "inference_mode", "contextmanager",
})
# Triton: the decorator that makes a kernel, and those that wrap one (by the last part of the name)
TRITON_JIT_NAMES = ("jit",)
TRITON_WRAPPERS = ("autotune", "heuristics")


def is_passthrough(func: str) -> bool:
    """Is a decorator (its dotted callee text) one of PASSTHROUGH_DECORATORS?"""
    return func.rpartition(".")[2] in PASSTHROUGH_DECORATORS


def triton_decorated(decorators, wrappers: bool = True) -> bool:
    """Does a def carry a Triton kernel decorator, by name: ``@jit`` (``@triton.jit``), and with ``wrappers``
    also ``@autotune`` / ``@heuristics``? (The resolver's own check also asks where the decorator comes from.)"""
    names = TRITON_JIT_NAMES + TRITON_WRAPPERS if wrappers else TRITON_JIT_NAMES
    return any(d.func.rpartition(".")[2] in names for d in decorators)


@_pickled_by_fields(load=_load_callsite)
@dataclass(slots=True)
class CallSite:
    line: int
    col: int
    end_line: int
    end_col: int
    fline: int
    fcol: int
    fend_line: int
    fend_col: int
    func: str  # dotted text of the callee ('' when not a dotted chain)
    scope: str  # qualname of the enclosing function ('' at module level)
    launch: bool = False  # kernel[grid](...)
    nargs: int = 0
    keywords: tuple = ()
    star_args: bool = False
    star_kwargs: bool = False
    str_args: tuple = ()  # positional literal strings (None where not a string)
    arg_texts: tuple = ()  # positional dotted texts ('' where not dotted)
    kw_texts: tuple = ()  # (name, text) where text is a dotted text or repr of a literal
    guards: tuple = ()
    forwards: bool = False  # passes *vararg / **kwarg of the enclosing function
    in_return: bool = False
    assigned_to: str | None = None
    subscript: str = ""  # `f[<this>](...)`: the subscript's source text (a grid, or a dict key)


@_pickled_by_fields(load=_load_function)
@dataclass(slots=True)
class FunctionInfo:
    qualname: str
    name: str
    line: int  # the def line (not the first decorator line)
    col: int
    end_line: int
    deco_line: int
    params: tuple = ()
    decorators: tuple = ()
    calls: list = field(default_factory=list)  # CallSite indices live in ModuleSummary.calls
    locals: dict = field(default_factory=dict)  # name -> [Binding] (lazy imports, local aliases)
    returns: tuple = ()  # dotted/literal texts of return expressions ('' when complex)
    returns_const: object = None  # ('const', value) when every return is the same literal
    dummy: str | None = None  # why it is a dummy
    docstring: str | None = None
    class_name: str | None = None
    is_async: bool = False
    significant: int = 0  # statements other than docstring/log/assert/pass
    names_read: tuple = ()  # the names the body reads, sorted (a tuple: 8 bytes a name, a frozenset took 40)
    kw_reads: frozenset = frozenset()  # string keys read from **kwargs
    inner_defs: tuple = ()  # qualnames of nested functions
    returns_names: tuple = ()  # bare names returned (decorator factories)
    wraps: str | None = None  # functools.wraps(<text>) on this function
    return_alts: tuple = ()  # (text, guards, line) of each `return`, text as in `returns`
    globals_: frozenset = frozenset()  # names declared `global` in the body
    raise_ifs: frozenset = frozenset()  # lines of `if c: raise ...` (what follows runs only when not c)
    asserts: tuple = ()  # (line, text) of each `assert c` directly in the body: what follows runs only when c holds
    # `obj.a.b = <dotted name or literal>` on a local or parameter (not self): (target, value, line, guards); a table
    # filled with a name, `TABLE[key] = name`, as (`TABLE[]`, name, line, guards)
    attr_sets: tuple = ()

    @property
    def is_abstract(self) -> bool:
        """Decorated ``@abstractmethod`` (``@abc.abstractmethod``)?"""
        return any(d.func.rpartition(".")[2] == "abstractmethod" for d in self.decorators)

    @property
    def call_params(self) -> list:
        """The names of the positional parameters a caller's positional arguments fill, in order (``self`` / ``cls``
        left out of a method that is not a static method)."""
        pos = [p.name for p in self.params if p.kind in ("posonly", "pos")]
        if self.class_name and pos and pos[0] in ("self", "cls") and "staticmethod" not in {d.func for d in self.decorators}:
            pos = pos[1:]
        return pos


@_pickled_by_fields
@dataclass(slots=True)
class ClassInfo:
    qualname: str
    name: str
    line: int
    col: int
    end_line: int
    deco_line: int
    bases: tuple = ()
    decorators: tuple = ()
    methods: dict = field(default_factory=dict)  # name -> function qualname
    attrs: dict = field(default_factory=dict)  # name -> Binding (class body assignments)
    inst_attrs: dict = field(default_factory=dict)  # name -> Binding (self.x = ... in methods)
    fields: tuple = ()  # (name, annotation, has_default, line)
    is_dataclass: bool = False
    docstring: str | None = None
    reassigned: frozenset = frozenset()  # instance attributes assigned more than once (never folded)
    inst_more: dict = field(default_factory=dict)  # name -> (Binding, ...): the later `self.x = ...` of a reassigned x
    inst_ann: dict = field(default_factory=dict)  # name -> annotation text of `self.x: T = ...` in a method


@_pickled_by_fields
@dataclass(slots=True)
class Ref:
    line: int
    col: int
    end_col: int
    text: str
    seg_ends: tuple  # end column of each dotted segment
    scope: str


@_pickled_by_fields
@dataclass(slots=True)
class AttrPatch:
    """``mod.attr = value`` / ``setattr(mod, "attr", value)`` at module level, or inside a function
    when ``mod`` is a name the function (or the module) imports (a patch applied when it runs)."""

    target: str  # dotted text of the assigned attribute (e.g. 'iu.has_triton_kernels')
    value: str  # dotted text of the value, the qualname of a lambda in ModuleSummary.lambdas, or '' when complex
    line: int
    col: int
    guards: tuple = ()
    scope: str = ""  # the function that makes the assignment ('' at module level)


@_pickled_by_fields
@dataclass(slots=True)
class ModuleSummary:
    path: str
    sha: str
    bindings: dict = field(default_factory=dict)  # name -> [Binding]
    functions: dict = field(default_factory=dict)
    classes: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)  # all CallSites (module + functions)
    refs: list = field(default_factory=list)
    attr_patches: list = field(default_factory=list)
    all_exports: tuple | None = None
    error: str | None = None
    error_line: int = 0
    syntax_errors: tuple = ()  # pyrecover.SyntaxIssue of each syntax error (the summary leaves out those statements)
    n_lines: int = 0
    has_getattr: bool = False  # module-level __getattr__
    global_ann: dict = field(default_factory=dict)  # name -> annotation text of a module-level `name: T = ...`
    # lambdas that replace attributes (`mod.f = lambda cfg: X`, setattr) or are bound to module names, as
    # functions of one return: qualname (`<lambda:line:col>` inside its scope) -> FunctionInfo
    lambdas: dict = field(default_factory=dict)

    def function(self, qualname: str):
        """The function (or lambda) of that qualname, else None."""
        f = self.functions.get(qualname)
        return f if f is not None or not self.lambdas else self.lambdas.get(qualname)

    def calls_in(self, qualname: str):
        f = self.function(qualname)
        return [self.calls[i] for i in f.calls] if f is not None else []

    def module_calls(self):
        return [c for c in self.calls if not c.scope]

    def binding_of(self, scope: str, name: str) -> tuple[str, list]:
        """How ``name`` is bound for code running in function ``scope``: ``("param", [])`` for a
        parameter of an enclosing function, ``("local", bindings)`` for an enclosing function's
        local, else ``("module", bindings)`` (empty when unbound). Class bodies do not enclose."""
        q = scope
        functions = self.functions
        while q:
            f = functions.get(q)
            if f is not None:
                for p in f.params:  # (a loop, not any() over a generator: a million calls in a census)
                    if p.name == name:
                        return "param", []
                bs = f.locals.get(name)
                if bs is not None:
                    return "local", bs
            q = q.rpartition(".")[0]
        return "module", self.bindings.get(name, [])

    def scope_at(self, line: int) -> str:
        """Innermost function qualname containing ``line`` ('' for module level)."""
        best = ""
        best_span = None
        for q, f in self.functions.items():
            if f.deco_line <= line <= f.end_line:
                span = f.end_line - f.deco_line
                if best_span is None or span < best_span:
                    best, best_span = q, span
        return best

    def class_at(self, line: int) -> str | None:
        best = None
        best_span = None
        for q, c in self.classes.items():
            if c.deco_line <= line <= c.end_line:
                span = c.end_line - c.deco_line
                if best_span is None or span < best_span:
                    best, best_span = q, span
        return best


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


_Attribute, _Name, _Constant, _Starred = ast.Attribute, ast.Name, ast.Constant, ast.Starred


_EMPTY_FROZENSET = frozenset()


def _frozen(items) -> frozenset:
    """``frozenset(items)``, the one shared empty frozenset when empty (29,000 of them for upstream vLLM)."""
    return frozenset(items) if items else _EMPTY_FROZENSET


def function_tree(text: str, line: int, end_line: int) -> tuple:
    """(parsed tree or None, source) of lines ``line``..``end_line`` of ``text`` (a function, from its ``def``),
    dedented; a node's ``lineno`` counts from ``line`` as 1."""
    import textwrap

    body = textwrap.dedent("\n".join(text.splitlines()[line - 1:end_line]))
    try:
        return ast.parse(body), body
    except (SyntaxError, ValueError):
        return None, body


def dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for Name/Attribute chains, else None. (The summary builder's most called helper: exact type
    tests, since the parser makes no subclasses of these nodes.)"""
    t = type(node)
    if t is _Name:
        return node.id
    if t is not _Attribute:
        return None
    parts = []
    while t is _Attribute:
        parts.append(node.attr)
        node = node.value
        t = type(node)
    if t is _Name:
        parts.append(node.id)
        parts.reverse()
        return _intern(".".join(parts))  # one string per text (the parser interns the names themselves)
    return None


_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt,
            ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
            ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def compare(op: ast.cmpop, a, b):
    """``a <op> b`` for an ``ast.Compare`` operator (every one Python has); raises what Python raises
    (``TypeError`` when ``a`` and ``b`` do not compare). The one comparison table of the folders
    (profile, envflags, the capability evaluator)."""
    return _COMPARE[type(op)](a, b)


def _default_text(node: ast.AST | None) -> str | None:
    """A parameter default's text when it is a str, int, bool or ``None`` literal (what a call that omits the
    argument binds: the resolver folds the callee's guards on it), else None."""
    if type(node) is _Constant and (node.value is None or type(node.value) in (str, int, bool)):
        return repr(node.value)
    return None


def _literal_text(node: ast.AST) -> str:
    t = type(node)
    if t is _Name:
        return node.id
    if t is _Constant:
        return repr(node.value)
    if t is _Attribute:
        d = dotted(node)
        if d is not None:
            return d
    if isinstance(node, (ast.List, ast.Tuple)) and all(isinstance(e, ast.Constant) for e in node.elts):
        return repr([e.value for e in node.elts])
    if isinstance(node, ast.List) and node.elts and all(dotted(e) is not None and "." in dotted(e) for e in node.elts):
        # a list of attribute chains (`[Enum.A, Enum.B]`, a priority list): kept as text
        return "[" + ", ".join(dotted(e) for e in node.elts) + "]"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return repr(-node.operand.value)  # type: ignore[operator]
    return ""


def _chain_text(node: ast.AST) -> str:
    """``a.b[].c`` for an attribute chain through subscripts (the keys elided), ``get_group().send`` through calls
    (the arguments elided: the callee's result, ``resolver._resolve_dotted``), else ''. (``super()`` is the
    summary's own form, and a call has one ``()`` per name: ``f()()`` is not written.)"""
    segs = []
    while True:
        if isinstance(node, ast.Attribute):
            segs.append("." + node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            segs.append("[]")
            node = node.value
        elif isinstance(node, ast.Call) and (not segs or segs[-1] != "()") and isinstance(node.func, (ast.Name, ast.Attribute, ast.Subscript)):
            segs.append("()")
            node = node.func
        else:
            break
    if not isinstance(node, ast.Name) or ("[]" not in segs and "()" not in segs) or (node.id == "super" and segs[-1] == "()"):
        return ""
    if node.id == "torch" and "()" in segs:
        return ""  # (a method of what a torch function or op returns: a tensor's, `torch.ops.x.f(a).view_as(a)`)
    return node.id + "".join(reversed(segs))


def call_id(cs: CallSite) -> int:
    """One int per call site of a module: where the call starts and where its callee ends. The start alone is shared
    by a call and the call its callee holds (``f(x).g(y)`` and ``f(x)`` both start at ``f``)."""
    return (((((cs.line << 20) | cs.col) << 12) | min(cs.fend_line - cs.line, 4095)) << 20) | cs.fend_col


def super_method(func: str) -> bool:
    """Is the callee text ``func`` a method reached through ``super()`` (``super().forward``: the base class's code
    runs, a call like any other), other than a constructor?"""
    return func.startswith("super().") and func.count(".") == 1 and func != "super().__init__"


# calls whose items are those of their first argument (a loop over them visits the same objects)
_SAME_ITEMS = frozenset({"enumerate", "islice", "itertools.islice", "reversed", "list", "tuple", "iter"})


def _loop_item(target: ast.AST, it: ast.AST) -> tuple:
    """(the name a ``for`` loop binds to an item, the expression whose items it visits, the bounds of the one slice
    it takes of them) or (None, it, ()): ``for x in xs``; ``for i, x in enumerate(xs)``; ``islice(xs, a, b)``,
    ``reversed(xs)``, ``list(xs)``, ``xs[a:b]`` visit the items of ``xs`` (``islice(xs, a, b)`` and ``xs[a:b]`` with
    plain bounds: the texts of ``a`` and ``b``)."""
    enum = False
    cuts: list = []
    while True:
        if isinstance(it, ast.Call) and it.args and not isinstance(it.args[0], ast.Starred) and dotted(it.func) in _SAME_ITEMS:
            enum = enum or dotted(it.func) == "enumerate"
            if dotted(it.func) in ("islice", "itertools.islice"):
                cuts.append(tuple(it.args[1:]) if len(it.args) == 3 else None)
            it = it.args[0]
        elif isinstance(it, ast.Call) and not it.args and not it.keywords and isinstance(it.func, ast.Attribute) \
                and it.func.attr == "values" and dotted(it.func.value) is not None:
            it = it.func.value  # (`for layer in self.layers.values()`: the items of a module dict)
        elif isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice):
            sl = it.slice
            cuts.append((sl.lower, sl.upper) if sl.lower is not None and sl.upper is not None and sl.step is None else None)
            it = it.value
        else:
            break
    bounds = ()
    if len(cuts) == 1 and cuts[0] is not None:
        texts = tuple(_literal_text(x) for x in cuts[0])
        bounds = texts if all(texts) else ()
    if enum:
        ok = isinstance(target, ast.Tuple) and len(target.elts) == 2 and isinstance(target.elts[1], ast.Name)
        return (target.elts[1], it, bounds) if ok else (None, it, ())
    return (target, it, bounds) if isinstance(target, ast.Name) else (None, it, ())


def _call_text(node: ast.AST) -> str:
    """``f()`` for a call of a dotted callee (any arguments), ``@import:mod`` for
    ``importlib.import_module("mod")``, else ''."""
    if isinstance(node, ast.Call):
        fd = dotted(node.func)
        if fd is None:
            return ""
        if fd.rpartition(".")[2] == "import_module" and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            return "@import:" + node.args[0].value
        # positional arguments that are names, attribute chains or literals are kept (`?` otherwise), so a
        # reader can bind the callee's parameters: `self.maybe_compile(self.forward_native)`
        args = [_literal_text(x) or "?" for x in node.args if not isinstance(x, ast.Starred)]
        if any("(" in x or ")" in x or ", " in x for x in args):
            args = ["?" for _ in args]
        return fd + "(" + ", ".join(args) + ")"
    return ""


def _const(node: ast.AST):
    if isinstance(node, ast.Constant):
        return ("const", node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        try:
            return ("const", -node.operand.value)  # type: ignore[operator]
        except TypeError:
            return None
    return None


_LOG_NAMES = {"logger", "log", "logging", "warnings", "print"}


def _is_log_call(stmt: ast.stmt) -> bool:
    if type(stmt) is not ast.Expr or type(stmt.value) is not ast.Call:
        return False
    d = dotted(stmt.value.func) or ""
    root = d.split(".", 1)[0]
    return root in _LOG_NAMES or d.endswith(("warning_once", "info_once", "warn", "warning", "debug", "info"))


def _first_doc_line(node) -> str | None:
    """The first line of a def's or class's docstring as ``ast.get_docstring(node, clean=True)`` would give
    it (tabs expanded, stripped), without cleaning the whole docstring; None when there is none or it is blank."""
    doc = ast.get_docstring(node, clean=False)
    if not doc:
        return None
    doc = doc.expandtabs().strip()
    return doc.splitlines()[0] if doc else None


def _is_docstring(stmt: ast.stmt) -> bool:
    return type(stmt) is ast.Expr and type(stmt.value) is ast.Constant and isinstance(stmt.value.value, str)


def _raises_not_implemented(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.Raise) or stmt.exc is None:
        return False
    exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
    return (dotted(exc) or "").endswith("NotImplementedError")


def _dummy_reason(body: list[ast.stmt]) -> str | None:
    stmts = [s for s in body if not _is_docstring(s)]
    if not stmts:
        return "empty body"
    logs = [s for s in stmts if _is_log_call(s)]
    rest = [s for s in stmts if not _is_log_call(s)]
    if all(isinstance(s, ast.Pass) for s in rest) and (logs or rest):
        return "body only logs" if logs else "body is only `pass`"
    if len(rest) == 1:
        s = rest[0]
        if isinstance(s, ast.Return) and (s.value is None or (isinstance(s.value, ast.Constant) and s.value.value is None)):
            return "only logs and returns None" if logs else "returns None and does nothing else"
        if _raises_not_implemented(s):
            return "raises NotImplementedError"
    if not rest and logs:
        return "body only logs"
    return None


_NEWLINE = __import__("re").compile(r"\r\n|\r|\n")


class _LineMap:
    """UTF-8 byte column -> code point column, per line (only for non-ASCII lines)."""

    def __init__(self, text: str):
        self.lines = _NEWLINE.split(text)
        self._cache: dict[int, list[int] | None] = {}
        # most files are pure ASCII: then every column is its own code point column
        self._all_ascii = text.isascii()

    def cp(self, line: int, byte_col: int) -> int:
        if self._all_ascii or line - 1 >= len(self.lines) or line < 1:
            return byte_col
        m = self._cache.get(line, False)
        if m is False:
            s = self.lines[line - 1]
            if s.isascii():
                m = None
            else:
                m = []
                for i, ch in enumerate(s):
                    m.extend([i] * len(ch.encode("utf-8")))
                m.append(len(s))
            self._cache[line] = m
        if m is None:
            return byte_col
        return m[byte_col] if byte_col < len(m) else len(self.lines[line - 1])


# --------------------------------------------------------------------------
# the visitor
# --------------------------------------------------------------------------


class Stopped(BaseException):
    """:func:`summarize` stopped because its ``should_stop`` said so (an editor's background summary of a
    buffer giving way to a request); nothing of it is kept. Not an ``Exception``: the analysis's "must not
    fail on a bad input" handlers (``except Exception``) would take it for a failed resolution and go on with
    a wrong answer (the rules engine's shared state lost the registry this way); only the rules engine,
    which set the ``should_stop``, catches it."""


def import_only(bindings) -> bool | None:
    """None when there are none, else whether every binding is an import (what ``_patch_root`` asks of the
    module's bindings of a name)."""
    if not bindings:
        return None
    return all(b.kind in ("import", "from") for b in bindings)


class _Builder:
    should_stop = None  # asked every 64 statements (summarize's should_stop)
    _n = 0
    # building one top-level chunk (pyincremental): the module's bindings before it, and what of them the
    # chunk read (name -> import_only of the prefix's bindings)
    prefix = None
    deps = None
    _top_body = True  # the next body() is the module's
    module_guard = False  # a module-level `if c: raise/return` guards the statements after it

    def __init__(self, text: str, path: str, sha: str):
        self.lm = _LineMap(text)
        self._ascii = self.lm._all_ascii  # byte columns are code point columns
        self.s = ModuleSummary(path=path, sha=sha, n_lines=len(self.lm.lines))
        self.guards: list[Guard] = []
        self.scope: list[FunctionInfo] = []  # function stack
        self.cls: list[ClassInfo] = []  # class stack
        self.qual: list[str] = []
        self._rets = []
        self._names = []
        self._lambda_done: set = set()  # ids of Lambda nodes summarised as functions (their bodies are their own scope)
        self._nonlocals: dict[str, frozenset] = {}  # function qualname -> names it declares `nonlocal`
        # one object per equal value within a summary, for the fields that repeat most (call sites' literal and
        # argument texts, guards, line numbers above the interpreter's small-int cache): upstream vLLM's 2,234
        # summaries held 900,000 tuples of 270,000 values and 660,000 ints of 6,400. Only tuples of texts, None
        # and guard triples go in (no bools: True == 1 would merge them). Per summary: a buffer's summaries after
        # every edit would fill a table shared across them (the cache's loaders share ints across files: _INTS)
        self._tup = {}.setdefault
        self._int = {}.setdefault

    # -- positions ---------------------------------------------------------
    def pos(self, node) -> tuple[int, int]:
        if self._ascii:
            return node.lineno, node.col_offset
        return node.lineno, self.lm.cp(node.lineno, node.col_offset)

    def end(self, node) -> tuple[int, int]:
        el = getattr(node, "end_lineno", node.lineno) or node.lineno
        ec = getattr(node, "end_col_offset", node.col_offset) or node.col_offset
        return el, (ec if self._ascii else self.lm.cp(el, ec))

    # -- bindings ------------------------------------------------------------
    def bind(self, b: Binding) -> None:
        if b.guards:
            b.guards = self._tup(b.guards, b.guards)
        if b.str_args:
            b.str_args = self._tup(b.str_args, b.str_args)
        if b.alternatives and type(b.alternatives[0]) is str:
            b.alternatives = self._tup(b.alternatives, b.alternatives)
        if b.line > 256:
            b.line = self._int(b.line, b.line)
        if self.scope and b.name in self.scope[-1].globals_:
            # `global x; x = ...` inside a function: a lazily filled module global
            b.scope = self.scope[-1].qualname
            self.s.bindings.setdefault(b.name, []).append(b)
        elif self.scope and b.name in self._nonlocals.get(self.scope[-1].qualname, ()):
            # `nonlocal x; x = ...`: rebinds the enclosing function's x (the innermost that binds it)
            b.scope = self.scope[-1].qualname
            outer = self.scope[-2::-1]
            owner = next((f for f in outer if b.name in f.locals or any(p.name == b.name for p in f.params)), outer[0])
            owner.locals.setdefault(b.name, []).append(b)
        elif self.scope:
            self.scope[-1].locals.setdefault(b.name, []).append(b)
        elif self.cls:
            pass  # class attributes handled by the class visitor
        else:
            self.s.bindings.setdefault(b.name, []).append(b)

    def set_inst_attr(self, b: Binding) -> None:
        """Record ``self.<b.name> = ...`` in a method of the class being read (a second assignment: ``inst_more``)."""
        c = self.cls[-1]
        if b.name in c.inst_attrs:
            c.reassigned = c.reassigned | {b.name}
            c.inst_more[b.name] = c.inst_more.get(b.name, ()) + (b,)
        c.inst_attrs.setdefault(b.name, b)

    def bind_names(self, target, g: tuple) -> None:
        """Bind every plain name in an assignment target (a name, a tuple/list of them, a starred one) to a
        value the summary does not follow (``kind='other'``): loop, ``with ... as`` and augmented targets."""
        if isinstance(target, ast.Name):
            line, col = self.pos(target)
            self.bind(Binding(target.id, "other", line, col, guards=g))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self.bind_names(e, g)
        elif isinstance(target, ast.Starred):
            self.bind_names(target.value, g)

    def cur_scope(self) -> str:
        return self.scope[-1].qualname if self.scope else ""

    # -- statements ------------------------------------------------------------
    def body(self, stmts: list[ast.stmt]) -> None:
        pushed = 0
        top = self._top_body
        self._top_body = False
        for st in stmts:
            self.stmt(st)
            if type(st) is ast.If and not st.orelse and st.body and _terminates(st.body[-1]):
                # `if c: return ...` (or raise/continue/break): what follows in this block runs only when not c
                text = " ".join((self.seg(st.test) or dotted(st.test) or "<condition>").split())
                if text not in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                    self.guards.append(("else", text, st.lineno))
                    pushed += 1
                    if top:
                        self.module_guard = True  # what follows this statement in the module is guarded by it
                    if type(st.body[-1]) is ast.Raise and self.scope:
                        self.scope[-1].raise_ifs = self.scope[-1].raise_ifs | {st.lineno}
        for _ in range(pushed):
            self.guards.pop()

    def stmt(self, st: ast.stmt) -> None:
        if self.should_stop is not None:
            self._n += 1
            if not self._n & 63 and self.should_stop():
                raise Stopped(f"{self.s.path}: summary stopped at line {st.lineno}")
        t = type(st)
        if t is ast.Expr:  # the most common statement (a call): its one expression
            self.expr(st.value)
            return
        if t is ast.Assign:
            self.assign(st.targets, st.value, st)
            return
        g = tuple(self.guards)
        if t is ast.Return:
            if self.scope:
                self._rets[-1].append((st.value, g, st.lineno))
            if st.value is not None:
                self.expr(st.value, in_return=True)
        elif t is ast.If:
            self.expr(st.test)
            text = self.seg(st.test)
            text = text or (dotted(st.test) or "<condition>")
            text = " ".join(text.split())
            kind = "typecheck" if text in ("TYPE_CHECKING", "typing.TYPE_CHECKING") else "if"
            self.guards.append((kind, text, st.lineno))
            self.body(st.body)
            self.guards.pop()
            if st.orelse:
                self.guards.append(("else", text, st.lineno))
                self.body(st.orelse)
                self.guards.pop()
        elif t is ast.FunctionDef or t is ast.AsyncFunctionDef:
            self.funcdef(st)
        elif t is ast.Import:
            for a in st.names:
                line, col = self.pos(st)
                if a.asname:
                    self.bind(Binding(a.asname, "import", line, col, target=a.name, guards=g))
                else:
                    top = a.name.split(".", 1)[0]
                    # `import a.b` binds `a` (the package); remember the full name too
                    self.bind(Binding(top, "import", line, col, target=top, guards=g, alternatives=(a.name,)))
        elif t is ast.ImportFrom:
            line, col = self.pos(st)
            for a in st.names:
                if a.name == "*":
                    self.bind(Binding("*", "star", line, col, target=st.module or "", level=st.level or 0, guards=g))
                    continue
                self.bind(
                    Binding(a.asname or a.name, "from", line, col, target=st.module or "", attr=a.name,
                            level=st.level or 0, guards=g)
                )
        elif t is ast.ClassDef:
            self.classdef(st)
        elif t is ast.Try or (sys.version_info >= (3, 11) and isinstance(st, getattr(ast, "TryStar", ()))):
            self.guards.append(("try", "", st.lineno))
            self.body(st.body)
            self.guards.pop()
            for h in st.handlers:
                names = dotted(h.type) if h.type is not None else "BaseException"
                if h.type is not None and isinstance(h.type, ast.Tuple):
                    names = ",".join(dotted(e) or "?" for e in h.type.elts)
                self.guards.append(("except", names or "?", h.lineno))
                if h.name:
                    self.bind(Binding(h.name, "other", h.lineno, self.lm.cp(h.lineno, h.col_offset), guards=tuple(self.guards)))
                self.body(h.body)
                self.guards.pop()
            self.body(st.orelse)
            self.body(st.finalbody)
        elif t is ast.With or t is ast.AsyncWith:
            for it in st.items:
                self.expr(it.context_expr)
                if it.optional_vars is not None:
                    self.bind_names(it.optional_vars, g)  # `with c as x`: whatever c.__enter__ returns
            self.body(st.body)
        elif t is ast.For or t is ast.AsyncFor or t is ast.While:
            if t is ast.While:
                self.expr(st.test)
            else:
                self.expr(st.iter)
                item, it, bounds = _loop_item(st.target, st.iter)
                if item is not None and not (self.cls and not self.scope):
                    # `for x in items:` binds x to each item in turn (resolver: a fork over a literal list's items, the
                    # items of a module list); `enumerate(items)`, `islice(items, a, b)`, `items[a:b]` are items'
                    src = dotted(it) or _call_text(it) or _literal_text(it)
                    if item is not st.target:
                        self.bind_names(st.target.elts[0], g)  # (`i` of `for i, x in enumerate(items)`)
                    line, col = self.pos(item)
                    self.bind(Binding(item.id, "iter", line, col, target=src or None, guards=g, str_args=bounds))
                else:
                    self.bind_names(st.target, g)  # `for a, b in items:`
            self.body(st.body)
            self.body(st.orelse)
        elif t is ast.AnnAssign:
            if st.value is not None:
                self.assign([st.target], st.value, st)
            elif self.cls and not self.scope and isinstance(st.target, ast.Name):
                pass
            if not self.cls and not self.scope and isinstance(st.target, ast.Name):
                # a module global's declared type (`_groups: dict[str, Callable[[], Group | None]] = {}`): what its
                # items are when nothing else says
                ann = " ".join((self.seg(st.annotation) or "").split())
                if ann:
                    self.s.global_ann[st.target.id] = ann
            if self.cls and not self.scope and isinstance(st.target, ast.Name):
                c = self.cls[-1]
                ann = self.seg(st.annotation)
                c.fields = c.fields + ((st.target.id, " ".join((ann or "").split()), st.value is not None, st.lineno),)
            elif self.cls and self.scope and isinstance(st.target, ast.Attribute) and dotted(st.target.value) == "self":
                # `self.x: T = ...` in a method: the declared type of the instance attribute
                ann = " ".join((self.seg(st.annotation) or "").split())
                if ann:
                    self.cls[-1].inst_ann.setdefault(st.target.attr, ann)
        elif t is ast.AugAssign:
            self.expr(st.value)
            self.bind_names(st.target, g)
        elif t is ast.Global:
            if self.scope:
                self.scope[-1].globals_ = self.scope[-1].globals_ | frozenset(st.names)
        elif t is ast.Nonlocal:
            if self.scope:
                q = self.scope[-1].qualname
                self._nonlocals[q] = self._nonlocals.get(q, frozenset()) | frozenset(st.names)
        elif hasattr(ast, "Match") and isinstance(st, getattr(ast, "Match")):
            self.expr(st.subject)
            for case in st.cases:
                self.body(case.body)
        else:
            for child in ast.iter_child_nodes(st):
                if isinstance(child, ast.expr):
                    self.expr(child)
                elif isinstance(child, ast.stmt):
                    self.stmt(child)

    _src: str = ""
    want_refs: bool = False
    _rets: list
    _names: list

    def seg(self, node) -> str:
        """Source text of a node (like ast.get_source_segment, without re-splitting the file)."""
        try:
            l0, l1 = node.lineno, node.end_lineno
            c0, c1 = node.col_offset, node.end_col_offset
            lines = self.lm.lines
            if l0 == l1 and self.lm._all_ascii:  # byte columns are character columns
                return lines[l0 - 1][c0:c1]
            if l0 == l1:
                return lines[l0 - 1].encode()[c0:c1].decode("utf-8", "replace")
            parts = [lines[l0 - 1].encode()[c0:].decode("utf-8", "replace")]
            parts.extend(lines[l0:l1 - 1])
            parts.append(lines[l1 - 1].encode()[:c1].decode("utf-8", "replace"))
            return "\n".join(parts)
        except (IndexError, AttributeError, TypeError):
            return ""

    def assign(self, targets, value, st) -> None:
        lam = self.lambda_def(value) if type(value) is ast.Lambda and len(targets) == 1 and self._lambda_wanted(targets[0]) else None
        self.expr(value, assigned_to=dotted(targets[0]) if len(targets) == 1 else None)
        g = tuple(self.guards)
        for t in targets:
            if isinstance(t, ast.Name):
                line, col = self.pos(t)
                b = self._binding_for_value(t.id, value, line, col, g)
                if lam is not None:
                    b.target = lam
                if self.cls and not self.scope:
                    self.cls[-1].attrs.setdefault(t.id, b)
                else:
                    self.bind(b)
            elif isinstance(t, ast.Attribute):
                self.expr(t)
                d = dotted(t)
                if d is None:
                    continue
                root = d.split(".", 1)[0]
                if root in ("self", "cls") and self.scope and self.cls and d.count(".") == 1:
                    line, col = self.pos(t)
                    b = self._binding_for_value(d.split(".", 1)[1], value, line, col, g)
                    self.set_inst_attr(Binding(b.name, b.kind, b.line, b.col, target=b.target, attr=self.cur_scope(),
                                               guards=b.guards, alternatives=b.alternatives, str_args=b.str_args))
                elif "." in d and self._patch_root(root):
                    line, col = self.pos(t)
                    self.s.attr_patches.append(AttrPatch(d, lam or dotted(value) or "", line, col, g, self.cur_scope()))
                elif "." in d and self.scope and root not in ("self", "cls"):
                    # a setting written onto an object (the platform's `config.x.y = Enum.M`): profile.config_overrides
                    vt = dotted(value) or (_literal_text(value) if isinstance(value, ast.Constant) else "")
                    if vt:
                        self.scope[-1].attr_sets = self.scope[-1].attr_sets + ((d, vt, t.lineno, g),)
            elif isinstance(t, ast.Subscript) and self.scope and isinstance(t.value, ast.Name) and isinstance(value, ast.Name):
                # `_CACHE[key] = obj` in a function: what the function stores in a table (a memo hit's `return
                # _CACHE[key]` gives a value stored earlier: Resolver.item_value), kept as `_CACHE[]`
                self.expr(t)
                self.scope[-1].attr_sets = self.scope[-1].attr_sets + ((f"{t.value.id}[]", value.id, t.lineno, g),)
            elif isinstance(t, ast.Subscript) and not self.scope and not self.cls and dotted(t.value) == "sys.modules" \
                    and isinstance(t.slice, ast.Constant) and isinstance(t.slice.value, str):
                # `sys.modules["name"] = module`: an import hook (resolver.import_map)
                line, col = self.pos(t)
                self.s.attr_patches.append(AttrPatch(f"sys.modules[{t.slice.value!r}]",
                                                     dotted(value) or _call_text(value), line, col, g))
                self.expr(t)
            elif isinstance(t, (ast.Tuple, ast.List)):
                src = _call_text(value) if isinstance(value, ast.Call) else ""
                for i, e in enumerate(t.elts):
                    if isinstance(e, ast.Attribute) and src and self.scope and self.cls and dotted(e) is not None \
                            and dotted(e).count(".") == 1 and dotted(e).split(".")[0] in ("self", "cls") \
                            and not any(isinstance(x, ast.Starred) for x in t.elts):
                        # `self.a, self.layers = make(...)`: the instance attribute is item i of what make returns
                        line, col = self.pos(e)
                        self.set_inst_attr(Binding(e.attr, "unpack", line, col, target=src, attr=self.cur_scope(), guards=g,
                                                   str_args=(str(i),)))
                        continue
                    if isinstance(e, ast.Name):
                        line, col = self.pos(e)
                        if src and not any(isinstance(x, ast.Starred) for x in t.elts):
                            # `a, b = f(...)`: item i of what f returns (resolver: tuple returns)
                            b = Binding(e.id, "unpack", line, col, target=src, guards=g, str_args=(str(i),))
                        else:
                            b = Binding(e.id, "other", line, col, guards=g)
                        if self.cls and not self.scope:
                            self.cls[-1].attrs.setdefault(e.id, b)
                        else:
                            self.bind(b)
            else:
                self.expr(t)
        if not self.scope and not self.cls:
            for t in targets:
                if isinstance(t, ast.Name) and t.id == "__all__" and isinstance(value, (ast.List, ast.Tuple)):
                    self.s.all_exports = tuple(e.value for e in value.elts if isinstance(e, ast.Constant))

    def _patch_root(self, root: str) -> bool:
        """Can an assignment to an attribute of ``root`` patch another module? At module level, any name
        outside a class body; inside a function, a name the function or the module binds by an import only."""
        if not self.scope:
            return not self.cls
        if root in ("self", "cls"):
            return False
        f = self.scope[-1]
        if any(p.name == root for p in f.params):
            return False
        bs = f.locals.get(root)
        if not bs:
            bs = self.s.bindings.get(root, [])
            if self.prefix is not None:  # a chunk of the module (pyincremental): the module's bindings before it count
                pre = self.prefix.get(root)
                self.deps[root] = import_only(pre)
                if pre:
                    bs = pre + bs
        return bool(import_only(bs))

    def _lambda_wanted(self, t) -> bool:
        """Is a lambda assigned to ``t`` summarised as a function: a replacement of another module's
        attribute, or a module-level name."""
        if isinstance(t, ast.Name):
            return not self.scope and not self.cls
        d = dotted(t) if isinstance(t, ast.Attribute) else None
        return d is not None and "." in d and self._patch_root(d.split(".", 1)[0])

    def _params(self, a: ast.arguments) -> tuple:
        params = []
        pos_defaults = len(a.defaults)
        allpos = list(a.posonlyargs) + list(a.args)
        for i, p in enumerate(allpos):
            has_def = i >= len(allpos) - pos_defaults
            dflt = a.defaults[i - (len(allpos) - pos_defaults)] if has_def else None
            params.append(Param(p.arg, "posonly" if i < len(a.posonlyargs) else "pos", has_def, self._ann(p), _default_text(dflt)))
        if a.vararg:
            params.append(Param(a.vararg.arg, "vararg", False, self._ann(a.vararg)))
        for p, dflt in zip(a.kwonlyargs, a.kw_defaults):
            params.append(Param(p.arg, "kwonly", dflt is not None, self._ann(p), _default_text(dflt)))
        if a.kwarg:
            params.append(Param(a.kwarg.arg, "kwarg", False, self._ann(a.kwarg)))
        return tuple(params)

    def lambda_def(self, node: ast.Lambda) -> str:
        """Summarise a lambda as a function of one return (its body), in ``ModuleSummary.lambdas``; calls in
        its body belong to it. Returns its qualname."""
        line, col = self.pos(node)
        name = f"<lambda:{line}:{col}>"
        qual = ".".join(self.qual + [name])
        fi = FunctionInfo(qualname=qual, name="<lambda>", line=line, col=col, end_line=getattr(node, "end_lineno", None) or line,
                          deco_line=line, params=self._params(node.args), significant=1)
        body = node.body
        fi.returns = (_literal_text(body),)
        fi.return_alts = ((fi.returns[0] or _call_text(body), (), line),)
        const = _const(body)
        if const is not None:
            fi.returns_const = const
        fi.returns_names = tuple(r for r in fi.returns if r and r.isidentifier())
        self._lambda_done.add(id(node))
        saved, self.guards = self.guards, []
        self.scope.append(fi)
        self.qual.append(name)
        self._names.append(set())
        try:
            self.expr(body, in_return=True)
        finally:
            fi.names_read = interned_names(self._names.pop())
            self.qual.pop()
            self.scope.pop()
            self.guards = saved
        self.s.lambdas[qual] = fi
        return qual

    def _binding_for_value(self, name, value, line, col, g) -> Binding:
        d = dotted(value)
        if d is not None:
            return Binding(name, "assign", line, col, target=d, guards=g)
        if isinstance(value, ast.Call):
            fd = dotted(value.func) or _chain_text(value.func)
            sargs = tuple(a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in value.args)
            alts = tuple(_literal_text(a) or _call_text(a) for a in value.args)
            return Binding(name, "call", line, col, target=fd, guards=g, str_args=sargs, alternatives=alts)
        if isinstance(value, ast.IfExp):
            # alternatives in order (body, orelse): a dotted name, or `C()` for a constructor call, '' otherwise;
            # a nested `a if c1 else b if c2 else d` keeps the first test only (the rest is the orelse text)
            alts = (_literal_text(value.body) or _call_text(value.body), _literal_text(value.orelse) or _call_text(value.orelse))
            cond = self.seg(value.test)
            return Binding(name, "ifexp", line, col, target=" ".join((cond or "").split()), guards=g, alternatives=alts)
        if isinstance(value, ast.Dict) and value.keys and all(k is not None for k in value.keys):
            pairs = tuple((" ".join((self.seg(k) or "?").split()), _literal_text(v) or _call_text(v))
                          for k, v in zip(value.keys, value.values))
            if any(v for _k, v in pairs):
                return Binding(name, "dict", line, col, target=None, guards=g, alternatives=pairs)
        if isinstance(value, ast.Subscript):
            base = dotted(value.value) or _call_text(value.value) or None
            if base is not None:
                return Binding(name, "subscript", line, col, target=base, guards=g,
                               str_args=(" ".join((self.seg(value.slice) or "").split()),))
        if isinstance(value, ast.Lambda):
            return Binding(name, "lambda", line, col, guards=g)
        if isinstance(value, (ast.BoolOp, ast.Compare, ast.UnaryOp)):
            # a condition stored for later (`self.use_x = has_x() and not c`): kept verbatim for folding
            return Binding(name, "other", line, col, guards=g, str_args=(" ".join((self.seg(value) or "").split()),))
        return Binding(name, "other", line, col, target=_literal_text(value) or None, guards=g)

    def decorators(self, node) -> tuple:
        out = []
        for d in node.decorator_list:
            self.expr(d)
            line, col = self.pos(d)
            if isinstance(d, ast.Call):
                out.append(
                    Decorator(
                        dotted(d.func) or "", line, col, True,
                        tuple(a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in d.args),
                        tuple(_literal_text(a) for a in d.args),
                        tuple((k.arg or "**", _literal_text(k.value)) for k in d.keywords),
                    )
                )
            else:
                out.append(Decorator(dotted(d) or "", line, col, False))
        return tuple(out)

    def funcdef(self, node) -> None:
        decos = self.decorators(node)
        for dflt in list(node.args.defaults) + [x for x in node.args.kw_defaults if x is not None]:
            self.expr(dflt)
        qual = ".".join(self.qual + [node.name])
        line, col = node.lineno, self.lm.cp(node.lineno, node.col_offset)
        # ast gives the `def` line as lineno (3.8+), decorators have their own lines
        deco_line = min([d.line for d in decos] + [line])
        a = node.args
        params = self._params(a)
        doc = _first_doc_line(node)
        fi = FunctionInfo(
            qualname=qual, name=node.name, line=line, col=col, end_line=node.end_lineno or line,
            deco_line=deco_line, params=params, decorators=decos,
            docstring=doc,
            class_name=".".join(self.qual) if self.cls and self.qual and self.qual[-1] == self.cls[-1].name else None,
            is_async=isinstance(node, ast.AsyncFunctionDef),
        )
        for d in decos:
            if d.func.endswith("wraps") and d.arg_texts:
                fi.wraps = d.arg_texts[0]
        fi.dummy = _dummy_reason(node.body)
        fi.significant = sum(
            1 for s in node.body if not (_is_docstring(s) or _is_log_call(s) or isinstance(s, (ast.Pass, ast.Assert)))
        )
        fi.asserts = tuple((s.lineno, text) for s in node.body if type(s) is ast.Assert
                           for text in (" ".join((self.seg(s.test) or "").split()),) if text)
        # outer binding
        if self.cls and not self.scope:
            self.cls[-1].methods[node.name] = qual
        else:
            self.bind(Binding(node.name, "def", line, col, target=qual, guards=tuple(self.guards)))
            if self.scope:
                self.scope[-1].inner_defs = self.scope[-1].inner_defs + (qual,)
        self.s.functions[qual] = fi
        # body
        saved_guards = self.guards
        self.guards = []
        self.scope.append(fi)
        self._rets.append([])
        self._names.append(set())
        self.qual.append(node.name)
        saved_cls = self.cls
        self.cls = saved_cls if saved_cls and fi.class_name else []
        self.body(node.body)
        self.cls = saved_cls
        self.qual.pop()
        self.scope.pop()
        ret_nodes = self._rets.pop()
        names = self._names.pop()
        self.guards = saved_guards
        # returns, reads
        rets = []
        consts = set()
        const_ok = True
        kw_reads = set()
        kwarg = a.kwarg.arg if a.kwarg else None
        alts = []
        for rv, rguards, rline in ret_nodes:
            if rv is None:
                rets.append("None")
                consts.add(("const", None))
            else:
                rets.append(_literal_text(rv))
                c = _const(rv)
                if c is None:
                    const_ok = False
                else:
                    consts.add(c)
            text = rets[-1] or (_call_text(rv) if rv is not None else "")
            if not text and isinstance(rv, ast.Tuple) and rv.elts and all(dotted(e) is not None for e in rv.elts):
                text = "(" + ", ".join(dotted(e) for e in rv.elts) + ",)"  # a tuple of names (for unpacking)
            if not text and isinstance(rv, ast.Subscript) and dotted(rv.value) is not None:
                # `return table[key]`: the item of a name, with the key verbatim
                text = f"{dotted(rv.value)}[{' '.join((self.seg(rv.slice) or '?').split())}]"
            alts.append((text, rguards, rline))
        if kwarg:
            for sub in _walk_own(node):
                if isinstance(sub, ast.Call):
                    fd = dotted(sub.func) or ""
                    if fd in (f"{kwarg}.get", f"{kwarg}.pop", f"{kwarg}.setdefault") and sub.args:
                        if isinstance(sub.args[0], ast.Constant) and isinstance(sub.args[0].value, str):
                            kw_reads.add(sub.args[0].value)
                elif isinstance(sub, ast.Subscript) and dotted(sub.value) == kwarg:
                    sl = sub.slice
                    if isinstance(sl, ast.Constant) and isinstance(sl.value, str):
                        kw_reads.add(sl.value)
                elif isinstance(sub, ast.Compare) and len(sub.ops) == 1 and isinstance(sub.ops[0], ast.In):
                    if dotted(sub.comparators[0]) == kwarg and isinstance(sub.left, ast.Constant):
                        kw_reads.add(str(sub.left.value))
        fi.returns = tuple(rets)
        fi.return_alts = tuple(alts)
        if const_ok and len(consts) == 1 and rets:
            fi.returns_const = next(iter(consts))
        fi.names_read = interned_names(names)
        fi.kw_reads = _frozen(kw_reads)
        fi.returns_names = tuple(r for r in rets if r and "." not in r and r.isidentifier())

    def _ann(self, p) -> str | None:
        if p.annotation is None:
            return None
        seg = self.seg(p.annotation)
        return " ".join(seg.split()) if seg else _literal_text(p.annotation)

    def classdef(self, node) -> None:
        decos = self.decorators(node)
        for b in node.bases:
            self.expr(b)
        for k in node.keywords:
            self.expr(k.value)
        qual = ".".join(self.qual + [node.name])
        line, col = node.lineno, self.lm.cp(node.lineno, node.col_offset)
        doc = _first_doc_line(node)
        ci = ClassInfo(
            qualname=qual, name=node.name, line=line, col=col, end_line=node.end_lineno or line,
            deco_line=min([d.line for d in decos] + [line]),
            bases=tuple(dotted(b.value if isinstance(b, ast.Subscript) else b) or "" for b in node.bases), decorators=decos,
            is_dataclass=any(d.func.split(".")[-1] == "dataclass" for d in decos),
            docstring=doc,
        )
        self.s.classes[qual] = ci
        if self.scope or self.cls:
            if self.scope:
                self.bind(Binding(node.name, "class", line, col, target=qual, guards=tuple(self.guards)))
            elif self.cls:
                self.cls[-1].attrs.setdefault(node.name, Binding(node.name, "class", line, col, target=qual))
        else:
            self.bind(Binding(node.name, "class", line, col, target=qual, guards=tuple(self.guards)))
        saved_guards, saved_scope = self.guards, self.scope
        self.guards, self.scope = [], []
        self.cls.append(ci)
        self.qual.append(node.name)
        self.body(node.body)
        self.qual.pop()
        self.cls.pop()
        self.guards, self.scope = saved_guards, saved_scope

    # -- expressions -------------------------------------------------------
    def expr(self, node: ast.AST, assigned_to: str | None = None, in_return: bool = False) -> None:
        stack = [node]
        names = self._names[-1] if self._names else None
        want_refs = self.want_refs
        pop, push, extend = stack.pop, stack.append, stack.extend
        while stack:
            n = pop()
            t = type(n)
            if t is ast.Constant:
                continue
            if t is ast.Name:
                if names is not None:
                    names.add(n.id)
                if want_refs:
                    self.ref(n)
            elif t is ast.Call:
                fd = self.call(n, assigned_to if n is node else None, in_return and n is node)
                extend(n.args)
                extend(k.value for k in n.keywords)
                f = n.func
                if type(f) is ast.Subscript:
                    push(f.value)
                    push(f.slice)
                elif fd is None:
                    push(f)
                else:
                    if names is not None:
                        names.add(fd.split(".", 1)[0])
                    if want_refs:
                        self.ref(f)
            elif t is ast.Attribute:
                d = dotted(n)
                if d is not None:
                    if names is not None:
                        names.add(d.split(".", 1)[0])
                    if want_refs:
                        self.ref(n)
                else:
                    push(n.value)
            elif t is ast.Lambda:
                if id(n) not in self._lambda_done:
                    push(n.body)
            # children pushed in field order (the last is visited first), as ast.iter_child_nodes
            # would: call sites keep their order in the summary
            elif t is ast.BinOp:
                push(n.left)
                push(n.right)
            elif t is ast.Compare:
                push(n.left)
                extend(n.comparators)
            elif t is ast.Subscript:
                push(n.value)
                push(n.slice)
            elif t is ast.Tuple or t is ast.List or t is ast.Set:
                extend(n.elts)
            elif t is ast.BoolOp:
                extend(n.values)
            elif t is ast.UnaryOp:
                push(n.operand)
            elif t is ast.keyword or t is ast.Starred:
                push(n.value)
            elif t is ast.NamedExpr:
                # `if x := f(...):` binds x; kept as a computed value (not followed: it names what decides, e.g. a
                # layer's quantization method, whose candidates would be every quantization config)
                if isinstance(n.target, ast.Name) and not (self.cls and not self.scope):
                    line, col = self.pos(n.target)
                    self.bind(Binding(n.target.id, "other", line, col, guards=tuple(self.guards)))
                push(n.value)
            else:  # comprehensions, dicts, f-strings, slices, ...: every child but load/store markers
                extend(c for c in ast.iter_child_nodes(n) if not isinstance(c, ast.expr_context))

    def ref(self, node) -> None:
        if not self.want_refs:
            return
        d = dotted(node)
        if d is None:
            return
        segs = []
        n = node
        while isinstance(n, ast.Attribute):
            segs.append(self.end(n)[1])
            n = n.value
        segs.append(self.end(n)[1])
        line, col = self.pos(node)
        el, ec = self.end(node)
        if el != line:
            return
        self.s.refs.append(Ref(line, col, ec, d, tuple(reversed(segs)), self.cur_scope()))

    def call(self, n: ast.Call, assigned_to, in_return) -> str | None:
        """Record a call site; returns the dotted callee (None when it is not a Name/Attribute chain)."""
        f = n.func
        launch = False
        if isinstance(f, ast.Subscript):
            fd = dotted(f.value)
            launch = fd is not None
            fnode = f.value
        else:
            fd = dotted(f)
            fnode = f
            if fd is None and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) \
                    and dotted(f.value.func) == "super" and not f.value.args and not f.value.keywords:
                # `super().__init__(...)`: constructor arguments flow to the base class (resolver: _ctor_argument);
                # `super().forward(...)`: the base class's method runs (resolver: super_attr)
                fd = f"super().{f.attr}"
        if self._ascii:  # byte columns are code point columns (most files): no line map
            line, col, el, ec = n.lineno, n.col_offset, n.end_lineno or n.lineno, n.end_col_offset or n.col_offset
            fl, fc = fnode.lineno, fnode.col_offset
            fel, fec = fnode.end_lineno or fl, fnode.end_col_offset or fc
        else:
            line, col = self.pos(n)
            el, ec = self.end(n)
            fl, fc = self.pos(fnode)
            fel, fec = self.end(fnode)
        fi = self.scope[-1] if self.scope else None
        forwards = False
        args, kws = n.args, n.keywords
        n_starred = 0
        for a in args:
            if type(a) is _Starred:
                n_starred += 1
        star_kwargs = False
        for k in kws:
            if k.arg is None:
                star_kwargs = True
                break
        if fi is not None and (n_starred or star_kwargs):
            va = next((p.name for p in fi.params if p.kind == "vararg"), None)
            kw = next((p.name for p in fi.params if p.kind == "kwarg"), None)
            for a in args:
                if isinstance(a, ast.Starred) and isinstance(a.value, ast.Name) and a.value.id == va:
                    forwards = True
            for k in kws:
                if k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kw:
                    forwards = True
        sub = ""
        if isinstance(f, ast.Subscript):
            sub = " ".join((self.seg(f.slice) or "").split())
        # `a.items[k].run(...)`: the callee through a subscript, key elided (`a.items[].run`); still walked as an expression
        func = fd or (_chain_text(f) if isinstance(f, (ast.Attribute, ast.Call)) else "")
        tup, num = self._tup, self._int
        if args:
            str_args = tup(t := tuple([a.value if type(a) is _Constant and type(a.value) is str else None for a in args]), t)
            arg_texts = tup(t := tuple([_literal_text(a) for a in args]), t)
        else:
            str_args = arg_texts = ()
        if kws:
            keywords = tup(t := tuple([k.arg for k in kws if k.arg]), t)
            kw_texts = tup(t := tuple([(k.arg, _literal_text(k.value)) for k in kws if k.arg]), t)
        else:
            keywords = kw_texts = ()
        guards = tup(t := tuple(self.guards), t) if self.guards else ()
        if line > 256:
            line, el, fl, fel = num(line, line), num(el, el), num(fl, fl), num(fel, fel)
        cs = CallSite(
            line, col, el, ec, fl, fc, fel, fec, func, fi.qualname if fi is not None else "", launch,
            len(args) - n_starred, keywords, n_starred > 0, star_kwargs, str_args, arg_texts, kw_texts,
            guards, forwards, in_return, assigned_to, sub,
        )
        idx = len(self.s.calls)
        self.s.calls.append(cs)
        if fi is not None:
            fi.calls.append(idx)
        if fd in ("setattr",) and len(n.args) >= 3 and isinstance(n.args[1], ast.Constant):
            tgt = dotted(n.args[0])
            if tgt and self._patch_root(tgt.split(".", 1)[0]):
                v = n.args[2]
                val = self.lambda_def(v) if type(v) is ast.Lambda else dotted(v) or ""
                self.s.attr_patches.append(AttrPatch(f"{tgt}.{n.args[1].value}", val, line, col, tuple(self.guards),
                                                     self.cur_scope()))
        return None if isinstance(f, ast.Subscript) else fd


def _terminates(st: ast.stmt) -> bool:
    """Does the block ending with ``st`` always leave (return, raise, continue, break), including an
    `if`/`else` whose every branch leaves?"""
    t = type(st)
    if t in (ast.Return, ast.Raise, ast.Continue, ast.Break):
        return True
    if t is ast.If:
        return bool(st.orelse) and bool(st.body) and _terminates(st.body[-1]) and _terminates(st.orelse[-1])
    return False


def _walk_own(fn: ast.AST):
    """Walk a function body without descending into nested defs/classes/lambdas."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))


@functools.lru_cache(maxsize=2)
def _parse_memo(text: str) -> tuple:
    try:
        return parse_tolerant(text), None
    except SyntaxError as e:  # a failed recovery is as costly as a parse per broken statement: kept too
        e.__context__ = e.__cause__ = None  # (not the frames of the failed parse: kept with the text)
        return None, e.with_traceback(None)


def parse_source(text: str) -> Parsed:
    """The error-tolerant parse of ``text`` (``pyrecover.parse_tolerant``: a syntax error blanks
    the broken statements only), memoised for the two latest texts: the index summary and the
    rules' expression facts of an edited buffer share one parse. Callers must not mutate the
    tree. Raises ``SyntaxError`` only when recovery fails (memoised as well), and what ``ast.parse``
    raises for input that is not text (those failures are not memoised)."""
    parsed, error = _parse_memo(text)
    if error is not None:
        raise error.with_traceback(None)
    return parsed


def _clear_parse_memos() -> None:
    _parse_memo.cache_clear()
    parse_chunk.cache_clear()


parse_source.cache_clear = _clear_parse_memos  # what tests and benchmarks call between runs


def parse_module(text: str) -> ast.Module:
    """The tree of :func:`parse_source` (positions are those of ``text``)."""
    return parse_source(text).tree


def summarize(text: str, path: str, sha: str, refs: bool = False, should_stop=None) -> ModuleSummary:
    """Build the summary of one module's source text. Never raises on bad input.

    ``should_stop``: a callable asked after the parse and every 64 statements; when it says so,
    :class:`Stopped` is raised (the only exception).

    ``refs=True`` also records every name/attribute chain with its range (for
    editor positions); the cached summaries used for resolution leave them out.
    A syntax error leaves out only the broken statements (``syntax_errors`` says where).
    """
    try:
        parsed = parse_source(text)
    except SyntaxError as e:
        b = _Builder(text, path, sha)
        b.s.error = f"syntax error: {e.msg}"
        b.s.error_line = e.lineno or 0
        b.s.syntax_errors = (syntax_issue(text, e),)
        return b.s
    except (ValueError, RecursionError, MemoryError) as e:  # NUL bytes, absurd nesting
        b = _Builder(text, path, sha)
        b.s.error = f"cannot parse: {type(e).__name__}: {e}"
        return b.s
    tree = parsed.tree
    if should_stop is not None and should_stop():
        raise Stopped(f"{path}: summary stopped after the parse")
    # the blanked text: same lines and columns, and source segments that match the tree
    b = _Builder(parsed.text, path, sha)
    b.should_stop = should_stop
    b.want_refs = refs
    b.s.syntax_errors = parsed.errors
    b._src = parsed.text
    try:
        b.body(tree.body)
    except RecursionError:
        b.s.error = "expression nesting too deep to analyse"
    b.s.has_getattr = "__getattr__" in b.s.bindings
    b._src = ""
    return b.s


def decode_source(data: bytes) -> str | None:
    """Decode Python source bytes; None for binary files."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            return data.decode("latin-1")
        except Exception:
            return None
