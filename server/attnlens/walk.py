"""The state of one resolution: the values a walk meets and the walk itself.

:class:`Val` is a value met while following a name (a module, a function, a class, an instance, a torch op,
a choice among alternatives, ...: :class:`ValKind`); :class:`Alt` is one alternative of a value chosen at run time
(:func:`alts_value` makes such a value, a fork once followed); :class:`Walk` is the mutable state of one
resolution (the hops so far, the depth, what was visited, the time budget and the tree's bounds).

A leaf below the resolver: it imports the result types (:mod:`attnlens.model`), the index's module and
summary types and the standard library only, so that the resolver's helpers (:mod:`attnlens.profile`,
:mod:`attnlens.patches`, :mod:`attnlens.torchops`, :mod:`attnlens.envflags`) and the features above use
the walk state without importing :mod:`attnlens.resolver` (the import-linter contract says so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import model as M
from .index import Module
from .model import ForkKind, Hop, Kind
from .pyindex import ClassInfo, FunctionInfo


class ValKind(Kind):
    """What a value met during a walk is (``Val.kind``)."""

    MODULE = "module"
    NAMESPACE = "namespace"  # a namespace package
    FUNCTION = "function"  # a def, a method or a lambda
    CLASS = "class"
    INSTANCE = "instance"  # an object of a class
    ENUM_MEMBER = "enum_member"
    TORCH = "torch"  # the torch module
    TORCH_OPS = "torch_ops"  # torch.ops, or one of its namespaces
    TORCH_OP = "torch_op"
    EXT_MODULE = "ext_module"  # a native extension module
    EXT_ATTR = "ext_attr"  # an attribute of one
    NOT_INSTALLED = "not_installed"  # something of a package that is not installed
    PLATFORM = "platform"  # vLLM's current_platform
    BUILTIN = "builtin"
    DICT = "dict"  # a literal dict of callables
    LIST = "list"  # a literal list
    CONTAINER = "container"  # an annotated container (`list[T]`): extra["item"] is the item's value
    CALLABLE = "callable"  # an annotated callable (`Callable[[], T]`): extra["returns"] is what calling it gives
    ALTS = "alts"  # one of several alternatives (a fork once followed): extra["alts"] holds the Alts
    UNKNOWN = "unknown"  # not followed; `reason` says why


@dataclass
class Val:
    """A resolved value during a walk."""

    kind: ValKind
    module: Module | None = None
    qual: str = ""  # function/class qualname, module name, op name, ...
    path: str | None = None
    line: int | None = None
    reason: str = ""
    owner: str | None = None  # class qualname that owns a method
    extra: dict = field(default_factory=dict)

    @property
    def func(self) -> FunctionInfo | None:
        if self.kind == ValKind.FUNCTION and self.module is not None:
            return self.module.summary.function(self.qual)  # a def, or a lambda summarised as one
        return None

    @property
    def cls(self) -> ClassInfo | None:
        if self.kind in (ValKind.CLASS, ValKind.INSTANCE) and self.module is not None:
            return self.module.summary.classes.get(self.qual)
        return None

    @property
    def dotted(self) -> str:
        if self.module is not None and self.kind in (ValKind.FUNCTION, ValKind.CLASS, ValKind.INSTANCE):
            return f"{self.module.name}.{self.qual}"
        return self.qual


@dataclass
class Alt:
    """One alternative of a value that is chosen at run time among visible candidates."""

    val: Val
    condition: str | None
    reachable: bool | None
    label: str
    path: str | None = None
    line: int | None = None
    # (module path, function qualname, guards): where the condition was read, for a call site whose own guards
    # decide it (Resolver.refined_at_call); None for an alternative whose condition is not a function's guards
    guarded: tuple | None = None
    decided: str | None = None  # what the call fixed that decided this alternative (model.Branch.decided)


def alts_value(fork_kind: ForkKind, decided_by: str | None, mod: Module | None, name: str, line: int | None, arms: list) -> Val:
    """A value that is one of ``arms`` (a fork when followed)."""
    return Val(ValKind.ALTS, mod, name, mod.path if mod is not None else None, line,
               extra={"alts": arms, "fork_kind": fork_kind, "decided_by": decided_by})


class Walk:
    """Mutable state of one resolution: hops so far, depth, visited."""

    def __init__(self, budget_s: float | None = None, cancel=None):
        self.cancel = cancel  # a callable returning True when the caller gave up
        self.hops: list[Hop] = []
        self.depth = 0
        self.seen: set = set()
        self.deadline = time.perf_counter() + budget_s if budget_s else None
        self.partial = False
        self.receiver = None  # (module, class qualname) of the object a method was looked up on
        self.fork_depth = 0  # forks above this walk in the tree
        self.budget = M.MAX_LEAVES  # leaves this walk's subtree may still have
        self.use_guards: tuple = ()  # guards of the call being resolved (which local bindings can reach it)
        # the room what was followed on this walk so far needs to come out the same (see fits): the least leaf
        # budget, and the deepest fork depth at which a fork was expanded (-1: none)
        self.need_budget = 0
        self.need_depth = -1

    def sub(self) -> "Walk":
        """A fresh walk for a side resolution (its hops are not kept) that keeps the receiver: `self`
        inside inherited code still means the concrete class."""
        b = Walk()
        b.receiver = self.receiver
        return b

    def branch(self) -> "Walk":
        """A walk for one branch of a fork: same deadline, cancel, receiver and tree budget; its own hops;
        the visited set of the path so far (a cycle through a branch still ends as a cycle)."""
        b = Walk.__new__(Walk)
        b.cancel = self.cancel
        b.hops = []
        b.depth = self.depth
        b.seen = set(self.seen)
        b.deadline = self.deadline
        b.partial = False
        b.receiver = self.receiver
        b.fork_depth = self.fork_depth + 1
        b.budget = self.budget
        b.use_guards = ()
        b.need_budget = 0
        b.need_depth = -1
        return b

    def add(self, hop: Hop) -> None:
        self.hops.append(hop)

    def start_need(self) -> tuple[int, int]:
        """Begin recording what a resolution on this walk needs (:meth:`end_need` ends it): the record so far,
        to give back to :meth:`end_need`."""
        saved = (self.need_budget, self.need_depth)
        self.need_budget, self.need_depth = 0, -1
        return saved

    def end_need(self, saved: tuple[int, int]) -> tuple[int | None, int]:
        """The room the resolution begun at :meth:`start_need` needs, as (fork depth checks relative to this
        walk's, or None when it expanded no fork; the least leaf budget); what it needs is added to the record
        of the resolution around it."""
        own_b, own_d = self.need_budget, self.need_depth
        self.need_budget, self.need_depth = max(saved[0], own_b), max(saved[1], own_d)
        return (None if own_d < 0 else own_d - self.fork_depth), own_b

    def note_need(self, need: tuple[int | None, int]) -> None:
        """A memoised result that needs ``need`` (:meth:`end_need`) is used on this walk."""
        rel, budget = need
        if budget > self.need_budget:
            self.need_budget = budget
        if rel is not None and self.fork_depth + rel > self.need_depth:
            self.need_depth = self.fork_depth + rel

    def fits(self, need: tuple[int | None, int]) -> bool:
        """May a complete result that needs ``need`` (:meth:`end_need`) stand for a fresh trace at this walk?
        Where every fork it expanded is still above the fork-depth limit, and the leaf budget is at least what
        its forks need to give each branch its whole subtree at the first pass (``resolver._fork_need``): then
        a fresh trace makes the same choices (no bound cuts, no second chances), whatever room it had."""
        rel, budget = need
        return self.budget >= budget and (rel is None or self.fork_depth + rel < M.MAX_FORK_DEPTH)

    def out_of_time(self) -> bool:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.partial = True
            return True
        if self.cancel is not None and self.cancel():
            self.partial = True
            self.cancelled = True
            return True
        return False

    cancelled = False

