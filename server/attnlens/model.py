"""Result types of the analysis (pure data, JSON-serialisable, no LSP types) and their kinds.

The kinds are str enums (:class:`Kind`): ``FinalKind``, ``ForkKind``, ``HopKind`` and ``Reach`` (the value
kinds of a walk, ``ValKind``, are in :mod:`attnlens.walk`). A member serialises, formats and compares as its
plain string, so JSON output and string comparisons elsewhere are unchanged."""

from __future__ import annotations

import ast
import functools
from dataclasses import asdict, dataclass, field
from enum import Enum

class Kind(str, Enum):
    """A kind of the analysis: a str enum whose members are their JSON spelling.

    A member is the plain string in every way output sees it: ``==`` and ``hash`` (dict keys, sets, ``in``
    tuples of strings), ``str()``, ``format()``/f-strings, ``%s``, ``repr()`` (and so ``str`` of a tuple that
    holds one), ``json.dumps`` and sorting. A kind read back as a plain string (JSON, an older cache)
    compares equal to its member; nothing may rely on ``is`` or on ``type(x) is str``."""

    __str__ = str.__str__
    __format__ = str.__format__
    __repr__ = str.__repr__


class FinalKind(Kind):
    """What a chain ends in (``Final.kind``)."""

    PYTHON_FUNCTION = "python_function"
    PYTHON_CLASS = "python_class"
    TORCH_OP = "torch_op"
    TRITON_KERNEL = "triton_kernel"
    EXTENSION_FUNCTION = "extension_function"
    DUMMY = "dummy"
    NOT_INSTALLED = "not_installed"
    UNRESOLVED = "unresolved"
    FORK = "fork"  # not a leaf: a choice point whose branches are chains of their own (Final.fork)


# the final kinds by their old names (lsp/ and cli.py spell them so)
PYTHON_FUNCTION = FinalKind.PYTHON_FUNCTION
PYTHON_CLASS = FinalKind.PYTHON_CLASS
TORCH_OP = FinalKind.TORCH_OP
TRITON_KERNEL = FinalKind.TRITON_KERNEL
EXTENSION_FUNCTION = FinalKind.EXTENSION_FUNCTION
DUMMY = FinalKind.DUMMY
NOT_INSTALLED = FinalKind.NOT_INSTALLED
UNRESOLVED = FinalKind.UNRESOLVED
FORK = FinalKind.FORK
# the leaf kinds (every final kind but FORK)
FINAL_KINDS = tuple(k for k in FinalKind if k != FinalKind.FORK)
KERNEL_KINDS = (FinalKind.TORCH_OP, FinalKind.TRITON_KERNEL, FinalKind.EXTENSION_FUNCTION)
# leaves that end a branch in something worth showing as "what runs"
RUNTIME_LEAF_KINDS = KERNEL_KINDS + (FinalKind.DUMMY, FinalKind.NOT_INSTALLED)


class ForkKind(Kind):
    """How a choice point decides (``Fork.kind``)."""

    CALLS = "calls"  # a function body runs these calls, each under its own guard (if/else inside the body)
    IFEXP = "conditional_expression"  # `f if c else g`
    DICT = "dict_key"  # `{"a": f, "b": g}[key]`
    FACTORY = "factory_return"  # `x = make()` where make returns one of several classes/callables
    RETURNS = "multiple_returns"  # a function with several `return` statements of callables/classes
    DISPATCH_KEY = "dispatch_key"  # a torch op with several kernels, one per dispatch key
    SELECTED_BACKEND = "selected_backend"  # `backend.get_impl_cls()` of whichever backend vLLM selected
    SUBCLASS = "subclass"  # a method of a declared (annotated) base type: each workspace subclass that overrides it
    ASSIGNMENTS = "assignments"  # a local bound differently on the branches before its use (`if a: f = x elif b: f = y`)
    PATCHED = "patched"  # an upstream attribute replaced at import time under conditions (and the original)
    MEMBER = "enum_member"  # an enum member chosen at run time (a config value, an item of a priority list)
    IR_PROVIDER = "ir_provider"  # a vLLM IR op: the first provider in the platform's priority that is supported


class Reach(Kind):
    """Reachability of a branch or a leaf (JSON spelling, ``reach_word``)."""

    LIVE = "live"
    DEAD = "dead"
    RUNTIME = "runtime"


class HopKind(Kind):
    """What one step of a chain followed (``Hop.kind``): every kind the analysis produces."""

    REGISTRY = "registry"  # a value registered for an enum member (`register_backend(Enum.X, class_path=...)`)
    CALL = "call"
    IMPORT = "import"
    CONDITIONAL_IMPORT = "conditional_import"
    LAZY_IMPORT = "lazy_import"
    DYNAMIC_IMPORT = "dynamic_import"  # importlib.import_module / getattr with literal strings
    REEXPORT = "reexport"
    ALIAS = "alias"
    WRAPPER = "wrapper"
    DECORATOR = "decorator"
    AUTOGRAD_APPLY = "autograd_apply"
    PATCH = "patch"
    TORCH_OP = "torch_op"
    OP_REGISTRATION = "op_registration"
    TRITON_LAUNCH = "triton_launch"
    DEFINITION = "definition"  # the C++ function an ops.impl binds, the symbol a trace starts at
    EXTENSION = "extension"  # a schema found in a native extension
    DUMMY = "dummy"
    NOT_INSTALLED = "not_installed"
    UNRESOLVED = "unresolved"
    PLATFORM = "platform"  # a query of the current platform
    SELECTION = "selection"  # code that never runs on this platform (never selected)


_RUNTIME_KINDS = frozenset(RUNTIME_LEAF_KINDS)  # (hashed as their strings: see Kind)
_RUNTIME_HOPS = (HopKind.TORCH_OP, HopKind.PATCH)


# the hops that import what follows (plain, conditional, lazy, importlib, a re-export)
IMPORT_HOP_KINDS = (HopKind.IMPORT, HopKind.CONDITIONAL_IMPORT, HopKind.LAZY_IMPORT, HopKind.DYNAMIC_IMPORT, HopKind.REEXPORT)

# bounds of one tree: deeper forks or more leaves end in a `truncated` marker, never a silent cut
MAX_FORK_DEPTH = 8
MAX_LEAVES = 48


@dataclass
class Hop:
    kind: HopKind
    path: str
    line: int
    symbol: str
    detail: str = ""
    condition: str | None = None
    reachable: bool | None = None  # value of `condition` under the platform profile
    col: int = 0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Registration:
    path: str
    line: int
    dispatch_key: str | None
    kind: str = "cpp_impl"  # cpp_def | cpp_impl | python | extension_schema
    function: str | None = None
    function_path: str | None = None
    function_line: int | None = None
    schema: str | None = None
    condition: str | None = None  # build-flag condition around the registration (`#ifdef X`, `not defined(X)`)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Final:
    kind: FinalKind
    path: str | None
    line: int | None
    symbol: str
    package: str | None = None
    reason: str | None = None
    detail: str = ""
    registrations: list[Registration] = field(default_factory=list)
    schema: str | None = None
    params: list[str] = field(default_factory=list)
    constexprs: list[str] = field(default_factory=list)
    providers: list[str] = field(default_factory=list)
    fork: "Fork | None" = None  # set when kind is FinalKind.FORK

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in ("kind", "path", "line", "symbol", "package", "reason", "detail", "schema",
                                             "params", "constexprs", "providers")}
        d["params"] = list(self.params)
        d["constexprs"] = list(self.constexprs)
        d["providers"] = list(self.providers)
        d["registrations"] = [r.to_json() for r in self.registrations]
        if self.fork is not None:
            d["fork"] = self.fork.header_json()
        return d


def reach_word(v: bool | None) -> Reach:
    return Reach.LIVE if v is True else Reach.DEAD if v is False else Reach.RUNTIME


@dataclass
class Branch:
    """One alternative of a fork: the condition that selects it and the chain that follows."""

    condition: str | None  # the deciding expression for this branch, verbatim (None: always taken)
    reachable: bool | None  # the condition under the platform profile: True live, False dead, None runtime
    label: str  # what the branch is (`line 42: kernel_a[grid]`, `"fp8" -> CacheFp8`, `returns A`)
    chain: "Chain"
    path: str | None = None  # where the branch is decided (the call, the dict entry, the return)
    line: int | None = None
    # what the call being followed fixed that decided the branch (`the call into f: mode='scale'`); None when the
    # platform profile decides it, or nothing does (then "dead" means: on this platform)
    decided: str | None = None
    # the branch is dead because the function raises before it: an `if c: raise ...` above the call whose `c` holds
    # here (`if not current_platform.is_cuda(): raise NotImplementedError`); not in JSON (the condition says it)
    raises: bool = False
    # the top-level `and` operands of a run-time condition that the call being followed makes true, though the
    # platform alone leaves them open (`not (dim == 0 and ...)` at a `dim=1` call): "decided at run time by" leaves
    # them out; not in JSON (the condition is verbatim there)
    held: tuple = ()
    # (path, first line, last line) of the function whose parameters the call fixed: a guard of that function on the
    # way (a local bound after an early `return`) is read with ``held`` too
    held_span: tuple = ()


@dataclass
class Fork:
    """A choice point among statically visible alternatives."""

    kind: ForkKind
    decided_by: str | None  # the expression that decides (verbatim), when there is one
    path: str | None
    line: int | None
    symbol: str  # the dispatcher (function, name or op) that forks
    branches: list[Branch] = field(default_factory=list)
    truncated: str | None = None  # why branches were left out (depth / width bound), when they were

    def header_json(self) -> dict:
        return {"kind": self.kind, "decided_by": self.decided_by, "path": self.path, "line": self.line,
                "symbol": self.symbol, "truncated": self.truncated}


@dataclass
class Leaf:
    """A flat view of one leaf of a tree: the final, the conditions from the root, the reachability."""

    final: Final
    conditions: list[str]
    reachable: bool | None  # False when any branch on the way is dead; None when any is decided at run time
    branch_path: list[str]  # the labels of the branches taken from the root
    # dead only because the call being followed decided a branch (Branch.decided), not the platform (not in JSON)
    dead_at_call: bool = False

    def to_json(self) -> dict:
        f = self.final
        return {"kind": f.kind, "symbol": f.symbol, "path": f.path, "line": f.line, "package": f.package,
                "reason": f.reason, "conditions": list(self.conditions), "branches": list(self.branch_path),
                "reachability": reach_word(self.reachable)}


@dataclass
class Chain:
    hops: list[Hop]
    final: Final
    reachable: bool | None
    partial: bool = False
    upstream: dict | None = None  # upstream counterpart of the first resolved symbol, when known
    # marked with the never-selected set of an earlier edit (a request does not wait for it to be checked
    # again: ``Workspace.never_selected(provisional=True)``); not kept in caches, answered again once it is
    provisional: bool = False

    # -- the tree -------------------------------------------------------------
    def leaves(self) -> list[Leaf]:
        """Every leaf of the tree, depth first, with the conditions and reachability from the root."""
        out: list[Leaf] = []
        _collect_leaves(self, [], [], True, out, 0, False)
        return out

    def live_leaves(self) -> list[Leaf]:
        """Leaves that can run on this platform (live or decided at run time)."""
        return [lf for lf in self.leaves() if lf.reachable is not False]

    def single_leaf(self) -> Final | None:
        """The leaf when exactly one can run, else None."""
        live = self.live_leaves()
        return live[0].final if len(live) == 1 else None

    def is_tree(self) -> bool:
        return self.final.fork is not None

    def truncated(self) -> bool:
        return any(f.truncated for f in self.forks())

    def truncated_live(self) -> bool:
        """Was the tree cut by its bounds on a path that can run: outside every branch (and hop) that is not taken
        here? A cut only inside such branches leaves what runs, and its conditions, complete."""
        stack = [self]
        while stack:
            c = stack.pop()
            if any(h.reachable is False for h in c.hops):
                continue
            fk = c.final.fork
            if fk is not None:
                if fk.truncated:
                    return True
                stack.extend(b.chain for b in fk.branches if b.reachable is not False)
        return False

    def leaf_count(self) -> int:
        """``len(self.leaves())``, without making the leaves (the resolver's leaf budget asks it per branch)."""
        n = 0
        stack = [self]
        while stack:
            c = stack.pop()
            fk = c.final.fork
            if fk is None:
                n += 1
            else:
                stack.extend(b.chain for b in fk.branches)
        return n

    def reaches_runtime(self) -> bool:
        """Does the tree end in (or pass through) kernel-like code: a leaf of RUNTIME_LEAF_KINDS, or a
        torch-op or patch hop on the trunk or a branch? (One walk of the nodes: the resolver asks it of every
        branch it expands.)"""
        stack = [self]
        while stack:
            c = stack.pop()
            fk = c.final.fork
            if fk is None:
                if c.final.kind in _RUNTIME_KINDS:
                    return True
            else:
                stack.extend(b.chain for b in fk.branches)
            for h in c.hops:
                if h.kind in _RUNTIME_HOPS:
                    return True
        return False

    def forks(self) -> list[Fork]:
        out: list[Fork] = []
        stack = [self]
        while stack:
            c = stack.pop()
            if c.final.fork is not None:
                out.append(c.final.fork)
                stack.extend(b.chain for b in c.final.fork.branches)
        return out

    def tree_json(self) -> dict:
        d: dict = {"hops": [h.to_json() for h in self.hops]}
        f = self.final
        if f.fork is None:
            d["leaf"] = f.to_json()
        else:
            fk = f.fork
            d["fork"] = fk.header_json()
            d["fork"]["detail"] = f.detail
            d["branches"] = [{"condition": b.condition, "reachability": reach_word(b.reachable), "label": b.label,
                              "path": b.path, "line": b.line, "node": b.chain.tree_json(),
                              **({"decided": b.decided} if b.decided else {})} for b in fk.branches]
        return d

    def to_json(self) -> dict:
        leaves = self.leaves()
        live = [lf for lf in leaves if lf.reachable is not False]
        d = {
            "hops": [h.to_json() for h in self.hops],
            "final": (live[0].final.to_json() if len(live) == 1 else self.final.to_json()),
            "reachable": self.reachable,
            "partial": self.partial,
            "tree": self.tree_json(),
            "leaves": [lf.to_json() for lf in leaves],
            "truncated": self.truncated(),
        }
        if self.upstream:
            d["upstream"] = self.upstream
        return d


def _collect_leaves(chain: "Chain", conds: list, labels: list, reach, out: list, depth: int, at_call: bool) -> None:
    f = chain.final
    if reach is not False and chain.reachable is False:
        at_call = False
    reach = combine_reachability([reach, chain.reachable])
    # guards on the trunk that the profile does not prove true are part of the path's conditions
    conds = list(conds)
    for h in chain.hops:
        if h.condition and h.reachable is not True and h.condition not in conds:
            conds.append(h.condition)
    if f.fork is None:
        out.append(Leaf(f, list(conds), reach, list(labels), reach is False and at_call))
        return
    for b in f.fork.branches:
        r = combine_reachability([reach, b.reachable])
        sub = conds + ([b.condition] if b.condition and b.condition not in conds else [])
        _collect_leaves(b.chain, sub, labels + [b.label], r, out, depth + 1,
                        at_call if reach is False else bool(b.decided) and b.reachable is False)


def combine_reachability(values) -> bool | None:
    """False when one of ``values`` is False, True when all are True (or there are none), else None. (A loop,
    not any/all over generators: 1.2 million calls in `attnlens sites` over upstream vLLM.)"""
    out: bool | None = True
    for v in values:
        if v is False:
            return False
        if v is not True:
            out = None
    return out


@functools.lru_cache(maxsize=4096)
def loose_condition(text: str) -> bool:
    """Does the condition ``text`` bind looser than ``and`` (``a or b``, ``x if c else y``, a lambda), so that
    joining it to other conditions with ``and`` needs parentheses?"""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return False
    return isinstance(node, (ast.IfExp, ast.Lambda, ast.NamedExpr)) or (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or))


@functools.lru_cache(maxsize=4096)
def conjuncts(text: str) -> tuple:
    """The top-level ``and`` operands of a one-line condition, as written (``a and (b or c)`` -> ``a``, ``b or c``);
    the condition itself when it is not an ``and`` (or not one line of Python)."""
    if "and" not in text or "\n" in text:
        return (text,)
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return (text,)
    if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And)):
        return (text,)
    src = text.strip()
    raw = src.encode("utf-8")  # (the offsets count UTF-8 bytes)
    return tuple(raw[v.col_offset:v.end_col_offset].decode("utf-8") for v in node.values)


def extension_holds(module: str, ns: str) -> bool:
    """Is extension module ``module`` (``pkg._C``) named like torch-op namespace ``ns``: the same last name, or the
    same stem up to the ``C`` part of a torch extension's name (``_C``, ``_C_stable_libtorch`` and
    ``_C_cache_ops`` are all ``_C``; ``_moe_C`` and ``_moe_C_stable_libtorch`` are ``_moe_C``)?"""
    last = module.rpartition(".")[2]
    return last == ns or _ext_stem(last) == _ext_stem(ns) != ()


def _ext_stem(name: str) -> tuple:
    parts = name.split("_")
    return tuple(parts[: parts.index("C") + 1]) if "C" in parts else ()


def or_joined(texts: list) -> str:
    """Conditions joined by ``or``, one that is an ``and`` or binds looser in parentheses (``(a and b) or not (a)``);
    a text said twice is said once."""
    parts = list(dict.fromkeys(texts))
    return " or ".join(f"({t})" if len(parts) > 1 and (len(conjuncts(t)) > 1 or loose_condition(t)) else t for t in parts)


def and_joined(texts: list) -> str:
    """Conditions joined by ``and``, each that binds looser than ``and`` in parentheses; an operand already said (the
    same text, or an ``and`` operand of one) is said once."""
    parts: list = []
    for t in texts:
        for c in conjuncts(t) if len(texts) > 1 else (t,):
            if c not in parts:
                parts.append(c)
    return " and ".join(f"({t})" if len(parts) > 1 and loose_condition(t) else t for t in parts)
