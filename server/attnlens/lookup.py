"""What the resolver's helpers may ask of it: the narrow lookup interface.

The platform profile (:mod:`attnlens.profile`), the monkey patches (:mod:`attnlens.patches`), the torch-op
registry (:mod:`attnlens.torchops`) and the environment-flag defaults (:mod:`attnlens.envflags`) are given
the resolver that owns them and call back into it. They see it as a :class:`Lookup`: exactly the members
they use, typed with the walk state of :mod:`attnlens.walk`, so that none of them imports
:mod:`attnlens.resolver` (the import-linter contract in ``.importlinter`` says so). The resolver
(:class:`attnlens.resolver.Resolver`) is the one implementation; tests may pass any object with these
members.

A leaf like :mod:`attnlens.walk`: it imports the index, the result types, the walk state and the standard
library only.
"""

from __future__ import annotations

from typing import Protocol

from .index import Index, Module
from .model import Chain, Final
from .walk import Val, Walk


class PlatformClasses(Protocol):
    """What the helpers read of the platform profile's findings (:class:`attnlens.profile.PlatformInfo`)."""

    classes: list  # the platform classes, as class Vals


class PlatformView(Protocol):
    """What the helpers ask of the platform profile (:class:`attnlens.profile.PlatformProfile`)."""

    @property
    def info(self) -> PlatformClasses: ...

    def evaluate(self, mod: Module | None, scope: str, text: str) -> bool | None:
        """A guard's value on this platform (None: decided at run time)."""
        ...


class OpProviders(Protocol):
    """What the environment-flag defaults ask of the torch-op registry (:class:`attnlens.torchops.OpRegistry`)."""

    def providers(self) -> list[tuple[str, str | None, str]]:
        """(kernel module, its guard, status) of the platform's ``import_kernels``, in import order."""
        ...


class Lookup(Protocol):
    """The resolver as its helpers see it (:class:`attnlens.resolver.Resolver` implements it)."""

    index: Index
    profile: PlatformView
    ops: OpProviders
    stdlib: frozenset  # top-level module names of the target's standard library
    rebind_cache: dict  # the patches' memo: does a module rebind attributes?

    # names and attributes
    def resolve_dotted(self, mod: Module, scope: str, text: str, w: Walk, line: int | None = None) -> Val: ...

    def resolve_symbol(self, dotted_name: str) -> Val: ...

    def module_value(self, name: str, w: Walk, quiet: bool = False) -> Val: ...

    def attr(self, v: Val, name: str, w: Walk) -> Val: ...

    def attr_of_module(self, m: Module, name: str, w: Walk, from_import: bool = False) -> Val: ...

    # classes
    def class_attr(self, mod: Module, cq: str, name: str, w: Walk, instance: bool = False) -> Val | None: ...

    def mro(self, mod: Module, cq: str, limit: int = 30) -> list[Val]: ...

    def class_bases(self, mod: Module, cq: str) -> list[Val]: ...  # a class's bases as written, resolved

    def enclosing_class(self, mod: Module, scope: str) -> str | None: ...

    # guards
    def guard_text(self, guards: tuple) -> str | None: ...

    def guard_value(self, mod: Module | None, guards: tuple, scope: str = "") -> bool | None: ...

    # patches and following to the end
    def patched(self, v: Val) -> tuple | None: ...

    def follow(self, v: Val, w: Walk, launch: bool = False) -> Final: ...

    def with_args(self, tv: Val, rec: tuple) -> Val: ...

    # what a memo may keep: an answer cut at a value an enclosing resolution is still resolving, or one that read
    # the hops before it, depends on where it was asked
    def cut_mark(self) -> tuple: ...

    def clean_since(self, mark: tuple) -> bool: ...

    def read_before(self, w: Walk, index: int) -> None: ...

    def outside_since(self, mark: tuple) -> frozenset | None: ...

    def replay_cuts(self, keys: frozenset) -> bool: ...

    def apart(self, compute): ...

    def ir_default_priority(self) -> dict | None:
        """provider -> (guard or None, path, line, module name, function qualname) of the IR op providers the
        platform's default priority lists (:meth:`attnlens.resolver.Resolver.ir_default_priority`)."""
        ...

    def ir_op_providers_of(self, mod: Module, op: str) -> dict | None:
        """{provider: ``supported=`` holds here (None: not decided)} of the IR op named ``op`` that ``mod`` registers
        a provider of or defines (:meth:`attnlens.resolver.Resolver.ir_op_providers_of`)."""
        ...


class Evaluator(Lookup, Protocol):
    """The resolver as a check sees it (``ModuleContext.r``, from ``Query.evaluator()``): the helpers'
    :class:`Lookup` and the few primitives a check that walks values step by step needs on top of it.
    ``tests/test_architecture.py`` checks that the checks read nothing else on it."""

    def lookup_name(self, mod: Module, scope: str, name: str, w: Walk, line: int | None = None) -> Val: ...

    def abs_module(self, mod: Module, target: str, level: int) -> str | None: ...

    def import_map(self) -> dict: ...

    def patch_decorator(self, mod: Module, d) -> str | None: ...

    def trace_call(self, mod: Module, cs, budget_s: float | None = None, cancel=None, receiver=None) -> Chain: ...
