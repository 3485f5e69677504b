"""Environment flags at their defaults: what the platform's *default configuration* does.

Pure analysis: the module that defines a flag is read, never imported. A flag is

* a key of a module-level dict of lambdas read through the module's ``__getattr__`` (the vLLM
  ``envs`` shape: ``environment_variables = {"X": lambda: bool(int(os.getenv("X", "0")))}``);
* a module-level name bound once to an expression that reads the environment
  (``X = os.environ.get("X", "0") == "1"``);
* an annotation with a default under ``if TYPE_CHECKING:`` (``X: bool = True``), when neither of
  the above says more;
* or the environment read in place (``os.environ.get("X", "0") == "1"`` in the guard itself).

Its default is the expression with every variable unset: ``os.getenv(K, D)`` and
``os.environ.get(K, D)`` give ``D`` (None without one), ``K in os.environ`` is False,
``os.environ[K]`` is unknown (it raises); ``int``, ``bool``, ``float``, ``str``, ``.lower()``,
``.upper()``, ``.strip()``, comparisons, ``in``, ``not``/``and``/``or`` and conditional
expressions fold; anything else is unknown. A guard is evaluated with those defaults on top of the
platform profile (``PlatformProfile.evaluate`` decides what is not an environment flag).

Used for the *default provider* of compiled ops (the first kernel module that the platform's
``import_kernels`` loads when no flag is set) and for saying whether a branch decided at run time
is taken by default. Reachability itself never uses defaults: a flag can be set.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .lookup import Lookup
from .model import extension_holds
from .walk import ValKind, Walk

UNKNOWN = object()

_GETENV = {"os.getenv", "getenv", "os.environ.get", "environ.get"}
_ENVIRON = {"os.environ", "environ"}
_IR_PRIORITY = re.compile(r"(?:^|\.)ir_op_priority\.\w+$")
_CASTS = {"int": int, "bool": bool, "float": float, "str": str}
_STR_METHODS = ("lower", "upper", "strip", "casefold")
MAX_DEPTH = 12


@dataclass
class _Table:
    """The flags one module defines: name -> expression node."""

    assigned: dict  # module-level `X = expr`, bound once
    lazy: dict  # keys of a dict of lambdas read by the module's __getattr__
    declared: dict  # `X: T = default` under `if TYPE_CHECKING:`


@dataclass(frozen=True)
class Flag:
    """An environment flag a guard reads, and its default."""

    text: str  # as written in the guard (`mx_envs.USE_PRECOMPILED_KERNEL`)
    value: object  # its default (UNKNOWN when it cannot be told)


class EnvDefaults:
    """Guards evaluated with every environment variable unset (memoised per index generation)."""

    def __init__(self, resolver: Lookup):
        self.r = resolver
        self._gen = -1
        self._tables: dict = {}
        self._memo: dict = {}
        self._bases: dict = {}  # (module, scope, dotted base) -> the flag-defining module it names, or None
        self._text = ""

    def _fresh(self) -> None:
        gen = self.r.index.generation
        if gen != self._gen:
            self._gen = gen
            self._tables.clear()
            self._memo.clear()
            self._bases.clear()

    # -- public ------------------------------------------------------------------
    def evaluate(self, mod, scope: str, text: str) -> bool | None:
        """``text`` under the platform profile with environment flags at their defaults."""
        v, _flags = self.explain(mod, scope, text)
        return v

    def explain(self, mod, scope: str, text: str) -> tuple[bool | None, tuple]:
        """(value, the flags read with their defaults) of a guard."""
        if mod is None or not text:
            return None, ()
        self._fresh()
        key = (mod.name, scope, text)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        try:
            node = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            return None, ()
        if not self._could_read_flags(mod, scope, node):
            self._memo[key] = (None, ())
            return None, ()
        flags: list[Flag] = []
        self._text = text
        try:
            v = self._eval(mod, scope, node, 0, flags)
        except RecursionError:
            v = UNKNOWN
        res = (None if v is UNKNOWN else bool(v), tuple(dict.fromkeys(flags)))
        self._memo[key] = res
        return res

    # -- evaluation ----------------------------------------------------------------
    def _eval(self, mod, scope, node, depth, flags):
        if depth > MAX_DEPTH:
            return UNKNOWN
        ev = lambda n: self._eval(mod, scope, n, depth + 1, flags)  # noqa: E731
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            vals = [ev(e) for e in node.elts]
            return UNKNOWN if any(v is UNKNOWN for v in vals) else tuple(vals)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            if v is UNKNOWN:
                return UNKNOWN
            if isinstance(node.op, ast.Not):
                return not v
            return _safe(lambda: -v if isinstance(node.op, ast.USub) else +v)
        if isinstance(node, ast.BoolOp):
            return _bool_op(node, ev)
        if isinstance(node, ast.IfExp):
            t = ev(node.test)
            return UNKNOWN if t is UNKNOWN else ev(node.body if t else node.orelse)
        if isinstance(node, ast.Compare):
            return self._compare(node, ev, flags, mod)
        if isinstance(node, ast.Call):
            return self._call(mod, scope, node, ev, flags)
        if isinstance(node, ast.Subscript) and _dotted(node.value) in _ENVIRON:
            return UNKNOWN  # os.environ["X"] raises when X is unset
        if isinstance(node, (ast.Name, ast.Attribute)):
            v = self._flag(mod, scope, node, depth, flags)
            if v is not None:
                return v[0]
        return self._profile(mod, scope, node)

    def _profile(self, mod, scope, node):
        try:
            v = self.r.profile.evaluate(mod, scope, ast.unparse(node))
        except Exception:  # noqa: BLE001 - a guard the profile cannot read is unknown
            return UNKNOWN
        return UNKNOWN if v is None else v

    def _compare(self, node: ast.Compare, ev, flags=None, mod=None):
        left = ev(node.left)
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)) and _dotted(right_node) in _ENVIRON:
                ok = isinstance(op, ast.NotIn)  # no variable is set
            elif isinstance(op, (ast.In, ast.NotIn)) and _IR_PRIORITY.search(_dotted(right_node) or "") and isinstance(left, str):
                ir_op = (_dotted(right_node) or "").rpartition(".")[2]
                listed = self._default_priority_lists(left, flags, self.r.ir_op_providers_of(mod, ir_op) if mod is not None else None)
                if listed is UNKNOWN:
                    return UNKNOWN
                ok = listed == isinstance(op, ast.In)
            else:
                right = ev(right_node)
                if left is UNKNOWN or right is UNKNOWN:
                    return UNKNOWN
                ok = _safe(lambda: _compare(op, left, right))
                if ok is UNKNOWN:
                    return UNKNOWN
                left = right
            if not ok:
                return False
        return True

    def _default_priority_lists(self, provider: str, flags, providers: dict | None = None):
        """``"oink" in kernel_config.ir_op_priority.rms_norm`` with no --kernel-config: False when the platform's
        default IR op priority never lists ``provider``, or only under ``if`` guards that are false at the env
        flags' defaults (their flags recorded); True when it is the first provider of the op listed there (every one
        before it in the list's text is listed only under guards false by default, or is not a provider of the op,
        ``providers``, or one whose ``supported=`` is false here: vLLM tries only the op's supported providers).
        UNKNOWN otherwise, a later one included: the condition is what the provider needs, and the ones before it
        win whenever they accept the arguments, so "listed" must not read as "taken by default"."""
        table = self.r.ir_default_priority()
        if table is None:
            return UNKNOWN
        if provider not in table:
            return False

        def listed(name):
            guard, _path, _line, modname, qual = table[name]
            if guard is None:
                return True
            saved = self._text
            try:
                v, read = self.explain(self.r.index.module(modname), qual, guard)
            finally:
                self._text = saved
            if v is not None and flags is not None:
                flags.extend(read)
            return v

        mine = listed(provider)
        if mine is not True:
            return UNKNOWN if mine is None else False
        for name in table:
            if name == provider:
                return True
            if providers is not None and providers.get(name, False) is False:
                continue  # (not a provider of this op, or not supported here: never tried)
            if listed(name) is not False:
                return UNKNOWN  # (one before it may be listed by default)
        return UNKNOWN

    def _call(self, mod, scope, node: ast.Call, ev, flags):
        d = _dotted(node.func)
        if d in _GETENV:
            default = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "default"), None)
            v = None if default is None else ev(default)
            flags.append(Flag(self._source(node), v))
            return v
        if d in _CASTS and len(node.args) == 1 and not node.keywords:
            v = ev(node.args[0])
            return UNKNOWN if v is UNKNOWN else _safe(lambda: _CASTS[d](v))
        if isinstance(node.func, ast.Attribute) and node.func.attr in _STR_METHODS and not node.args:
            v = ev(node.func.value)
            return getattr(v, node.func.attr)() if isinstance(v, str) else UNKNOWN
        return self._profile(mod, scope, node)

    def _flag(self, mod, scope, node, depth, flags):
        """(default,) of the environment flag ``node`` names, or None when it names none."""
        if isinstance(node, ast.Attribute):
            home = self._module_named(mod, scope, _dotted(node.value))
            if home is None:
                return None
            name = node.attr
        else:
            how, _b = mod.summary.binding_of(scope, node.id)
            if how != "module":
                return None
            home, name = mod, node.id
        table = self._table(home)
        expr = table.assigned.get(name)
        if expr is None:
            expr = table.lazy.get(name)
        if expr is None:
            expr = table.declared.get(name)
        if expr is None:
            return None
        v = self._eval(home, "", expr, depth + 1, [])  # the flag is what the guard reads, not its parts
        flags.append(Flag(self._source(node), v))
        return (v,)

    def _module_named(self, mod, scope, base: str | None):
        """The module ``base`` names in ``scope`` when it defines environment flags, else None (memoised)."""
        if not base or base == "self" or base.startswith("self."):
            return None
        key = (mod.name, scope, base)
        if key in self._bases:
            return self._bases[key]
        home = None
        try:
            bv = self.r.resolve_dotted(mod, scope, base, Walk())
        except RecursionError:
            bv = None
        if bv is not None and bv.kind == ValKind.MODULE and bv.module is not None:
            t = self._table(bv.module)
            home = bv.module if (t.assigned or t.lazy or t.declared) else None
        self._bases[key] = home
        return home

    def _could_read_flags(self, mod, scope, node) -> bool:
        """Does the guard read the environment or a name of a module that defines flags (else the profile
        alone decides it and there is nothing to evaluate)?"""
        for n in ast.walk(node):
            if isinstance(n, ast.Call) and _dotted(n.func) in _GETENV:
                return True
            if isinstance(n, ast.Compare) and _IR_PRIORITY.search(_dotted(n.comparators[-1]) or ""):
                return True  # (the platform's default IR op priority)
            if isinstance(n, ast.Attribute) and self._module_named(mod, scope, _dotted(n.value)) is not None:
                return True
            if isinstance(n, ast.Name) and n.id in self._table(mod).assigned:
                return True
        return False

    def _source(self, node) -> str:
        """The text of ``node`` as written in the guard being explained (nodes of other sources only
        reach here while evaluating a flag's definition, whose flags are dropped)."""
        try:
            return ast.get_source_segment(self._text, node) or ast.unparse(node)
        except (IndexError, ValueError):
            return ast.unparse(node)

    def _table(self, mod) -> _Table:
        hit = self._tables.get(mod.path)
        if hit is not None:
            return hit
        table = _Table({}, {}, {})
        text = self.r.index.source_text(mod.path) or ""
        if b"environ" in text.encode("utf-8", "surrogatepass") or "getenv" in text:
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError, RecursionError):
                tree = None
            if tree is not None:
                table = _read_table(tree)
        self._tables[mod.path] = table
        return table


def _read_table(tree: ast.Module) -> _Table:
    assigned: dict = {}
    counts: dict = {}
    lazy: dict = {}
    declared: dict = {}
    has_getattr = any(isinstance(s, ast.FunctionDef) and s.name == "__getattr__" for s in tree.body)
    for s in tree.body:
        if isinstance(s, ast.If) and _dotted(s.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for t in s.body:
                if isinstance(t, ast.AnnAssign) and isinstance(t.target, ast.Name) and t.value is not None:
                    declared[t.target.id] = t.value
            continue
        targets, value = _assignment(s)
        for name in targets:
            counts[name] = counts.get(name, 0) + 1
            assigned[name] = value
            if isinstance(value, ast.Dict) and has_getattr:
                for k, v in zip(value.keys, value.values):
                    if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Lambda) \
                            and not v.args.args:
                        lazy[k.value] = v.body
    # a name bound more than once (or to something that is no expression of the environment) is not a flag
    assigned = {n: v for n, v in assigned.items() if counts[n] == 1 and _reads_environment(v)}
    return _Table(assigned, lazy, declared)


def _assignment(s) -> tuple[list[str], ast.expr | None]:
    if isinstance(s, ast.Assign) and all(isinstance(t, ast.Name) for t in s.targets):
        return [t.id for t in s.targets], s.value
    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None:
        return [s.target.id], s.value
    return [], None


def _reads_environment(node) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and _dotted(n.func) in _GETENV:
            return True
        if isinstance(n, (ast.Attribute, ast.Name)) and _dotted(n) in _ENVIRON:
            return True
    return False


def _bool_op(node: ast.BoolOp, ev):
    vals = [ev(v) for v in node.values]
    if isinstance(node.op, ast.And):
        for v in vals:
            if v is UNKNOWN:
                return UNKNOWN if all(x is UNKNOWN or x for x in vals) else next(x for x in vals if x is not UNKNOWN and not x)
            if not v:
                return v
        return vals[-1]
    for v in vals:
        if v is UNKNOWN:
            return UNKNOWN if all(x is UNKNOWN or not x for x in vals) else next(x for x in vals if x is not UNKNOWN and x)
        if v:
            return v
    return vals[-1]


def _safe(fn):
    try:
        return fn()
    except (TypeError, ValueError, OverflowError, AttributeError):
        return UNKNOWN


# -- the default provider of compiled ops -------------------------------------------


@dataclass(frozen=True)
class DefaultProvider:
    """The first kernel module the platform's ``import_kernels`` loads when no flag is set."""

    module: str
    status: str  # "not installed", "not built in this checkout", "installed at ..."
    guard: str | None  # the guard it is imported under (None: always)
    flags: tuple  # Flag, the environment flags that decide, at their defaults


def default_providers(resolver: Lookup, defaults: EnvDefaults):
    """Every provider of ``OpRegistry.providers()`` (in the order ``import_kernels`` imports them) whose guard holds
    with every environment flag at its default (a generator: the first is the kernel module loaded first by default);
    one whose guard cannot be decided is left out."""
    ops = getattr(resolver, "ops", None)
    if ops is None:
        return
    try:
        provs = ops.providers()
    except Exception:  # noqa: BLE001 - no providers: nothing to say
        return
    scopes = _kernel_import_scopes(resolver)
    for module, guard, status in provs:
        if not guard:
            yield DefaultProvider(module, status, None, ())
            continue
        for mod, scope in scopes:
            v, flags = defaults.explain(mod, scope, guard)
            if v is True:
                yield DefaultProvider(module, status, guard, flags)
                break
            if v is False:
                break


def provider_for_namespace(providers: list, ns: str) -> DefaultProvider | None:
    """Of the providers loaded by default, the one that holds torch-op namespace ``ns``: the extension module named
    like it (:func:`model.extension_holds`: ``_moe_C`` -> ``pkg._moe_C``, ``_C_cache_ops`` -> ``pkg._C``, whose
    module registers its sub-namespaces), the one with the same last name first; None when none is (``sgl_kernel``
    where its module is imported only under a flag that is off by default)."""
    named = [p for p in providers if extension_holds(p.module, ns)]
    return next((p for p in named if p.module.rpartition(".")[2] == ns), named[0] if named else None)


def _kernel_import_scopes(resolver: Lookup) -> list:
    """(module, function qualname) of the platform classes' ``import_kernels`` (where provider guards are read)."""
    out = []
    for cv in resolver.profile.info.classes:
        fv = resolver.class_attr(cv.module, cv.qual, "import_kernels", Walk())
        if fv is not None and fv.func is not None and fv.module is not None:
            out.append((fv.module, fv.func.qualname))
    return out


from .pyindex import compare as _compare, dotted as _dotted  # noqa: E402 - one comparison table, one dotted()


# -- the platform's default configuration, as the renderers ask for it -------------------------------


class PlatformDefaults:
    """``condition(text, path, line)``: a guard written at ``path:line`` with every environment flag at its
    default; ``provider_for(ns)``: the kernel module loaded by default that holds a torch-op namespace (memoised per
    index generation).
    The duck type :mod:`attnlens.render` takes as ``defaults``."""

    def __init__(self, resolver: Lookup):
        self.r = resolver
        self.env = EnvDefaults(resolver)
        self._providers: tuple | None = None  # (generation, the providers loaded by default)

    def condition(self, text: str, path: str | None, line: int | None) -> bool | None:
        if not text or not path:
            return None
        mod = self.r.index.module_for_path(path)
        if mod is None:
            return None
        scope = mod.summary.scope_at(line) if line else ""
        try:
            return self.env.evaluate(mod, scope or "", text)
        except Exception:  # noqa: BLE001 - a default is a nicety: never fail the caller
            return None

    def platform_fact(self, text: str, path: str | None, line: int | None) -> bool | None:
        """A condition written at ``path:line`` on this platform alone (no env flag at its default, no call's
        arguments): True or False where the platform profile decides it, else None."""
        if not text or not path:
            return None
        mod = self.r.index.module_for_path(path)
        if mod is None:
            return None
        try:
            return self.r.profile.evaluate(mod, mod.summary.scope_at(line) if line else "", text)
        except Exception:  # noqa: BLE001 - a simplification is a nicety: never fail the caller
            return None

    def _loaded(self) -> list:
        """The providers loaded by default (:func:`default_providers`), memoised per index generation."""
        gen = self.r.index.generation
        if self._providers is None or self._providers[0] != gen:
            try:
                self._providers = (gen, list(default_providers(self.r, self.env)))
            except Exception:  # noqa: BLE001 - a default is a nicety: never fail the caller
                self._providers = (gen, [])
        return self._providers[1]

    def provider_for(self, ns: str) -> DefaultProvider | None:
        """The provider loaded by default that holds torch-op namespace ``ns`` (:func:`provider_for_namespace`)."""
        return provider_for_namespace(self._loaded(), ns)


