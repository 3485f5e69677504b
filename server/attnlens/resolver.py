"""Follow a call or a name to the code that runs.

The resolver walks :mod:`attnlens.pyindex` summaries. Each step appends a
:class:`~attnlens.model.Hop` (kind, file:line, symbol, detail, guard
condition and its value under the platform profile) and ends in a
:class:`~attnlens.model.Final` whose kind is one of ``python_function``,
``python_class``, ``torch_op``, ``triton_kernel``, ``extension_function``,
``dummy``, ``not_installed`` or ``unresolved`` (always with a reason).

Hop kinds followed: imports (plain, conditional, lazy, relative), re-exports,
assignment aliases, ``importlib.import_module``/``getattr`` with literal
strings, ``self.x`` attributes, class MRO lookups, ``get_impl_cls`` style
returns, wrappers (``*args/**kwargs`` forwarding, single-call bodies,
``functools.wraps`` decorators), ``autograd.Function.apply``, monkey patches
of the plugin (applied before any upstream lookup), ``torch.ops.<ns>.<op>``
to C++ and Python registrations, Triton ``kernel[grid](...)`` launches
(through autotune/heuristics), native extension modules, dummies and
packages that are not installed.

The values a walk meets and the walk's state (:class:`~attnlens.walk.Val`,
:class:`~attnlens.walk.Walk`) live in :mod:`attnlens.walk`, a leaf module
that the resolver's helpers (platform profile, monkey patches, torch ops,
environment flags) and the features above import instead of this one; the
helpers see the resolver through the narrow :class:`~attnlens.lookup.Lookup`
interface and never import this module.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re

from . import model as M
from .index import Index, Module
from .model import Chain, Final, FinalKind, ForkKind, Hop, HopKind
from .patches import LazyPatches, collect_patches, freeze_patches, is_patch_decorator, lambda_text, thaw_patches
from .profile import NONE_VALUE, SOME_VALUE, InstanceOf, PlatformProfile, constant_of, parse_guard
from .pyindex import (TRITON_JIT_NAMES, TRITON_WRAPPERS, Binding, CallSite, FunctionInfo, call_id, dotted, function_tree,
                      interned_names, is_passthrough, super_method, triton_decorated)
from .torchops import OpRegistry
from .walk import Alt, Val, ValKind, Walk, alts_value

MAX_DEPTH = 40
CONTAINERS = ("list", "List", "Sequence", "tuple", "Tuple", "dict", "Dict", "Mapping")
# vLLM's tables of attention layers by name (an item is one of the layer classes)
LAYER_TABLES = ("no_compile_layers", "static_forward_context")
# PyTorch module containers: built from an iterable of modules, iterated (or indexed) as those modules
MODULE_CONTAINERS = ("ModuleList", "Sequential", "ModuleDict")

BUILTINS = frozenset(dir(__builtins__) if isinstance(__builtins__, dict) is False else __builtins__.keys())  # type: ignore[arg-type]
# calls never worth following as the "one real call" of a wrapper body
TRIVIAL_ROOTS = frozenset({
    "logger", "logging", "warnings", "log", "print", "len", "int", "float", "str", "bool", "tuple", "list", "dict",
    "set", "isinstance", "issubclass", "getattr", "hasattr", "setattr", "range", "min", "max", "sum", "any", "all",
    "zip", "enumerate", "sorted", "reversed", "type", "super", "repr", "abs", "round", "divmod", "iter", "next",
    "assert", "math", "np", "numpy", "os", "sys", "cdiv", "triton.cdiv", "triton.next_power_of_2", "super()",
})


# what a module whose summary holds an import hook ``import_map`` reads must spell: an assignment to
# ``sys.modules[...]`` or to an ``.__import__`` attribute, or ``"__import__"`` (``setattr(builtins, "__import__",
# hook)``). Decided on the text (a plain ``__import__(name)`` call does not count): on upstream vLLM as the
# workspace 3 modules instead of 8 are summarised for it, and each alternative has a literal the scan needs
# (``Index.text_matches``' pre-test). It holds every usual spelling; it misses whitespace or parentheses inside
# ``sys.modules[`` or before ``.__import__``, and a line continuation before the ``=``
_IMPORT_HOOK_TEXT = rb"(?<![\w.])sys\.modules\[[^\]]*\]\s*=(?!=)|\.__import__\s*=(?!=)|[\"']__import__[\"']"


class Resolver:
    """Static evaluation of plugin code against the installed vLLM: names, attributes and calls to
    :class:`~attnlens.walk.Val` values, and calls to trees of hops ending in leaves (:class:`model.Chain`).

    Core-internal. Outside the core it is reached only through :class:`attnlens.query.Query` (the CLI, the
    language server, upgrade) and, for checks that walk values step by step, as ``ModuleContext.r`` typed
    :class:`attnlens.lookup.Evaluator`; its helpers (profile, patches, torch ops, env flags) see it as
    :class:`attnlens.lookup.Lookup`. The entry points are ``trace_call`` / ``trace_value`` / ``trace_text``
    (a call or value to its tree), ``resolve_symbol`` / ``resolve_dotted`` / ``lookup_name`` (a name to a
    value), ``class_attr`` / ``mro`` (classes) and ``guard_value`` / ``guard_text`` (conditions under the
    platform profile). Its memos belong to one index generation; it is not thread-safe (one analysis thread).
    """

    def __init__(self, index: Index, profile=None, ops=None):
        self.index = index
        self.profile = profile if profile is not None else PlatformProfile(self)
        self.ops = ops if ops is not None else OpRegistry(self)
        self._patches: dict | None = None
        self._patch_gen = -1
        self._lazy_patches = None  # patches.LazyPatches of the generation, while its whole table is not built
        self._active: set = set()
        # every place that cuts a resolution short (a cycle, a depth or width bound, the time budget)
        # bumps this counter: a result computed without a cut does not depend on the path that led to
        # it, so it may be memoised (see resolve_dotted and follow)
        self.cuts = 0
        self.bound_cuts = 0  # the cuts made by the leaf / fork-depth bounds (see _bound_cut)
        self.leaf_cuts = 0  # of those, the ones the leaf bound made (or a result cut by it that was used)
        # the cuts that depend on the path (a value met again while it is being resolved, a walk's cycle), as
        # ("a", key in _active) / ("s", key in a walk's seen), and the reads of a walk's earlier hops ("h", (walk,
        # index): read_before); a resolution whose path cuts all hit keys it opened itself (none on the path above
        # it) and that read no hop from before it began is as complete as one without a cut (see _outside_cuts)
        self.cut_log: list = []
        self.inner_cuts = 0  # path cuts found internal by a finished resolution (taken out of cut_log)
        self._val_memo: dict = {}  # (module, sha, scope, text, line) -> (Val, hops it added)
        self._follow_memo: dict = {}  # (value identity, launch, receiver) -> (Final, hops it added, shape, met)
        self._visits: list[set] = []  # per follow / body being computed: the values it met (see follow)
        self._memo_gen = -1
        self.memo_enabled = True  # off only in tests that prove memoised answers equal fresh ones
        # the impl classes of the backends vLLM can select: [(backend name, impl class Val, is_mla)],
        # provided by the workspace (the registry reads them); used for `backend.get_impl_cls()`
        self.backend_impls = None
        # out-of-tree replacements of CustomOp/PluggableLayer classes: name -> OotRegistration (workspace hook)
        self.oot_replacements = None
        # class paths the plugin registers for enum members (`register_backend(Enum.X, class_path=...)`, also
        # `register_mla_prefill_backend`): {(enum class name, member): (class path, path, line)} (workspace hook)
        self.enum_overrides = None
        self._enum_memo: dict = {}  # (module, class qualname) -> is it an Enum subclass
        self._field_memo: dict = {}  # (generation, module, class, field) -> values constructors pass for it
        self._kw_memo: tuple | None = None  # (generation, keyword -> workspace modules passing it, per-file sets)
        self._mro_memo: dict = {}  # (module path, sha, class, limit) -> its MRO, this generation
        self._karg_memo: dict = {}  # function -> call site -> the Triton kernel handed to it (or None), this generation (_call_memo)
        self._import_map_memo: tuple | None = None  # (generation, import hooks' module map)
        self._reach_memo: dict = {}  # kernels reached by a multi-call function, this generation
        self._met_table: dict = {}  # each distinct `met` set of the memos once (_shared_met)
        self._layers_memo: dict = {}  # (module path, sha) -> its attention_layers, this generation
        # (module path, sha, function) -> wrapper_target's answer; (module path, sha, scope, line, col) -> _hopeless's:
        # both resolve a body's calls on fresh walks, the same wherever asked (upstream vLLM's `sites` asked them
        # 72,680 and 354,302 times for 13,000 functions)
        self._wrap_memo: dict = {}
        self._hopeless_memo: dict = {}
        self._tested_memo: dict = {}  # (module path, sha, function) -> the parameters its call guards test
        self._ir_memo: dict = {}  # (generation, package) -> IR op -> its registered providers
        self._passed_memo: dict = {}  # (path, sha, call line, col, name, guard line) -> _passed_as_guarded
        self._lazy_memo: dict = {}  # (module path, sha, function) -> lazy-import parameters (_lazy_import_params)
        self._guard_facts_memo: dict = {}  # (module path, sha, scope, guards) -> module-level expression facts
        self._reach_gen = -1
        self.site_memo: dict = {}  # registry: call site -> (generation, sha, chain, files it touched)
        self.rebind_cache: dict = {}  # patches: does a module rebind attributes?
        tgt = index.target
        self.stdlib = frozenset((tgt.stdlib if tgt is not None and tgt.stdlib else [])) or _STDLIB

    # ------------------------------------------------------------------
    # guards
    # ------------------------------------------------------------------
    def guard_text(self, guards: tuple) -> str | None:
        parts = [t for kind, text, _line in guards if (t := _guard_written(kind, text, len(guards)))]
        return " and ".join(parts) if parts else None

    def guard_value(self, mod: Module | None, guards: tuple, scope: str = "", binds: tuple = ()) -> bool | None:
        """Can code under ``guards`` in function ``scope`` run on this platform (None: decided at run time)?
        ``binds``: the parameters of ``scope`` the call being followed fixes (:meth:`call_binds`)."""
        vals = []
        for kind, text, gline in guards:
            if kind == "typecheck":
                vals.append(False)
            elif kind == "if":
                vals.append(self.profile.evaluate(mod, scope, text, binds, gline))
            elif kind == "else":
                v = self.profile.evaluate(mod, scope, text, binds, gline)
                vals.append(None if v is None else not v)
        return M.combine_reachability(vals)

    def call_binds(self, mod: Module, scope: str, cs: CallSite, tv: Val, caller_binds: tuple = ()) -> tuple:
        """((parameter, constant), ...): the parameters of the function ``tv`` that its guards test and that the
        call ``cs`` (in function ``scope`` of ``mod``) fixes: an argument that folds to a constant on this
        platform (``inverse=True``; one of the caller's own bound parameters passed on), or the literal default
        of one it leaves out (``scoring_func="softmax"``). Empty for any other callee or a call by another name
        (an autograd ``apply``, an alias), and for a parameter the function assigns again or a call that spreads
        ``*args`` / ``**kwargs`` over what it leaves out."""
        f = tv.func if tv.kind == ValKind.FUNCTION else None
        if f is None or tv.module is None or cs.func.rpartition(".")[2] != f.name:
            # (only a direct call of the def by its own name: `Fn.apply(...)` runs `forward(ctx, ...)`, a
            # `__call__` or an alias may place the arguments differently)
            return ()
        return self._bind_params(tv.module, f, *self._call_args(mod, scope, cs, caller_binds))

    def _call_args(self, mod: Module, scope: str, cs: CallSite, caller_binds: tuple) -> tuple:
        """(positional texts, keyword texts, spread, fold) of the call ``cs`` for :meth:`_bind_params`: ``fold``
        gives what an argument's text folds to where the call is, with the caller's own bound parameters (a
        constant, ``NONE_VALUE``, or None when unknown); ``spread`` when the call spreads ``*args`` or
        ``**kwargs`` (then which argument lands where, and what is left out, is not static)."""
        def fold(text: str):
            if not text:
                return None
            if text == "None":
                return NONE_VALUE
            if text.isidentifier():
                inst = self.instance_passed(mod, scope, text, caller_binds)
                if inst is not None:
                    return inst
            v = self.profile.value_of(mod, scope, text, caller_binds)
            if v is None and text.isidentifier():
                # a name the caller's guards say is (not) None (`else:` of `if residual is None:`), or its own
                # parameter that its caller's did (the profile reads SOME_VALUE as unknown)
                v = SOME_VALUE if (text, SOME_VALUE) in caller_binds else self._none_fact(mod, scope, cs, text)
            return v

        return () if cs.star_args else cs.arg_texts, cs.kw_texts, cs.star_args or cs.star_kwargs, fold

    def instance_passed(self, mod: Module, scope: str, text: str, caller_binds: tuple = ()) -> InstanceOf | None:
        """What a call in ``scope`` passes when it passes ``self`` (an object of the method's class or a subclass), or
        a parameter the call being followed bound to such an object: the :class:`InstanceOf` its callee's guards
        fold ``isinstance`` on; else None."""
        if text == "self":
            cq = self.enclosing_class(mod, scope) if scope else None
            return InstanceOf(mod.name, cq) if cq is not None else None
        return next((v for n, v in caller_binds if n == text and isinstance(v, InstanceOf)), None)

    def _none_fact(self, mod: Module, scope: str, cs: CallSite, name: str):
        """``NONE_VALUE`` / ``SOME_VALUE`` when the guards around call ``cs`` say local or parameter ``name`` is None
        / is not None (`if x is None`, its `else`, `if x is not None and ...`) and the function does not bind it
        again between the guard and the call; else None."""
        if not cs.guards or mod.summary.binding_of(scope, name)[0] not in ("local", "param"):
            return None
        f = mod.summary.functions.get(scope)
        binds = f.locals.get(name, ()) if f is not None else ()
        for kind, text, gline in cs.guards:
            if kind not in ("if", "else") or name not in text:
                continue
            for e, truth in _guard_parts(kind, parse_guard(text)):
                if isinstance(e, ast.Compare) and len(e.ops) == 1 and isinstance(e.ops[0], (ast.Is, ast.IsNot)) \
                        and isinstance(e.left, ast.Name) and e.left.id == name and isinstance(e.comparators[0], ast.Constant) \
                        and e.comparators[0].value is None:
                    if any(gline <= b.line < cs.line and (kind, text, gline) in tuple(b.guards) for b in binds):
                        return None  # (bound again under the guard: `if x is None: x = default`)
                    if f is None or not self._passed_as_guarded(mod, f, cs, name, gline):
                        return None
                    return NONE_VALUE if truth == isinstance(e.ops[0], ast.Is) else SOME_VALUE
        return None

    def _passed_as_guarded(self, mod: Module, f: FunctionInfo, cs: CallSite, name: str, gline: int) -> bool:
        """Is ``name`` at call ``cs`` the one the ``if`` on line ``gline`` tested: no loop between them binds it again
        (a second turn would pass the new value), and no comprehension or lambda around the call has its own
        ``name``? Read from the function's source."""
        key = (mod.path, mod.sha, call_id(cs), name, gline)
        hit = self._passed_memo.get(key)
        if hit is None:
            if len(self._passed_memo) > 4096:
                self._passed_memo.clear()
            hit = self._passed_memo[key] = self._passed_as_guarded_of(mod, f, cs, name, gline)
        return hit

    def _passed_as_guarded_of(self, mod: Module, f: FunctionInfo, cs: CallSite, name: str, gline: int) -> bool:
        tree, _src = function_tree(self.index.source_text(mod.path) or "", f.line, f.end_line)
        if tree is None:
            return False
        parent: dict = {}
        call = guard = None
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parent[child] = node
            if isinstance(node, ast.If) and node.lineno == gline - f.line + 1:
                guard = guard or node
            elif call is None and isinstance(node, ast.Call) and node.lineno == cs.line - f.line + 1 \
                    and ast.unparse(node.func) == cs.func:
                call = node
        if call is None or guard is None:
            return False
        node = call
        while node is not guard:
            node = parent.get(node)
            if node is None:
                return False  # (the call is not under that `if`)
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) and any(
                    isinstance(n, ast.Name) and n.id == name for g in node.generators for n in ast.walk(g.target)):
                return False
            if isinstance(node, ast.Lambda) and name in {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}:
                return False
            if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and any(
                    isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(node)):
                return False
        return True

    def arg_record(self, mod: Module, scope: str, cs: CallSite, caller_binds: tuple) -> tuple:
        """The arguments of ``cs`` folded (:meth:`_call_args`), for a callee that hands them on whole
        (``forward(self, *args, **kwargs)``): ((value, ...), ((keyword, value), ...), spread), a value None
        where unknown. A part of memo keys: equal for calls that pass the same constants."""
        pos, kws, spread, fold = self._call_args(mod, scope, cs, caller_binds)
        return tuple(fold(t) for t in pos), tuple((k, fold(t)) for k, t in kws), spread

    def _bind_params(self, fmod: Module, f: FunctionInfo, pos, kws, spread: bool, fold=None) -> tuple:
        """((parameter, constant), ...) of ``f`` from its call's arguments: each parameter its guards test that
        an argument fixes, or that is left out and has a literal default. ``pos`` / ``kws`` hold what ``fold``
        turns into a value (none: they are values already)."""
        tested = self._tested_params(fmod, f)
        if not tested:
            return ()
        params = [p for p in f.params if p.kind in ("posonly", "pos", "kwonly")]
        if f.class_name and params and params[0].name in ("self", "cls") and "staticmethod" not in (d.func for d in f.decorators):
            params = params[1:]  # (called on an object or a class: bound)
        kw = dict(kws)
        out = []
        for i, p in enumerate(params):
            if p.name not in tested:
                continue
            if p.name in kw:
                val = fold(kw[p.name]) if fold is not None else kw[p.name]
            elif p.kind != "kwonly" and i < len(pos):
                val = fold(pos[i]) if fold is not None else pos[i]
            elif spread or p.default is None:
                continue  # (spread: which argument lands here, or whether one does, is not static)
            elif p.default == "None":
                val = NONE_VALUE
            else:
                val = fold(p.default) if fold is not None else self.profile.value_of(fmod, "", p.default)
            if val is not None and p.name in f.locals and not all(
                    self.guard_value(fmod, b.guards, f.qualname, ((p.name, val),)) is False for b in f.locals[p.name]):
                continue  # (assigned again under an `if` this value does not rule out: the value may not last)
            if val is not None:
                out.append((p.name, val))
        return tuple(out)

    def _decided_by(self, mod: Module, scope: str, guards: tuple, binds: tuple, reach) -> str:
        """``the call into f: exact=True``: the parameters fixed by the call being followed that decided ``guards``
        (their value differs from the guards' own), for a branch (model.Branch.decided); '' when they decided nothing."""
        if reach == self.guard_value(mod, guards, scope):
            return ""
        texts = " ".join(t for _k, t, _l in guards)
        used = [f"{n} is not None" if val is SOME_VALUE else f"{n} is a {val.qual}" if isinstance(val, InstanceOf) else f"{n}={val!r}"
                for n, val in binds
                if re.search(rf"\b{re.escape(n)}\b", texts)]
        return f"the call into {scope.rpartition('.')[2]}: {', '.join(used)}" if used else ""

    def _held_by(self, mod: Module, scope: str, guards: tuple, binds: tuple) -> tuple:
        """The top-level ``and`` operands of ``guards`` (as :meth:`guard_text` writes them) that the parameters fixed by
        the call being followed make true while the platform alone leaves them open (model.Branch.held)."""
        names = [n for n, _v in binds]
        out = []
        for kind, text, gline in guards:
            if kind not in ("if", "else") or not any(re.search(rf"\b{re.escape(n)}\b", text) for n in names):
                continue
            for part in M.conjuncts(_guard_written(kind, text, len(guards))):
                part = part.strip()
                if self.profile.evaluate(mod, scope, part, binds, gline) is True \
                        and self.profile.evaluate(mod, scope, part, (), gline) is not True:
                    out.append(part)
        return tuple(out)

    def _tested_params(self, mod: Module, f: FunctionInfo) -> frozenset:
        """The parameters of ``f`` that a guard of one of its own calls tests by name, or that it passes on as an
        argument, and that ``f`` never assigns again (memoised per function and generation)."""
        return self._memoised(self._tested_memo, (mod.path, mod.sha, f.qualname), lambda: _tested_params(mod, f))

    def with_binds(self, mod: Module, scope: str, cs: CallSite, tv: Val, caller_binds: tuple = (),
                   handed: tuple | None = None) -> Val:
        """``tv`` (the callee of ``cs``) carrying what the call fixes: the parameters (:meth:`call_binds`) of a
        function called by its own name; for an instance called (or each instance of a fork), its folded
        arguments (:meth:`arg_record`), bound to the parameters of its ``__call__`` / ``forward`` when that is
        followed. ``handed``: the arguments the function ``cs`` is in received, when ``cs`` hands them on whole
        (``return self._forward_method(*args, **kwargs)``): they go to the callee instead. A callee of the same
        module also carries what the call's guards fix of module-level expressions (:meth:`_guard_facts`)."""
        if handed is not None:
            out = self.with_args(tv, handed)
        elif tv.kind in (ValKind.INSTANCE, ValKind.ALTS):
            rec = None
            if tv.kind == ValKind.INSTANCE or any(a.val.kind == ValKind.INSTANCE for a in tv.extra["alts"]):
                rec = self.arg_record(mod, scope, cs, caller_binds)
            out = tv if rec is None or (rec[2] and not _any_known(rec)) else self.with_args(tv, rec)
        elif tv.kind == ValKind.TORCH_OP:
            # an op with a Python body: what the call passes goes to that body's parameters (TorchOps.follow_op)
            rec = self.arg_record(mod, scope, cs, caller_binds) if self.ops.python_bodied(tv) else None
            out = tv if rec is None or not _any_known(rec) else dataclasses.replace(tv, extra={**tv.extra, "args": rec})
        else:
            binds = self.call_binds(mod, scope, cs, tv, caller_binds)
            out = dataclasses.replace(tv, extra={**tv.extra, "binds": binds}) if binds else tv
        if cs.guards and out.kind in (ValKind.FUNCTION, ValKind.INSTANCE) and out.module is not None \
                and out.module.path == mod.path:
            facts = self._guard_facts(mod, scope, cs.guards)
            if facts:
                out = dataclasses.replace(out, extra={**out.extra, "facts": facts})
        return out

    def _guard_facts(self, mod: Module, scope: str, guards: tuple) -> tuple:
        """((expression key, bool), ...): what ``guards`` (of a call in ``scope``) fix of expressions of module-level
        names only (``if get_pp_group().is_first_rank:``), for the calls inside a callee of the same module: an
        alternative there chosen by the same expression is decided by it (:meth:`refined_at_call`). One level: the
        callee's own callees do not get them."""
        key = (mod.path, mod.sha, scope, guards)
        hit = self._guard_facts_memo.get(key)
        if hit is None:
            exprs: dict = {}
            for kind, text, _line in guards:
                if kind not in ("if", "else"):
                    continue
                for e, truth in _guard_parts(kind, parse_guard(text)):
                    if _module_level(mod, scope, e):
                        exprs[(mod.path, ast.dump(e))] = truth
            hit = tuple(sorted(exprs.items()))
            if len(self._guard_facts_memo) > 50000:
                self._guard_facts_memo.clear()
            self._guard_facts_memo[key] = hit
        return hit

    def with_args(self, tv: Val, rec: tuple) -> Val:
        """``tv`` called with the folded arguments ``rec``: an instance (or a fork's instances) carries them to
        its ``__call__`` / ``forward``; a function takes its parameters' bindings from them, and one that hands
        its arguments on whole (:func:`_hands_on_whole`) carries them too."""
        if tv.kind == ValKind.INSTANCE and tv.module is not None:
            return dataclasses.replace(tv, extra={**tv.extra, "args": rec})
        if tv.kind == ValKind.FUNCTION and tv.module is not None:
            f = tv.func
            if f is None:
                return tv
            if _hands_on_whole(f):
                return dataclasses.replace(tv, extra={**tv.extra, "args": rec})
            binds = self._bind_params(tv.module, f, *rec)
            return dataclasses.replace(tv, extra={**tv.extra, "binds": binds}) if binds else tv
        if tv.kind == ValKind.ALTS:
            arms = tv.extra["alts"]
            new = [dataclasses.replace(a, val=self.with_args(a.val, rec)) for a in arms]
            if any(n.val is not a.val for n, a in zip(new, arms)):
                return dataclasses.replace(tv, extra={**tv.extra, "alts": new})
        return tv

    @staticmethod
    def handed_on(v: Val, f: FunctionInfo, cs: CallSite) -> tuple | None:
        """The folded arguments the followed function ``v`` (``f``) received, when its call ``cs`` hands them
        on whole: ``f`` takes only ``*args`` / ``**kwargs`` and ``cs`` spreads exactly those and nothing else."""
        rec = v.extra.get("args")
        if rec is None or not cs.forwards or cs.nargs or cs.keywords:
            return None
        return rec if (cs.star_args, cs.star_kwargs) == _var_params(f) else None

    # ------------------------------------------------------------------
    # names
    # ------------------------------------------------------------------
    def choose(self, mod: Module, bindings: list[Binding], scope: str, line: int | None = None) -> Binding:
        """Pick the binding that is live at ``line`` on this platform."""
        cands = bindings
        if line is not None and scope:
            before = [b for b in cands if b.line < line]
            if before:
                cands = before
        if len(cands) == 1:
            return cands[0]
        live = [b for b in cands if self.guard_value(mod, b.guards, scope) is not False]
        if not live:
            return cands[-1]
        filled = [b for b in live if not (b.kind == "other" and b.target == "None")]
        if filled and len(filled) < len(live) and any(b.scope for b in filled):
            live = filled  # `x = None` at module level, filled by a function that declares `global x`
        # try/except ImportError alternatives: the try branch wins when its import resolves
        tried = [b for b in live if any(k == "try" for k, _, _ in b.guards) and not any(k == "except" for k, _, _ in b.guards)]
        excepts = [b for b in live if any(k == "except" for k, _, _ in b.guards)]
        if tried and excepts:
            b = tried[-1]
            if b.kind in ("import", "from") and not self._import_ok(mod, b):
                e = excepts[-1]
                if (e.kind, e.target) in (("assign", "object"), ("other", "None")):
                    return b  # `except ImportError: X = object` is a stand-in: what runs is the missing package's
                return e
            return b
        definite = [b for b in live if self.guard_value(mod, b.guards, scope) is True]
        return (definite or live)[-1]

    def _ctor_argument(self, mod: Module, f: FunctionInfo, name: str, w: Walk) -> Val | None:
        """A parameter of a base class's ``__init__``, for an object of a subclass: what the subclass's
        ``super().__init__(...)`` passes for it (by keyword or position), read where that call is."""
        rmod, rq = w.receiver
        if rmod is None or rq is None or f.class_name is None:
            return None
        chain = self.mro(rmod, rq)
        idx = next((i for i, b in enumerate(chain) if b.module is not None and (b.module.name, b.qual) == (mod.name, f.class_name)), None)
        if not idx:
            return None
        want, fn = name, f
        for sub in reversed(chain[:idx]):
            c, m = sub.cls, sub.module
            if c is None or m is None or "__init__" not in c.methods:
                return None  # the subclass does not pass anything: the default holds
            q = c.methods["__init__"]
            calls = [cs for cs in m.summary.calls_in(q) if cs.func == "super().__init__"]
            if len(calls) != 1:
                return None
            cs = calls[0]
            kw = dict(cs.kw_texts)
            text = kw.get(want)
            if text is None:
                pos = fn.call_params
                if want in pos and pos.index(want) < len(cs.arg_texts):
                    text = cs.arg_texts[pos.index(want)]
            if not text or text in ("None", "?"):
                return None
            sf = m.summary.functions[q]
            if any(p.name == text for p in sf.params):
                want, fn = text, sf  # passed through from the next subclass down
                continue
            v = self.resolve_dotted(m, q, text, Walk(), line=cs.line)
            if v.kind == ValKind.UNKNOWN:
                return None
            w.add(Hop(HopKind.ALIAS, m.path, cs.line, name, f"{name} = {text}: passed by {sub.qual}.__init__ to super().__init__"))
            return v
        return None

    @staticmethod
    def _compatible(g1: tuple, g2: tuple) -> bool:
        """Can code under guards ``g1`` and code under ``g2`` run in one pass? Not when one sits in the
        `if` and the other in the `else` of the same statement (or in different `except` handlers)."""
        for k1, t1, l1 in g1:
            for k2, t2, l2 in g2:
                if l1 == l2 and t1 == t2 and {k1, k2} == {"if", "else"}:
                    return False
        return True

    def _branch_bindings(self, mod: Module, scope: str, locs: list, w: Walk) -> Val | None:
        """A local bound on several branches before its use: a fork over the bindings that can reach it
        (the last unconditional one and the conditional ones after it), each with its own guards."""
        use = w.use_guards
        cands = [b for b in locs if self._compatible(b.guards, use)]
        chosen: list = []
        for b in reversed(cands):
            own = tuple(g for g in b.guards if g not in use)
            chosen.append((b, own))
            if not own:
                break
        if len(chosen) < 2:
            return None
        chosen.reverse()
        # `x = None` then `x = f()` (in a try, a loop or an if): None is no candidate of what x can call
        valued = [(b, own) for b, own in chosen if not (b.kind == "other" and b.target == "None")]
        if valued and len(valued) < len(chosen):
            if len(valued) == 1:
                return self.binding_value(mod, valued[0][0], w, scope)
            chosen = valued
        arms = []
        conds = [self.guard_text(own) for _b, own in chosen if own]
        for b, own in chosen:
            if own:
                c, r = self.guard_text(own), self.guard_value(mod, own, scope)
            else:
                c = " and ".join(f"not ({x})" for x in conds) if conds else None
                r = None
            if r is False:
                av = Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason="dead on this platform")
            else:
                av = self.binding_value(mod, b, w.sub(), scope)
            arms.append(Alt(av, c, r if own else (None if conds else True), f"{b.name} = {b.target or '...'} (line {b.line})",
                            mod.path, b.line, (mod.path, scope, own) if own else None))
        if all(a.val.kind == ValKind.UNKNOWN for a in arms):
            return None  # nothing to choose between: the plain binding rules apply
        return alts_value(ForkKind.ASSIGNMENTS, chosen[0][0].name, mod, chosen[0][0].name, chosen[-1][0].line, arms)

    def _import_ok(self, mod: Module, b: Binding) -> bool:
        target = self.abs_module(mod, b.target or "", b.level)
        if target is None:
            return False
        if self.index.locate(target) is not None:
            return True
        return b.kind == "from" and self.index.locate(f"{target}.{b.attr}") is not None

    def abs_module(self, mod: Module, target: str, level: int) -> str | None:
        if level == 0:
            return target
        base = mod.package.split(".") if mod.package else []
        if level - 1 > len(base):
            return None
        base = base[: len(base) - (level - 1)] if level > 1 else base
        return ".".join(base + ([target] if target else []))

    def lookup_name(self, mod: Module, scope: str, name: str, w: Walk, line: int | None = None) -> Val:
        summ = mod.summary
        # function scopes, innermost first (class bodies are not enclosing scopes)
        q = scope
        while q:
            f = summ.function(q)
            if f is not None:
                locs = f.locals.get(name)
                if locs and line is not None:
                    locs = [b for b in locs if b.line < line] or None
                if locs:
                    alts = self._branch_bindings(mod, q, locs, w) if len(locs) > 1 and line is not None else None
                    if alts is not None:
                        return alts
                    b = self.choose(mod, locs, q, line)
                    return self.binding_value(mod, b, w, scope=q)
                p = next((p for p in f.params if p.name == name), None)
                if p is not None and f.name == "__init__" and w.receiver is not None:
                    cv = self._ctor_argument(mod, f, name, w)
                    if cv is not None:
                        return cv
                if p is not None:
                    if p.annotation and name not in ("self", "cls"):
                        av = self.annotation_value(mod, q, p.annotation, f.line)
                        if av is not None:
                            w.add(Hop(HopKind.ALIAS, mod.path, f.line, name, f"{name}: {p.annotation} (annotated parameter of {f.name})"))
                            return av
                    return Val(ValKind.UNKNOWN, mod, name, reason=f"`{name}` is a parameter of {f.qualname}")
            q = q.rpartition(".")[0]
        if name in summ.bindings:
            b = self.choose(mod, summ.bindings[name], "", None)
            return self.binding_value(mod, b, w, scope="")
        for star in summ.bindings.get("*", []):
            target = self.abs_module(mod, star.target or "", star.level)
            sub = self.index.module(target) if target else None
            if sub is not None and name in sub.summary.bindings:
                w.add(Hop(HopKind.IMPORT, mod.path, star.line, f"{target}.*", "star import", self.guard_text(star.guards)))
                return self.attr_of_module(sub, name, w)
        if name in BUILTINS:
            return Val(ValKind.BUILTIN, None, name)
        return Val(ValKind.UNKNOWN, mod, name, reason=f"name `{name}` is not bound in {mod.name}")

    def binding_value(self, mod: Module, b: Binding, w: Walk, scope: str) -> Val:
        """What binding ``b`` (of ``scope`` in ``mod``) gives. A local the binding's expression reads is read under the
        binding's own guards (the statement runs there): of that local's bindings on several branches, those the
        statement cannot follow are no arms, and the guards the two share are no condition of an arm (`get_rope`:
        `cls = A` / `cls = B` under `if v4:` / `else:`, then `rotary_emb = cls(...)`, all under the memo test)."""
        if scope and b.guards != w.use_guards:
            saved, w.use_guards = w.use_guards, b.guards
            try:
                return self._binding_value(mod, b, w, scope)
            finally:
                w.use_guards = saved
        return self._binding_value(mod, b, w, scope)

    def _binding_value(self, mod: Module, b: Binding, w: Walk, scope: str) -> Val:
        cond = self.guard_text(b.guards)
        reach = self.guard_value(mod, b.guards, scope) if b.guards else None
        if b.kind in ("import", "from"):
            kind = HopKind.LAZY_IMPORT if scope else (HopKind.CONDITIONAL_IMPORT if b.guards else HopKind.IMPORT)
            target = self.abs_module(mod, b.target or "", b.level)
            if target is None:
                return Val(ValKind.UNKNOWN, mod, b.name, reason=f"relative import beyond top-level package in {mod.name}")
            if b.kind == "import":
                if target == "torch":
                    return self.module_value(target, w)
                w.add(Hop(kind, mod.path, b.line, target, f"import {target}" + (f" as {b.name}" if b.name != target else ""), cond, reach, b.col))
                return self.module_value(target, w)
            w.add(Hop(kind, mod.path, b.line, f"{target}.{b.attr}", f"from {'.' * b.level}{b.target or ''} import {b.attr}" + (f" as {b.name}" if b.name != b.attr else ""), cond, reach, b.col))
            if target == mod.name or (mod.is_package and target == mod.package and b.attr):
                # `from . import sub` inside a package __init__: the submodule, not the package attribute
                sub = f"{target}.{b.attr}"
                if self.index.locate(sub) is not None:
                    return self.module_value(sub, w)
            base = self.module_value(target, w, quiet=True)
            if base.kind == ValKind.MODULE:
                return self.attr_of_module(base.module, b.attr or "", w, from_import=True)  # type: ignore[arg-type]
            if base.kind == ValKind.NAMESPACE:
                return self.module_value(f"{target}.{b.attr}", w)
            return self.attr(base, b.attr or "", w)
        if b.kind == "def":
            f = mod.summary.functions.get(b.target or "")
            return Val(ValKind.FUNCTION, mod, b.target or b.name, mod.path, f.line if f else b.line)
        if b.kind == "class":
            c = mod.summary.classes.get(b.target or "")
            return Val(ValKind.CLASS, mod, b.target or b.name, mod.path, c.line if c else b.line)
        if b.kind == "assign":
            w.add(Hop(HopKind.ALIAS, mod.path, b.line, f"{mod.name}.{b.name}" if not scope else b.name, f"{b.name} = {b.target}", cond, reach, b.col))
            return self.resolve_dotted(mod, scope, b.target or "", w, line=b.line)
        if b.kind == "call":
            if _builds_container(b):
                cv = self.container_value(mod, scope, b.line, w)
                if cv is not None:
                    return cv
            return self.call_value(mod, scope, b, w)
        if b.kind == "ifexp":
            first, last = (b.alternatives[0] or "...", b.alternatives[-1] or "...") if b.alternatives else ("?", "?")
            w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"{b.name} = {first} if {b.target or '?'} else {last}", cond, reach, b.col))
            test = b.target or "?"
            tv = self.profile.evaluate(mod, scope, test) if b.target else None
            arms = []
            for i, text in enumerate(b.alternatives[:2]):
                c = test if i == 0 else f"not ({test})"
                r = tv if i == 0 else (None if tv is None else not tv)
                if not text:
                    av = Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"arm {i + 1} of the conditional expression at "
                             f"{os.path.basename(mod.path)}:{b.line} is not a name, attribute chain or constructor call")
                else:
                    av = self.value_text(mod, scope, text, w.sub(), b.line)
                arms.append(Alt(av, c, r, f"{text or '...'} ({'if' if i == 0 else 'else'})", mod.path, b.line))
            return alts_value(ForkKind.IFEXP, test, mod, b.name, b.line, arms)
        if b.kind == "dict":
            return Val(ValKind.DICT, mod, b.name, mod.path, b.line, extra={"pairs": b.alternatives, "scope": scope})
        if b.kind == "unpack":
            return self.unpacked_value(mod, scope, b, w)
        if b.kind == "subscript" and (b.target or "").rpartition(".")[2] in LAYER_TABLES:
            lv = self.layers_by_name(mod, f"{b.target}[]", b.line, w, b.name)
            if lv.kind == ValKind.ALTS:
                return lv
        if b.kind == "subscript":
            base = self.resolve_dotted(mod, scope, b.target or "", w, line=b.line)
            key = b.str_args[0] if b.str_args else "?"
            if base.kind == ValKind.DICT:
                w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"{b.name} = {b.target}[{key}]", cond, reach, b.col))
                return self.dict_choice(base, key, mod, scope)
            if base.kind == ValKind.CONTAINER and base.extra.get("item") is not None:
                # `layer = self.layers[i]`: an item of a module list (or of an annotated list)
                w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"{b.name} = {b.target}[{key}]: an item of {base.qual}", cond, reach, b.col))
                return base.extra["item"]
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"`{b.name}` is an item of `{b.target}` at {os.path.basename(mod.path)}:{b.line}")
        if b.kind == "star":
            return Val(ValKind.UNKNOWN, mod, b.name, reason="star import")
        if b.kind == "lambda":
            lf = mod.summary.lambdas.get(b.target or "")
            if lf is not None:
                return Val(ValKind.FUNCTION, mod, b.target or "", mod.path, lf.line)
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"`{b.name}` is a lambda at {os.path.basename(mod.path)}:{b.line}")
        if b.kind == "iter":
            return self.iteration_value(mod, scope, b, w)
        ann = mod.summary.global_ann.get(b.name) if not scope and not b.scope else None
        av = self.annotation_value(mod, "", ann, b.line) if ann else None
        if av is not None:
            # a module global whose value says nothing (`_groups: dict[str, Callable[[], Group | None]] = {}`): what
            # its declared type says
            w.add(Hop(HopKind.ALIAS, mod.path, b.line, f"{mod.name}.{b.name}", f"{b.name}: {ann} (its declared type)", cond, reach, b.col))
            return av
        return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"`{b.name}` is bound to a computed value at {os.path.basename(mod.path)}:{b.line}")

    def call_value(self, mod: Module, scope: str, b: Binding, w: Walk) -> Val:
        key = ("call", mod.name, scope, b.name, b.line)
        if key in self._active:
            self._path_cut("a", key)
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line,
                       reason=f"cycle: `{b.name}` at {os.path.basename(mod.path)}:{b.line} is bound to a call that reaches itself")
        self._active.add(key)
        try:
            return self._call_value(mod, scope, b, w)
        finally:
            self._active.discard(key)

    def _call_value(self, mod: Module, scope: str, b: Binding, w: Walk) -> Val:
        callee = b.target or ""
        last = callee.rpartition(".")[2]
        if last == "import_module" and b.str_args and b.str_args[0]:
            name = b.str_args[0]
            w.add(Hop(HopKind.DYNAMIC_IMPORT, mod.path, b.line, name, f'{b.name} = {callee}("{name}")', self.guard_text(b.guards)))
            return self.module_value(name, w)
        if callee in ("getattr", "builtins.getattr") and len(b.str_args) >= 2 and b.str_args[1]:
            base_text = b.alternatives[0] if b.alternatives else ""
            if base_text.startswith("@import:"):
                name = base_text[len("@import:"):]
                w.add(Hop(HopKind.DYNAMIC_IMPORT, mod.path, b.line, name, f'{b.name} = getattr(importlib.import_module("{name}"), '
                          f'"{b.str_args[1]}")' + (f" (filled lazily in {b.scope})" if b.scope else ""), self.guard_text(b.guards)))
                return self.attr(self.module_value(name, w), b.str_args[1], w)
            base = self.resolve_dotted(mod, scope, base_text, w, line=b.line) if base_text else Val(ValKind.UNKNOWN, mod, "?")
            w.add(Hop(HopKind.DYNAMIC_IMPORT, mod.path, b.line, b.str_args[1], f'{b.name} = getattr({base_text}, "{b.str_args[1]}")', self.guard_text(b.guards)))
            return self.attr(base, b.str_args[1], w)
        if callee in ("getattr", "builtins.getattr"):
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"getattr with a non-literal name at {os.path.basename(mod.path)}:{b.line}")
        last = callee.rpartition(".")[2]
        if (callee in ("torch.compile", "functools.partial", "partial") or (last == "partial" and "functools" in callee)) \
                and b.alternatives and b.alternatives[0] and not b.alternatives[0].endswith(")"):
            # the result calls its first argument
            w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"{b.name} = {callee}({b.alternatives[0]}, ...): calls {b.alternatives[0]}",
                      self.guard_text(b.guards)))
            return self.resolve_dotted(mod, scope, b.alternatives[0], w, line=b.line)
        cw = w.sub()
        cw.use_guards = w.use_guards  # (the callee is read where the binding is: binding_value)
        target = self.resolve_dotted(mod, scope, callee, cw, line=b.line) if callee else Val(ValKind.UNKNOWN)
        return self.result_of_call(mod, scope, b.name, b.line, callee, target, w,
                                   self.guard_text(self._path_guards(mod, b.attr if b.attr and b.kind == "call" else scope, b.guards)),
                                   b.alternatives)

    def _path_guards(self, mod: Module, scope: str, guards: tuple) -> tuple:
        """The guards that decide whether a binding's value is what a later call sees, without the far
        sides of `if c: raise` in that function (they decide whether the object exists at all)."""
        f = mod.summary.functions.get(scope) if scope else None
        if f is None or not f.raise_ifs:
            return guards
        return tuple(g for g in guards if not (g[0] == "else" and g[2] in f.raise_ifs))

    def result_of_call(self, mod: Module, scope: str, name: str, line: int, callee: str, target: Val, w: Walk,
                       cond: str | None = None, args: tuple = ()) -> Val:
        """The value ``callee(...)`` returns: an instance of a class, a factory's return (a fork over several
        returns), a decorator's wrapped argument, or unknown."""
        b_line = line
        if target.kind in (ValKind.FUNCTION, ValKind.CLASS) and not target.extra.get("unpatched"):
            p = self.patched(target)
            if p is not None:  # the plugin replaced the callee (`mod.select = lambda cfg: X`): its result is the call's
                w.add(Hop(HopKind.PATCH, p[1], p[2], p[0].extra.get("patch_symbol", p[0].dotted), f"{p[3]} replaces {target.dotted} at import time", cond))
                target = p[0]
        if target.kind == ValKind.FUNCTION and (target.extra.get("enum_member") or target.extra.get("enum_any")):
            ev = self.enum_method_result(mod, scope, name, line, callee, target, w)
            if ev is not None:
                return ev
        if target.kind == ValKind.UNKNOWN and callee.rpartition(".")[2] == "get_impl_cls" and self.backend_impls is not None:
            sel = self.selected_impls(mod, scope, name, b_line)
            if sel is not None:
                w.add(Hop(HopKind.ALIAS, mod.path, b_line, name, f"{name} = {callee}(): the impl class of the backend vLLM selected "
                          f"for this layer ({len(sel.extra['alts'])} candidates)", cond))
                return sel
        if target.kind == ValKind.NOT_INSTALLED and target.qual.rpartition(".")[2][:1].isupper():
            # an object of a missing package's class: its methods are that package's code
            return Val(ValKind.NOT_INSTALLED, None, target.qual, reason=target.reason, extra=dict(target.extra, object=True))
        if target.kind == ValKind.UNKNOWN and callee in ("cast", "typing.cast") and len(args) >= 2 and args[1]:
            return self.value_text(mod, scope, args[1], w, b_line)  # typing.cast(T, x) is x
        if target.kind == ValKind.CALLABLE:
            rv = target.extra["returns"]
            shown = callee.replace("[]", "[...]")
            w.add(Hop(HopKind.ALIAS, mod.path, b_line, name, f"{name.replace('[]', '[...]')} = {shown}(...): a {rv.dotted} by the type of {shown} ({target.qual})", cond))
            return rv
        if target.kind == ValKind.ALTS:
            arms = [dataclasses.replace(a, val=self.result_of_call(mod, scope, name, line, callee, a.val, w.sub(), cond, args))
                    for a in target.extra["alts"]]
            return alts_value(target.extra["fork_kind"], target.extra.get("decided_by"), mod, name, line, arms)
        if target.kind == ValKind.CLASS:
            rep_cls = self.oot_replacement(target)
            if rep_cls is not None:
                reg = rep_cls
                w.add(Hop(HopKind.PATCH, reg.path, reg.line, reg.replacement.dotted,
                          f"{name} = {callee}(...): vLLM's __new__ instantiates the out-of-tree replacement registered "
                          f"as {reg.name!r} ({reg.form})", cond))
                rv = reg.replacement
                return Val(ValKind.INSTANCE, rv.module, rv.qual, rv.path, rv.line)
            w.add(Hop(HopKind.ALIAS, mod.path, b_line, name, f"{name} = {callee}(...) (instance)", cond))
            return Val(ValKind.INSTANCE, target.module, target.qual, target.path, target.line)
        if target.kind == ValKind.FUNCTION and target.func is not None and target.module is not None:
            # a function whose return reaches a call of itself (`return self.inner.f(...)` where `inner` may be an
            # object of this class: a fork over subclasses that includes it) is a cycle: without this the returns
            # were read again at each turn (upstream vLLM's MoE `workspace_shapes`: 85,000 reads, 1.5 s a site)
            key = ("ret", target.module.name, target.qual)
            if key in self._active:
                self._path_cut("a", key)
                return Val(ValKind.UNKNOWN, mod, name, mod.path, b_line,
                           reason=f"cycle: `{callee}` returns the result of a call that reaches it again")
            self._active.add(key)
            try:
                rv = self._function_result(mod, scope, name, b_line, callee, target, w, cond, args)
            finally:
                self._active.discard(key)
            if rv is not None:
                return rv
        why = f": {target.reason}" if target.kind == ValKind.UNKNOWN and target.reason and "result of calling" not in target.reason else ""
        return Val(ValKind.UNKNOWN, mod, name, mod.path, b_line,
                   reason=f"`{name}` is the result of calling `{callee or '...'}` at {os.path.basename(mod.path)}:{b_line}{why}")

    def _function_result(self, mod: Module, scope: str, name: str, b_line: int, callee: str, target: Val, w: Walk,
                         cond: str | None, args: tuple) -> Val | None:
        """:meth:`result_of_call` of a function defined in a module: what its returns give, or None (unknown)."""
        f = target.func
        tm = target.module
        assert f is not None and tm is not None
        if self._decorates_argument(mod, scope, b_line, tm, f, args, w):
            w.add(Hop(HopKind.WRAPPER, tm.path, f.line, target.dotted, f"{name} = {callee}({args[0]}): the wrapper calls {args[0]}", cond))
            return self.resolve_dotted(mod, scope, args[0], w, line=b_line)
        qi = self._qualname_import_param(tm, f) if args else None
        if qi is not None and qi < len(args) and args[qi]:
            # `resolve_obj_by_qualname(current_platform.get_punica_wrapper())`: a function that imports the module of
            # a "module.attr" name and returns the attribute, called with what folds to such a name on this platform
            # (a platform method returning the class it chooses)
            qual = self.profile.value_of(mod, scope, args[qi], (), b_line)
            if isinstance(qual, str) and "." in qual.strip("."):
                qv = self.resolve_symbol(qual)
                if qv.kind in (ValKind.CLASS, ValKind.FUNCTION, ValKind.NOT_INSTALLED):
                    w.add(Hop(HopKind.DYNAMIC_IMPORT, tm.path, f.line, qual,
                              f"{name} = {callee}({args[qi]}): imports {qual}, the name {args[qi]} holds on this platform", cond))
                    return qv
        lazy = self._lazy_import_params(tm, f) if args else None
        if lazy is not None:
            # a lazy-import factory called with literal names (`_lazy_import_wrapper("flashinfer", "fp4_quantize")`:
            # its closure imports the module and calls its attribute when first called): the call's value is that
            # attribute (a package this environment lacks: not installed)
            mi, ai = lazy
            pkg = _str_literal(args[mi]) if mi < len(args) else None
            attr = (_str_literal(args[ai]) if ai < len(args) else None) if ai is not None else ""
            if pkg and attr is not None:
                w.add(Hop(HopKind.DYNAMIC_IMPORT, tm.path, f.line, f"{pkg}.{attr}" if attr else pkg,
                          f"{name} = {callee}(...): imports {pkg} when first called" + (f" and calls its {attr}" if attr else ""), cond))
                mv = self.module_value(pkg, w)
                return self.attr(mv, attr, w) if attr else mv
        rets = [(t, g, ln) for t, g, ln in f.return_alts if t and t != "None"]
        texts = {t for t, _g, _ln in rets}
        memo_miss = False
        if f.attr_sets and len(texts) > 1:
            # a memo hit (`if key in _CACHE: return _CACHE[key]` ... `_CACHE[key] = obj; return obj`) returns what
            # another return gives: no arm of its own
            stored = {t[:-2]: v for t, v, _ln, _g in f.attr_sets if t.endswith("[]")}
            hits = {t for t in texts if t.endswith("]") and stored.get(t.partition("[")[0]) in texts}
            if hits and hits != texts:
                rets = [r for r in rets if r[0] not in hits]
                texts -= hits
                # what the hit returns was made by another return, so the test that chose the hit decides nothing:
                # the bindings of the value returned are read under that return's own guards, which drop out of
                # their conditions (the rope arms said `not (key in _ROPE_DICT)`)
                memo_miss = True

        def ret_value(t: str, ln: int, g: tuple = ()) -> Val:
            arg = self._bound_arg(f, t, args)
            if arg is not None:  # a parameter returned: the caller's argument, read where the call is
                return self.value_text(mod, scope, arg, w.sub(), b_line)
            c_callee, _, c_inner = t[:-1].partition("(") if t.endswith(")") else ("", "", "")
            if c_callee in ("torch.compile", "functools.partial", "partial") and c_inner:
                # `return torch.compile(fn, ...)` of a parameter: the compiled callable runs the argument
                arg = self._bound_arg(f, c_inner.split(", ")[0], args)
                if arg is not None:
                    return self.value_text(mod, scope, arg, w.sub(), b_line)
            inner = tm.summary.functions.get(f"{f.qualname}.{t}") if t.isidentifier() else None
            arg = self._bound_arg(f, inner.wraps, args) if inner is not None and inner.wraps else None
            if arg is not None:
                # a returned closure made with functools.wraps(param): calling it runs the caller's argument
                return self.value_text(mod, scope, arg, w.sub(), b_line)
            cw = self._callee_walk(target, w)
            saved, cw.use_guards = cw.use_guards, g  # which local bindings reach this return
            try:
                return self.value_text(tm, f.qualname, t, cw, ln)
            finally:
                cw.use_guards = saved

        # one name returned at several places, bound again before each (`module = import_module("a")` /
        # `return module` in a try, the same with "b" after it): the value at each return is its own arm
        per_return = (len(texts) == 1 and len({ln for _t, _g, ln in rets}) > 1
                      and len(f.locals.get(next(iter(texts)), ())) > 1)
        if len(texts) == 1 and not per_return:
            text = next(iter(texts))
            inner = ret_value(text, rets[0][2], rets[0][1] if memo_miss else ())
            if inner.kind in (ValKind.FUNCTION, ValKind.CLASS, ValKind.INSTANCE, ValKind.ALTS, ValKind.NOT_INSTALLED,
                              ValKind.TORCH_OP, ValKind.EXT_ATTR, ValKind.DICT, ValKind.LIST):
                w.add(Hop(HopKind.ALIAS, mod.path, b_line, name, f"{name} = {callee}(...) returns {text}", cond))
                return inner
        elif len(texts) > 1 or per_return:
            arms = []
            # the objects the call passes as `self` (`get_quant_method(self, prefix)`) to parameters the function does
            # not bind again: a return's `isinstance` test of such a parameter folds (an embedding layer is never a
            # LinearBase)
            passed = tuple((p, inst) for p, a in zip(f.call_params, args)
                           if a and p not in f.locals and (inst := self.instance_passed(mod, scope, a)) is not None)
            missing = 0  # returns that import a package this environment lacks
            for t, g, ln in rets:
                av = ret_value(t, ln, g)
                if av.kind == ValKind.NOT_INSTALLED and any(k == "try" for k, _t, _l in g):
                    # returned inside a `try` after importing a package this environment lacks: the import
                    # raises, so this return is not what runs here (the handler's fallback is)
                    pkg = av.qual.split(".", 1)[0]
                    arms.append(Alt(av, f"`{pkg}` imports (it is not installed here)", False, f"returns {t}", tm.path, ln))
                    missing += 1
                    continue
                arms.append(Alt(av, self.guard_text(g), self.guard_value(tm, g, f.qualname, passed) if g else True,
                                f"returns {t}", tm.path, ln))
            if arms and missing == len(arms):
                # every return is a `try` import of a missing package: the call fails here; what it names is
                # the first one (the function returns None once every import failed). Returns that are all dead
                # for other reasons stay dead: the call gives None there (an embedding layer's quant config
                # returns a method only for linear and MoE layers)
                arms = [dataclasses.replace(arms[0], condition=None, reachable=True)]
            arms = _merge_same(arms)
            if len(arms) == 1 and arms[0].val.kind != ValKind.UNKNOWN:
                w.add(Hop(HopKind.ALIAS, mod.path, b_line, name, f"{name} = {callee}(...): every return that can give it is "
                          f"{arms[0].val.dotted}", cond))
                return arms[0].val
            if any(a.val.kind != ValKind.UNKNOWN for a in arms):
                w.add(Hop(HopKind.ALIAS, mod.path, b_line, name, f"{name} = {callee}(...): one of {len(arms)} returns", cond))
                return alts_value(ForkKind.FACTORY, None, tm, target.dotted, f.line, arms)
        return None

    def unpacked_value(self, mod: Module, scope: str, b: Binding, w: Walk) -> Val:
        """``a, b = f(...)``: item i of the tuple ``f`` returns, read in ``f`` (every return that is a tuple of names)."""
        callee = (b.target or "").partition("(")[0]
        i = int(b.str_args[0]) if b.str_args else 0
        tv = self.resolve_dotted(mod, scope, callee, w.sub(), line=b.line) if callee else Val(ValKind.UNKNOWN)
        f = tv.func if tv.kind == ValKind.FUNCTION else None
        if f is None or tv.module is None:
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"`{b.name}` is item {i} of what `{callee or '...'}` returns")
        items = []
        for text, _g, ln in f.return_alts:
            if text.startswith("(") and text.endswith(",)"):
                parts = [x.strip() for x in text[1:-2].split(",")]
                if i < len(parts):
                    items.append((parts[i], ln, tuple(parts)))
        if len(items) != 1:
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line,
                       reason=f"`{b.name}` is item {i} of what `{callee}` returns ({len(items)} tuple returns)")
        text, ln, parts = items[0]
        w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"{b.name} is item {i} of {callee}(...), which returns {text} "
                  f"({os.path.basename(tv.module.path)}:{ln})"))
        made = f.locals.get(text, ())
        if len(made) == 1 and _builds_container(made[0]):
            # a module list the callee builds, maybe from a callable the caller passes (`make_layers(n, lambda
            # prefix: Layer(...))`): its items read where each is made, the caller's argument for the callee's parameter
            cv = self.container_value(tv.module, f.qualname, made[0].line, w, (mod, scope, b.line, callee))
            if cv is not None:
                # (which of the callee's names the caller's other items of the same tuple are: a loop's slice bounds)
                return dataclasses.replace(cv, extra=dict(cv.extra, unpacked=(b.target, b.line, parts)))
        return self.resolve_dotted(tv.module, f.qualname, text, w, line=ln + 1)

    # ------------------------------------------------------------------
    # enums whose members name classes (backend registries), loops over literal lists
    # ------------------------------------------------------------------
    def is_enum(self, mod: Module, cq: str) -> bool:
        return self._memoised(self._enum_memo, (mod.path, mod.sha, cq), lambda: any(
            t.rpartition(".")[2] in ("Enum", "IntEnum", "StrEnum") for b in self.mro(mod, cq) if b.cls for t in b.cls.bases))

    def enum_members(self, mod: Module, cq: str) -> list:
        """(member, value text) of an enum class body, in order (methods, nested classes and private names
        left out)."""
        c = mod.summary.classes.get(cq)
        if c is None:
            return []
        return [(n, b.target) for n, b in c.attrs.items() if b.kind == "other" and not n.startswith("_")]

    def enum_member_class(self, mod: Module, cq: str, member: str, w: Walk) -> Val:
        """The class an enum member names: the class path the plugin registers for it, else the member's
        value in the enum body (vLLM's ``get_class()`` resolves ``get_path()``, which prefers the override)."""
        ename = cq.rpartition(".")[2]
        over = None
        if self.enum_overrides is not None:
            try:
                over = self.enum_overrides().get((ename, member))
            except RecursionError:
                over = None
        via: tuple = ()
        if over is not None:
            path, rpath, rline = over
            via = (Hop(HopKind.REGISTRY, rpath, rline, path, f"{ename}.{member} is registered as {path}"),)
            w.hops.extend(via)
        else:
            b = mod.summary.classes[cq].attrs.get(member) if cq in mod.summary.classes else None
            try:
                path = ast.literal_eval(b.target) if b is not None and b.target else None
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                path = None
            if not isinstance(path, str) or not path:
                return Val(ValKind.UNKNOWN, mod, f"{cq}.{member}", mod.path, b.line if b else None,
                           reason=f"{ename}.{member} has no class path (it must be registered before use)")
        cv = self.resolve_symbol(path)
        if cv.kind == ValKind.CLASS:  # (the registration hop travels with the value: a tree shows it on the branch)
            return Val(ValKind.CLASS, cv.module, cv.qual, cv.path, cv.cls.line if cv.cls else cv.line, extra={"via": via} if via else {})
        return cv

    @staticmethod
    def _returns_class(f: FunctionInfo) -> bool:
        """Does an enum method give the class its member's path names (``resolve_obj_by_qualname(self.get_path())``)?"""
        return any(t.partition("(")[0].rpartition(".")[2] == "resolve_obj_by_qualname" for t, _g, _l in f.return_alts)

    def _expanded(self, mod: Module, scope: str, text: str) -> str:
        """``text`` with a leading local name that is bound once, to an attribute chain, replaced by that chain
        (``selected_backend`` -> ``attention_config.mla_prefill_backend`` -> ``vllm_config.attention_config...``)."""
        for _ in range(4):
            head, dot, rest = text.partition(".")
            how, bs = mod.summary.binding_of(scope, head)
            if how != "local" or len(bs) != 1 or bs[0].kind != "assign" or not bs[0].target:
                break
            text = bs[0].target + (dot + rest if dot else "")
        return text

    def enum_method_result(self, mod: Module, scope: str, name: str, line: int, callee: str, target: Val, w: Walk) -> Val | None:
        """``member.get_class()``: the class the member names; ``x.get_class()`` of an enum value chosen at run
        time (a config field declared as the enum): a fork over every member's class, decided by ``x``."""
        f = target.func
        if f is None or not self._returns_class(f):
            return None
        em, eq = target.extra["receiver"]
        member = target.extra.get("enum_member")
        if member:
            return self.enum_member_class(em, eq, member, w)
        ename = eq.rpartition(".")[2]
        base = callee.rpartition(".")[0] or callee
        decided = self._expanded(mod, scope, base)
        arms = []
        for m_name, _v in self.enum_members(em, eq):
            aw = Walk()
            cv = self.enum_member_class(em, eq, m_name, aw)
            if cv.kind != ValKind.CLASS:
                continue
            c = f"{decided} is {ename}.{m_name}"
            arms.append(Alt(cv, c, self.profile.evaluate(mod, scope, c), f"{m_name}: {cv.qual}", cv.path, cv.line))
        if not arms:
            return None
        w.add(Hop(HopKind.ALIAS, mod.path, line, name, f"{name} = {callee}(): the class of the {ename} member in `{decided}` "
                  f"(chosen at run time: {len(arms)} members name a class)"))
        return alts_value(ForkKind.MEMBER, decided, mod, name, line, arms)

    def iteration_value(self, mod: Module, scope: str, b: Binding, w: Walk) -> Val:
        """``for x in items:``: x is each item of a literal list in turn; a list a factory returns gives its
        items under the condition of each return."""
        src = b.target or ""
        iv = self.value_text(mod, scope, src, w.sub(), b.line) if src else Val(ValKind.UNKNOWN)
        if iv.kind == ValKind.CONTAINER and iv.extra.get("item") is not None:
            item = iv.extra["item"]
            kept = self._slice_arms(mod, scope, b, iv) if b.str_args and item.kind == ValKind.ALTS else None
            w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"for {b.name} in {src}: an item of {iv.qual}"
                      + (f" between {b.str_args[0]} and {b.str_args[1]}: {', '.join(a.label for a in kept)}" if kept else ""),
                      self.guard_text(b.guards)))
            if kept:
                return kept[0].val if len(kept) == 1 else dataclasses.replace(item, extra=dict(item.extra, alts=kept))
            return item
        arms: list = []

        def items_of(v: Val, conds: list, reach):
            if v.kind == ValKind.LIST:
                for i, t in enumerate(v.extra["items"]):
                    av = self.value_text(v.module, v.extra["scope"], t, Walk(), v.line)  # type: ignore[arg-type]
                    if av.kind == ValKind.UNKNOWN:
                        continue
                    arms.append(Alt(av, " and ".join(conds + [f"{b.name} is {t} (item {i} of {src})"]), reach, t, v.path, v.line))
            elif v.kind == ValKind.ALTS:
                for a in v.extra["alts"]:
                    items_of(a.val, conds + ([a.condition] if a.condition else []), M.combine_reachability([reach, a.reachable]))

        items_of(iv, [], True)
        del items_of  # (a recursive closure is a reference cycle: freed now, not by a collector a CLI run keeps off)
        if not arms:
            return Val(ValKind.UNKNOWN, mod, b.name, mod.path, b.line, reason=f"`{b.name}` iterates over `{src or '...'}` (not a literal list)")
        w.add(Hop(HopKind.ALIAS, mod.path, b.line, b.name, f"for {b.name} in {src}: one of {len(arms)} items", self.guard_text(b.guards)))
        kind = ForkKind.MEMBER if all(a.val.kind == ValKind.ENUM_MEMBER for a in arms) else ForkKind.ASSIGNMENTS
        return alts_value(kind, f"the item of {src} the loop is at", mod, b.name, b.line, arms)

    def container_value(self, mod: Module, scope: str, line: int, w: Walk, caller: tuple | None = None) -> Val | None:
        """The module container built on ``line`` of ``scope`` (``nn.ModuleList(<iterable>)``): a container whose item is
        what each element of the iterable is (a list display's items, a comprehension's element, both sides of ``+``,
        the modules a call is given to wrap: ``wrap_modules(layer_fn(...) for i in ...)``), a fork when they differ.
        ``caller``: (module, scope, line, callee text) of the call into ``scope`` whose result holds the container: an
        element that calls a parameter (``layer_fn(prefix=...)``) is what the caller's argument makes (a lambda's
        body, read with the walk's receiver: `layer_type(...)` of a constructor parameter). None when the call or its
        elements cannot be read. Not memoised here: what the elements are depends on the receiver, and the value of the
        name that holds the container is memoised with it (:meth:`resolve_dotted`)."""
        node = self._call_at(mod, scope, line, MODULE_CONTAINERS)
        if node is None or not node.args:
            return None
        f = mod.summary.functions.get(scope) if scope else None
        params = {p.name for p in f.params} if f is not None else set()
        arms: list = []
        seen: dict = {}  # (kind, dotted) -> arm index
        spans: list = []  # per arm: the (first, end) index texts of the elements that make it (None: not known)
        args: dict = {}  # parameter -> what the caller passes for it (its call parsed once)
        for el, lo, hi in _container_elements(node.args[0]):
            expr, emod, escope, eline, how = el, mod, scope, line, ""
            if isinstance(el, ast.Call) and isinstance(el.func, ast.Name) and el.func.id in params:
                if el.func.id not in args:
                    args[el.func.id] = self._caller_argument(caller, f, el.func.id) if caller is not None else None  # type: ignore[arg-type]
                arg = args[el.func.id]
                if arg is None:
                    continue
                # (a lambda's body is what calling it makes; a named callable is called)
                expr = arg.body if isinstance(arg, ast.Lambda) else ast.Call(arg, [], [])
                emod, escope, eline = caller[0], caller[1], caller[2]  # type: ignore[index]
                how = f" ({el.func.id}: the argument at {os.path.basename(emod.path)}:{eline})"
            if isinstance(expr, ast.Call):
                callee = dotted(expr.func)
                if callee is None:
                    continue
                text = f"{callee}()"  # (what it makes, not what it is given: a class's instance)
            else:
                text = dotted(expr) or ""
                if not text:
                    continue
            ev = self.value_text(emod, escope, text, w.sub(), eline)
            if ev.kind in (ValKind.UNKNOWN, ValKind.BUILTIN, ValKind.MODULE):
                continue
            ident = (ev.kind, ev.dotted)
            if ident in seen:
                spans[seen[ident]].append((lo, hi))
                continue
            seen[ident] = len(arms)
            spans.append([(lo, hi)])
            arms.append(Alt(ev, None, None, f"{text}{how}", emod.path, eline))
        if not arms:
            return None
        item = arms[0].val if len(arms) == 1 else alts_value(ForkKind.ASSIGNMENTS, "which item the loop or index is at", mod,
                                                            f"{dotted(node.func)}[...]", line, arms)
        return Val(ValKind.CONTAINER, mod, f"{dotted(node.func)}(...) at {os.path.basename(mod.path)}:{line}", mod.path, line,
                   extra={"item": item, "spans": tuple(tuple(x) for x in spans)})

    def _slice_arms(self, mod: Module, scope: str, b: Binding, iv: Val) -> list | None:
        """The arms of the container ``iv``'s item that a loop over the slice ``b.str_args`` visits: where the bounds
        are the caller's other items of the tuple the container came in (``self.start_layer, self.end_layer,
        self.layers = make_layers(...)``) and name exactly the indices that the elements of an arm span
        (``range(start_layer, end_layer)``); None when that cannot be read."""
        got = iv.extra.get("unpacked")
        spans = iv.extra.get("spans")
        if not got or not spans:
            return None
        call, line, parts = got
        mapped = []
        for t in b.str_args:
            if t.startswith("self.") and t.count(".") == 1:
                cq = self.enclosing_class(mod, scope)
                c = mod.summary.classes.get(cq) if cq else None
                bd = c.inst_attrs.get(t[5:]) if c is not None and t[5:] not in c.reassigned else None
            else:
                bs = mod.summary.functions[scope].locals.get(t, ()) if scope in mod.summary.functions else ()
                bd = bs[0] if len(bs) == 1 else None
            if bd is None or bd.kind != "unpack" or (bd.target, bd.line) != (call, line) or not bd.str_args:
                return None
            k = int(bd.str_args[0])
            if k >= len(parts):
                return None
            mapped.append(parts[k])
        want = tuple(mapped)
        arms = iv.extra["item"].extra["alts"]
        kept = [a for a, sp in zip(arms, spans) if want in sp]
        return kept if kept and all(len(sp) == 1 or want not in sp for sp in spans) else None

    def _call_at(self, mod: Module, scope: str, line: int, names: tuple):
        """The call on ``line`` of function ``scope`` (or the module) whose callee's last name is one of ``names``
        (parsed from the source), or None."""
        f = mod.summary.functions.get(scope) if scope else None
        text = self.index.source_text(mod.path) or ""
        if f is not None:
            tree, _src = function_tree(text, f.line, f.end_line)
            off = f.line - 1
        else:
            try:
                tree, off = ast.parse(text), 0
            except (SyntaxError, ValueError):
                tree = None
        if tree is None:
            return None
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and n.lineno + off == line and (dotted(n.func) or "").rpartition(".")[2] in names:
                return n
        return None

    def _caller_argument(self, caller: tuple, f: FunctionInfo, param: str):
        """The expression the call ``caller`` ((module, scope, line, callee text)) passes for ``param`` of ``f``."""
        cmod, cscope, cline, callee = caller
        node = self._call_at(cmod, cscope, cline, (callee.rpartition(".")[2],))
        if node is None:
            return None
        for k in node.keywords:
            if k.arg == param:
                return k.value
        names = f.call_params
        pos = [a for a in node.args if not isinstance(a, ast.Starred)]
        if len(pos) != len(node.args) or param not in names:
            return None
        i = names.index(param)
        return pos[i] if i < len(pos) else None

    def field_values(self, m: Module, cq: str, name: str) -> Val | None:
        """What the constructors of class ``cq`` pass for field ``name`` (``Meta(..., name=value)`` in the
        workspace or the class's module), read where each call is; None when no call passes a value that
        resolves. Memoised per index generation."""
        key = (self.index.generation, m.path, m.sha, cq, name)
        if key in self._field_memo:
            return self._field_memo[key]
        if key in self._active:
            self._path_cut("a", key)
            return None
        if len(self._field_memo) > 20000:
            self._field_memo.clear()
        mark = self.cut_mark()
        self._active.add(key)
        try:
            out = self._field_values(m, cq, name)
        finally:
            self._active.discard(key)
        if self.clean_since(mark):  # (not when a value on the path above cut it)
            self._field_memo[key] = out
        return out

    _KEYWORD = re.compile(rb"[(,]\s*([A-Za-z_]\w*)\s*=(?!=)")

    def _keyword_modules(self) -> dict:
        """keyword -> workspace modules whose source passes it to a call (`f(..., name=...)`), from one pass
        over the files' bytes per index generation (a field's constructors are looked for only there)."""
        memo = self._kw_memo
        if memo is not None and memo[0] == self.index.generation:
            return memo[1]
        kw_re = self._KEYWORD

        def keywords(text) -> tuple:
            return interned_names(k.decode() for k in kw_re.findall((text or "").encode("utf-8", "surrogatepass")))

        per_file = tuple((modname, self.index.per_text(self.index.ws_files[modname], "call-keywords", keywords))
                         for modname in sorted(self.index.ws_files))
        if memo is not None and len(memo[2]) == len(per_file) and all(
                a[0] == b[0] and a[1] is b[1] for a, b in zip(memo[2], per_file)):
            out = memo[1]  # no file's keywords changed (an edit elsewhere, or of a body that kept them)
        else:
            out = {}
            for modname, kws in per_file:
                for kw in kws:
                    out.setdefault(kw, []).append(modname)
        self._kw_memo = (self.index.generation, out, per_file)
        return out

    def _field_values(self, m: Module, cq: str, name: str) -> Val | None:
        cname = cq.rpartition(".")[2]
        # the class's module, and the workspace modules that pass `name=` to a call and name the class (a
        # constructor may be reached through an attribute: `self.metadata_cls(...)` defaults to the class)
        mods = [m]
        for modname in self._keyword_modules().get(name, ()):
            # (the text first: most of these modules never name the class, and their summaries need not be read)
            path = self.index.ws_files.get(modname)
            if path is None or cname not in (self.index.source_text(path) or ""):
                continue
            x = self.index.module(modname)
            if x is not None and x.path != m.path:
                mods.append(x)
        arms, seen = [], set()
        for mod in mods:
            for cs in mod.summary.calls:
                if not cs.func or name not in cs.keywords:
                    continue
                text = dict(cs.kw_texts).get(name)
                if not text or text in ("None", "?"):
                    continue
                if not self._builds(self.resolve_dotted(mod, cs.scope, cs.func, Walk(), line=cs.line), m, cq):
                    continue
                fv = self.value_text(mod, cs.scope, text, Walk(), cs.line)
                if fv.kind in (ValKind.UNKNOWN, ValKind.BUILTIN, ValKind.MODULE):
                    continue
                ident = (fv.kind, fv.dotted, fv.path, fv.line)
                if ident in seen:
                    continue
                seen.add(ident)
                label = f"{cname}({name}={text}) at {os.path.basename(mod.path)}:{cs.line}"
                arms.append(Alt(dataclasses.replace(fv, extra=dict(fv.extra, field_site=(mod.path, cs.line, label))),
                                None, None, label, mod.path, cs.line))
        if not arms:
            return None
        if len(arms) == 1:
            return arms[0].val
        return alts_value(ForkKind.ASSIGNMENTS, f"where the {cname} was built", m, f"{cq}.{name}", None, arms)

    @staticmethod
    def _builds(cv: Val, m: Module, cq: str) -> bool:
        """Is ``cv`` (a callee) class ``cq`` of ``m``, or a fork with that class among its candidates?"""
        if cv.kind == ValKind.ALTS:
            return any(Resolver._builds(a.val, m, cq) for a in cv.extra["alts"])
        return cv.kind == ValKind.CLASS and cv.module is not None and (cv.module.path, cv.qual) == (m.path, cq)

    def attention_layers(self, mod: Module) -> list:
        """Attention layer classes a layer looked up by name can be (vLLM's ``no_compile_layers`` holds every
        layer with an attention backend): the classes of ``mod`` deriving from vLLM's ``AttentionLayerBase``,
        and the workspace's classes deriving from them (the plugin's layers). Memoised per module and index
        generation (14 ms each on upstream vLLM, whose every `Attention` file is read for subclasses)."""
        return list(self._memoised(self._layers_memo, (mod.path, mod.sha), lambda: tuple(self._attention_layers(mod))))

    def _attention_layers(self, mod: Module) -> list:
        base = [Val(ValKind.CLASS, mod, q, mod.path, c.line) for q, c in mod.summary.classes.items() if "." not in q
                and any(b.qual == "AttentionLayerBase" for b in self.mro(mod, q)[1:])]
        out = list(base)
        keys = {(b.module.name, b.qual) for b in base}
        for m in self.index.workspace_modules_matching(rb"Attention"):
            for q, line, _methods, _attrs in self.index.class_facts(m):
                if "." in q or (m.name, q) in keys:
                    continue
                if any(b.module is not None and (b.module.name, b.qual) in keys for b in self.mro(m, q)[1:]):
                    out.append(Val(ValKind.CLASS, m, q, m.path, line))
                    keys.add((m.name, q))
        return out[: M.MAX_LEAVES]

    def layers_by_name(self, mod: Module, text: str, line: int | None, w: Walk, name: str | None = None) -> Val:
        """An item of vLLM's tables of layers by name (``forward_context.no_compile_layers[...]``,
        ``compilation_config.static_forward_context[...]``): an instance of one of the attention layer classes."""
        layers = self.attention_layers(mod)
        prev = w.hops[-1] if w.hops else None
        self.read_before(w, len(w.hops) - 1)  # (the answer depends on the hop before: no memo above it keys it)
        if prev is not None and prev.path and prev.path != mod.path:
            # looked up in a helper (``get_attention_context``) whose caller in another module unpacked the
            # result: the layer is one of the caller's module's layer classes (an MLA op's helper call
            # returns an MLA layer), when that module defines any
            caller = self.index.module_for_path(prev.path)
            theirs = self.attention_layers(caller) if caller is not None else []
            if theirs:
                layers = theirs
        if not layers:
            return Val(ValKind.UNKNOWN, mod, text, mod.path, line, reason=f"`{text}`: no attention layer class in reach")
        w.add(Hop(HopKind.ALIAS, mod.path, line or 0, name or text, f"{name + ' = ' if name else ''}{text.replace('[]', '[...]')}: the attention layer "
                  f"registered under that name ({len(layers)} layer classes)"))
        arms = [Alt(Val(ValKind.INSTANCE, lv.module, lv.qual, lv.path, lv.line), f"the layer is a {lv.qual}", None,
                    lv.qual, lv.path, lv.line) for lv in layers]
        return alts_value(ForkKind.SUBCLASS, "the layer registered under that name", mod, name or text, line, arms)

    def oot_replacement(self, cv: Val):
        """The registration whose class vLLM instantiates instead of ``cv`` (a CustomOp or PluggableLayer
        subclass whose ``__name__`` is registered with ``register_oot``), else None."""
        if self.oot_replacements is None or cv.module is None:
            return None
        regs = self.oot_replacements()
        reg = regs.get(cv.qual.rpartition(".")[2]) if regs else None
        if reg is None or (reg.replacement.module is not None and (reg.replacement.module.name, reg.replacement.qual) == (cv.module.name, cv.qual)):
            return None
        if not any(b.qual in ("CustomOp", "PluggableLayer") and b.module is not None and not b.module.workspace
                   for b in self.mro(cv.module, cv.qual)):
            return None
        return reg

    def selected_impls(self, mod: Module, scope: str, name: str, line: int) -> Val | None:
        """`<backend>.get_impl_cls()` inside an attention layer: one candidate per backend that can be
        selected for the layer's kind (MLA layers: MLA backends; other layers: the rest)."""
        try:
            cands = self.backend_impls()
        except RecursionError:
            return None
        if not cands:
            return None
        cls_q = self.enclosing_class(mod, scope)
        layer_mla = cls_q is not None and any("MLA" in b.qual.rpartition(".")[2] for b in self.mro(mod, cls_q))
        arms = [Alt(v, f"the selected backend is {label}", None, f"{label}: {v.qual.rpartition('.')[2]}", v.path, v.line)
                for label, v, is_mla in cands if is_mla == layer_mla]
        if not arms:
            return None
        return alts_value(ForkKind.SELECTED_BACKEND, "the attention backend vLLM selected for this layer", mod, name, line, arms)

    def _lazy_import_params(self, tm: Module, f: FunctionInfo) -> tuple | None:
        """(index of the module-name parameter, index of the attribute-name parameter or None) when ``f`` or a def
        inside it imports a module named by a parameter (``importlib.import_module(p)``, or a module function
        whose body does that with its first parameter) and, if it reads an attribute, takes it with
        ``getattr(..., q)`` of another parameter; else None. Memoised per function and source."""
        if not f.inner_defs:
            return None  # (the factory's work is in a closure it returns)
        return self._memoised(self._lazy_memo, (tm.path, tm.sha, f.qualname), lambda: self._find_lazy_import(tm, f), 5000)

    def _qualname_import_param(self, tm: Module, f: FunctionInfo) -> int | None:
        """The index of the parameter of ``f`` that names a "module.attr" when ``f`` imports that module and returns
        the attribute (``a, b = p.rsplit(".", 1)`` or ``p.rpartition(".")``; ``m = importlib.import_module(a)``; ``return
        getattr(m, b)``: vLLM's ``resolve_obj_by_qualname``), else None. Memoised per function and source."""
        if len(f.return_alts) != 1 or not f.return_alts[0][0].startswith("getattr("):
            return None
        return self._memoised(self._lazy_memo, ("qualname", tm.path, tm.sha, f.qualname), lambda: self._find_qualname_import(tm, f), 5000)

    @staticmethod
    def _find_qualname_import(tm: Module, f: FunctionInfo) -> int | None:
        m = re.fullmatch(r"getattr\((\w+), (\w+)\)", f.return_alts[0][0])
        if m is None:
            return None
        mod_local, attr_local = m.groups()
        mb = f.locals.get(mod_local, ())
        if len(mb) != 1 or mb[0].kind != "call" or (mb[0].target or "").rpartition(".")[2] != "import_module":
            return None
        calls = [cs for cs in tm.summary.calls_in(f.qualname)
                 if cs.line == mb[0].line and cs.func.rpartition(".")[2] == "import_module" and cs.arg_texts]
        if len(calls) != 1:
            return None
        nb, ab = f.locals.get(calls[0].arg_texts[0], ()), f.locals.get(attr_local, ())
        if len(nb) != 1 or len(ab) != 1 or nb[0].kind != "unpack" or ab[0].kind != "unpack" or nb[0].target != ab[0].target:
            return None
        src = (nb[0].target or "").replace('"', "'")
        for i, p in enumerate(f.call_params):
            if (src == f"{p}.rsplit('.', 1)" and (nb[0].str_args, ab[0].str_args) == (("0",), ("1",))
                    or src == f"{p}.rpartition('.')" and (nb[0].str_args, ab[0].str_args) == (("0",), ("2",))):
                return i
        return None

    def _find_lazy_import(self, tm: Module, f: FunctionInfo) -> tuple | None:
        pos = f.call_params
        if not pos:
            return None
        inside = f.qualname + "."
        mi = ai = None
        for cs in tm.summary.calls:
            if not (cs.scope == f.qualname or cs.scope.startswith(inside)) or not cs.arg_texts:
                continue
            a0 = cs.arg_texts[0]
            if cs.func in ("getattr", "builtins.getattr") and len(cs.arg_texts) >= 2 and cs.arg_texts[1] in pos:
                ai = pos.index(cs.arg_texts[1])
            elif a0 in pos and (cs.func.rpartition(".")[2] == "import_module" or self._imports_first_param(tm, cs.func)):
                mi = pos.index(a0)
        return (mi, ai) if mi is not None and ai != mi else None

    @staticmethod
    def _imports_first_param(tm: Module, func: str) -> bool:
        """Is ``func`` a function of ``tm`` that calls ``import_module`` with its first parameter?"""
        g = tm.summary.functions.get(func) if func.isidentifier() else None
        if g is None or not g.params:
            return False
        p0 = g.params[0].name
        return any(cs.scope == g.qualname and cs.func.rpartition(".")[2] == "import_module" and cs.arg_texts[:1] == (p0,)
                   for cs in tm.summary.calls)

    def _decorates_argument(self, mod: Module, scope: str, line: int, tm: Module, f: FunctionInfo, args: tuple,
                            w: Walk) -> bool:
        """Is ``f(args[0], ...)``, called in ``scope`` of ``mod``, a decorator applied by call (``g = deco(fn)``: the
        def it returns runs ``fn``)? ``f`` returns an inner def, the argument is a name, and that def calls the
        parameter or the argument is a function (``make_async(fn)`` hands it to ``partial``). Not
        ``_lazy_import_wrapper("pkg", "attr")`` nor a kernel factory called with sizes (``_mhc_post_fwd(mhc,
        hidden)``, whose inner def uses ``mhc`` as a size): those are the def they return."""
        if not (f.inner_defs and f.returns_names and args and args[0]
                and set(f.returns_names) <= {q.rpartition(".")[2] for q in f.inner_defs}
                and all(x.isidentifier() for x in args[0].split("."))):
            return False
        return self._inner_calls_param(tm, f) or self.resolve_dotted(mod, scope, args[0], w.sub(), line=line).kind in (
            ValKind.FUNCTION, ValKind.CLASS, ValKind.ALTS, ValKind.NOT_INSTALLED, ValKind.TORCH_OP)

    @staticmethod
    def _inner_calls_param(tm: Module, f: FunctionInfo) -> bool:
        """Does a def that ``f`` returns call ``f``'s first parameter (``def deco(fn): def w(*a): return fn(*a);
        return w``)?"""
        pos = f.call_params
        if not pos:
            return False
        inner = {q for q in f.inner_defs if q.rpartition(".")[2] in f.returns_names}
        return any(cs.func == pos[0] and cs.scope in inner for cs in tm.summary.calls)

    @staticmethod
    def _bound_arg(f: FunctionInfo, text: str, args: tuple) -> str | None:
        """When ``f`` returns its positional parameter ``text``: the caller's argument text for it."""
        if args and text.isidentifier():
            pos = f.call_params
            if text in pos:
                i = pos.index(text)
                if i < len(args) and args[i]:
                    return args[i]
        return None

    def _callee_walk(self, target: Val, w: Walk) -> Walk:
        """The walk in which a called method's returns are read: `self` there is the object the
        method was looked up on (the caller's receiver when the method is inherited by it)."""
        sub = w.sub()
        recv = target.extra.get("receiver")
        if recv is not None and (sub.receiver is None or recv[1] is not None and not self._inherits(sub.receiver, recv)):
            sub.receiver = recv
        return sub

    def _inherits(self, sub_recv, base_recv) -> bool:
        smod, sq = sub_recv
        bmod, bq = base_recv
        if smod is None or sq is None or bmod is None:
            return False
        return any(b.module is not None and (b.module.name, b.qual) == (bmod.name, bq) for b in self.mro(smod, sq))

    def value_text(self, mod: Module, scope: str, text: str, w: Walk, line: int | None) -> Val:
        """A value from a binding's recorded text: a dotted name, ``C()`` (a call's result), ``@import:mod``."""
        if text.startswith("@import:"):
            return self.module_value(text[len("@import:"):], w)
        if text.startswith("[") and text.endswith("]"):
            items = [x.strip() for x in text[1:-1].split(",") if x.strip()]
            return Val(ValKind.LIST, mod, text, mod.path, line, extra={"items": items, "scope": scope})
        if text.endswith(")") and "(" in text:
            callee, _, inner = text[:-1].partition("(")
            args = tuple("" if a == "?" else a for a in inner.split(", ")) if inner else ()
            tv = self.resolve_dotted(mod, scope, callee, w.sub(), line=line)
            return self.result_of_call(mod, scope, callee, line or 0, callee, tv, w, None, args)
        base, sep, key = text[:-1].partition("[") if text.endswith("]") else ("", "", "")
        if sep and base and all(x.isidentifier() for x in base.split(".")):
            return self.item_value(mod, scope, base, key, w, line)
        return self.resolve_dotted(mod, scope, text, w, line=line)

    def item_value(self, mod: Module, scope: str, base: str, key: str, w: Walk, line: int | None) -> Val:
        """``base[key]`` read as a value (a function's ``return _REGISTRY[name]``): an entry of a literal dict of
        callables (a fork by the key), an item of a module list, else unknown, said as an item (it was looked up as
        one name, "name `_ROPE_DICT[key]` is not bound")."""
        f = mod.summary.functions.get(scope) if scope else None
        stored = [(v, ln) for t, v, ln, _g in (f.attr_sets if f is not None else ()) if t == f"{base}[]"]
        if stored and base not in (f.locals if f is not None else {}):
            # a table this function fills (`_ROPE_DICT[key] = rotary_emb` below a `return _ROPE_DICT[key]`): an item
            # read back is a value it stored earlier, read where it is stored
            vals = [self.resolve_dotted(mod, scope, v, w.sub(), line=ln + 1) for v, ln in stored]
            if len(vals) == 1 and vals[0].kind != ValKind.UNKNOWN:
                w.add(Hop(HopKind.ALIAS, mod.path, line or 0, f"{base}[{key}]",
                          f"{base}[{key}] is a value stored by `{base}[...] = {stored[0][0]}` "
                          f"({os.path.basename(mod.path)}:{stored[0][1]})"))
                return vals[0]
        bv = self.resolve_dotted(mod, scope, base, w.sub(), line=line)
        if bv.kind == ValKind.DICT:
            return self.dict_choice(bv, key, mod, scope)
        if bv.kind == ValKind.CONTAINER and bv.extra.get("item") is not None:
            return bv.extra["item"]
        return Val(ValKind.UNKNOWN, mod, f"{base}[{key}]", mod.path, line,
                   reason=f"`{base}[{key}]` is an item of `{base}`" + (f" at {os.path.basename(mod.path)}:{line}" if line else ""))

    def dict_choice(self, dv: Val, key: str, mod: Module, scope: str) -> Val:
        """``d[key]`` of a literal dict of callables: one branch per entry, decided by ``key``."""
        dm = dv.module
        arms = []
        for k, text in dv.extra.get("pairs", ()):
            if not text:
                av = Val(ValKind.UNKNOWN, dm, f"{dv.qual}[{k}]", dv.path, dv.line, reason=f"the value for {k} is not a name or constructor call")
            else:
                av = self.value_text(dm, dv.extra.get("scope", ""), text, Walk(), dv.line)  # type: ignore[arg-type]
            c = f"{key} == {k}"
            arms.append(Alt(av, c, self.profile.evaluate(mod, scope, c), f"{k}: {text or '...'}", dv.path, dv.line))
        return alts_value(ForkKind.DICT, key, dm, dv.qual, dv.line, arms)

    def import_map(self) -> dict:
        """Module names a plugin's import hook serves from elsewhere: ``builtins.__import__`` replaced
        (at module level) by a function that reads a literal dict of module names.
        name -> (mapped module, hook path, hook line). Memoised per index generation."""
        gen = self.index.generation
        memo = self._import_map_memo
        if memo is not None and memo[0] == gen:
            return memo[1]
        out: dict = {}
        self._import_map_memo = (gen, out)
        for m in self.index.workspace_modules_matching(_IMPORT_HOOK_TEXT):
            for ap in m.summary.attr_patches:
                if ap.target.startswith("sys.modules[") and ap.value:
                    try:
                        src = ast.literal_eval(ap.target[len("sys.modules["):-1])
                    except (ValueError, SyntaxError):
                        continue
                    if ap.value.startswith("@import:"):
                        dst = ap.value[len("@import:"):]
                    else:
                        mv = self.resolve_dotted(m, "", ap.value, Walk(), line=ap.line)
                        dst = mv.qual if mv.kind == ValKind.MODULE else None
                    if isinstance(src, str) and dst:
                        out.setdefault(src, (dst, m.path, ap.line))
                    continue
                if ap.target not in ("builtins.__import__", "__builtins__.__import__") or not ap.value:
                    continue
                f = m.summary.functions.get(ap.value)
                if f is None:
                    continue
                for name in f.names_read:
                    for b in m.summary.bindings.get(name, []):
                        if b.kind != "dict":
                            continue
                        for k, v in b.alternatives:
                            try:
                                src, dst = ast.literal_eval(k), ast.literal_eval(v) if v else None
                            except (ValueError, SyntaxError):
                                continue
                            if isinstance(src, str) and isinstance(dst, str):
                                out.setdefault(src, (dst, m.path, ap.line))
        return out

    def module_value(self, name: str, w: Walk, quiet: bool = False) -> Val:
        if not name.startswith(("torch", "vllm")):
            mapped = self.import_map().get(name)
            if mapped is not None and mapped[0] != name:
                w.add(Hop(HopKind.PATCH, mapped[1], mapped[2], mapped[0],
                          f"the import hook installed at {os.path.basename(mapped[1])}:{mapped[2]} serves `{name}` from `{mapped[0]}`"))
                name = mapped[0]
        if name == "torch" or name.startswith("torch."):
            if name == "torch":
                return Val(ValKind.TORCH, None, "torch")
            if name == "torch.ops":
                return Val(ValKind.TORCH_OPS, None, "", extra={"ns": []})
            return Val(ValKind.UNKNOWN, None, name, reason=f"`{name}` is a PyTorch API (not followed)", extra={"torch_api": True})
        top = name.split(".", 1)[0]
        if top in self.stdlib:
            return Val(ValKind.UNKNOWN, None, name, reason=f"`{name}` is in the Python standard library (not followed)", extra={"stdlib": True})
        loc = self.index.locate(name)
        if loc is None:
            top = name.split(".", 1)[0]
            if self.index.locate(top) is None:
                return Val(ValKind.NOT_INSTALLED, None, name, reason=f"package `{top}` is not installed in the target environment", extra={"package": top})
            return Val(ValKind.UNKNOWN, None, name, reason=f"module `{name}` not found (package `{top}` is installed)")
        if loc.kind == "ext":
            return Val(ValKind.EXT_MODULE, None, name, loc.path, None, extra={"package": name.split(".", 1)[0]})
        if loc.kind == "namespace":
            return Val(ValKind.NAMESPACE, None, name, loc.path)
        m = self.index.module(name)
        if m is None:
            return Val(ValKind.UNKNOWN, None, name, reason=f"cannot read module `{name}`")
        if m.summary.error:
            return Val(ValKind.MODULE, m, name, m.path, 1, reason=m.summary.error)
        return Val(ValKind.MODULE, m, name, m.path, 1)

    def resolve_dotted(self, mod: Module, scope: str, text: str, w: Walk, line: int | None = None) -> Val:
        if not text:
            return Val(ValKind.UNKNOWN, mod, "", reason="the callee is not a plain name or attribute chain")
        key = (mod.name, scope, text, line)
        if key in self._active:
            self._path_cut("a", key)
            return Val(ValKind.UNKNOWN, mod, text, reason=f"`{text}` is defined in terms of itself")
        if len(self._active) > 80:
            self.cuts += 1
            return Val(ValKind.UNKNOWN, mod, text, reason="resolution nested too deeply")
        head = text.partition(".")[0]
        mkey = None
        if head not in ("self", "cls") and self.memo_enabled:
            self._check_memo_gen()
            # the line matters only for a name local to the scope (bindings before the line)
            local = scope and mod.summary.binding_of(scope, head)[0] != "module"
            recv = w.receiver
            # the receiver matters for names whose bindings read `self` (a local `x = self.f()`)
            # and for a local, the guards of its use (which of its bindings on several branches can reach it)
            mkey = (mod.path, mod.sha, scope, text, (line, w.use_guards) if local else None,
                    (recv[0].name, recv[1]) if recv and recv[0] is not None else None)
            hit = self._val_memo.get(mkey)
            if hit is not None:
                w.hops.extend(hit[1])
                return hit[0]
        self._active.add(key)
        cuts, inner, n_log, n0 = self.cuts, self.inner_cuts, len(self.cut_log), len(w.hops)
        try:
            v = self._resolve_dotted(mod, scope, text, w, line)
        finally:
            self._active.discard(key)
        if mkey is not None and not w.partial and self._outside_cuts(cuts, inner, n_log, None, w, n0) == 0:
            if len(self._val_memo) > 200000:
                self._val_memo.clear()
            self._val_memo[mkey] = (v, tuple(w.hops[n0:]))
        return v

    def clear_memos(self) -> None:
        """Empty the memos of traced values, subtrees and call sites (a long batch bounds its memory with it:
        `attnlens sites`). Answers do not depend on what was traced before, so nothing changes but the time. The
        constructors' field values stay (``_field_memo``: keyed by class and field alone, about 1,000 at the end of
        upstream vLLM's run, and each computed again read back the summaries of every module passing the keyword)."""
        self._clear_work_memos()
        self.site_memo.clear()

    def _clear_work_memos(self) -> None:
        for memo in (self._val_memo, self._follow_memo, self._reach_memo, self._karg_memo, self._met_table,
                     self._wrap_memo, self._hopeless_memo, self._tested_memo):
            memo.clear()

    # a server's work memos (traced values, subtrees, reach) past this many traced values are emptied between two
    # files' work (:meth:`trim_memos`); the answers (the site memo) stay
    TRIM_VALUES = int(os.environ.get("ATTNLENS_TRIM_VALUES") or 8000)

    def trim_memos(self) -> bool:
        """Bound a long-lived process's memory (an editor's server with many files open): when the traced
        values pass ``TRIM_VALUES``, empty the memos behind the answers and keep the answers themselves (the
        site memo: a call site's chain, the same whatever was traced before it, docs/resolver.md). Called
        between two pieces of work, never inside a resolution. True when it emptied them."""
        if len(self._val_memo) <= self.TRIM_VALUES:
            return False
        self._clear_work_memos()
        return True

    def _check_memo_gen(self) -> None:
        if self._memo_gen != self.index.generation:
            self._val_memo.clear()
            self._follow_memo.clear()
            self._mro_memo.clear()
            self._karg_memo.clear()
            self._met_table.clear()
            self._layers_memo.clear()
            self._wrap_memo.clear()
            self._hopeless_memo.clear()
            self._tested_memo.clear()
            self._memo_gen = self.index.generation

    def _resolve_dotted(self, mod: Module, scope: str, text: str, w: Walk, line: int | None) -> Val:
        parts = text.split(".")
        if parts[0] in ("self", "cls") and scope and self.enclosing_class(mod, scope) is not None \
                and mod.summary.binding_of(scope, parts[0])[0] != "local":  # (a local named `cls` is a value)
            v = self.self_value(mod, scope, parts[0], w)
        elif parts[0] == "super()" and len(parts) > 1 and scope:
            v = self.super_attr(mod, scope, parts[1], w)
            parts = parts[1:]
        elif _suffixes(parts[0])[1]:
            # `get_group().send(...)`, `_groups[name]()`: the result of calling the name, an item of it (pyindex
            # elides the arguments and keys)
            head, suf = _suffixes(parts[0])
            v = self._suffixed(mod, scope, head, suf, self.lookup_name(mod, scope, head, w, line), w, line)
        else:
            v = self.lookup_name(mod, scope, parts[0], w, line)
        for k, p in enumerate(parts[1:], 1):
            # `a.table[].x`, `self.get_x().y`: an item of `a.table`, the result of calling `self.get_x` (pyindex elides
            # the keys and arguments)
            name, suf = _suffixes(p)
            if suf == "[]" and name in LAYER_TABLES:  # whatever holds the table, its items are the attention layers
                v = self.layers_by_name(mod, text.partition(p)[0] + p, line, w)
                continue
            if v.kind in (ValKind.UNKNOWN, ValKind.BUILTIN):
                break
            if v.kind == ValKind.NOT_INSTALLED and "(" not in suf:
                v = self.attr(v, name, w)  # (an item of a missing package's attribute is its code too; a call's result is not)
                continue
            v = self.attr(v, name, w)
            if suf:
                v = self._suffixed(mod, scope, ".".join(parts[:k] + [name]), suf, v, w, line, text)
        return v

    def _suffixed(self, mod: Module, scope: str, text: str, suffixes: str, v: Val, w: Walk, line: int | None,
                  whole: str | None = None) -> Val:
        """``v`` (the value of ``text``) called and indexed as ``suffixes`` say, in order (``()[]``: an item of what
        calling it gives): a call's result is what :meth:`result_of_call` gives a binding of the call (the chain's text
        has no arguments), an item one of a literal dict's entries or an annotated container's item, else an item
        chosen at run time (of ``whole``, the chain being resolved)."""
        name = text.rpartition(".")[2]
        for i in range(0, len(suffixes), 2):
            if suffixes[i] == "(":
                if v.kind == ValKind.UNKNOWN:
                    return v
                v = self.result_of_call(mod, scope, f"{text}()", line or 0, text, v, w)
            elif v.kind == ValKind.DICT:
                v = self.dict_choice(v, "?", mod, scope)
            elif v.kind == ValKind.CONTAINER and v.extra.get("item") is not None:
                v = v.extra["item"]
            elif v.kind == ValKind.UNKNOWN and whole is None:
                return v  # (the name itself is not known: its reason says why)
            else:
                shown = whole or f"{text}[]"
                return Val(ValKind.UNKNOWN, mod, shown, mod.path, line,
                           reason=f"`{shown.replace('[]', '[...]')}`: an item of `{name}` chosen at run time")
            text += suffixes[i:i + 2]
        return v

    def self_value(self, mod: Module, scope: str, which: str, w: Walk | None = None) -> Val:
        cls_q = self.enclosing_class(mod, scope)
        if cls_q is None:
            return Val(ValKind.UNKNOWN, mod, which, reason=f"`{which}` outside a class")
        kind = ValKind.INSTANCE if which == "self" else ValKind.CLASS
        recv = getattr(w, "receiver", None) if w is not None else None
        if recv is not None and recv[1] is not None:
            rmod, rq = recv
            # virtual dispatch: `self` is the receiver's class when the method is inherited by it
            if (rmod.name, rq) != (mod.name, cls_q) and any(
                    b.module is not None and (b.module.name, b.qual) == (mod.name, cls_q) for b in self.mro(rmod, rq)):
                rc = rmod.summary.classes.get(rq)
                return Val(kind, rmod, rq, rmod.path, rc.line if rc else None)
        c = mod.summary.classes[cls_q]
        return Val(kind, mod, cls_q, mod.path, c.line)

    def super_attr(self, mod: Module, scope: str, name: str, w: Walk) -> Val:
        """``super().name`` in a method of ``scope``: ``name`` of the first class after the method's class in the MRO
        of the object's class (the receiver the walk follows when the method is inherited by it, else the method's
        class), as Python's zero-argument ``super()`` finds it; the object stays the receiver of what it finds."""
        cls_q = self.enclosing_class(mod, scope)
        if cls_q is None:
            return Val(ValKind.UNKNOWN, mod, f"super().{name}", reason="`super()` outside a class")
        here = (mod.name, cls_q)
        recv = getattr(w, "receiver", None)
        rmod, rq = (recv if recv is not None and recv[1] is not None else (mod, cls_q))
        order = self.mro(rmod, rq)
        at = next((i for i, b in enumerate(order) if b.module is not None and (b.module.name, b.qual) == here), None)
        if at is None:  # (a receiver that does not inherit the method: the method's own class)
            rmod, rq = mod, cls_q
            order = self.mro(mod, cls_q)
            at = 0
        v = self.class_attr(rmod, rq, name, w, order=order[at + 1:])
        if v is not None:
            if v.kind == ValKind.FUNCTION and v.module is not None:
                w.add(Hop(HopKind.ALIAS, v.path or "", v.line or 0, v.dotted, f"super().{name}: {v.owner}.{name}, the next "
                          f"class in the MRO of {rq} after {cls_q}", None))
            return v
        c = mod.summary.classes.get(cls_q)
        found = {b.qual.rpartition(".")[2] for b in order[at + 1:]}
        lost = tuple(t for t in (c.bases if c is not None else ()) if t.rpartition(".")[2] not in found and t != "object")
        # (`lost`: a base class that is not found; what it runs is unknown, a branch of its own: body_branches)
        return Val(ValKind.UNKNOWN, mod, f"super().{name}", mod.path, extra={"lost_bases": lost} if lost else {},
                   reason=f"`super().{name}`: " + (f"the base class {', '.join(lost)} of {cls_q} is not found" if lost else
                                                   f"no base class of {cls_q} in the workspace or the target defines `{name}`"))

    def enclosing_class(self, mod: Module, scope: str) -> str | None:
        q = scope
        while q:
            f = mod.summary.functions.get(q)
            if f is not None and f.class_name and f.class_name in mod.summary.classes:
                return f.class_name
            q = q.rpartition(".")[0]
        return None

    # ------------------------------------------------------------------
    # attributes
    # ------------------------------------------------------------------
    def attr(self, v: Val, name: str, w: Walk) -> Val:
        k = v.kind
        if k == ValKind.ALTS:
            arms = [dataclasses.replace(a, val=self.attr(a.val, name, Walk())) for a in v.extra["alts"]]
            if all(a.val.kind == ValKind.UNKNOWN for a in arms):
                return Val(ValKind.UNKNOWN, v.module, f"{v.qual}.{name}", v.path, v.line,
                           reason=f"`{name}` is found on none of the {len(arms)} candidates of `{v.qual}`")
            return alts_value(v.extra["fork_kind"], v.extra.get("decided_by"), v.module, f"{v.qual}.{name}", v.line, arms)
        if k == ValKind.DICT:
            return Val(ValKind.UNKNOWN, v.module, f"{v.qual}.{name}", v.path, v.line, reason=f"`.{name}` of the dict `{v.qual}`")
        if k == ValKind.MODULE:
            return self.attr_of_module(v.module, name, w)  # type: ignore[arg-type]
        if k == ValKind.NAMESPACE:
            return self.module_value(f"{v.qual}.{name}", w)
        if k == ValKind.TORCH:
            if name == "ops":
                return Val(ValKind.TORCH_OPS, None, "", extra={"ns": []})
            return Val(ValKind.UNKNOWN, None, f"torch.{name}", reason=f"`torch.{name}` is a PyTorch API (not followed)", extra={"torch_api": True})
        if k == ValKind.TORCH_OPS:
            ns = v.extra.get("ns", [])
            if not ns:
                return Val(ValKind.TORCH_OPS, None, name, extra={"ns": [name]})
            return Val(ValKind.TORCH_OP, None, f"{ns[0]}::{name}", extra={"ns": ns[0], "op": name})
        if k == ValKind.TORCH_OP:
            if name in ("default",) or not name.startswith("_"):
                return Val(ValKind.TORCH_OP, None, v.qual, extra=dict(v.extra, overload=name))
            return v
        if k in (ValKind.EXT_MODULE, ValKind.EXT_ATTR):
            return Val(ValKind.EXT_ATTR, None, f"{v.qual}.{name}", v.path, None, extra=v.extra)
        if k == ValKind.NOT_INSTALLED:
            extra = {x: y for x, y in v.extra.items() if x not in ("object", "member")}
            if v.extra.get("member"):
                # `obj.field.items()` on an object of a missing package: a plain value of it, not its code
                return Val(ValKind.UNKNOWN, None, f"{v.qual}.{name}", reason=f"`.{name}` of an attribute of a `{v.extra.get('package')}` object")
            if v.extra.get("object"):
                extra["member"] = True
            return Val(ValKind.NOT_INSTALLED, None, f"{v.qual}.{name}", reason=v.reason, extra=extra)
        if k == ValKind.PLATFORM:
            return self.profile.platform_attr(name, w)
        if k == ValKind.ENUM_MEMBER:
            em, eq = v.extra["enum"]
            found = self.class_attr(em, eq, name, w, instance=True)
            if found is not None and found.kind == ValKind.FUNCTION:
                return dataclasses.replace(found, extra=dict(found.extra, enum_member=v.extra["member"]))
            return Val(ValKind.UNKNOWN, v.module, f"{v.qual}.{name}", v.path, v.line, reason=f"`.{name}` of the enum member {v.qual}")
        if k == ValKind.INSTANCE and name == "__class__":
            return Val(ValKind.CLASS, v.module, v.qual, v.path, v.line)
        if k in (ValKind.CLASS, ValKind.INSTANCE):
            found = self.class_attr(v.module, v.qual, name, w, instance=(k == ValKind.INSTANCE))  # type: ignore[arg-type]
            if found is not None and k == ValKind.INSTANCE and found.kind == ValKind.FUNCTION and self.is_enum(v.module, v.qual):  # type: ignore[arg-type]
                return dataclasses.replace(found, extra=dict(found.extra, enum_any=True))  # a member chosen at run time
            if found is not None and k == ValKind.INSTANCE and found.kind == ValKind.FUNCTION and (
                    v.extra.get("annotated") or found.func is not None and found.func.is_abstract):
                # a declared type's method, or an abstract method reached on an object (`self.get_heads(n)` in a
                # base whose subclasses implement it): what runs is a subclass's
                sub = self.overriding_subclasses(v, name, found)
                if sub is not None:
                    return sub
            if found is not None:
                return found
            if v.module is not None and not v.module.workspace:
                p = self.patch_entry((v.module.name, f"{v.qual}.{name}"))
                if p is not None:  # an attribute the plugin adds onto an upstream class (`Up._orig = Up.forward`)
                    rv, ppath, pline, text = p
                    w.add(Hop(HopKind.PATCH, ppath, pline, rv.dotted, f"{text}: set on {v.dotted} by the plugin at import time"))
                    return rv
            if name == "apply" and self.is_autograd_function(v):
                c = v.cls
                fq = c.methods.get("forward") if c else None
                if fq and v.module is not None:
                    f = v.module.summary.functions[fq]
                    w.add(Hop(HopKind.AUTOGRAD_APPLY, v.module.path, f.line, f"{v.dotted}.forward", f"{v.qual}.apply(...) runs {v.qual}.forward", None))
                    return Val(ValKind.FUNCTION, v.module, fq, v.module.path, f.line, owner=v.qual)
            return Val(ValKind.UNKNOWN, v.module, f"{v.dotted}.{name}", reason=f"`{name}` not found on class {v.dotted} (or it is set dynamically)")
        if k == ValKind.FUNCTION:
            if name == "maybe_inplace" and v.module is not None and v.func is not None \
                    and self._ir_op_decorator(v.module, v.func) is not None:
                # (`ir.ops.fused_add_rms_norm.maybe_inplace(...)`: the same IR op, dispatched the same way)
                w.add(Hop(HopKind.ALIAS, v.path or "", v.line or 0, f"{v.dotted}.maybe_inplace",
                          f"{v.qual}.maybe_inplace: the IR op {v.qual}, whose providers may write in place"))
                return v
            return Val(ValKind.UNKNOWN, v.module, f"{v.dotted}.{name}", reason=f"attribute `{name}` of function {v.dotted}")
        return Val(ValKind.UNKNOWN, v.module, f"{v.qual}.{name}", reason=v.reason or f"cannot follow `.{name}`")

    def attr_of_module(self, m: Module, name: str, w: Walk, from_import: bool = False) -> Val:
        key = ("attr", m.name, name)
        if key in self._active:
            self._path_cut("a", key)
            return Val(ValKind.UNKNOWN, m, f"{m.name}.{name}", reason=f"`{m.name}.{name}` is defined in terms of itself (import cycle)")
        self._active.add(key)
        try:
            return self._attr_of_module(m, name, w, from_import)
        finally:
            self._active.discard(key)

    def _attr_of_module(self, m: Module, name: str, w: Walk, from_import: bool = False) -> Val:
        summ = m.summary
        if name in summ.bindings:
            b = self.choose(m, summ.bindings[name], "", None)
            if b.kind in ("import", "from"):
                # a re-export: name imported into m from elsewhere
                w.add(Hop(HopKind.REEXPORT, m.path, b.line, f"{m.name}.{name}", f"{m.name} re-exports {name}", self.guard_text(b.guards), self.guard_value(m, b.guards) if b.guards else None, b.col))
                hops_before = len(w.hops)
                v = self.binding_value(m, b, w, scope="")
                # drop the duplicated import hop that binding_value adds right after the reexport hop
                if len(w.hops) > hops_before and w.hops[hops_before].kind in (HopKind.IMPORT, HopKind.CONDITIONAL_IMPORT) and w.hops[hops_before].line == b.line:
                    w.hops[hops_before - 1].detail += f" ({w.hops[hops_before].detail})"
                    del w.hops[hops_before]
                return v
            return self.binding_value(m, b, w, scope="")
        sub = f"{m.name}.{name}"
        if m.is_package:
            loc = self.index.locate(sub)
            if loc is not None:
                return self.module_value(sub, w)
        for star in summ.bindings.get("*", []):
            target = self.abs_module(m, star.target or "", star.level)
            if not target or target == m.name:
                continue
            sm = self.index.module(target)
            if sm is not None and (name in sm.summary.bindings or any(b.kind == "star" for b in sm.summary.bindings.get("*", []))):
                key = ("star", m.name, target, name)
                if key in self._active:
                    self._path_cut("a", key)
                    continue
                self._active.add(key)
                try:
                    v = self.attr_of_module(sm, name, Walk())
                finally:
                    self._active.discard(key)
                if v.kind != ValKind.UNKNOWN or name in sm.summary.bindings:
                    w.add(Hop(HopKind.REEXPORT, m.path, star.line, f"{m.name}.{name}", f"{m.name} re-exports {name} via `from {target} import *`", self.guard_text(star.guards)))
                    return self.attr_of_module(sm, name, w)
        if m.name == "vllm.platforms" and name == "current_platform" or (summ.has_getattr and name == "current_platform"):
            return self.profile.current_platform(w)
        if summ.has_getattr:
            return Val(ValKind.UNKNOWN, m, sub, reason=f"`{name}` comes from {m.name}.__getattr__ (dynamic)")
        if summ.error:
            return Val(ValKind.UNKNOWN, m, sub, reason=f"{m.name}: {summ.error}")
        return Val(ValKind.UNKNOWN, m, sub, reason=f"`{name}` does not exist in {m.name} ({os.path.basename(m.path)})")

    def class_bases(self, mod: Module, cq: str) -> list[Val]:
        c = mod.summary.classes.get(cq)
        out = []
        if c is None:
            return out
        scope = cq.rpartition(".")[0] if "." in cq else ""
        scope = scope if scope in mod.summary.functions else ""
        for b in c.bases:
            if not b or b in ("object", "Generic", "ABC", "abc.ABC") or b.startswith("Generic"):
                continue
            v = self.resolve_dotted(mod, scope, b, Walk(), line=c.line)
            out.append(v)
        return out

    def mro(self, mod: Module, cq: str, limit: int = 30) -> list[Val]:
        """Linearised base classes (depth-first, de-duplicated), starting with the class. Memoised per index
        generation (callers get a copy)."""
        # (a base met while it is being resolved above is not memoised as this class's MRO)
        return list(self._memoised(self._mro_memo, (mod.path, mod.sha, cq, limit), lambda: self._mro(mod, cq, limit), 50000))

    def _mro(self, mod: Module, cq: str, limit: int) -> list[Val]:
        out: list[Val] = []
        seen = set()
        stack = [Val(ValKind.CLASS, mod, cq, mod.path, mod.summary.classes[cq].line if cq in mod.summary.classes else None)]
        while stack and len(out) < limit:
            v = stack.pop(0)
            key = (v.module.name if v.module else None, v.qual)
            if key in seen:
                continue
            seen.add(key)
            out.append(v)
            if v.kind == ValKind.CLASS and v.module is not None:
                stack[0:0] = [b for b in self.class_bases(v.module, v.qual) if b.kind == "class"]
        return out

    def class_attr(self, mod: Module, cq: str, name: str, w: Walk, instance: bool = False, order: list | None = None) -> Val | None:
        """``name`` on class ``cq`` of ``mod`` (an instance of it with ``instance``), looked up along its MRO, or along
        ``order`` (the classes after one in that MRO: ``super()``), the object staying ``cq``'s."""
        chain = self.mro(mod, cq) if order is None else order
        for i, cv in enumerate(chain):
            m = cv.module
            c = cv.cls
            if m is None or c is None:
                continue
            if name in c.methods:
                fq = c.methods[name]
                f = m.summary.functions[fq]
                return Val(ValKind.FUNCTION, m, fq, m.path, f.line, owner=cv.qual, extra={"receiver": (mod, cq)})
            if instance and name in c.attrs and c.attrs[name].kind not in ("class", "assign", "def"):
                av = self._field(cv, name, w)  # `x: T = default` on an instance: what is passed, else the declared type
                if av is not None:
                    return av
            if name in c.attrs and c.attrs[name].kind == "other" and self.is_enum(m, cv.qual):
                b = c.attrs[name]
                return Val(ValKind.ENUM_MEMBER, m, f"{cv.qual}.{name}", m.path, b.line, extra={"enum": (m, cv.qual), "member": name})
            if name in c.attrs:
                b = c.attrs[name]
                if b.kind == "class":
                    ci = m.summary.classes.get(b.target or "")
                    return Val(ValKind.CLASS, m, b.target or name, m.path, ci.line if ci else b.line)
                if b.kind == "assign":
                    w.add(Hop(HopKind.ALIAS, m.path, b.line, f"{cv.dotted}.{name}", f"{name} = {b.target}", None))
                    return self.resolve_dotted(m, "", b.target or "", w, line=b.line)
                return Val(ValKind.UNKNOWN, m, f"{cv.dotted}.{name}", m.path, b.line, reason=f"class attribute {cv.dotted}.{name} holds a value", extra={"binding": b})
            if instance and name not in c.inst_attrs:
                av = self._field(cv, name, w)
                if av is not None:
                    return av
            if instance and name in c.inst_attrs:
                b = c.inst_attrs[name]
                if name in c.inst_more or (b.guards and any(x.cls is not None and name in x.cls.inst_attrs for x in chain[i + 1:])):
                    # assigned in several places (`if w: self.attn = A(...) else: self.attn = B(...)`; `self.x = None`
                    # first, `self.x = make(...)` later), or only under a guard over what a base class set: what each
                    # assignment that names something holds
                    alt = self._reassigned(cv, name, w, chain[i + 1:], (mod, cq))
                    if alt is not None and alt.kind != ValKind.UNKNOWN:
                        return alt  # (else the declared type below may still say what it is)
                iv = self._inst_value(m, b, w)
                ann = c.inst_ann.get(name)
                if iv.kind == ValKind.UNKNOWN and ann:  # `self.x: T = ...`: the declared type when the value says nothing
                    av = self.annotation_value(m, b.attr or "", ann, b.line)
                    if av is not None:
                        w.add(Hop(HopKind.ALIAS, m.path, b.line, f"self.{name}", f"self.{name}: {ann} (annotated attribute)"))
                        return av
                return iv
        return None

    def _field(self, cv: Val, name: str, w: Walk) -> Val | None:
        """A declared field read on an instance: the values its constructors pass (``Meta(..., name=x)``), else
        an instance of its annotation."""
        m, c = cv.module, cv.cls
        fld = next((x for x in c.fields if x[0] == name), None)
        if fld is None or not fld[1]:
            return None
        fv = self.field_values(m, cv.qual, name)
        if fv is not None:
            site = fv.extra.get("field_site")
            w.add(Hop(HopKind.ALIAS, site[0] if site else m.path, site[1] if site else fld[3], f"{cv.dotted}.{name}",
                      f"{name}: {fld[1]} (field), built as {site[2]}" if site else
                      f"{name}: {fld[1]} (field), one of the values its constructors pass"))
            return fv
        av = self.annotation_value(m, "", fld[1], fld[3])
        if av is not None:
            w.add(Hop(HopKind.ALIAS, m.path, fld[3], f"{cv.dotted}.{name}", f"{name}: {fld[1]} (field)"))
        return av

    def _reassigned(self, cv: Val, name: str, w: Walk, bases: list = (), concrete: tuple | None = None) -> Val | None:
        """``self.x`` assigned in several places: a fork over the assignments whose values can be called (None is
        none), each under its own guards; None when none is left. In one method an unconditional assignment
        overwrites those before it (as for a local, :meth:`_branch_bindings`): what it holds is kept only where the
        conditional ones after it do not run, and not at all when they cover both sides of one ``if``. Where every
        assignment in ``__init__`` is conditional, the attribute otherwise holds what a class of ``bases`` (the rest
        of the MRO) set: that is a branch too (`CustomOp.__init__` sets `_forward_method`; a subclass sets it
        again only on some platforms)."""
        m, c = cv.module, cv.cls
        # (`self.x = self.x.to(dtype)` keeps the object the assignment before it made: not a value of its own)
        own = f"self.{name}"
        every = sorted((b for b in (c.inst_attrs[name],) + c.inst_more.get(name, ())
                        if not (b.target == own or (b.target or "").startswith(own + "."))), key=lambda b: b.line)
        by_method: dict = {}
        for b in every:
            by_method.setdefault(b.attr or "", []).append(b)
        chosen = []  # (binding, condition text, reachability)
        for q, bs in by_method.items():
            keep = []
            for b in reversed(bs):
                keep.append(b)
                if not b.guards:
                    break
            keep.reverse()
            later = [b for b in keep if b.guards]
            for b in keep:
                if b.guards:
                    chosen.append((b, self.guard_text(b.guards), self.guard_value(m, b.guards, q)))
                elif not later:
                    chosen.append((b, None, None))  # (which method's assignment holds is decided at run time)
                else:
                    rest = self._none_of(m, q, later)  # (what it holds stays where no later one runs)
                    if rest is not None:
                        chosen.append((b,) + rest)
        chosen = [(b, t, r) for b, t, r in chosen if not (b.kind == "other" and b.target in ("None", None))]
        init_q, init = next(((q, bs) for q, bs in by_method.items() if q.rpartition(".")[2] == "__init__"), ("", []))
        # (set on some paths through __init__ only: where none runs, what a base class set stays)
        rest = self._none_of(m, init_q, init) if init and chosen and all(b.guards for b in init) else None
        inherited = self._inherited_attr(bases, name, w.receiver or concrete) if rest is not None else None
        if inherited is not None:
            chosen.append((inherited,) + rest)
        if len(chosen) == 1 and chosen[0][2] is False and not isinstance(chosen[0][0], tuple):
            # the one assignment that names something is under a guard false on this platform (`if ... and
            # current_platform.is_rocm(): self.qr_comm = QuickAllReduce(...)`; else it stays None): what a call
            # through the attribute would reach is dead here
            b, text, _r = chosen[0]
            av = self._inst_value(m, b, w.sub())
            if av.kind != ValKind.UNKNOWN:
                return alts_value(ForkKind.ASSIGNMENTS, f"self.{name}", m, f"self.{name}", b.line,
                                  [Alt(av, text, False, f"self.{name} = {b.target or '...'} ({os.path.basename(m.path)}:{b.line})",
                                       m.path, b.line, (m.path, b.attr or "", b.guards))])
        if len(chosen) < 2:
            # (the first assignment alone: what class_attr follows anyway, with its declared type as a fallback)
            return None if not chosen or chosen[0][0] is c.inst_attrs[name] else self._inst_value(m, chosen[0][0], w)
        arms, named = [], []
        for b, text, reach in chosen:
            if isinstance(b, tuple):  # (what a base class set: (its class Val, the value))
                bcv, av = b
                if av.kind != ValKind.UNKNOWN:
                    arms.append(Alt(av, text, reach, f"self.{name} as {bcv.qual} sets it", bcv.path, bcv.line))
                continue
            sub = w.sub()
            av = self._inst_value(m, b, sub)
            if av.kind == ValKind.UNKNOWN:
                # a value the analysis cannot name (`self.quant_method = quant_method` of a walrus): left out, as a
                # branch it would only add an unresolved leaf to every call through the attribute
                continue
            named.append(b)
            arms.append(Alt(av, text, reach, f"self.{name} = {b.target or '...'} ({os.path.basename(m.path)}:{b.line})",
                            m.path, b.line, (m.path, b.attr or "", b.guards) if b.guards else None))
        if len(arms) < 2:
            # one assignment names something: followed on this walk (its hops keep the guards it is under)
            return self._inst_value(m, named[0], w) if named else arms[0].val if arms else None
        w.add(Hop(HopKind.ALIAS, m.path, chosen[0][0].line, f"self.{name}", f"self.{name} is assigned in {len(chosen)} places"))
        return alts_value(ForkKind.ASSIGNMENTS, f"self.{name}", m, f"self.{name}", chosen[0][0].line, arms)

    def _none_of(self, m: Module, q: str, guarded: list) -> tuple | None:
        """(condition text, reachability) of "none of the assignments ``guarded`` (each under guards, in function
        ``q``) runs"; None when they cover both sides of one ``if`` (one of them always runs)."""
        sides = {g for b in guarded if len(b.guards) == 1 for g in b.guards}
        if any(k == "if" and ("else", t, ln) in sides for k, t, ln in sides):
            return None
        reach = [self.guard_value(m, b.guards, q) for b in guarded]
        return (" and ".join(f"not ({self.guard_text(b.guards)})" for b in guarded),
                False if True in reach else True if all(r is False for r in reach) else None)

    def _inherited_attr(self, bases: list, name: str, receiver: tuple | None) -> tuple | None:
        """(class, value) of instance attribute ``name`` as the first class of ``bases`` that sets it does, ``self``
        there being ``receiver`` (the concrete class); None when none does or its value names nothing."""
        for bcv in bases:
            bc = bcv.cls
            if bcv.module is None or bc is None:
                continue
            if name in bc.methods or name in bc.attrs:
                return None
            if name in bc.inst_attrs:
                first = bc.inst_attrs[name]
                if first.kind == "other" and first.target in ("None", None) and name not in bc.inst_more:
                    return None  # (`self.x: T | None = None`: nothing to call; its annotation is no value)
                bw = Walk()
                bw.receiver = receiver
                v = self.class_attr(bcv.module, bcv.qual, name, bw, instance=True)
                return (bcv, v) if v is not None and v.kind != ValKind.UNKNOWN else None
        return None

    def _inst_value(self, m: Module, b: Binding, w: Walk) -> Val:
        scope = b.attr or ""
        if b.kind == "assign":
            w.add(Hop(HopKind.ALIAS, m.path, b.line, f"self.{b.name}", f"self.{b.name} = {b.target}", None))
            return self.resolve_dotted(m, scope, b.target or "", w, line=b.line)
        if b.kind in ("ifexp", "unpack") or _builds_container(b):
            # (a conditional expression; `self.a, self.layers = make(...)`; `self.layers = nn.ModuleList(...)`)
            return self.binding_value(m, b, w, scope)
        if b.kind == "call":
            return self.call_value(m, scope, b, w)
        return Val(ValKind.UNKNOWN, m, f"self.{b.name}", m.path, b.line, reason=f"self.{b.name} is computed at {os.path.basename(m.path)}:{b.line}")

    def overriding_subclasses(self, v: Val, name: str, found: Val) -> Val | None:
        """A method called on a value declared as a base type whose own method is abstract or a no-op:
        one branch per workspace subclass that overrides it (what can run is the subclass's code); when no
        workspace class does and the base is installed code, one per subclass of that installed package that
        does (:meth:`_installed_defining`)."""
        f = found.func
        if f is None or not (f.dummy or f.is_abstract):
            return None
        arms = self._overriding_arms(v, name, self.index.workspace_modules_matching(
            rb"def\s+" + re.escape(name).encode() + rb"\b"))
        if not arms:
            arms = self._overriding_arms(v, name, self._installed_defining(v.module, name))
        if not arms:
            return None
        return alts_value(ForkKind.SUBCLASS, f"the concrete type of the {v.qual.rpartition('.')[2]}", v.module, f"{v.qual}.{name}",
                          found.line, arms)

    def _overriding_arms(self, v: Val, name: str, mods) -> list:
        arms = []
        for m in mods:
            for q, _line, methods, _attrs in self.index.class_facts(m):
                if name not in methods or (m.name, q) == (v.module.name if v.module else None, v.qual):
                    continue
                if not any(b.module is not None and (b.module.name, b.qual) == (v.module.name, v.qual) for b in self.mro(m, q)[1:]):
                    continue
                fq = m.summary.classes[q].methods[name]
                fn = m.summary.functions[fq]
                if fn.is_abstract and self._is_abc(m, q):
                    # an abstract method of an ABC never runs: no object is of a class that leaves it abstract,
                    # and the subclasses that implement it are arms of their own (upstream vLLM's
                    # `FallbackExperts.workspace_shapes`, a "dummy" arm of every MoE `workspace_shapes` fork)
                    continue
                arms.append(Alt(Val(ValKind.FUNCTION, m, fq, m.path, fn.line, owner=q, extra={"receiver": (m, q)}),
                                f"the object is a {q}", None, f"{q}.{name}", m.path, fn.line))
                if len(arms) >= M.MAX_LEAVES:
                    return arms
        return arms

    def _installed_defining(self, mod: Module | None, name: str) -> list:
        """The modules of the installed package that holds ``mod`` (not a workspace module) whose text defines a
        function ``name`` (``Index.installed_def_files``): where the subclasses of an installed class that implement its method can be (vLLM's
        `FusedMoEPrepareAndFinalizeModular.prepare`, abstract, implemented by vLLM's own prepare-finalize
        classes: a plugin that subclasses none of them still runs one of them)."""
        folder = self._installed_package_folder(mod.name.partition(".")[0]) if mod is not None and not mod.workspace else None
        if folder is None:
            return []
        files = self.index.installed_def_files(folder, ("tests", "benchmarks"), name)
        if len(files) > self.INSTALLED_DEFINING_MAX:
            return []  # (a name defined all over a package, `forward` in PyTorch: no subclass search of it)
        return [m for m in map(self.index.module_for_path, files) if m is not None and m is not mod]

    def _installed_package_folder(self, pkg: str) -> str | None:
        """The folder of installed package ``pkg`` (a regular package outside the workspace), else None."""
        loc = self.index.locate(pkg)
        if loc is None or loc.kind != "py" or not loc.is_package or self.index.is_workspace_path(loc.path):
            return None
        return os.path.dirname(loc.path)

    # the most files of an installed package :meth:`_installed_defining` summarises for one method name (vLLM 0.26.0:
    # `prepare` 11, `finalize` 15, `add_lora_w13` 3, `embedding` 4)
    INSTALLED_DEFINING_MAX = 48

    def _is_abc(self, m: Module, q: str) -> bool:
        """Is class ``q`` of ``m`` an ``abc.ABC`` (a base of it, or of one in its MRO, is named ``ABC``)? A class
        made with ``metaclass=ABCMeta`` is not recognised (the summaries keep no class keywords)."""
        return any(b.cls is not None and any(t.rpartition(".")[2] == "ABC" for t in b.cls.bases) for b in self.mro(m, q))

    _NONE_PARTS = ("None", "NoneType", "type(None)")

    def annotation_value(self, mod: Module, scope: str, ann: str, line: int | None) -> Val | None:
        """An instance of the class an annotation names (``X``, ``"X"``, ``X | None``, ``Optional[X]``,
        ``X[T]``); None for anything else (unions of several classes, builtins, PyTorch types)."""
        text = ann.strip().strip("'\"")
        if text.startswith(("Optional[", "typing.Optional[")) and text.endswith("]"):
            text = text[text.index("[") + 1:-1]
        union = _union_operands(text)
        last = text.partition("[")[0].strip().rpartition(".")[2]
        args = _subscript_args(text) if len(union) == 1 else []
        if last in CONTAINERS and args:
            # `list[T]`, `dict[K, T]`, `Sequence[T]`: an item is a T
            elem = args[-1] if last in ("dict", "Dict", "Mapping") else args[0]
            iv = self.annotation_value(mod, scope, elem, line) if elem and elem != "..." else None
            return Val(ValKind.CONTAINER, mod, text, mod.path, line, extra={"item": iv}) if iv is not None else None
        if last == "Callable" and len(args) == 2:
            # `Callable[[...], T]`: calling it gives a T (what it runs is not known)
            rv = self.annotation_value(mod, scope, args[-1], line)
            return Val(ValKind.CALLABLE, mod, text, mod.path, line, reason=f"a callable known by its type alone (`{text}`)",
                       extra={"returns": rv}) if rv is not None else None
        parts = [x.strip().strip("'\"") for x in union]
        parts = [x for x in parts if x and x not in self._NONE_PARTS]
        if len(parts) != 1:
            return None
        base = parts[0].partition("[")[0].strip()
        if not base or not all(x.isidentifier() for x in base.split(".")) or base.split(".")[0] in ("torch", "np", "int",
                                                                                                     "float", "str", "bool"):
            return None
        cv = self.resolve_dotted(mod, scope, base, Walk(), line=line)
        if cv.kind == ValKind.NOT_INSTALLED:
            # an object of a missing package's type: what its methods run comes from that package
            return Val(ValKind.NOT_INSTALLED, None, cv.qual, reason=cv.reason, extra=dict(cv.extra, object=True))
        if cv.kind != ValKind.CLASS or cv.module is None:
            return None
        return Val(ValKind.INSTANCE, cv.module, cv.qual, cv.path, cv.line, extra={"annotated": True})

    def is_autograd_function(self, v: Val) -> bool:
        if v.module is None:
            return False
        c = v.cls
        if c is None:
            return False
        for b in c.bases:
            if b.endswith("autograd.Function") or b == "Function":
                return True
        return False

    # ------------------------------------------------------------------
    # patches
    # ------------------------------------------------------------------
    def patches(self) -> dict:
        """(upstream module, attribute path) -> (replacement Val, path, line, decorator text). The first table of a
        process may come from the cache folder (keyed by the workspace fingerprint); after that it is carried
        across edits (``Index.carried``): collected again only when an edit touches a module that holds or held
        a patch, or one that collecting the table read."""
        idx = self.index
        if self._patches is not None and self._patch_gen == idx.generation:
            return self._patches
        first = self._patches is None
        self._patches, self._patch_gen = {}, idx.generation  # re-entrant lookups while collecting see none
        self._lazy_patches = None
        frozen = idx.cache.load_pickle("derived", f"patches-{idx.fingerprint()}") if first else None
        # (a thawed table's reads are not known: it is not carried, the next generation collects)
        if frozen is not None:
            self._patches = thaw_patches(self, frozen)
        else:
            self._patches = idx.carried(("patches",), self._collect_patches)
        return self._patches

    def _collect_patches(self) -> dict:
        table = collect_patches(self)
        if not self.index.has_overlays():  # (a table of unsaved buffers would only fill the cache folder)
            self.index.cache.store_pickle("derived", f"patches-{self.index.fingerprint()}", freeze_patches(table))
        return table

    def patch_entry(self, key) -> tuple | None:
        """``patches().get(key)``. After edits whose buffers are not summarised yet, when nothing records
        dependencies, the one entry from the modules that can hold it (:class:`patches.LazyPatches`): a hover in one
        file does not wait for the summary of a 5,000-line paste in another to build the whole table."""
        idx = self.index
        lazy = self._lazy_patches
        if lazy is not None and lazy.busy:
            return None  # a lookup while it collects a module's replacements (observed): none, as in `patches`
        if self._patches is None or self._patch_gen == idx.generation or idx.observed():
            return self.patches().get(key)
        if lazy is None or lazy.generation != idx.generation:
            changed = idx.changed_since(self._patch_gen)
            if changed is None or all(idx.summary_ready(p) for p in changed):
                return self.patches().get(key)  # (every edited module summarised: the whole table costs little)
            kept = idx.carried_valid(("patches",))  # none of the edits can change the table
            if kept is not None:
                self._patches, self._patch_gen = kept[0], idx.generation
                return kept[0].get(key)
            lazy = self._lazy_patches = LazyPatches(self)
        return lazy.entry(key)

    def patched(self, v: Val) -> tuple | None:
        if v.module is None or v.module.workspace:
            return None
        return self.patch_entry((v.module.name, v.qual))

    # ------------------------------------------------------------------
    # following to the end
    # ------------------------------------------------------------------
    def follow(self, v: Val, w: Walk, launch: bool = False) -> Final:
        """From a resolved callee value to the final target (memoised when nothing cut it short)."""
        via = v.extra.get("via")
        if via:
            w.hops.extend(via)  # hops that made the value (a registration), outside the memo
        w.depth += 1
        if w.depth > MAX_DEPTH:
            self.cuts += 1
            return Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason="chain longer than the depth limit")
        if w.out_of_time():
            self.cuts += 1
            return Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason="time budget exhausted (partial answer)")
        key = (v.kind, v.module.name if v.module else None, v.qual, bool(v.extra.get("unpatched")), bool(v.extra.get("ir_native")))
        if self._visits:
            self._visits[-1].add(key)  # (what a memoised subtree met: reusable only off those paths)
        if key in w.seen and v.kind != ValKind.ALTS:  # (a fork is a finite value: only its branches can cycle)
            self._path_cut("s", key)
            return Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason="cycle in the chain")
        mkey = None
        # what a torch op's answer reads of where it is called from (the calling function's imports name the
        # packages that would provide it): read here, before the op's walk begins, and part of its memo key
        op_caller = self.ops.calling_module(w) if v.kind == ValKind.TORCH_OP else None
        if self.memo_enabled and (v.kind in (ValKind.FUNCTION, ValKind.CLASS, ValKind.INSTANCE) and v.module is not None or v.kind == ValKind.TORCH_OP):
            self._check_memo_gen()
            recv = _run_receiver(v, w)
            mkey = (key, v.path, v.line, launch, (recv[0].name, recv[1]) if recv else None,
                    (v.extra.get("overload"), op_caller[0].name, op_caller[2], v.extra.get("args")) if op_caller is not None
                    else (v.extra.get("overload"), v.extra.get("args")) if v.kind == ValKind.TORCH_OP else _context_key(v))
            hit = self._follow_memo.get(mkey)
            if hit is not None and not (w.fits(hit[2]) and hit[3].isdisjoint(w.seen)):
                hit = None  # complete, but this walk's bounds or path (a cycle) would cut it: traced again
            if hit is None:
                # cut by the fork-depth bound alone: the same at this depth for any budget at least the one it had
                hit = self._follow_memo.get(mkey + ("d", w.fork_depth))
                if hit is not None and not (w.budget >= hit[4] and hit[3].isdisjoint(w.seen)):
                    hit = None
                if hit is not None:
                    self._bound_cut(leaf=False)  # (a result cut by the bounds: what uses it is cut too)
            if hit is None:
                hit = self._follow_memo.get(mkey + (w.budget, w.fork_depth))
                if hit is not None and not hit[3].isdisjoint(w.seen):
                    hit = None
                if hit is not None:
                    self._bound_cut()  # (a result cut by the bounds: what uses it is cut too)
            if hit is not None:
                if self._visits:
                    self._visits[-1] |= hit[3]
                if hit[2] is not None:
                    w.note_need(hit[2])
                w.hops.extend(hit[1])
                return hit[0]
        w.seen.add(key)
        cuts, bcuts, inner, n_log, n0 = self.cuts, self.bound_cuts, self.inner_cuts, len(self.cut_log), len(w.hops)
        lcuts = self.leaf_cuts
        vis_n = self._visits_push()
        saved_need = w.start_need()
        try:
            fin = self._follow(v, w, launch, op_caller)
        finally:
            met = self._visits_pop(vis_n)
            need = w.end_need(saved_need)
        w.seen.discard(key)
        outside = None if mkey is None or w.partial else self._outside_cuts(cuts, inner, n_log, w.seen, w, n0)
        if outside is not None and outside in (0, self.bound_cuts - bcuts):
            if len(self._follow_memo) > 100000:
                self._follow_memo.clear()
            # complete, or cut only by the leaf / depth bounds (then the same for the same budget and depth);
            # with what it met on the way: on a path through any of those, a fresh trace would end in a cycle
            met = self._shared_met(met)
            if outside == 0:  # complete: reusable wherever a walk has the room it needs (Walk.fits)
                self._follow_memo[mkey] = (fin, tuple(w.hops[n0:]), need, met)
            elif self.leaf_cuts == lcuts:
                # cut by the fork-depth bound alone: the same at this fork depth with any larger budget (shares only
                # grow with it, and what no leaf bound cut needs no more); kept for the least budget it was made with
                dkey = mkey + ("d", w.fork_depth)
                old = self._follow_memo.get(dkey)
                if old is None or w.budget < old[4]:
                    self._follow_memo[dkey] = (fin, tuple(w.hops[n0:]), need, met, w.budget)
            else:
                self._follow_memo[mkey + (w.budget, w.fork_depth)] = (fin, tuple(w.hops[n0:]), None, met)
        return fin

    def _shared_met(self, met) -> frozenset:
        """``met`` (what a memoised subtree met) as a frozenset shared with every equal one: upstream vLLM's
        `sites` kept 89,913 of them in its memos, 61 MB, of 13,102 distinct values (15.5 MB)."""
        fs = frozenset(met)
        table = self._met_table
        if len(table) > 200_000:
            table.clear()
        return table.setdefault(fs, fs)

    def _visits_push(self) -> int:
        self._visits.append(set())
        return len(self._visits) - 1

    def _visits_pop(self, n: int) -> set:
        """End the visit record started at stack position ``n`` (and any left open above it by an exception):
        what it met, also added to the enclosing record."""
        met: set = set()
        for extra in self._visits[n:]:
            met |= extra
        del self._visits[n:]
        if self._visits:
            self._visits[-1] |= met
        return met

    def _new_trace(self) -> None:
        """A trace starts: outside any resolution, the path cuts of earlier traces are of no use."""
        if not self._active and not self._visits:
            self.cut_log.clear()

    def _path_cut(self, kind: str, key) -> None:
        """A resolution cut short because ``key`` is already on the path: ``kind`` "a" for a value being
        resolved (``_active``), "s" for a walk's cycle (``Walk.seen``)."""
        self.cuts += 1
        self.cut_log.append((kind, key))

    def _memoised(self, memo: dict, key, compute, max_size: int = 0):
        """``memo[key]``, else ``compute()`` kept there when nothing cut it from outside (:meth:`_memo_if_clean`); the
        memos of this generation (:meth:`_check_memo_gen`). A ``None`` answer is memoised too."""
        self._check_memo_gen()
        hit = memo.get(key, _MISSING)
        return self._memo_if_clean(memo, key, compute, max_size) if hit is _MISSING else hit

    def _memo_if_clean(self, memo: dict, key, compute, max_size: int = 0):
        """``compute()``, kept in ``memo`` under ``key`` unless something cut it from outside (:meth:`clean_since`:
        a side computation that met a value being resolved above it got a cycle's answer there); a memo past
        ``max_size`` entries is emptied first."""
        mark = self.cut_mark()
        out = compute()
        if self.clean_since(mark):
            if max_size and len(memo) > max_size:
                memo.clear()
            memo[key] = out
        return out

    def apart(self, compute):
        """``compute()`` apart from whatever is being resolved now (a fresh path: nothing in progress cuts it as a
        cycle), its own cuts leaving no mark on the resolution around it: for an answer kept for the whole
        generation (the platform profile), found wherever it is first asked."""
        saved = (self._active, self._visits, self.cuts, self.bound_cuts, self.inner_cuts, len(self.cut_log), self.leaf_cuts)
        self._active, self._visits = set(), []
        try:
            return compute()
        finally:
            self._active, self._visits = saved[0], saved[1]
            self.cuts, self.bound_cuts, self.inner_cuts, self.leaf_cuts = saved[2], saved[3], saved[4], saved[6]
            del self.cut_log[saved[5]:]

    def cut_mark(self) -> tuple:
        """Where the cut counters stand (for :meth:`clean_since`)."""
        return self.cuts, self.inner_cuts, len(self.cut_log)

    def clean_since(self, mark: tuple) -> bool:
        """Was what was computed since ``mark`` (:meth:`cut_mark`) cut only at keys it opened itself, so that it
        is the same wherever it is asked and may be memoised? A side computation (an MRO, a guard's value, an op's
        registrations) that met a value an enclosing resolution is still resolving got a cycle's answer there."""
        return self._outside_cuts(*mark, None) == 0

    def outside_since(self, mark: tuple) -> frozenset | None:
        """The values being resolved above at which what was computed since ``mark`` (:meth:`cut_mark`) was cut
        (empty: nothing cut it from outside, it is the same wherever it is asked); None when something else cut it
        from outside (a walk's cycle, a bound, the time budget). A side computation whose only outside cuts are at
        values being resolved is the same wherever those are being resolved again (:meth:`replay_cuts`)."""
        n = self._outside_cuts(*mark, None)
        if n == 0:
            return frozenset()
        kept = self.cut_log[mark[2]:]  # (what _outside_cuts left in the log: the cuts from outside)
        if len(kept) != n or any(k != "a" for k, _key in kept):
            return None
        return frozenset(key for _k, key in kept)

    def replay_cuts(self, keys: frozenset) -> bool:
        """Are all of ``keys`` (:meth:`outside_since`) being resolved now? Then a side computation memoised with
        them stands here, and its cuts are made again (what is resolved around it depends on them too)."""
        if not keys <= self._active:
            return False
        for key in keys:
            self._path_cut("a", key)
        return True

    def read_before(self, w: Walk, index: int) -> None:
        """The answer being made depends on the hops of ``w`` from ``index`` on (-1: also on there being none
        before): a resolution or walk on ``w`` that began after ``index`` got it from its context, so it is not
        memoised (its key does not say where it was reached from), unless it keys that context itself (see
        ``follow`` for torch ops). Logged as a cut ("h"): a resolution that made ``w``, or began on it at or
        before ``index``, saw those hops made and keeps its memo."""
        self.cuts += 1
        self.cut_log.append(("h", (w, index)))

    def _outside_cuts(self, cuts0: int, inner0: int, n_log: int, seen, walk: Walk | None = None, n0: int = 0) -> int:
        """How many of the cuts made since a resolution began (``cuts0``, ``inner0``, ``n_log``: the counters
        and the log's length then) depend on the path above it, now that it is done: every cut but the path cuts
        at keys the resolution opened itself (no longer in ``_active``, nor in ``seen``, the walk's visited set
        above it; None: a walk cycle counts as outside). Those inner cuts are the same wherever the resolution
        runs, like its own code: they leave the log (an enclosing resolution counts them as inner too: what is
        off the path here is off the shorter path above). A read of the hops of ``walk`` (the resolution's own walk,
        which had ``n0`` hops when it began) from before ``n0`` is from outside; one of another walk, made inside,
        is its own."""
        if self.cuts == cuts0:
            return 0
        log = self.cut_log
        if len(log) > n_log:
            active = self._active
            keep = [(k, key) for k, key in log[n_log:]
                    if (key in active if k == "a" else (key[0] is walk and key[1] < n0) if k == "h"
                        else seen is None or key in seen)]
            self.inner_cuts += len(log) - n_log - len(keep)
            log[n_log:] = keep
        return self.cuts - cuts0 - (self.inner_cuts - inner0)

    def _bound_cut(self, leaf: bool = True) -> None:
        """A tree cut by the leaf or fork-depth bound (deterministic for a given budget and depth, unlike a
        cycle or the time budget, which depend on the path); ``leaf=False``: by the fork-depth bound alone (a
        result cut so is the same at that depth with any larger budget)."""
        self.cuts += 1
        self.bound_cuts += 1
        if leaf:
            self.leaf_cuts += 1

    def _follow(self, v: Val, w: Walk, launch: bool, op_caller=None) -> Final:
        k = v.kind
        if k == ValKind.ALTS:
            return self.fork_final(v, w, launch)
        if k == ValKind.DICT:
            return Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason=f"`{v.qual}` is a dict of callables: call one of its items")
        if k in (ValKind.FUNCTION, ValKind.CLASS) and not v.extra.get("unpatched"):
            p = self.patched(v)
            if p is not None:
                rep, ppath, pline, text = p
                w.add(Hop(HopKind.PATCH, ppath, pline, rep.extra.get("patch_symbol", rep.dotted), f"{text} replaces {v.dotted} at import time", None))
                return self.follow(rep, w, launch)
        if k == ValKind.FUNCTION:
            recv = _run_receiver(v, w)
            if recv is not w.receiver:
                saved = w.receiver
                w.receiver = recv
                try:
                    return self.follow_function(v, w, launch)
                finally:
                    w.receiver = saved
            return self.follow_function(v, w, launch)
        if k == ValKind.CLASS:
            c = v.cls
            if launch:
                return Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason=f"`{v.dotted}[...]` launches a class")
            return Final(FinalKind.PYTHON_CLASS, v.path, c.line if c else v.line, v.dotted, package=_pkg(v), detail=c.docstring or "" if c else "")
        if k == ValKind.INSTANCE:
            # calling an instance: __call__ / forward
            for meth in ("__call__", "forward"):
                fv = self.class_attr(v.module, v.qual, meth, w, instance=True) if v.module else None
                if fv is not None and fv.kind == ValKind.FUNCTION:
                    w.add(Hop(HopKind.CALL, fv.path or "", fv.line or 0, fv.dotted, f"instance of {v.dotted} called: {meth}"))
                    rec = v.extra.get("args")
                    if rec is not None:
                        fv = self.with_args(fv, rec)
                    if v.extra.get("facts"):
                        fv = dataclasses.replace(fv, extra={**fv.extra, "facts": v.extra["facts"]})
                    return self.follow(fv, w)
            return Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason=f"instance of {v.dotted} is not callable statically")
        if k == ValKind.TORCH_OP:
            return self.ops.follow_op(v, w, op_caller)
        if k == ValKind.TORCH_OPS:
            return Final(FinalKind.UNRESOLVED, None, None, f"torch.ops.{v.qual}", reason="torch.ops namespace without an op name")
        if k == ValKind.EXT_ATTR:
            return Final(FinalKind.EXTENSION_FUNCTION, v.path, None, v.qual, package=v.extra.get("package"),
                         detail=f"native extension module {os.path.basename(v.path or '')}")
        if k == ValKind.EXT_MODULE:
            return Final(FinalKind.EXTENSION_FUNCTION, v.path, None, v.qual, package=v.extra.get("package"), detail="native extension module")
        if k == ValKind.NOT_INSTALLED:
            pkg = v.extra.get("package") or v.qual.split(".", 1)[0]
            w.add(Hop(HopKind.NOT_INSTALLED, "", 0, v.qual, v.reason))
            return Final(FinalKind.NOT_INSTALLED, None, None, pkg, package=pkg, reason=v.reason, detail=f"{v.qual} would come from `{pkg}`")
        if k == ValKind.MODULE:
            return Final(FinalKind.UNRESOLVED, v.path, 1, v.qual, reason=f"`{v.qual}` is a module, not a callable")
        if k == ValKind.BUILTIN:
            return Final(FinalKind.UNRESOLVED, None, None, v.qual, reason=f"`{v.qual}` is a Python builtin")
        if k == ValKind.PLATFORM:
            return Final(FinalKind.PYTHON_CLASS, v.path, v.line, v.qual, detail="the current platform")
        if k in (ValKind.ENUM_MEMBER, ValKind.LIST):
            return Final(FinalKind.UNRESOLVED, v.path, v.line, v.qual, reason=f"`{v.qual}` is {'an enum member' if k == ValKind.ENUM_MEMBER else 'a list'}, not a callable")
        return Final(FinalKind.UNRESOLVED, v.path, v.line, (v.qual or "?").replace("[]", "[...]"), reason=v.reason or "could not resolve")

    # ------------------------------------------------------------------
    # forks
    # ------------------------------------------------------------------
    def fork_final(self, v: Val, w: Walk, launch: bool = False) -> Final:
        arms: list[Alt] = v.extra["alts"]
        fk = M.Fork(v.extra["fork_kind"], v.extra.get("decided_by"), v.path, v.line, v.dotted)
        if w.fork_depth >= M.MAX_FORK_DEPTH:
            self._bound_cut(leaf=False)
            fk.truncated = f"fork depth limit ({M.MAX_FORK_DEPTH}): {len(arms)} branches not expanded"
        else:
            needs: dict = {}
            w.need_depth = max(w.need_depth, w.fork_depth)

            def expand(i: int, share: int):
                a = arms[i]
                bw = w.branch()
                bw.budget = share
                fin = self.follow(a.val, bw, launch)
                if bw.partial:
                    w.partial = True
                b = M.Branch(a.condition, a.reachable, a.label, self._chain(bw, fin, a.val.module), a.path, a.line, a.decided)
                needs[i] = (bw.need_budget, b.chain.leaf_count())
                w.need_depth = max(w.need_depth, bw.need_depth)
                return b

            reach = [a.reachable for a in arms]
            done, left = _expand_within(w.budget, reach, expand)
            w.need_budget = max(w.need_budget, _fork_need(w.budget, reach, needs))
            fk.branches = [done[i] for i in sorted(done)]
            if left:
                self._bound_cut()
                fk.truncated = f"leaf limit ({M.MAX_LEAVES}): {left} branches not expanded"
        return Final(FinalKind.FORK, v.path, v.line, v.dotted, detail=f"one of {len(arms)} candidates ({fk.kind})", fork=fk)

    def callee_value(self, mod: Module, cs: CallSite, w: Walk, outer: tuple | None = None) -> tuple[Val, bool]:
        """The value of a call site's callee and whether it is a kernel launch; ``d[key](...)`` of a
        literal dict of callables becomes a fork (a call of an item, not a launch). ``outer``: what the guards of
        the call into the function ``cs`` is in fixed (:meth:`_guard_facts`)."""
        saved, w.use_guards = w.use_guards, cs.guards
        try:
            v = self.resolve_dotted(mod, cs.scope, cs.func, w, line=cs.line)
        finally:
            w.use_guards = saved
        if cs.launch and v.kind == ValKind.CONTAINER and v.extra.get("item") is not None:
            # `self.layers[key](...)`: an item of a module container called, not a kernel launch
            w.add(Hop(HopKind.ALIAS, mod.path, cs.line, f"{cs.func}[{cs.subscript}]", f"{cs.func}[{cs.subscript}](...): an item of {v.qual}",
                      None, None, cs.col))
            item = v.extra["item"]
            return (self.refined_at_call(mod, cs, item, outer) if item.kind == ValKind.ALTS else item), False
        if cs.launch and v.kind == ValKind.DICT:
            w.add(Hop(HopKind.ALIAS, mod.path, cs.line, f"{cs.func}[{cs.subscript}]", f"{cs.func}[{cs.subscript}](...): an item of a dict of callables",
                      None, None, cs.col))
            return self.dict_choice(v, cs.subscript or "?", mod, cs.scope), False
        if v.kind == ValKind.ALTS:
            v = self.refined_at_call(mod, cs, v, outer)
        return v, cs.launch

    def refined_at_call(self, mod: Module, cs: CallSite, v: Val, outer: tuple | None = None) -> Val:
        """``v`` (a fork the callee of ``cs`` can be) with the alternatives the call itself rules out marked dead
        ("not taken at this call", ``Alt.decided``):

        * **its guards.** A guard of the call in a method that tests a flag of the object (``if self.use_mha:``)
          fixes the boolean local or parameter the class stored in it (``self.use_mha = use_mha`` in
          ``__init__``), and so the conditions on that local where the class chose among alternatives (``if
          use_mha: attn_cls = A ... else: attn_cls = B``; ``self.attn = attn_cls(...)``). A guard on an expression
          of module-level names only (``get_pp_group().is_first_rank``, ``envs.X``) is taken as fixed for the
          process: the same expression guarding an alternative in the same module is decided by it. So is one
          that the guards of the call into this function fixed (``outer``: "decided by the caller's guards").
        * **its arguments.** An alternative whose function (an instance's ``__call__`` or ``forward``) does not
          accept what the call passes (a keyword it lacks, too many positional arguments, a required one
          missing) would raise ``TypeError``: that object is not what runs there."""
        f = mod.summary.functions.get(cs.scope) if cs.scope else None
        asserts = tuple(("if", t, ln) for ln, t in f.asserts if ln < cs.line) if f is not None and f.asserts else ()
        facts = self._call_facts(mod, cs.scope, cs.guards + asserts) if cs.guards or asserts else None
        wider = None
        if outer:
            wider = ({}, dict(outer), {}) if facts is None else (facts[0], {**dict(outer), **facts[1]}, facts[2])
        return self._refine_arms(cs, v, facts, 0, wider)

    def _call_facts(self, mod: Module, scope: str, guards: tuple) -> tuple | None:
        """({(module path, method): {name: bool}}, {(module path, expression dump): bool}, {"self.x": (class module
        name, class qualname, bool, text)}) that the guards of a call in ``scope`` (and the ``assert`` statements
        before it) fix (:meth:`refined_at_call`); None when they fix nothing."""
        cq = self.enclosing_class(mod, scope)
        c = mod.summary.classes.get(cq) if cq else None
        binds: dict = {}
        exprs: dict = {}
        isa: dict = {}
        for kind, text, _line in guards:
            if kind not in ("if", "else"):
                continue
            for e, truth in _guard_parts(kind, parse_guard(text)):
                if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "isinstance" and len(e.args) == 2 \
                        and isinstance(e.args[0], ast.Attribute) and isinstance(e.args[0].value, ast.Name) \
                        and e.args[0].value.id == "self" and mod.summary.binding_of(scope, "isinstance")[1] == []:
                    # `assert isinstance(self.impl, ModularImpl)`: which class the attribute's object is
                    cname = ast.unparse(e.args[1]) if isinstance(e.args[1], (ast.Name, ast.Attribute)) else None
                    cv = self.resolve_dotted(mod, scope, cname, Walk()) if cname else None
                    if cv is not None and cv.kind == ValKind.CLASS and cv.module is not None:
                        isa[f"self.{e.args[0].attr}"] = (cv.module.name, cv.qual, truth, ast.unparse(e))
                elif isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                    b = c.inst_attrs.get(e.attr) if c is not None else None
                    if b is None or b.kind != "assign" or b.guards or e.attr in c.inst_more or not (b.target or "").isidentifier():
                        continue
                    q = b.attr or ""
                    if self._boolean_name(mod, q, b.target):
                        binds.setdefault((mod.path, q), {})[b.target] = truth
                elif _module_level(mod, scope, e):
                    exprs[(mod.path, ast.dump(e))] = truth
        return (binds, exprs, isa) if binds or exprs or isa else None

    @staticmethod
    def _boolean_name(mod: Module, q: str, name: str) -> bool:
        """Is ``name`` in function ``q`` a bool: a parameter annotated ``bool`` or defaulting to True/False, or a
        local every binding of which is a comparison, a boolean operation, a ``not`` or a bool literal?"""
        f = mod.summary.functions.get(q)
        if f is None:
            return False
        for p in f.params:
            if p.name == name:
                return p.annotation == "bool" or p.default in ("True", "False")
        bs = f.locals.get(name) or ()
        return bool(bs) and all(b.kind == "other" and (b.str_args or b.target in ("True", "False")) for b in bs)

    def _guards_under(self, guarded: tuple, facts: tuple) -> tuple:
        """(reachability, what decided it) of an alternative's guards (``Alt.guarded``) under a call's facts."""
        path, q, guards = guarded
        m = self.index.module_for_path(path)
        if m is None:
            return None, ""
        binds = facts[0].get((path, q), {})
        vals, used = [], []
        for g in guards:
            kind, text, _line = g
            known = None
            node = parse_guard(text) if kind in ("if", "else") and facts[1] else None
            if node is not None:
                neg = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
                e = node.operand if neg else node
                fact = facts[1].get((path, ast.dump(e)))
                if fact is not None and _module_level(m, q, e):
                    known = (fact != neg) == (kind == "if")  # (the guard's text holds, and it is an `if`)
                    used.append(f"{ast.unparse(e) if neg else text} is {fact!r}")
            if known is None:
                b = tuple((n, val) for n, val in binds.items() if re.search(rf"\b{re.escape(n)}\b", text))
                used.extend(f"{n}={val!r}" for n, val in b)
                known = self.guard_value(m, (g,), q, b)
            vals.append(known)
        return M.combine_reachability(vals), ", ".join(dict.fromkeys(used))

    def _rejects(self, v: Val, cs: CallSite) -> str:
        """What of the call ``cs`` the function ``v`` stands for (an instance: its ``__call__`` or ``forward``) does
        not accept, so that the call would raise TypeError (`already_sequence_parallel=`); '' when it accepts it or
        that cannot be told (``*args``/``**kwargs`` on either side, a decorated function)."""
        if cs.star_args or cs.star_kwargs or v.module is None:
            return ""
        if v.kind == ValKind.INSTANCE:
            for meth in ("__call__", "forward"):
                fv = self.class_attr(v.module, v.qual, meth, Walk(), instance=True)
                if fv is not None:
                    break
            if fv is None or fv.kind != ValKind.FUNCTION or fv.module is None:
                return ""
            v = fv
        f = v.func if v.kind == ValKind.FUNCTION else None
        if f is None or f.decorators or cs.func.endswith(".apply"):
            return ""
        params = list(f.params)
        if f.class_name and params and params[0].name in ("self", "cls"):
            params = params[1:]
        kinds = {p.kind for p in params}
        names = {p.name for p in params if p.kind in ("pos", "kwonly")}
        for kw in cs.keywords:
            if kw not in names and "kwarg" not in kinds:
                return f"`{kw}=`, which {v.qual} does not take"
        positional = [p for p in params if p.kind in ("posonly", "pos")]
        if cs.nargs > len(positional) and "vararg" not in kinds:
            return f"{cs.nargs} positional arguments, {v.qual} takes {len(positional)}"
        for i, p in enumerate(positional):
            if i >= cs.nargs and not p.has_default and p.name not in cs.keywords:
                return f"no `{p.name}`, which {v.qual} requires"
        for p in params:
            if p.kind == "kwonly" and not p.has_default and p.name not in cs.keywords:
                return f"no `{p.name}=`, which {v.qual} requires"
        return ""

    def _refine_arms(self, cs: CallSite, v: Val, facts: tuple | None, depth: int, wider: tuple | None = None) -> Val:
        changed, arms = False, []
        # the object of a `self.x` the call's guards or asserts say the class of (`isinstance(self.x, C)`)
        isa = None
        if facts is not None and facts[2] and v.qual == cs.func:
            root = ".".join(cs.func.split(".")[:2])
            isa = facts[2].get(root)
        for a in v.extra["alts"]:
            na = a
            if facts is not None and a.guarded is not None and a.reachable is not False:
                r, why = self._guards_under(a.guarded, facts)
                if r is not a.reachable and why:
                    na = _decided(a, r, f"the call's guards: {why}")
            if wider is not None and na is a and a.guarded is not None and a.reachable is not False:
                r, why = self._guards_under(a.guarded, wider)
                if r is not a.reachable and why:
                    na = _decided(a, r, f"the caller's guards: {why}")
            if isa is not None and na.reachable is not False:
                recv = (na.val.module, na.val.qual) if na.val.kind == ValKind.INSTANCE else na.val.extra.get("receiver") \
                    if na.val.kind == ValKind.FUNCTION else None
                if recv is not None and recv[0] is not None:
                    sub = any(b.module is not None and (b.module.name, b.qual) == isa[:2] for b in self.mro(recv[0], recv[1]))
                    if sub != isa[2]:
                        na = _decided(na, False, f"the call's guards: {isa[3]} is {isa[2]!r}")
            if na.reachable is not False and not cs.launch and na.val.kind in (ValKind.INSTANCE, ValKind.FUNCTION):
                bad = self._rejects(na.val, cs)
                if bad:
                    na = _decided(na, False, f"the call's arguments: it passes {bad} (TypeError)")
            if na.val.kind == ValKind.ALTS and depth < 4:
                nv = self._refine_arms(cs, na.val, facts, depth + 1, wider)
                if nv is not na.val:
                    na = dataclasses.replace(na, val=nv)
            changed = changed or na is not a
            arms.append(na)
        return dataclasses.replace(v, extra={**v.extra, "alts": arms}) if changed else v

    def body_branches(self, v: Val, f: FunctionInfo, w: Walk) -> list:
        """The calls of ``f`` whose chains reach kernel-like code, each as a branch under its guard
        (dead ones included, marked dead). Memoised per function, receiver and generation."""
        mod = v.module
        assert mod is not None
        recv = w.receiver
        binds = v.extra.get("binds", ())  # (the parameters the call being followed fixes: call_binds)
        key = (mod.path, mod.sha, f.qualname, (recv[0].name, recv[1]) if recv else None, self.index.generation,
               _context_key(v))
        memo = self._reach_memo
        if self._reach_gen != self.index.generation:
            memo.clear()
            self._reach_gen = self.index.generation
        if self.memo_enabled:
            hit = memo.get(key)
            if hit is not None and not (w.fits(hit[3]) and hit[2].isdisjoint(w.seen)):
                hit = None  # complete, but this walk's bounds or path would cut it
            depth_only = False
            if hit is None:
                hit = memo.get(key + ("d", w.fork_depth))  # (cut by the fork-depth bound alone: see follow)
                if hit is not None and not (w.budget >= hit[4] and hit[2].isdisjoint(w.seen)):
                    hit = None
                depth_only = hit is not None
            if hit is None:
                hit = memo.get(key + (w.budget, w.fork_depth))
                if hit is not None and not hit[2].isdisjoint(w.seen):
                    hit = None
            if hit is not None:
                if depth_only:
                    self._bound_cut(leaf=False)
                elif hit[1] is not None or key not in memo:
                    self._bound_cut()  # (what uses it was cut below too)
                if hit[3] is not None:
                    w.note_need(hit[3])
                if self._visits:
                    self._visits[-1] |= hit[2]
                return hit[0], hit[1]
        out = []
        partial = False
        truncated = None
        # a subtree cut short below makes the result depend on the budget (bounds) or on the path (cycles above)
        cuts0, bcuts0, inner0, n_log, n_hops = self.cuts, self.bound_cuts, self.inner_cuts, len(self.cut_log), len(w.hops)
        lcuts0 = self.leaf_cuts
        vis_n = self._visits_push()
        saved_need = w.start_need()
        needs: dict = {}
        # the calls worth a branch, in source order; then expanded live and run-time ones first (dead ones get
        # what is left, a few leaves each), so a dead subtree never starves what can run
        cands = []
        for cs in mod.summary.calls_in(f.qualname):
            if cs.scope != f.qualname or not cs.func:
                continue
            root = cs.func.split(".", 1)[0]
            if (root in TRIVIAL_ROOTS or cs.func in TRIVIAL_ROOTS) and not super_method(cs.func):
                continue
            if self._hopeless(mod, f.qualname, cs):
                continue  # (decided before the leaf shares are handed out: it would take a share and give nothing)
            reach = self.guard_value(mod, cs.guards, f.qualname, binds) if cs.guards else True
            cands.append((cs, reach))
        if w.fork_depth >= M.MAX_FORK_DEPTH and cands:
            truncated = f"fork depth limit ({M.MAX_FORK_DEPTH}): calls not expanded"
            cands = []
        elif cands:
            w.need_depth = max(w.need_depth, w.fork_depth)

        def expand(i: int, share: int):
            cs, reach = cands[i]
            bw = w.branch()
            if len(cands) == 1:
                bw.fork_depth = w.fork_depth  # a body with one candidate call cannot fork here
            bw.budget = share
            try:
                b = expand_one(cs, reach, bw)
            finally:
                w.need_depth = max(w.need_depth, bw.need_depth)
            needs[i] = (bw.need_budget, b.chain.leaf_count() if b is not None else 0)
            return b

        def expand_one(cs, reach, bw: Walk):
            nonlocal partial
            cond = self.guard_text(cs.guards)
            sym = cs.func + (f"[{cs.subscript or 'grid'}]" if cs.launch else "")
            bw.add(Hop(HopKind.TRITON_LAUNCH if cs.launch else HopKind.CALL, mod.path, cs.line, sym, f"call in {f.qualname}", cond,
                       reach if cs.guards else None, cs.col))
            tv, launch = self.callee_value(mod, cs, bw, v.extra.get("facts"))
            _subscript_call(bw, cs, launch)
            if any(h.kind == HopKind.PLATFORM for h in bw.hops) and tv.kind != ValKind.TORCH_OP:
                return None  # platform queries are not kernels
            if not launch:
                tv = self.with_binds(mod, f.qualname, cs, tv, binds, self.handed_on(v, f, cs))
            if tv.kind == ValKind.UNKNOWN and tv.extra.get("lost_bases"):
                # `super().f(...)` of a base class that is not found (its import fails): what runs there is unknown,
                # said as such rather than dropped (the function's other branches are not all it runs)
                ch = self._chain(bw, Final(FinalKind.UNRESOLVED, mod.path, cs.line, cs.func, reason=tv.reason or ""), mod)
                return M.Branch(cond, reach, f"line {cs.line}: {sym}(...)", ch, mod.path, cs.line)
            if tv.kind in (ValKind.UNKNOWN, ValKind.BUILTIN, ValKind.MODULE, ValKind.NAMESPACE, ValKind.TORCH, ValKind.TORCH_OPS,
                           ValKind.CALLABLE):
                # a kernel handed to a launcher the resolver cannot see (`ctx.call_kernel(kernel, grid, ...)`)
                kv = self._kernel_argument(mod, f.qualname, cs)
                if kv is None:
                    return None
                bw.add(Hop(HopKind.TRITON_LAUNCH, mod.path, cs.line, kv.dotted, f"{kv.qual} is passed to {cs.func}(...), which launches it", cond,
                           reach if cs.guards else None, cs.col))
                tv, launch, sym = kv, True, f"{cs.func}({kv.qual}, ...)"
            fin = self.follow(tv, bw, launch=launch)
            ch = self._chain(bw, fin, mod)
            partial = partial or bw.partial
            if not ch.reaches_runtime():
                # (a callee whose only work is a launch of its parameter, `kernel[grid](...)`, ends at that parameter:
                # vLLM's `_run_reshape_kernel(_reshape_cache_int4_kernel, ...)`)
                launches_param = fin.kind == FinalKind.UNRESOLVED and tv.kind == ValKind.FUNCTION and tv.func is not None \
                    and fin.symbol in {p.name for p in tv.func.params}
                kv = self._kernel_argument(mod, f.qualname, cs) if fin.kind == FinalKind.PYTHON_FUNCTION or launches_param else None
                if kv is None:
                    return None
                # the callee launches what it is given: the kernel argument is what runs
                bw.hops = bw.hops[:1]
                bw.add(Hop(HopKind.TRITON_LAUNCH, fin.path or mod.path, fin.line or cs.line, kv.dotted,
                           f"{kv.qual} is passed to {tv.dotted if launches_param else fin.symbol}, which launches it"))
                ch = self._chain(bw, self.follow(kv, bw, launch=True), mod)
                sym = f"{cs.func}({kv.qual}, ...)"
            # a guard the parameters this call fixes decided says so on the branch's label
            decided = self._decided_by(mod, f.qualname, cs.guards, binds, reach) if binds and cs.guards else ""
            held = self._held_by(mod, f.qualname, cs.guards, binds) if binds and cs.guards and reach is None else ()
            # dead because an `if c: raise` above it is taken here: the function raises rather than running other code
            raised = [g for g in cs.guards if g[0] == "else" and g[2] in f.raise_ifs] if reach is False and f.raise_ifs else ()
            return M.Branch(cond, reach, f"line {cs.line}: {sym}(...)" + (f" (decided by {decided})" if decided else ""), ch,
                            mod.path, cs.line, decided or None,
                            bool(raised) and self.guard_value(mod, tuple(raised), f.qualname, binds) is False, held,
                            (mod.path, f.line, f.end_line) if held else ())

        reach_of = [r for _cs, r in cands]
        kept, skipped = _expand_within(w.budget, reach_of, expand)
        w.need_budget = max(w.need_budget, _fork_need(w.budget, reach_of, needs))
        need = w.end_need(saved_need)
        out = _merge_not_installed([kept[i] for i in sorted(kept)])
        if skipped and truncated is None:
            truncated = f"leaf limit ({M.MAX_LEAVES}): {skipped} calls not expanded"
        if truncated is not None:
            self._bound_cut(leaf=bool(skipped))
        met = self._shared_met(self._visits_pop(vis_n))
        outside = None if partial else self._outside_cuts(cuts0, inner0, n_log, w.seen, w, n_hops)
        if partial:
            w.partial = True
        elif outside == 0 and truncated is None:
            memo[key] = (out, None, met, need)
        elif outside == self.bound_cuts - bcuts0 and self.leaf_cuts == lcuts0:
            # cut by the fork-depth bound alone: the same at this depth with any larger budget (see follow)
            old = memo.get(key + ("d", w.fork_depth))
            if old is None or w.budget < old[4]:
                memo[key + ("d", w.fork_depth)] = (out, truncated, met, need, w.budget)
        elif outside == self.bound_cuts - bcuts0:
            # cut only by the leaf / depth bounds: the same for the same budget and depth
            memo[key + (w.budget, w.fork_depth)] = (out, truncated, met, None)
        return out, truncated

    def _hopeless(self, mod: Module, scope: str, cs: CallSite) -> bool:
        """A call of a body that cannot be a branch: its callee is a platform query, a builtin, a PyTorch or
        standard-library API, or unknown, and no Triton kernel is handed to it."""
        if cs.launch:
            return False
        if not self.memo_enabled:
            return self._hopeless_of(mod, scope, cs)
        return self._call_memo(self._hopeless_memo, mod, scope, cs, lambda: self._hopeless_of(mod, scope, cs))

    def _call_memo(self, memo: dict, mod: Module, scope: str, cs: CallSite, compute):
        """``compute()`` for call site ``cs`` of function ``scope``, memoised in ``memo`` per function, then per
        call (``pyindex.call_id``: one int; upstream vLLM's `sites` kept ~150,000 call-site entries between two
        emptyings, a 5-tuple key each) when nothing cut it from outside (:meth:`_memo_if_clean`)."""
        self._check_memo_gen()
        inner = memo.setdefault((mod.path, mod.sha, scope), {})
        return self._memoised(inner, call_id(cs), compute)

    def _hopeless_of(self, mod: Module, scope: str, cs: CallSite) -> bool:
        probe = Walk()
        saved, probe.use_guards = probe.use_guards, cs.guards
        tv = self.resolve_dotted(mod, scope, cs.func, probe, line=cs.line)
        if tv.kind == ValKind.TORCH_OP:
            return False
        if tv.kind == ValKind.UNKNOWN and tv.extra.get("lost_bases"):
            return False  # (`super()` of a base class that is not found: an unresolved branch, see body_branches)
        if any(h.kind == HopKind.PLATFORM for h in probe.hops):
            return True
        return tv.kind in (ValKind.UNKNOWN, ValKind.BUILTIN, ValKind.MODULE, ValKind.NAMESPACE, ValKind.TORCH, ValKind.TORCH_OPS,
                           ValKind.CALLABLE) and \
            self._kernel_argument(mod, scope, cs) is None

    def _kernel_argument(self, mod: Module, scope: str, cs: CallSite) -> Val | None:
        return self._call_memo(self._karg_memo, mod, scope, cs, lambda: self._kernel_argument_of(mod, scope, cs))

    def _kernel_argument_of(self, mod: Module, scope: str, cs: CallSite) -> Val | None:
        for text in cs.arg_texts:
            if not text or text[0] in "'\"[(-0123456789" or text in ("None", "True", "False"):
                continue
            av = self.resolve_dotted(mod, scope, text, Walk(), line=cs.line)
            af = av.func if av.kind == ValKind.FUNCTION else None
            if af is not None and triton_decorated(af.decorators):
                return av
        return None

    # vLLM IR ops -------------------------------------------------------------------------------------------------
    def _ir_op_decorator(self, mod: Module, f: FunctionInfo):
        """The decorator that makes ``f`` the native implementation of a vLLM IR op (``@register_op``, from the module
        that defines the op class with ``register_impl``), else None."""
        for d in f.decorators:
            if d.func.rpartition(".")[2] != "register_op":
                continue
            dv = self.resolve_dotted(mod, "", d.func, Walk(), line=d.line)
            if dv.kind == ValKind.FUNCTION and dv.module is not None and dv.qual == "register_op" and any(
                    "register_impl" in c.methods for c in dv.module.summary.classes.values()):
                return d
        return None

    def ir_providers(self, op: Val) -> list:
        """(provider, module name, function qualname, ``supported=`` text, line) of every implementation registered
        for the IR op whose native function is ``op`` (``@<op>.register_impl("provider", supported=...)``), in the
        workspace and in the installed package that defines the op; in module order, then line."""
        assert op.module is not None
        pkg = op.module.name.split(".", 1)[0]
        key = (self.index.generation, pkg)
        table = self._ir_memo.get(key)
        if table is None:
            if len(self._ir_memo) > 16:
                self._ir_memo.clear()
            table = self._ir_memo[key] = self.apart(lambda: self._ir_table(pkg))
        return table.get((op.module.name, op.qual), [])

    def _ir_table(self, pkg: str) -> dict:
        mods = {m.name: m for m in self.index.workspace_modules_matching(rb"\.register_impl\(")}
        folder = self._installed_package_folder(pkg)
        if folder is not None:
            files = self.index.outside_memo(("ir.impl_files", folder), lambda: [
                p for p, _d in self.index.installed_files_containing(folder, ("tests", "benchmarks"), (b".register_impl(",))])
            for p in files:
                m = self.index.module_for_path(p)
                if m is not None:
                    mods.setdefault(m.name, m)
        out: dict = {}
        for name in sorted(mods):
            m = mods[name]
            texts = None
            for q, fi in m.summary.functions.items():
                for d in fi.decorators:
                    if not d.func.endswith(".register_impl") or not d.str_args or not d.str_args[0]:
                        continue
                    tv = self.resolve_dotted(m, "", d.func[: -len(".register_impl")], Walk(), line=d.line)
                    if tv.kind != ValKind.FUNCTION or tv.module is None:
                        continue
                    kws = dict(d.kw_texts)
                    sup, args = kws.get("supported"), kws.get("supports_args")
                    if sup == "" or args == "":  # (a call or an expression: the summary keeps no text of it)
                        if texts is None:
                            src = self.index.source_text(m.path) or ""
                            texts = (_keyword_sources(src, "register_impl", "supported"),
                                     _keyword_sources(src, "register_impl", "supports_args"))
                        sup = texts[0].get(d.line, "?") if sup == "" else sup
                        args = texts[1].get(d.line, "?") if args == "" else args
                    out.setdefault((tv.module.name, tv.qual), []).append((d.str_args[0], m.name, q, sup, d.line, args))
        return out

    def _ir_supported(self, m: Module | None, sup: str | None) -> bool | None:
        """Does a provider's ``supported=`` text (read in its module ``m``) hold on this platform: True without one,
        None where it is not decided here (or its text could not be read, ``?``)."""
        if sup is None:
            return True
        if not sup or sup == "?" or m is None:
            return None
        v = self.profile.value_of(m, "", sup)
        return None if v is None else bool(v)

    def ir_op_providers_of(self, mod: Module, op: str) -> dict | None:
        """{provider: whether its ``supported=`` holds on this platform (None: not decided)} of the IR op named ``op``,
        ``native`` included, where ``mod`` registers a provider of it (``@<op>.register_impl(...)``) or defines it
        (``@register_op``); None when it does neither. (What the env-flag defaults ask of ``"p" in
        kernel_config.ir_op_priority.<op>`` written at a provider's registration: which names vLLM would try.)"""
        target = None
        for f in mod.summary.functions.values():
            for d in f.decorators:
                if d.func.endswith(".register_impl") and d.func.split(".")[-2] == op:
                    tv = self.resolve_dotted(mod, "", d.func[: -len(".register_impl")], Walk(), line=d.line)
                    if tv.kind == ValKind.FUNCTION and tv.module is not None:
                        target = tv
                        break
            if target is not None:
                break
        f = mod.summary.functions.get(op)
        if target is None and f is not None and any(d.func.rpartition(".")[2] == "register_op" for d in f.decorators):
            target = Val(ValKind.FUNCTION, mod, op, mod.path, f.line)
        if target is None:
            return None
        out: dict = {"native": True}
        for prov, mname, _q, sup, _line, _args in self.ir_providers(target):
            out[prov] = self._ir_supported(self.index.module(mname), sup)
        return out

    def ir_default_priority(self) -> dict | None:
        """The provider names the platform's ``get_default_ir_op_priority`` can put in a priority list: the string
        items of the list displays in that method (as the platform classes define or inherit it), in order of first
        appearance, each with (the ``if`` guards it is listed under, or None when it is listed unguarded somewhere;
        path; line; module name; function qualname): ``{"vllm_c": (None, ...), "native": (None, ...), "oink":
        ("envs.VLLM_USE_OINK_OPS", ...)}`` for vLLM-MetaX. None when no platform class has the method. Memoised per
        index generation."""
        key = (self.index.generation, "ir-default")
        if key in self._ir_memo:
            return self._ir_memo[key]

        def compute():
            guards: dict = {}
            found = False
            for cv in self.profile.info.classes:
                if cv.module is None:
                    continue
                fv = self.class_attr(cv.module, cv.qual, "get_default_ir_op_priority", Walk())
                if fv is None or fv.kind != ValKind.FUNCTION or fv.module is None or fv.func is None:
                    continue
                found = True
                for name, guard, line in _list_strings(self.index.source_text(fv.module.path) or "", fv.func.line,
                                                       fv.func.end_line):
                    guards.setdefault(name, []).append((guard, fv.module.path, line, fv.module.name, fv.func.qualname))
            if not found:
                return None
            out = {}
            for name, seen in guards.items():
                texts = list(dict.fromkeys(x[0] for x in seen))
                guard = None if None in texts else M.or_joined(texts)
                out[name] = (guard, *seen[0][1:])
            return out

        out = self._ir_memo[key] = self.apart(compute)
        return out

    def ir_op_final(self, v: Val, f: FunctionInfo, d, w: Walk) -> Final:
        """A call of a vLLM IR op (``@register_op def rms_norm``): a fork over its providers. vLLM runs the first
        provider in the platform's IR op priority (``get_default_ir_op_priority``, ``--kernel-config``) that is
        ``supported`` and whose ``supports_args`` accepts the arguments, the op's own body (``native``) last. A
        provider whose ``supported=`` folds to False on this platform is dead; the priority and the argument checks
        are decided at run time."""
        mod = v.module
        assert mod is not None
        arms = []
        prio = f"kernel_config.ir_op_priority.{f.name}"
        default = self.ir_default_priority()
        call = f"({', '.join(p.name for p in f.params)})"
        for prov, mname, q, sup, line, args in self.ir_providers(v):
            m = self.index.module(mname)
            fi = m.summary.functions.get(q) if m is not None else None
            if m is None or fi is None:
                continue
            val = self._ir_supported(m, sup)
            listed = f'"{prov}" in {prio}'
            note = ""
            if val is not None and not val:
                cond, reach = sup, False
            else:
                # (whether the priority lists it by default is for the env-flag defaults to say: `ir_default_priority`;
                # a user's --kernel-config can list any provider)
                cond, reach = (listed if val is not None else f"{sup} and {listed}"), None
                if default is not None and prov not in default:
                    note = "; not in the platform's default IR op priority"
            if args and reach is not False:
                # what `supports_args` checks (dtypes, shapes) is decided by the arguments at run time
                cond += " and " + (args if re.fullmatch(r"[\w.]+", args) else f"({args})") + call
            arms.append((prov, Alt(Val(ValKind.FUNCTION, m, q, m.path, fi.line), cond, reach,
                                   f"provider {prov!r}: {m.name}.{q} (supported={sup or 'True'}{note})", m.path, line)))
        live = any(a.reachable is not False for _p, a in arms)
        native = dataclasses.replace(v, extra={**v.extra, "ir_native": True})
        # (its condition, in words, is what keeps the defaults from calling it taken when a provider before it is)
        arms.append(("native", Alt(native, f"no provider before native in {prio} accepts the arguments" if live else None,
                                   None if live else True,
                                   f"provider 'native': the op's own body ({'when no provider before it in ' + prio + ' accepts the arguments' if live else 'no other provider is taken here'})",
                                   v.path, f.line)))
        # what can run first, in the platform's default order (what runs by default is expanded first within the
        # leaf limit), then the rest; native last of those that can run (vLLM tries it after every listed provider)
        rank = {p: i for i, p in enumerate(default or ()) if p != "native"}
        arms.sort(key=lambda pa: (pa[1].reachable is False, pa[0] == "native", rank.get(pa[0], 1 << 20)))
        arms = [a for _p, a in arms]
        w.add(Hop(HopKind.DECORATOR, mod.path, d.line, v.dotted,
                  f"@{d.func}: {f.name} is a vLLM IR op with {len(arms)} providers; a call runs the first in the platform's "
                  f"IR op priority that is supported and accepts the arguments"))
        return self.follow(alts_value(ForkKind.IR_PROVIDER, prio, mod, v.dotted, f.line, arms), w)

    def follow_function(self, v: Val, w: Walk, launch: bool) -> Final:
        mod = v.module
        f = v.func
        assert mod is not None and f is not None
        # decorators, outermost first
        jit = None
        deco_notes = []
        for d in f.decorators:
            last = d.func.rpartition(".")[2]
            if last in TRITON_JIT_NAMES and ("triton" in d.func or self._is_triton(mod, d.func)):
                jit = d
            elif last in TRITON_WRAPPERS and ("triton" in d.func or self._is_triton(mod, d.func)):
                deco_notes.append(f"@{d.func}")
        if jit is not None:
            if deco_notes:
                w.add(Hop(HopKind.DECORATOR, mod.path, f.deco_line, v.dotted, " over ".join(deco_notes) + " over @triton.jit (the autotuner/heuristics wrap the jit function)"))
            return self.triton_final(v, f, deco_notes)
        if launch:
            return Final(FinalKind.UNRESOLVED, v.path, f.line, v.dotted, reason=f"`{v.dotted}[grid](...)` but {v.dotted} is not decorated with @triton.jit")
        if not v.extra.get("ir_native"):
            ir = self._ir_op_decorator(mod, f)
            if ir is not None:
                return self.ir_op_final(v, f, ir, w)
        for d in f.decorators:
            text = d.func
            if not text or is_passthrough(text) or text.rpartition(".")[2] == "dataclass":
                continue
            last = text.rpartition(".")[2]
            if last in ("custom_op", "triton_op") and d.str_args and d.str_args[0]:
                w.add(Hop(HopKind.OP_REGISTRATION, mod.path, d.line, d.str_args[0], f"@{text}(\"{d.str_args[0]}\") registers {v.dotted} as torch op {d.str_args[0]}"))
                continue
            if last == "compile" and "torch" in text:
                w.add(Hop(HopKind.DECORATOR, mod.path, d.line, v.dotted, f"@{text}: runs through torch.compile"))
                continue
            if self.patch_decorator(mod, d) is not None:
                continue
            dv = self.resolve_dotted(mod, "", text, Walk(), line=d.line)
            if dv.kind == ValKind.FUNCTION and dv.func is not None and dv.module is not None:
                inner = self._decorator_inner(dv)
                if inner is not None:
                    w.add(Hop(HopKind.WRAPPER, dv.module.path, inner.line, f"{dv.module.name}.{inner.qualname}",
                              f"@{text} wraps {v.qual}" + (" (functools.wraps)" if inner.wraps else "") + "; the wrapper calls the original"))
        if f.dummy:
            w.add(Hop(HopKind.DUMMY, mod.path, f.line, v.dotted, f.dummy))
            return Final(FinalKind.DUMMY, mod.path, f.line, v.dotted, package=_pkg(v), reason=f"{v.dotted} {f.dummy}", detail=f.docstring or "")
        nxt = self.wrapper_target(v, f, w)
        if nxt is not None and nxt[0].forwards:
            return self._follow_call(v, f, nxt[0], nxt[1], w)
        branches, truncated = self.body_branches(v, f, w)
        if len(branches) == 1 and branches[0].condition is None and truncated is None:
            # one unconditional call reaches kernel code: the function is a pass-through to it
            b = branches[0]
            first = b.chain.hops[0] if b.chain.hops else None
            if first is not None:
                w.add(Hop(first.kind, first.path, first.line, first.symbol, f"{f.name} runs {first.symbol}(...)", None, None, first.col))
            w.hops.extend(b.chain.hops[1:])
            return b.chain.final
        if branches or truncated:
            fk = M.Fork(ForkKind.CALLS, "; ".join(dict.fromkeys(b.condition for b in branches if b.condition)) or None,
                        mod.path, f.line, v.dotted, branches, truncated)
            return Final(FinalKind.FORK, mod.path, f.line, v.dotted, package=_pkg(v), detail=f.docstring or "",
                         params=[p.name for p in f.params], fork=fk)
        if nxt is not None:
            return self._follow_call(v, f, nxt[0], nxt[1], w)
        sel = self.returned_classes(v, f, w)
        if sel is not None:
            return sel
        return self.python_final(v, f)

    def returned_classes(self, v: Val, f: FunctionInfo, w: Walk) -> Final | None:
        """A function that runs no kernel and returns classes (a selector: `get_backend(cfg)`, a lambda that
        replaces one): the call's result is the class it selects, so the tree ends in those classes (a fork of
        returns, each with its condition). None for any other function."""
        texts = [t for t, _g, _l in f.return_alts if t != "None"]
        if not texts or any(not t or t[0] in "'\"0123456789[({-" or t in ("True", "False") for t in texts):
            return None
        rv = self.result_of_call(v.module, f.qualname, f.name, f.line, v.dotted, v, w.sub())  # type: ignore[arg-type]
        if not _classes_only(rv):
            return None
        w.add(Hop(HopKind.SELECTION, v.path or "", f.line, v.dotted, f"{f.name}(...) returns a class: the call's result is the class it selects"))
        return self.follow(rv, w)

    def _follow_call(self, v: Val, f: FunctionInfo, cs: CallSite, why: str, w: Walk) -> Final:
        mod = v.module
        assert mod is not None
        binds = v.extra.get("binds", ())
        w.add(Hop(HopKind.WRAPPER if cs.forwards else HopKind.CALL, mod.path, cs.line, cs.func or "?", why,
                  self.guard_text(cs.guards), self.guard_value(mod, cs.guards, f.qualname, binds) if cs.guards else None, cs.col))
        tv, launch = self.callee_value(mod, cs, w, v.extra.get("facts"))
        if not launch:
            tv = self.with_binds(mod, f.qualname, cs, tv, binds, self.handed_on(v, f, cs))
        return self.follow(tv, w, launch=launch)

    def python_final(self, v: Val, f: FunctionInfo) -> Final:
        mod = v.module
        assert mod is not None
        params = [p.name for p in f.params]
        detail = f.docstring or ""
        if f.name == "<lambda>":
            detail = f"{lambda_text(mod, f.qualname)} (returns {f.return_alts[0][0] or 'a computed value'})"
        return Final(FinalKind.PYTHON_FUNCTION, mod.path, f.line, v.dotted, package=_pkg(v), detail=detail, params=params)

    def triton_final(self, v: Val, f: FunctionInfo, wrappers: list[str]) -> Final:
        params = []
        constexprs = []
        for p in f.params:
            params.append(p.name)
            if p.annotation and p.annotation.rpartition(".")[2] == "constexpr":
                constexprs.append(p.name)
        return Final(FinalKind.TRITON_KERNEL, v.path, f.line, v.dotted, package=_pkg(v),
                     detail=("wrapped by " + ", ".join(wrappers)) if wrappers else "@triton.jit",
                     params=params, constexprs=constexprs)

    def _is_triton(self, mod: Module, text: str) -> bool:
        root = text.split(".", 1)[0]
        v = self.lookup_name(mod, "", root, Walk())
        return v.kind in (ValKind.MODULE, ValKind.NAMESPACE, ValKind.NOT_INSTALLED, ValKind.UNKNOWN) and "triton" in (v.qual or "")

    def _decorator_inner(self, dv: Val) -> FunctionInfo | None:
        f = dv.func
        if f is None or dv.module is None:
            return None
        for q in f.inner_defs:
            inner = dv.module.summary.functions.get(q)
            if inner is None:
                continue
            if inner.wraps or any(cs.forwards for cs in dv.module.summary.calls_in(q)):
                return inner
        return None

    def patch_decorator(self, mod: Module, d) -> str | None:
        return is_patch_decorator(self, mod, d)

    def wrapper_target(self, v: Val, f: FunctionInfo, w: Walk):
        """If ``f`` is a thin wrapper, the one call it delegates to (memoised per function: it reads nothing of
        ``w``)."""
        mod = v.module
        assert mod is not None
        if not self.memo_enabled:
            return self._wrapper_target(mod, f)
        return self._memoised(self._wrap_memo, (mod.path, mod.sha, f.qualname), lambda: self._wrapper_target(mod, f))

    def _wrapper_target(self, mod: Module, f: FunctionInfo):
        calls = mod.summary.calls_in(f.qualname)
        if not calls:
            return None
        scope = f.qualname
        live = [c for c in calls if c.scope == scope and (not c.guards or self.guard_value(mod, c.guards, scope) is not False)]
        fwd = [c for c in live if c.forwards and c.func]
        if len(fwd) == 1:
            return fwd[0], f"{f.name} forwards *args/**kwargs to {fwd[0].func}"
        interesting = []
        for c in live:
            if not c.func:
                continue
            root = c.func.split(".", 1)[0]
            if root in TRIVIAL_ROOTS or c.func in TRIVIAL_ROOTS:
                continue
            if c.launch or c.func.startswith("torch.ops."):
                interesting.append((c, 2))
                continue
            probe = Walk()
            tv = self.resolve_dotted(mod, scope, c.func, probe, line=c.line)
            if any(h.kind == HopKind.PLATFORM for h in probe.hops) and tv.kind != ValKind.TORCH_OP:
                continue  # a platform query decides a branch; it is not the work
            if tv.kind in (ValKind.FUNCTION, ValKind.CLASS, ValKind.TORCH_OP, ValKind.EXT_ATTR, ValKind.EXT_MODULE, ValKind.NOT_INSTALLED, ValKind.INSTANCE) and not (tv.kind == ValKind.CLASS and not c.launch):
                score = 2 if tv.kind in (ValKind.TORCH_OP, ValKind.EXT_ATTR, ValKind.NOT_INSTALLED) else 1
                interesting.append((c, score))
        if not interesting:
            return None
        pick = None
        returns_value = any(t != "None" for t, _g, _l in f.return_alts)
        if len(interesting) == 1:
            c = interesting[0][0]
            # a pass-through only when what it returns is the callee's, or the call is the work it exists for
            if c.in_return or not returns_value:
                pick = c
        else:
            rets = [c for c, _ in interesting if c.in_return]
            if len(rets) == 1 and f.significant <= 2:
                pick = rets[0]
        if pick is None:
            return None
        if f.significant > 12 and not pick.in_return and not (pick.launch or pick.func.startswith("torch.ops.")):
            return None
        why = f"{f.name} delegates to {pick.func}" + ("[grid](...)" if pick.launch else "(...)")
        return pick, why

    # ------------------------------------------------------------------
    # entry points
    # ------------------------------------------------------------------
    def trace_call(self, mod: Module, cs: CallSite, budget_s: float | None = None, cancel=None, receiver=None) -> Chain:
        """The tree behind one call site. ``receiver`` is ``(module, class qualname)`` of the concrete
        class when the call sits in a method it inherits (``self`` then means that class)."""
        w = Walk(budget_s, cancel)
        self._new_trace()
        w.receiver = receiver
        cond = self.guard_text(cs.guards)
        reach = self.guard_value(mod, cs.guards, cs.scope) if cs.guards else None
        sym = cs.func + (f"[{cs.subscript or 'grid'}]" if cs.launch else "")
        w.add(Hop(HopKind.TRITON_LAUNCH if cs.launch else HopKind.CALL, mod.path, cs.line, sym or "?", f"call in {mod.name}{'.' + cs.scope if cs.scope else ''}", cond, reach, cs.col))
        if not cs.func:
            final = Final(FinalKind.UNRESOLVED, mod.path, cs.line, "?", reason="dynamic call: the callee is not a plain name or attribute chain")
        else:
            try:
                v, launch = self.callee_value(mod, cs, w)
                _subscript_call(w, cs, launch)
                if not launch:
                    v = self.with_binds(mod, cs.scope, cs, v)
                final = self.follow(v, w, launch=launch)
            except RecursionError:
                self._active.clear()
                final = Final(FinalKind.UNRESOLVED, mod.path, cs.line, cs.func, reason="cycle: resolution recursed without end")
        return self._chain(w, final, mod)

    def trace_text(self, mod: Module, scope: str, text: str, line: int, budget_s: float | None = None, col: int = 0,
                   cancel=None) -> Chain:
        w = Walk(budget_s, cancel)
        self._new_trace()
        w.add(Hop(HopKind.CALL, mod.path, line, text, f"reference in {mod.name}{'.' + scope if scope else ''}", None, None, col))
        try:
            v = self.resolve_dotted(mod, scope, text, w, line=line)
            final = self.follow(v, w)
        except RecursionError:
            self._active.clear()
            final = Final(FinalKind.UNRESOLVED, mod.path, line, text, reason="cycle: resolution recursed without end")
        return self._chain(w, final, mod)

    def trace_value(self, v: Val, first: Hop | None = None, budget_s: float | None = None, cancel=None) -> Chain:
        w = Walk(budget_s, cancel)
        self._new_trace()
        if first is not None:
            w.add(first)
        try:
            final = self.follow(v, w)
        except RecursionError:
            self._active.clear()
            final = Final(FinalKind.UNRESOLVED, v.path, v.line, v.dotted, reason="cycle: resolution recursed without end")
        return self._chain(w, final, v.module)

    def _chain(self, w: Walk, final: Final, mod: Module | None) -> Chain:
        if final.kind == FinalKind.UNRESOLVED and w.hops and w.hops[-1].kind != HopKind.UNRESOLVED:
            w.hops.append(Hop(HopKind.UNRESOLVED, final.path or "", final.line or 0, final.symbol, final.reason or ""))
        reach = M.combine_reachability(h.reachable for h in w.hops if h.reachable is not None or h.condition)
        return Chain(w.hops, final, reach, w.partial)

    def resolve_symbol(self, dotted_name: str) -> Val:
        """A fully qualified dotted name (module path + attributes) to a value."""
        if dotted_name.startswith("torch.ops."):
            parts = dotted_name.split(".")
            if len(parts) >= 4:
                return Val(ValKind.TORCH_OP, None, f"{parts[2]}::{parts[3]}", extra={"ns": parts[2], "op": parts[3]})
        if "::" in dotted_name:
            ns, _, op = dotted_name.partition("::")
            return Val(ValKind.TORCH_OP, None, dotted_name, extra={"ns": ns, "op": op})
        parts = dotted_name.split(".")
        for i in range(len(parts), 0, -1):
            name = ".".join(parts[:i])
            loc = self.index.locate(name)
            if loc is None:
                continue
            w = Walk()
            v = self.module_value(name, w)
            for p in parts[i:]:
                v = self.attr(v, p, w)
            return v
        return Val(ValKind.NOT_INSTALLED, None, dotted_name, reason=f"package `{parts[0]}` is not installed in the target environment", extra={"package": parts[0]})


_STDLIB = frozenset(getattr(__import__("sys"), "stdlib_module_names", ()))


_MISSING = object()  # (a memo's "no entry", where None is an answer)


def _tested_params(mod: Module, f: FunctionInfo) -> frozenset:
    """See :meth:`Resolver._tested_params` (read from the summary alone). A parameter the function assigns again only
    under an ``if`` (``if dim < 0: dim += x.dim()``) is in too: :meth:`Resolver._bind_params` binds it only where the
    value bound rules every such assignment out."""
    names = {p.name for p in f.params if p.kind in ("posonly", "pos", "kwonly")} - {"self", "cls"}
    names -= {n for n in names if n in f.locals and not _only_guarded(mod, f, f.locals[n])}
    calls = [cs for cs in mod.summary.calls_in(f.qualname) if cs.scope == f.qualname]
    texts = {t for cs in calls for _k, t, _l in cs.guards}
    passed = {t for cs in calls for t in cs.arg_texts} | {t for cs in calls for _k, t in cs.kw_texts}
    return frozenset(n for n in names if n in passed or any(re.search(rf"\b{re.escape(n)}\b", t) for t in texts))


def _guard_written(kind: str, text: str, n: int) -> str:
    """One guard as :meth:`Resolver.guard_text` writes it among ``n`` guards ('' for a kind it leaves out): ``a or b``
    joined to other guards by ``and`` is parenthesised (``x and (a or b) and y``)."""
    if kind in ("if", "typecheck"):
        return f"({text})" if n > 1 and M.loose_condition(text) else text
    if kind == "else":
        return f"not ({text})"
    return f"except {text}" if kind == "except" else ""


def _any_known(rec: tuple) -> bool:
    """Does the folded argument record ``rec`` (:meth:`Resolver.arg_record`) know any argument's value?"""
    return any(x is not None for x in rec[0]) or any(x is not None for _k, x in rec[1])


def _only_guarded(mod: Module, f: FunctionInfo, bindings) -> bool:
    """Is each of ``bindings`` (of a name in ``f``) made in ``f``'s own body under an ``if`` (or its ``else``)? Not one
    a nested function makes (a ``nonlocal``), whose guards are that function's."""
    inner = [g for q, g in mod.summary.functions.items() if q.startswith(f.qualname + ".")]
    return all(any(k in ("if", "else") for k, _t, _l in b.guards)
               and not any(g.line <= b.line <= g.end_line for g in inner) for b in bindings)


def _list_strings(text: str, line: int, end_line: int) -> list:
    """(value, guard, line) of each string item of the list and tuple displays in lines ``line``..``end_line`` of
    ``text`` (a function's body), in source order; ``guard``: the conditions of the ``if`` statements around it,
    joined by ``and`` (``not (...)`` in an ``else``), or None."""
    tree, body = function_tree(text, line, end_line)
    if tree is None:
        return []
    out = []

    def visit(node, guards):
        if isinstance(node, (ast.If, ast.IfExp)):  # (also `["native"] if using_inductor else ["vllm_c", "native"]`)
            test = " ".join((ast.get_source_segment(body, node.test) or ast.unparse(node.test)).split())
            visit(node.test, guards)
            for n in node.body if isinstance(node.body, list) else [node.body]:
                visit(n, guards + [test])
            for n in node.orelse if isinstance(node.orelse, list) else [node.orelse]:
                visit(n, guards + [f"not ({test})"])
            return
        if isinstance(node, (ast.List, ast.Tuple)):
            out.extend((e.lineno, e.col_offset, e.value, " and ".join(guards) or None) for e in node.elts
                       if isinstance(e, ast.Constant) and isinstance(e.value, str))
        for n in ast.iter_child_nodes(node):
            visit(n, guards)

    visit(tree, [])
    return [(v, g, line - 1 + ln) for ln, _c, v, g in sorted(out)]


def _keyword_sources(text: str, method: str, keyword: str) -> dict:
    """line -> the source of ``keyword=`` in each call of ``<...>.method(...)`` that starts on that line (a decorator
    whose argument the summary keeps no text of: ``supported=has_oink_op("rmsnorm")``)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return {}
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == method:
            for k in node.keywords:
                if k.arg == keyword:
                    seg = ast.get_source_segment(text, k.value)
                    if seg:
                        out[node.lineno] = " ".join(seg.split())
    return out


def _guard_parts(kind: str, node) -> list:
    """(expression, truth) that a guard (``if`` / ``else`` of the parsed condition ``node``) fixes: `if a and b:`
    fixes a and b, its `else` a lone condition only; `not e` fixes e the other way."""
    if node is None:
        return []
    parts = node.values if kind == "if" and isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) else [node]
    out = []
    for part in parts:
        negated = isinstance(part, ast.UnaryOp) and isinstance(part.op, ast.Not)
        out.append((part.operand if negated else part, (kind == "if") != negated))
    return out


def _builds_container(b: Binding) -> bool:
    """Is ``b`` bound to a module container made on its line (``nn.ModuleList(...)``: :meth:`Resolver.container_value`)?"""
    return b.kind == "call" and (b.target or "").rpartition(".")[2] in MODULE_CONTAINERS


def _subscript_call(w: Walk, cs: CallSite, launch: bool) -> None:
    """``d[key](...)`` whose callee turned out to be an item of a dict or container, not a kernel launched on a grid:
    the walk's first hop (the call) says "call"."""
    if cs.launch and not launch and w.hops and w.hops[0].kind == HopKind.TRITON_LAUNCH:
        w.hops[0] = dataclasses.replace(w.hops[0], kind=HopKind.CALL)


def _container_elements(node: ast.expr) -> list:
    """(element, first index, end index) of the expressions whose values are the items of the iterable ``node``: a
    list or tuple display's items, a comprehension's element, both sides of ``+``, the iterable given to a call that
    wraps it (``wrap_modules(gen)``). The indices are texts where the iterable is a sum of comprehensions over
    ``range(n)`` / ``range(a, b)`` that follow each other (``[A() for _ in range(start)] + [f(i) for i in range(start,
    end)]``: ("0", "start"), ("start", "end")), else None."""
    out: list = []
    off: str | None = "0"
    for part in _summands(node):
        if isinstance(part, ast.Call) and len(part.args) == 1 and not part.keywords \
                and isinstance(part.args[0], (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp, ast.Dict, ast.DictComp)):
            part = part.args[0]
        if isinstance(part, (ast.List, ast.Tuple)):
            out.extend((e, None, None) for e in part.elts if not isinstance(e, ast.Starred))
            off = None
        elif isinstance(part, ast.Dict):  # (`nn.ModuleDict({"a": A(), ...})`: its values)
            out.extend((e, None, None) for e in part.values if e is not None)
            off = None
        elif isinstance(part, ast.DictComp):
            out.append((part.value, None, None))
            off = None
        elif isinstance(part, (ast.ListComp, ast.GeneratorExp)):
            lo = hi = None
            gen = part.generators[0] if len(part.generators) == 1 and not part.generators[0].ifs else None
            it = gen.iter if gen is not None else None
            if isinstance(it, ast.Call) and dotted(it.func) == "range" and not it.keywords and 1 <= len(it.args) <= 2:
                texts = [dotted(a) or (repr(a.value) if isinstance(a, ast.Constant) else None) for a in it.args]
                first, end = ("0", texts[0]) if len(texts) == 1 else (texts[0], texts[1])
                if off is not None and first == off and end:
                    lo, hi = first, end
            out.append((part.elt, lo, hi))
            off = hi
    return out


def _summands(node: ast.expr) -> list:
    """The operands of a chain of ``+``, left to right."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _summands(node.left) + _summands(node.right)
    return [node]


def _run_receiver(v: Val, w: Walk):
    """The object `self` is when the value ``v`` followed on walk ``w`` runs: the value's own receiver, else the walk's,
    except for a function defined outside any class of its module (a module-level function, or one nested in such a
    function), whose body has no `self`: the caller's object carried in split the memos of a helper by every class
    that called it (upstream vLLM's `is_list_of`, 48 keys in 600 modules)."""
    own = v.extra.get("receiver")
    if own is not None:
        return own
    f, mod = v.func, v.module
    if v.kind == ValKind.FUNCTION and f is not None and mod is not None and f.class_name is None \
            and f.qualname.partition(".")[0] not in mod.summary.classes:
        return None
    return w.receiver


def _context_key(v: Val):
    """What a followed function or instance carries from its call, for memo keys: the parameters it binds, and (only
    when there are any, so that other keys keep their shape) the arguments it hands on and the guard facts."""
    binds = v.extra.get("binds", ())
    args, facts = v.extra.get("args"), v.extra.get("facts")
    return binds if args is None and facts is None else (binds, args, facts)


def _var_params(f: FunctionInfo) -> tuple:
    """(takes ``*args``, takes ``**kwargs``) of ``f``."""
    kinds = {p.kind for p in f.params}
    return "vararg" in kinds, "kwarg" in kinds


def _hands_on_whole(f: FunctionInfo) -> bool:
    """Does ``f`` take nothing but ``*args`` / ``**kwargs`` (after ``self``): a ``forward(self, *args,
    **kwargs)`` that hands its arguments on (CustomOp's dispatch)?"""
    named = [p for p in f.params if p.kind in ("posonly", "pos", "kwonly")]
    if f.class_name and named and named[0].name in ("self", "cls"):
        named = named[1:]
    return not named and any(_var_params(f))


def _str_literal(text: str) -> str | None:
    """The string a call argument's text spells when it is a string literal (``'flashinfer'``), else None."""
    v = constant_of(text) if text else None
    return v if isinstance(v, str) else None


def _classes_only(x: Val) -> bool:
    """Is ``x`` a class, or a fork whose known candidates are all classes (one at least)? (A module function: a
    recursive closure is a reference cycle per call, which a CLI run with the collector off never frees.)"""
    if x.kind == ValKind.ALTS:
        arms = x.extra["alts"]
        return all(_classes_only(a.val) or a.val.kind == ValKind.UNKNOWN for a in arms) and any(_classes_only(a.val) for a in arms)
    return x.kind == ValKind.CLASS


def _merge_not_installed(branches: list) -> list:
    """Several calls into one package that is not installed, under one condition, are one branch: what
    can be said of them is the same (the package is missing); the call lines stay in the label."""
    out: list = []
    groups: dict = {}  # (package, condition) -> (index in out, [lines])
    for b in branches:
        f = b.chain.final
        key = (f.package or f.symbol, b.condition) if f.fork is None and f.kind == FinalKind.NOT_INSTALLED else None
        if key is not None and key in groups:
            groups[key][1].append(b.line)
            continue
        if key is not None:
            groups[key] = (len(out), [b.line])
        out.append(b)
    for (pkg, _cond), (j, lines) in groups.items():
        if len(lines) > 1:
            b = out[j]
            out[j] = dataclasses.replace(b, label=f"{b.label} (+{len(lines) - 1} more calls into `{pkg}`, lines "
                                            f"{', '.join(str(x) for x in lines)})")
    return out


def _merge_same(arms: list) -> list:
    """Returns that give one and the same callable (`return fn` on four paths of `maybe_compile`) are one branch:
    its condition is any of theirs (dead only when all are). Unknown values are never merged."""
    out: list = []
    index: dict = {}
    for a in arms:
        v = a.val
        recv = v.extra.get("receiver")
        key = None if v.kind in (ValKind.UNKNOWN, ValKind.ALTS) else (v.kind, v.path, v.qual, v.line, (recv[0].name, recv[1]) if recv else None)
        if key is None or key not in index:
            if key is not None:
                index[key] = (len(out), [a])
            out.append(a)
            continue
        j, group = index[key]
        group.append(a)
        conds = [g.condition for g in group]
        reach = [g.reachable for g in group]
        r = True if any(x is True for x in reach) else (False if all(x is False for x in reach) else None)
        cond = None if any(c is None for c in conds) else " or ".join(f"({c})" for c in conds)
        first = group[0]
        out[j] = Alt(first.val, cond, r, f"{first.label} ({len(group)} returns)", first.path, first.line)
    return out


def _expand_within(leaves: int, reach: list, expand) -> tuple[dict, int]:
    """Expand the branches with these reachabilities within ``leaves`` (``expand(i, share)`` gives branch i's
    Branch, or None when it is no branch): the order and shares of ``_Budget.order``, then a second chance for
    the branches cut short. Returns ({index: Branch}, how many branches got no share)."""
    budget = _Budget(leaves)
    kept: dict = {}
    skipped = 0
    for i, share in budget.order(reach):
        if share <= 0:
            skipped += 1
            continue
        b = expand(i, share)
        if b is not None:
            kept[i] = b
            budget.spend(b.chain.leaf_count())
    _second_chance(kept, budget, expand)
    return kept, skipped


def _fork_need(leaves: int, reach: list, needs: dict) -> int:
    """The least leaf budget at which :func:`_expand_within` would give every branch of ``needs`` ({index: (the
    budget its subtree needs, its leaves)}, the branches as expanded within ``leaves``) at least what it needs at
    the first pass, so that a fresh expansion makes the same tree (shares only grow with the budget); ``leaves``
    when none below it does (or a branch was not expanded: then the tree was cut, and is not reused elsewhere)."""
    if not reach:
        return 0
    if len(needs) < len(reach):
        return leaves
    for b in range(1, leaves):
        budget = _Budget(b)
        for i, share in budget.order(reach):
            n, used = needs[i]
            if share <= 0 or share < n:
                break
            budget.spend(used)
        else:
            return b
    return leaves


def _second_chance(kept: dict, budget, expand) -> None:
    """Leaves left over once every branch had its share go to the branches that were cut short, in order (a
    branch that turned out small leaves its share to a big one expanded before it). Each is expanded once more."""
    for i in sorted(kept):
        if budget.remaining <= 0:
            return
        b = kept[i]
        if b.reachable is False or not b.chain.truncated():
            continue
        used = b.chain.leaf_count()
        nb = expand(i, used + budget.remaining)
        if nb is not None:
            budget.spend(nb.chain.leaf_count() - used)
            kept[i] = nb


class _Budget:
    """Leaves left for the branches of one fork, handed out in expansion order (see ``order``)."""

    def __init__(self, leaves: int):
        self.remaining = leaves

    def order(self, reach: list):
        """(branch index, its share) for branches with these reachabilities: live and run-time ones first, in
        source order, each a fair share of what is left (what a small branch leaves goes to the next); dead
        ones last with a few leaves each (enough to name what they would reach). Shares are computed when
        asked, after the previous branch called ``spend``."""
        # branches the profile proves taken first, then those decided at run time (each in source order)
        live = [i for i, r in enumerate(reach) if r is True] + [i for i, r in enumerate(reach) if r is None]
        dead = sum(1 for r in reach if r is False)
        reserve = min(dead, self.remaining // 4)  # a leaf for each dead branch, so that it is named, not dropped
        for k, i in enumerate(live):
            left = self.remaining - reserve
            yield i, max(1, left // (len(live) - k)) if left > 0 else 0
        for i in (i for i, r in enumerate(reach) if r is False):
            # a few leaves each (enough to name them), more when the live branches left many: together at most a
            # quarter of what is left, so a small dead subtree is shown whole
            yield i, min(self.remaining, max(3, self.remaining // (4 * dead))) if self.remaining > 0 else 0

    def spend(self, used: int) -> None:
        self.remaining -= used


def _pkg(v: Val) -> str | None:
    if v.module is None:
        return None
    return v.module.name.split(".", 1)[0]


def _decided(a: Alt, reach: bool | None, why: str) -> Alt:
    """Alternative ``a`` with the reachability the call being followed decided, saying what decided it."""
    return dataclasses.replace(a, reachable=reach, label=f"{a.label} (decided by {why})", decided=why)


def _module_level(mod: Module, scope: str, node: ast.expr) -> bool:
    """Is ``node`` an expression of module-level names only (imports and globals of ``mod`` as seen from ``scope``:
    no parameter, local, ``self`` or builtin), with no lambda or comprehension? Such a condition is taken to have
    one value for the process (``get_pp_group().is_first_rank``, ``envs.VLLM_X``)."""
    seen = False
    for n in ast.walk(node):
        if isinstance(n, (ast.Lambda, ast.comprehension, ast.NamedExpr, ast.Await, ast.Yield)):
            return False
        if isinstance(n, ast.Name):
            how, bs = mod.summary.binding_of(scope, n.id)
            if how != "module" or not bs:
                return False
            seen = True
    return seen


def _suffixes(part: str) -> tuple[str, str]:
    """A chain part split into its name and the calls and items taken of it (``_groups[]()`` -> ``_groups``, ``[]()``)."""
    i = len(part)
    while i >= 2 and part[i - 2:i] in ("()", "[]"):
        i -= 2
    return part[:i], part[i:]


def _union_operands(text: str) -> list:
    """The operands of an annotation's top-level ``|`` as written (``X[A | B] | None`` -> ``X[A | B]``, ``None``);
    ``[text]`` for anything else, a text that does not parse included."""
    node = parse_expr(text)
    if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)):
        return [text]
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.BitOr):
            stack += [n.right, n.left]
        else:
            out.append((ast.get_source_segment(text, n) or "").strip())
    return out


def _subscript_args(text: str) -> list:
    """The arguments of a subscripted annotation as written (``dict[str, Callable[[], X]]`` -> ``str``,
    ``Callable[[], X]``); [] when it is not one."""
    node = parse_expr(text)
    if not isinstance(node, ast.Subscript):
        return []
    elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    return [(ast.get_source_segment(text, e) or "").strip() for e in elts]


def parse_expr(text: str) -> ast.expr | None:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
