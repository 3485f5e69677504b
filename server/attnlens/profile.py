"""The platform profile: what the plugin's platform class says about branches.

Nothing here is specific to one vendor. The plugin is found through its
``vllm.platform_plugins`` entry point (``pyproject.toml``, ``setup.py`` or
``setup.cfg`` of the workspace); the entry function's returned class path
gives the platform class (or classes, for ``A if cond else B``). Branch
guards are then evaluated statically:

* ``current_platform.<method>(...)``: the method found in the platform
  class's MRO (plugin classes first, then upstream ``Platform``) whose body is
  a constant return, or a comparison of ``_enum`` with ``PlatformEnum``
  members (``is_cuda``, ``is_out_of_tree``, ...), evaluated with the class's
  ``_enum``;
* calls of functions whose every return is the same literal
  (``get_flash_attn_version() -> 2``, ``is_..._available() -> True``);
* ``TYPE_CHECKING`` is False; ``not``/``and``/``or`` and comparisons with
  literals fold; anything else (environment flags, device queries) is
  *unknown* and stays visible as a condition.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple
from pathlib import Path

from .lookup import Lookup
from .model import Hop, HopKind
from .walk import Val, ValKind, Walk

PLATFORM_PLUGIN_GROUP = "vllm.platform_plugins"
CURRENT_PLATFORM = "vllm.platforms.current_platform"


@dataclass
class PlatformInfo:
    entry: str | None = None  # "pkg:func"
    entry_source: str | None = None  # file that declares it
    class_paths: list[str] = field(default_factory=list)
    classes: list = field(default_factory=list)  # Vals of platform classes
    enum: str | None = None  # e.g. "OOT"
    error: str | None = None


_EP_MEMO: dict = {}  # (root, stamps of its three build files) -> entry points: those files' content, per root


def read_entry_points(root: Path) -> dict[str, dict[str, str]]:
    """Entry points declared by the workspace (pyproject.toml, setup.cfg, setup.py); memoised by file stamps."""
    stamps = []
    for name in ("pyproject.toml", "setup.cfg", "setup.py"):
        try:
            st = (root / name).stat()
            stamps.append((name, st.st_mtime_ns, st.st_size))
        except OSError:
            stamps.append((name, None, None))
    key = (str(root), tuple(stamps))
    if key in _EP_MEMO:
        return _EP_MEMO[key]
    out = _read_entry_points(root)
    _EP_MEMO[key] = out
    return out


def _read_entry_points(root: Path) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    pp = root / "pyproject.toml"
    if pp.is_file():
        try:
            try:
                import tomllib  # type: ignore[import-not-found]
            except ModuleNotFoundError:  # pragma: no cover - Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(pp.read_text(encoding="utf-8", errors="replace"))
            eps = (data.get("project") or {}).get("entry-points") or {}
            for group, items in eps.items():
                if isinstance(items, dict):
                    out.setdefault(group, {}).update({k: str(v) for k, v in items.items()})
        except Exception:
            pass
    cfg = root / "setup.cfg"
    if cfg.is_file() and not out.get(PLATFORM_PLUGIN_GROUP):
        import configparser

        cp = configparser.ConfigParser()
        try:
            cp.read_string(cfg.read_text(errors="replace"))
            if cp.has_section("options.entry_points"):
                for group, text in cp.items("options.entry_points"):
                    for line in text.splitlines():
                        if "=" in line:
                            k, v = line.split("=", 1)
                            out.setdefault(group, {})[k.strip()] = v.strip()
        except Exception:
            pass
    sp = root / "setup.py"
    if sp.is_file() and not out.get(PLATFORM_PLUGIN_GROUP):
        try:
            tree = ast.parse(sp.read_text(errors="replace"))
            for node in ast.walk(tree):
                if isinstance(node, ast.keyword) and node.arg == "entry_points" and isinstance(node.value, ast.Dict):
                    for k, v in zip(node.value.keys, node.value.values):
                        if isinstance(k, ast.Constant) and isinstance(v, (ast.List, ast.Tuple)):
                            for e in v.elts:
                                if isinstance(e, ast.Constant) and isinstance(e.value, str) and "=" in e.value:
                                    a, b = e.value.split("=", 1)
                                    out.setdefault(k.value, {})[a.strip()] = b.strip()
        except (SyntaxError, ValueError, OSError):
            pass
    return out


class _NoneValue:
    """The constant ``None`` as a folded value (the evaluator's own ``None`` means "not known"): only a parameter a
    call binds to ``None`` (an argument ``None``, or a ``None`` default it leaves) has it. Falsy; ``x is None``
    folds to True on it, ``x is not None`` to False (and the other way round on any other constant)."""

    __slots__ = ()

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "None"


NONE_VALUE = _NoneValue()


class _SomeValue:
    """A value that is not ``None`` and otherwise unknown, as a folded argument: what a caller's guard says of a name
    it passes (``if residual is None: ... else: norm(x, residual)``). ``x is None`` folds to False on it, ``x is not
    None`` to True; anything else about it is unknown (the evaluator reads it as None)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<not None>"

    def __reduce__(self):
        return "SOME_VALUE"


SOME_VALUE = _SomeValue()


class InstanceOf(NamedTuple):
    """A parameter bound to an object of class ``qual`` of module ``module``, or of a subclass of it: what a call passes
    as ``self`` from a method of that class (``quant_config.get_quant_method(self, prefix)`` in an embedding layer's
    ``__init__``). ``isinstance(param, X)`` folds on it (:meth:`PlatformProfile.is_instance`); anything else reads
    it as a value that is not None."""

    module: str
    qual: str

    def __repr__(self) -> str:
        return f"<a {self.qual.rpartition('.')[2]}>"


class PlatformProfile:
    """What the plugin's platform class answers, evaluated statically: ``info()`` (the platform classes and
    their facts), ``current_platform`` (the value of ``vllm.platforms.current_platform``), ``method_value`` /
    ``platform_attr`` (a platform method's or attribute's value) and ``evaluate`` (a guard's truth under the
    platform: True, False or None when decided at run time). Owned by the resolver, which it sees as a
    :class:`attnlens.lookup.Lookup`; outside the core reached through ``Query.platform_info`` and friends.
    """

    def __init__(self, resolver: Lookup):
        self.r = resolver
        self._info: PlatformInfo | None = None
        self._gen = -1
        self._memo: dict = {}
        self._ctx_memo: dict = {}  # guard key -> [(values being resolved that cut it, its value then)] (evaluate)
        self._active_eval: set = set()  # function results being evaluated (recursion guard)
        self._binds = None  # (module path, scope, {parameter: constant}) while value_of evaluates with binds
        self._line = None  # (module path, scope, line) while value_of evaluates a guard on that line (see value_of)
        self._both: dict = {}  # (class key, class key, generation) -> does a workspace class derive from both
        self._reads_local_memo: dict = {}  # (module path, sha, scope, text) -> does the text read a local (_reads_local)
        self._discovering = False  # (info is being found: _discover_apart)
        self._overrides: tuple | None = None  # (generation, config_overrides())
        self._return_nodes: dict = {}  # (path, sha, line) -> a return's expression parsed from the source

    # -- discovery -----------------------------------------------------------
    @property
    def info(self) -> PlatformInfo:
        if self._info is None or self._gen != self.r.index.generation:
            if self._discovering:
                return PlatformInfo()  # (asked again while it is found: nothing is known yet, nothing kept)
            self._info = self._discover_apart()
            self._gen = self.r.index.generation
            self._memo.clear()
            self._ctx_memo.clear()
        return self._info

    def _discover_apart(self) -> PlatformInfo:
        """:meth:`_discover`, apart from whatever the resolver is resolving when the profile is first asked (a guard
        or a call's argument deep in a trace), whose values would cut its lookups short as cycles: it is kept for
        the whole generation (:meth:`Resolver.apart`)."""
        self._discovering = True
        try:
            return self.r.apart(self._discover)
        finally:
            self._discovering = False

    def _discover(self) -> PlatformInfo:
        info = PlatformInfo()
        eps = read_entry_points(self.r.index.root).get(PLATFORM_PLUGIN_GROUP, {})
        if eps:
            name, value = sorted(eps.items())[0]
            info.entry = value.strip()
            info.entry_source = "pyproject.toml"
            modname, _, func = info.entry.partition(":")
            mod = self.r.index.module(modname.strip())
            if mod is None:
                info.error = f"entry point module {modname} not found"
                return info
            fv = self.r.attr_of_module(mod, func.strip(), Walk()) if func else None
            f = fv.func if fv is not None else None
            paths = []
            if f is not None and f.returns_const and isinstance(f.returns_const[1], str):
                paths = [f.returns_const[1]]
            elif f is not None:
                paths = [r.strip("'\"") for r in f.returns if r.startswith(("'", '"'))]
            info.class_paths = paths
        else:
            # fall back: a workspace class deriving from vllm's Platform
            # (only modules with a class statement whose bases spell Platform are summarised: upstream vLLM as
            # the workspace summarised the 11 modules before vllm.platforms.cpu that merely mention it; a `)`
            # in a comment between the class name and the base is the one spelling this text test misses)
            for m in self.r.index.workspace_modules_matching(rb"\bclass\s+[^\s(:]+\s*\([^)]*\bPlatform\b"):
                for q, c in m.summary.classes.items():
                    if any(b.rpartition(".")[2] == "Platform" for b in c.bases):
                        info.class_paths = [f"{m.name}.{q}"]
                        break
                if info.class_paths:
                    break
        classes = []
        for p in info.class_paths:
            v = self.r.resolve_symbol(p)
            if v.kind == ValKind.ALTS:  # `Platform = A if cond else B`: every candidate class
                classes.extend(a.val for a in v.extra["alts"] if a.val.kind == ValKind.CLASS)
            elif v.kind == ValKind.CLASS:
                classes.append(v)
        info.classes = classes
        enums = {self._class_enum(c) for c in classes}
        enums.discard(None)
        info.enum = enums.pop() if len(enums) == 1 else None
        if not classes and not info.error:
            info.error = "no platform class found (no vllm.platform_plugins entry point)"
        return info

    def _class_enum(self, cv) -> str | None:
        for c in self.r.mro(cv.module, cv.qual):
            ci = c.cls
            if ci is None:
                continue
            b = ci.attrs.get("_enum")
            if b is not None and b.target:
                return b.target.rpartition(".")[2]
        return None

    # -- values ----------------------------------------------------------
    def current_platform(self, w):
        info = self.info
        if not info.classes:
            return Val(ValKind.UNKNOWN, None, CURRENT_PLATFORM, reason=info.error or "no platform class")
        c = info.classes[0]
        return Val(ValKind.PLATFORM, c.module, c.qual, c.path, c.line, extra={"classes": [x.dotted for x in info.classes]})

    def platform_attr(self, name: str, w):
        info = self.info
        found = []
        for cv in info.classes:
            v = self.r.class_attr(cv.module, cv.qual, name, w.__class__())
            if v is not None:
                found.append(v)
        if not found:
            return Val(ValKind.UNKNOWN, None, f"current_platform.{name}", reason=f"platform has no `{name}`")
        v = found[0]
        if v.kind == ValKind.FUNCTION and info.classes:
            c0 = info.classes[0]
            v.extra = dict(v.extra, receiver=(c0.module, c0.qual))
        if v.kind == ValKind.FUNCTION and v.module is not None:
            names = sorted({x.dotted for x in found})
            w.add(Hop(HopKind.PLATFORM, v.path or "", v.line or 0, v.dotted,
                      f"current_platform is {' / '.join(c.dotted for c in info.classes)}; `{name}` defined in {v.owner or v.dotted}" + (f" (varies: {', '.join(names)})" if len(names) > 1 else "")))
        return v

    def method_value(self, name: str, args: tuple = ()):
        """Constant value of ``current_platform.name(...)``, or None when unknown."""
        key = ("m", name, args)
        if key in self._memo:
            return self._memo[key]
        mark = self.r.cut_mark()
        vals = set()
        unknown = False
        for cv in self.info.classes:
            v = self.r.class_attr(cv.module, cv.qual, name, Walk())
            if v is None or v.kind != ValKind.FUNCTION:
                unknown = True
                continue
            val = self._eval_method(v, self._class_enum(cv), cv)
            if val is None:
                unknown = True
            else:
                vals.add(val)
        res = vals.pop() if (len(vals) == 1 and not unknown) else None
        if self.r.clean_since(mark):
            self._memo[key] = res
        return res

    def _eval_method(self, v, enum: str | None, cv=None):
        f = v.func
        if f is None:
            return None
        if f.returns_const is not None:
            val = f.returns_const[1]
            return val if isinstance(val, (bool, int, str)) else None
        if len(f.returns) == 1 and enum is not None:
            text = self._return_source(v)
            if text:
                return self._eval_enum_expr(text, enum)
        return self._none_guarded_return(f, cv) if cv is not None else None

    def _none_guarded_return(self, f, cv):
        """The constant a platform method returns first when it starts by testing a sibling method's result for None
        and that sibling returns the constant None on platform class ``cv`` (vLLM's ``has_device_capability``:
        ``cap = cls.get_device_capability(...)``; ``if cap is None: return False``, on a platform without a
        capability); else None."""
        if not f.return_alts:
            return None
        text, guards, _line = f.return_alts[0]
        if len(guards) != 1 or guards[0][0] != "if" or not guards[0][1].endswith(" is None"):
            return None
        bs = f.locals.get(guards[0][1][: -len(" is None")], ())
        if len(bs) != 1 or bs[0].kind != "call" or not (bs[0].target or "").startswith(("cls.", "self.")) \
                or bs[0].target.count(".") != 1:
            return None
        sib = self.r.class_attr(cv.module, cv.qual, bs[0].target.partition(".")[2], Walk())
        g = sib.func if sib is not None and sib.kind == ValKind.FUNCTION else None
        if g is None or g.returns_const is None or g.returns_const[1] is not None or any(
                d.func.rpartition(".")[2] not in ("classmethod", "staticmethod") for d in g.decorators):
            return None  # (overridden, computed, or wrapped by a decorator that may change what it returns)
        try:
            val = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return None
        return val if isinstance(val, (bool, int, str)) else None

    def _return_source(self, v) -> str | None:
        src = self.r.index.source_text(v.module.path)
        if src is None:
            return None
        f = v.func
        lines = src.splitlines()[f.line - 1 : f.end_line]
        m = re.search(r"return\s+(self|cls)\._enum\s*(==|!=|in|not in)\s*(.+)", "\n".join(lines))
        return m.group(0)[len("return "):].strip() if m else None

    def _eval_enum_expr(self, text: str, enum: str):
        m = re.match(r"(self|cls)\._enum\s*(==|!=|not in|in)\s*(.+)$", text)
        if not m:
            return None
        op, rhs = m.group(2), m.group(3).strip()
        members = re.findall(r"PlatformEnum\.([A-Z_0-9]+)", rhs)
        if not members:
            return None
        if op == "==":
            return enum == members[0]
        if op == "!=":
            return enum != members[0]
        if op == "in":
            return enum in members
        return enum not in members

    # -- guard evaluation ----------------------------------------------------
    def evaluate(self, mod, scope: str, text: str, binds: tuple = (), line: int | None = None):
        """True / False when the profile decides guard ``text`` (code in function ``scope`` of ``mod``), else None.
        ``binds``: ((parameter, constant), ...) of ``scope``'s parameters that the call being followed fixes (its
        arguments, or the defaults it leaves): a guard on them is decided for that call. ``line``: where the guard
        is (see :meth:`value_of`)."""
        val = self.value_of(mod, scope, text, binds, line)
        return val if isinstance(val, bool) else (bool(val) if isinstance(val, (int, str)) or val is NONE_VALUE else None)

    def value_of(self, mod, scope: str, text: str, binds: tuple = (), line: int | None = None):
        """The constant expression ``text`` has in ``scope`` on this platform (a bool, int or str; a
        parameter in ``binds`` has its bound value), else None. ``line``: the line the expression is read on; it
        matters where the text reads a local of the function (``x = f(); if x.ok(): x = g(x)``: the ``if``
        reads the ``x`` bound before it; read without its line, it read the last ``x``, which is made from the
        one the ``if`` reads, and upstream vLLM's `prepare_fp8_layer_for_marlin` took 0.4 s of such cycles)."""
        if mod is None or not text:
            return None
        if binds:
            binds = tuple(b for b in binds if b[0] in text)
        if line is not None and not self._reads_local(mod, scope, text):
            line = None
        key = (mod.name, scope, text, binds) if binds else (mod.name, scope, text)
        if line is not None:
            key += (line,)
        if key in self._memo and self._gen == self.r.index.generation:
            return self._memo[key]
        _ = self.info
        node = parse_guard(text)
        if node is None:
            return None
        # a value cut at values being resolved above it is memoised with them, for where they are (Resolver.outside_since)
        for deps, res in self._ctx_memo.get(key, ()):
            if self.r.replay_cuts(deps):
                return res
        mark = self.r.cut_mark()
        saved, self._binds = self._binds, ((mod.path, scope, dict(binds)) if binds else None)
        saved_line, self._line = self._line, ((mod.path, scope, line) if line is not None else None)
        try:
            val = self._eval(mod, scope, node, 0)
        except RecursionError:
            val = None
        finally:
            self._binds = saved
            self._line = saved_line
        res = val if isinstance(val, (bool, int, str)) or val is NONE_VALUE else None
        deps = self.r.outside_since(mark)
        if deps is not None and not deps:
            self._memo[key] = res
        elif deps:
            alts = self._ctx_memo.setdefault(key, [])
            if len(alts) < 8:
                alts.append((deps, res))
        return res

    def _reads_local(self, mod, scope: str, text: str) -> bool:
        """Does ``text`` (an expression in function ``scope``) read a local of the function (a name it binds: which
        binding the text reads depends on the line; a parameter bound again reads as the parameter above it)?"""
        if not scope:
            return False
        key = (mod.path, mod.sha, scope, text)
        hit = self._reads_local_memo.get(key)
        if hit is None:
            if len(self._reads_local_memo) > 20000:
                self._reads_local_memo.clear()
            node = parse_guard(text)
            hit = node is not None and any(self._local_owner(mod, scope, n.id) is not None
                                           for n in ast.walk(node) if isinstance(n, ast.Name))
            self._reads_local_memo[key] = hit
        return hit

    @staticmethod
    def _fixed_in(state, mod, scope):
        """What ``value_of`` fixed (``_binds``: {parameter: value}; ``_line``: the guard's line) when the code being
        evaluated is in ``scope`` of ``mod``, else None (a binding of another function folded on the way)."""
        return state[2] if state is not None and state[0] == mod.path and state[1] == scope else None

    def _line_in(self, mod, scope) -> int | None:
        """The line of the guard being evaluated, when it is in ``scope`` of ``mod`` (value_of)."""
        return self._fixed_in(self._line, mod, scope)

    def _eval(self, mod, scope, node, depth):
        if depth > 8:
            return None
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == "TYPE_CHECKING":
                return False
            v = self._fold_name(mod, scope, node.id, depth)
            return None if v is SOME_VALUE else v
        if isinstance(node, ast.Attribute):
            d = _dotted(node)
            if d and d.endswith("TYPE_CHECKING"):
                return False
            if d and d.count(".") == 1 and d.startswith("self.") and scope:
                return self._fold_self_attr(mod, scope, d[5:], depth)
            return None
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self._eval(mod, scope, node.operand, depth + 1)
            return None if v is None else (not v)
        if isinstance(node, ast.BoolOp):
            vals = [self._eval(mod, scope, x, depth + 1) for x in node.values]
            if isinstance(node.op, ast.And):
                if any(v is not None and not v for v in vals):
                    return False
                return True if all(v is not None and bool(v) for v in vals) else None
            if any(v is not None and bool(v) for v in vals):
                return True
            return False if all(v is not None and not v for v in vals) else None
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            forced = self._forced_compare(node)
            if forced is not None:
                return forced
            op = node.ops[0]
            right = node.comparators[0]
            if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None \
                    and isinstance(node.left, ast.Name) and self._fold_name(mod, scope, node.left.id, depth + 1) is SOME_VALUE:
                return isinstance(op, ast.IsNot)
            a = self._eval(mod, scope, node.left, depth + 1)
            if isinstance(op, (ast.Is, ast.IsNot)) and isinstance(right, ast.Constant) and right.value is None \
                    and (a is NONE_VALUE or isinstance(a, (bool, int, str))):
                return (a is NONE_VALUE) == isinstance(op, ast.Is)  # (a parameter a call bound: see NONE_VALUE)
            b = self._eval(mod, scope, right, depth + 1)
            if a is None or b is None or a is NONE_VALUE or b is NONE_VALUE:
                return None
            if isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
                return None  # identity and membership are not folded (only what _forced_compare decides)
            try:
                return _compare(op, a, b)
            except TypeError:
                return None
        if isinstance(node, ast.Call):
            d = _dotted(node.func)
            if not d:
                return None
            if d == "isinstance" and len(node.args) == 2 and not node.keywords and isinstance(node.args[0], ast.Name):
                inst = (self._fixed_in(self._binds, mod, scope) or {}).get(node.args[0].id)
                if isinstance(inst, InstanceOf):
                    return self.is_instance(mod, scope, inst, node.args[1])
            return self._eval_call(mod, scope, d, node)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Call) and isinstance(node.slice, ast.Constant):
            # f()[0] where f returns a constant tuple
            d = _dotted(node.value.func)
            if d:
                v = self.r.resolve_dotted(mod, scope, d, Walk(), line=self._line_in(mod, scope))
                f = v.func if v.kind == ValKind.FUNCTION else None
                if f is not None and len(f.returns) == 1 and f.returns[0].startswith("["):
                    try:
                        val = ast.literal_eval(f.returns[0])
                        return val[node.slice.value]
                    except (ValueError, SyntaxError, IndexError, TypeError, KeyError):
                        return None
            return None
        return None

    # -- settings the platform forces onto the config ---------------------------
    def config_overrides(self) -> dict:
        """``{target text: value text}`` of what the platform class's ``check_and_update_config`` (vLLM calls it
        on the config before any layer is built) writes onto config objects: ``attention_config.x = Enum.M``,
        once, unconditionally or under ``if name := <the object>`` (the object exists). Memoised per generation."""
        gen = self.r.index.generation
        if self._overrides is not None and self._overrides[0] == gen:
            return self._overrides[1]
        self._overrides = (gen, {})  # guards evaluated below see none (no recursion)
        out: dict = {}
        seen: dict = {}
        done: set = set()
        for cv in self.info.classes:
            fv = self.r.class_attr(cv.module, cv.qual, "check_and_update_config", Walk())
            f = fv.func if fv is not None else None
            if f is None or fv.module is None or not fv.module.workspace or (fv.module.path, f.qualname) in done:
                continue
            done.add((fv.module.path, f.qualname))
            for target, value, line, guards in f.attr_sets:
                root = target.split(".", 1)[0]
                ok = all(k == "if" and t.replace(" ", "").startswith(root + ":=") or
                         (k in ("if", "else") and self.r.guard_value(fv.module, ((k, t, ln),), f.qualname) is True)
                         for k, t, ln in guards)
                seen[target] = seen.get(target, 0) + 1
                if ok:
                    out[target] = (value, fv.module.path, line)
        out = {t: v for t, v in out.items() if seen[t] == 1}  # written twice: which one holds is not static
        self._overrides = (gen, out)
        return out

    def _forced_compare(self, node):
        """``x.attr is Enum.M`` / ``== ...`` / ``is not None`` where the platform forces ``attr`` (see
        config_overrides): True or False; None when nothing is forced there."""
        op = node.ops[0]
        if not isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)):
            return None
        d = _dotted(node.left)
        overrides = self.config_overrides() if d and "." in d else {}
        hit = next((v for t, v in overrides.items() if d == t or d.endswith("." + t)), None)
        if hit is None:
            return None
        value = hit[0]
        right = node.comparators[0]
        if isinstance(right, ast.Constant):
            try:
                same = ast.literal_eval(value) == right.value
            except (ValueError, SyntaxError):
                same = False  # an enum member or a name: never None, never equal to a literal
        else:
            rd = _dotted(right)
            if not rd or "." not in rd or "." not in value:
                return None
            same = rd.split(".")[-2:] == value.split(".")[-2:]
        return same if isinstance(op, (ast.Is, ast.Eq)) else not same

    # -- constant folding of names ----------------------------------------------
    def _fold_binding(self, mod, scope, b, depth):
        """The constant a single binding holds: a literal, or a call of a constant-returning function.
        A binding under guards is folded only when every guard is the far side of an
        ``if c: raise`` (the object does not exist otherwise)."""
        if b.scope:
            return None
        if b.guards:
            f = mod.summary.functions.get(scope) if scope else None
            if f is None or not all(k == "else" and ln in f.raise_ifs for k, _t, ln in b.guards):
                return None
        if b.kind == "other" and b.target:
            return constant_of(b.target)
        if b.kind == "assign" and b.target and depth < 6:
            # `self.allow_x = can_use_x` (a local of the method, or a name of the module): folds as that name does
            node = parse_guard(b.target)
            return self._eval(mod, scope, node, depth + 1) if node is not None else None
        if b.kind == "call" and b.target and not b.alternatives:
            return self._eval_call(mod, scope, b.target, ast.Call(func=ast.Name(id="_"), args=[], keywords=[]))
        if b.kind == "other" and b.str_args and b.str_args[0]:
            # `self.x = <boolean expression>`: folded when the profile decides the expression
            return self.evaluate(mod, scope, b.str_args[0])
        return None

    def is_instance(self, mod, scope: str, inst: InstanceOf, spec: ast.expr) -> bool | None:
        """``isinstance(obj, spec)`` (``spec`` a class name, or a tuple of them, read in ``scope`` of ``mod``) for an
        object of class ``inst`` or of one of its subclasses: True when a class of ``spec`` is in the class's MRO; False
        when each is unrelated to it (neither in its MRO nor a subclass of it, both MROs known to their roots, and no
        workspace class that names one of the two among its bases derives from both); else None (decided at run
        time: the object may be of a subclass that is one)."""
        elts = spec.elts if isinstance(spec, ast.Tuple) else [spec]
        texts = [_dotted(e) for e in elts]
        cmod = self.r.index.module(inst.module)
        if not texts or not all(texts) or cmod is None or inst.qual not in cmod.summary.classes:
            return None
        c_keys, c_open = self._class_line(cmod, inst.qual)
        answer: bool | None = False
        for t in texts:
            xv = self.r.resolve_dotted(mod, scope, t, Walk())
            if xv.kind != ValKind.CLASS or xv.module is None or xv.qual not in xv.module.summary.classes:
                return None
            if (xv.module.name, xv.qual) in c_keys:
                return True
            if answer is None:
                continue
            x_keys, x_open = self._class_line(xv.module, xv.qual)
            # (a base that does not resolve is of a package neither class is from: a class of it is no subclass of theirs)
            pkgs = {inst.module.partition(".")[0], xv.module.name.partition(".")[0]}
            if c_open is None or x_open is None or pkgs & (c_open | x_open) or (inst.module, inst.qual) in x_keys \
                    or self._derives_from_both(cmod, inst.qual, xv.module, xv.qual):
                answer = None
        return answer

    def _class_line(self, mod, cq: str) -> tuple[set, set | None]:
        """(the (module, qualname) of each class in the MRO of ``cq``, the packages of the bases on the way that do not
        resolve to a class: `nn.Module` where torch is not installed in the target; None when one has no package, is of
        the package of the class that names it, or the MRO is longer than its bound)."""
        line = self.r.mro(mod, cq)
        open_pkgs: set | None = set() if len(line) < 30 else None
        for v in line:
            if v.module is None or open_pkgs is None:
                continue
            for b in self.r.class_bases(v.module, v.qual):
                if b.kind != ValKind.CLASS:
                    pkg = (b.qual or "").partition(".")[0]
                    if not pkg or pkg == v.module.name.partition(".")[0]:
                        open_pkgs = None
                        break
                    open_pkgs.add(pkg)
        return {(v.module.name, v.qual) for v in line if v.module is not None}, open_pkgs

    def _derives_from_both(self, amod, aq: str, bmod, bq: str) -> bool:
        """Does a workspace class whose bases name one of the two classes (by its last name) have both in its MRO?"""
        key = ((amod.name, aq), (bmod.name, bq), self.r.index.generation)
        hit = self._both.get(key)
        if hit is not None:
            return hit
        keys = {(amod.name, aq), (bmod.name, bq)}
        hit = any(keys <= {(v.module.name, v.qual) for v in self.r.mro(m, cq) if v.module is not None}
                  for short in (aq.rpartition(".")[2], bq.rpartition(".")[2])
                  for m in self.r.index.workspace_modules_matching(rb"class\s+\w+\s*\([^)]*\b" + re.escape(short).encode() + rb"\b")
                  for cq, c in m.summary.classes.items() if any(b.rpartition(".")[2] == short for b in c.bases))
        if len(self._both) > 4096:
            self._both.clear()
        self._both[key] = hit
        return hit

    def _fold_name(self, mod, scope, name, depth):
        # (a parameter fixed by the call being followed, Resolver.call_binds, or a boolean local an object's flag
        # stored, Resolver.refined_at_call)
        fixed = self._fixed_in(self._binds, mod, scope)
        if fixed is not None and name in fixed:
            v = fixed[name]
            return SOME_VALUE if isinstance(v, InstanceOf) else v
        how, bindings = mod.summary.binding_of(scope, name)
        if how == "param":
            return None
        if how == "local":
            return self._fold_local(mod, scope, name, bindings, depth)
        if how != "module" or len(bindings) != 1:
            return None
        return self._fold_binding(mod, "", bindings[0], depth)

    def _fold_local(self, mod, scope, name, bindings, depth):
        """A local of ``scope`` (or of an enclosing function) whose every binding folds to the same constant.
        A loop, ``with``/``except ... as``, walrus, augmented or ``nonlocal`` assignment is a binding of the
        summary that folds to nothing, so such a local is never folded."""
        if not bindings or len(bindings) > 4:
            return None
        owner = self._local_owner(mod, scope, name)
        return self._fold_alike(mod, [(owner.qualname, b) for b in bindings], depth + 1) if owner is not None else None

    @staticmethod
    def _local_owner(mod, scope, name):
        q = scope
        while q:
            f = mod.summary.functions.get(q)
            if f is not None and name in f.locals:
                return f
            q = q.rpartition(".")[0]
        return None

    def _fold_reassigned_attr(self, mod, cls_q, name, depth):
        """``self.x`` assigned in several methods of the class: folded when every assignment folds to the
        same constant in its method."""
        c = mod.summary.classes.get(cls_q)
        if c is None or name not in c.inst_attrs or depth >= 6:
            return None
        return self._fold_alike(mod, [(b.attr or "", b) for b in (c.inst_attrs[name],) + c.inst_more.get(name, ())], depth + 1)

    def _fold_alike(self, mod, scoped, depth):
        """The constant every ``(scope, binding)`` folds to alike, else None. Guards are set aside: whichever
        assignment runs, the value is the same; but an assignment under a guard this platform decides False never
        runs and is left out (`self.allow_x = False`, then `if can_use_cuda_kernels: self.allow_x = ...`). A plain
        name or attribute (``x = y``) folds as ``y`` does."""
        vals = []
        for q, b in scoped:
            if b.guards and len(scoped) > 1 and self._never_runs(mod, q, b.guards, depth):
                continue
            v = self._fold_binding(mod, q, dataclasses.replace(b, guards=()), depth)
            if v is None:
                return None
            vals.append(v)
        return vals[0] if vals and all(v == vals[0] for v in vals) else None

    def _never_runs(self, mod, q, guards, depth) -> bool:
        """Does one of ``guards`` (of code in function ``q``) fold to the side that skips the code?"""
        if depth >= 6:
            return False
        for kind, text, _line in guards:
            if kind not in ("if", "else"):
                continue
            node = parse_guard(text)
            v = self._eval(mod, q, node, depth + 1) if node is not None else None
            if (v is NONE_VALUE or isinstance(v, (bool, int, str))) and bool(v) != (kind == "if"):
                return True  # (NONE_VALUE is falsy)
        return False

    def _fold_self_attr(self, mod, scope, name, depth):
        """``self.x`` assigned exactly once (in ``__init__``) to a constant, in the class or its bases."""
        cls_q = self.r.enclosing_class(mod, scope)
        if cls_q is None:
            return None
        for cv in self.r.mro(mod, cls_q):
            c = cv.cls
            if c is None or cv.module is None:
                continue
            if name in c.reassigned:
                return self._fold_reassigned_attr(cv.module, cv.qual, name, depth)
            b = c.inst_attrs.get(name)
            if b is not None:
                if not (b.attr or "").endswith("__init__"):
                    return None
                return self._fold_binding(cv.module, b.attr or "", b, depth)
            if name in c.attrs:
                return self._fold_binding(cv.module, "", c.attrs[name], depth)
        return self._fold_subclass_attr(mod, cls_q, name, depth)

    def _fold_subclass_attr(self, mod, cls_q, name, depth):
        """``self.x`` read in a base class and set by its subclasses: folded when every workspace
        subclass sets it exactly once, in ``__init__``, to values that fold to the same constant."""
        key = ("subattr", mod.name, cls_q, name)
        if key in self._active_eval:
            return None
        self._active_eval.add(key)
        try:
            vals = []
            for m in self.r.index.workspace_modules_matching(rb"self\." + re.escape(name).encode() + rb"\s*(:[^=]*)?="):
                for q, _line, _methods, attrs in self.r.index.class_facts(m):
                    if name not in attrs or (m.name, q) == (mod.name, cls_q):
                        continue
                    if not any(x.module is not None and (x.module.name, x.qual) == (mod.name, cls_q) for x in self.r.mro(m, q)[1:]):
                        continue
                    c = m.summary.classes[q]
                    b = c.inst_attrs[name]
                    if name in c.reassigned or not (b.attr or "").endswith("__init__"):
                        return None
                    v = self._fold_binding(m, b.attr or "", b, depth)
                    if v is None:
                        return None
                    vals.append(v)
            return vals[0] if vals and all(v == vals[0] for v in vals) else None
        finally:
            self._active_eval.discard(key)

    def _eval_call(self, mod, scope, d: str, node: ast.Call):
        parts = d.split(".")
        w = Walk()
        line = self._line_in(mod, scope)
        if len(parts) >= 2:
            base = self.r.resolve_dotted(mod, scope, ".".join(parts[:-1]), w, line=line)
            if base.kind == ValKind.PLATFORM:
                args = tuple(a.value for a in node.args if isinstance(a, ast.Constant))
                return self.method_value(parts[-1], args)
        v = self.r.resolve_dotted(mod, scope, d, w, line=line)
        if v.dotted == "importlib.util.find_spec" and len(node.args) == 1 and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) and not node.keywords:
            # whether the package is installed in the target interpreter (a spec, or None)
            return True if self.r.index.locate(node.args[0].value) is not None else NONE_VALUE
        if v.kind == ValKind.FUNCTION and v.module is not None and not v.module.workspace and not v.extra.get("unpatched"):
            p = self.r.patched(v)
            if p is not None:  # the plugin replaced it (`mod.f = lambda: False`): the replacement answers
                return self._replaced_result(p[0])
        return self._called_result(v)

    def _called_result(self, v):
        if v.kind == ValKind.FUNCTION and v.func is not None and v.module is not None:
            key = ("result", v.module.name, v.qual)
            if key in self._active_eval:
                return None  # a recursive function: its result is not a constant
            self._active_eval.add(key)
            try:
                return self._function_result(v)
            finally:
                self._active_eval.discard(key)
        return None

    def _replaced_result(self, rv):
        """The result of a replaced function: the replacement's, or (replacements under conditions) the one
        value every branch that can be taken gives."""
        if rv.kind != ValKind.ALTS:
            return self._called_result(rv)
        vals = [self._called_result(a.val) for a in rv.extra["alts"] if a.reachable is not False]
        return vals[0] if vals and all(x is not None and x == vals[0] for x in vals) else None

    def result_of(self, v) -> object | None:
        """What calling function ``v`` returns on this platform when the profile decides it (a bool,
        int or str constant), else None. Public face of the folding for rules that compare answers."""
        try:
            return self._called_result(v) if v is not None else None
        except RecursionError:
            return None

    def _function_result(self, v):
        """The value a call of ``v`` returns when the profile decides it: every return the same
        literal; the first return whose guards hold (earlier ones proven not taken); or False when a
        decorator runs the function only under a condition that is false here (it returns None)."""
        f, m = v.func, v.module
        for d in f.decorators:
            if self._decorator_gate(m, d) is False:
                return False  # the wrapper returns None without calling: falsy
        if f.returns_const is not None:
            val = f.returns_const[1]
            return val if isinstance(val, (bool, int, str)) or val is None else None
        for text, guards, line in f.return_alts:
            gv = self.r.guard_value(m, guards, f.qualname) if guards else True
            if gv is None:
                return None
            if gv is False:
                continue
            try:
                val = ast.literal_eval(text)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                val = self._computed_return(m, f, text, line)
            return val if isinstance(val, (bool, int, str)) else None
        return None

    def _return_node(self, m, f, line: int):
        """The expression of the ``return`` on ``line`` of function ``f``, parsed from the source (the summary keeps
        no text of a comparison: ``return find_spec("aiter") is not None``); None when there is none."""
        key = (m.path, m.sha, line)
        if key in self._return_nodes:
            return self._return_nodes[key]
        node = None
        tree, _src = function_tree(self.r.index.source_text(m.path) or "", f.line, f.end_line)
        for n in ast.walk(tree) if tree is not None else ():
            if isinstance(n, ast.Return) and n.value is not None and n.lineno == line - f.line + 1:
                node = n.value
                break
        if len(self._return_nodes) > 4096:
            self._return_nodes.clear()
        self._return_nodes[key] = node
        return node

    def _computed_return(self, m, f, text: str, line: int):
        """The constant a return that is not a literal gives: a call the profile decides (``return
        current_platform.is_cuda()``; the summary keeps no text of other expressions), or a module global the
        function fills once and returns
        (``if _G is None: _G = <expr>`` ... ``return _G``: the value every filling gives). None when unknown."""
        node = parse_guard(text) if text else self._return_node(m, f, line)
        if node is None:
            return None
        if not isinstance(node, ast.Name):
            return self._eval(m, f.qualname, node, 1) if isinstance(node, (ast.Call, ast.Compare, ast.BoolOp, ast.UnaryOp)) else None
        how, bindings = m.summary.binding_of(f.qualname, node.id)
        if how != "module" or len(bindings) < 2:
            return None
        empty = [b for b in bindings if not b.scope and b.kind == "other" and b.target == "None" and not b.guards]
        fills = [b for b in bindings if b.scope]
        if len(empty) != 1 or len(empty) + len(fills) != len(bindings):
            return None
        unset = (("if", f"{node.id} is None"),)
        if not any(b.scope == f.qualname and b.line < line and tuple(g[:2] for g in b.guards) == unset for b in fills):
            return None  # (this function does not fill it before it returns it: it may return the None)
        vals = set()
        for b in fills:
            if b.guards and tuple(g[:2] for g in b.guards) != unset:
                return None
            v = self._fold_binding(m, b.scope, dataclasses.replace(b, guards=(), scope=""), 1)  # (as a local's filling)
            if not isinstance(v, (bool, int, str)):
                return None
            vals.add(v)
        return vals.pop() if len(vals) == 1 else None

    def _decorator_gate(self, m, d):
        """False when decorator ``d`` wraps the function in a closure that calls it only under a
        guard the profile proves false (and otherwise returns None); else None (unknown/no gate)."""
        if not d.func or d.is_call or is_passthrough(d.func):
            return None
        dv = self.r.resolve_dotted(m, "", d.func, Walk())
        df = dv.func if dv.kind == ValKind.FUNCTION else None
        if df is None or dv.module is None or not df.params or not df.inner_defs:
            return None
        param = df.params[0].name
        for q in df.inner_defs:
            inner = dv.module.summary.functions.get(q)
            if inner is None:
                continue
            calls = [(g, ln) for t, g, ln in inner.return_alts if t == f"{param}()"]
            nones = [ln for t, g, ln in inner.return_alts if t == "None"]
            if len(calls) == 1 and calls[0][0] and nones:
                return False if self.r.guard_value(dv.module, calls[0][0], inner.qualname) is False else None
        return None

    def summary(self) -> dict:
        info = self.info
        facts = {}
        for name in ("is_out_of_tree", "is_cuda", "is_rocm", "is_cuda_alike", "is_device_capability_family"):
            facts[name] = self.method_value(name)
        return {
            "entry_point": info.entry, "classes": [c.dotted for c in info.classes], "enum": info.enum,
            "facts": facts, "error": info.error,
        }


_GUARDS: dict = {}  # guard text -> parsed expression: a pure function of the text, bounded (5,000: 20,000 held 7 MB of
# upstream vLLM `sites` peak for no time measurable)


@functools.lru_cache(maxsize=4096)
def constant_of(text: str):
    """The bool, int or str a literal's text evaluates to, else None. Memoised: ``ast.literal_eval`` makes a
    cycle of closures per call, which a CLI run with the collector off never frees (7,000 calls in an upstream
    vLLM `sites`)."""
    try:
        val = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return val if isinstance(val, (bool, int, str)) else None


def parse_guard(text: str):
    """Parsed guard expressions, memoised by text (the same guard appears in many scopes)."""
    node = _GUARDS.get(text, False)
    if node is False:
        try:
            node = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            node = None
        if len(_GUARDS) > 5000:
            _GUARDS.clear()
        _GUARDS[text] = node
    return node


from .pyindex import compare as _compare, dotted as _dotted, function_tree, is_passthrough  # one comparison table, one dotted()
