"""The registry view: every backend the plugin registers, and what it reaches.

Registrations are recognised by what their callee *resolves to*, not by
name alone: a call or class decorator whose callee resolves to an upstream
function named ``register_*backend`` (vLLM's ``register_backend`` and
``register_mla_prefill_backend``), and ``@<CustomOp>.register_oot(...)``
class decorators (out-of-tree CustomOp replacements such as a sparse
attention indexer). The enum member argument gives the upstream default
class path (the *upstream counterpart*), read from the installed vLLM's enum
class body.
"""

from __future__ import annotations

import ast
import os
import re
import time
from dataclasses import asdict, dataclass, field

from . import model as M
from .model import HopKind
from .pyindex import super_method, triton_decorated
from .walk import Val, ValKind, Walk

REGISTRAR = re.compile(r"^register_\w*backend$")
REGISTRAR_TEXT = rb"register_\w*backend"  # a source text without it calls no registrar by name
PART_METHODS = (("impl", "get_impl_cls"), ("builder", "get_builder_cls"))


def _candidates(s) -> tuple[list, list]:
    """The calls (in order) and the (class, decorator call) pairs of summary ``s`` whose callee's last name
    is a registrar's (``REGISTRAR``): the only ones ``Registry.scan_registrations`` resolves."""
    calls = [cs for cs in s.calls if cs.func and REGISTRAR.match(cs.func.rpartition(".")[2])]
    decos = [(q, d) for q, c in s.classes.items() for d in c.decorators
             if d.is_call and REGISTRAR.match(d.func.rpartition(".")[2])]
    return calls, decos


@dataclass
class ClassRef:
    cls: str | None
    path: str | None
    line: int | None
    inherited_from: str | None = None  # the method that returned it lives upstream
    note: str | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k in ("cls", "path", "line")} | {"class": self.cls}


@dataclass
class CallSiteResult:
    path: str
    line: int
    col: int
    call: str
    scope: str
    chain: M.Chain

    def to_json(self) -> dict:
        leaves = self.chain.leaves()
        live = [lf for lf in leaves if lf.reachable is not False]
        return {"path": self.path, "line": self.line, "col": self.col + 1, "call": self.call, "scope": self.scope,
                "final": (live[0].final if len(live) == 1 else self.chain.final).to_json(), "reachable": self.chain.reachable,
                "hops": len(self.chain.hops), "leaves": [lf.to_json() for lf in leaves],
                "truncated": self.chain.truncated()}


@dataclass
class BackendEntry:
    name: str
    kind: str  # attention | mla_prefill | custom_op
    enum: str | None
    cls: str
    path: str | None
    line: int | None
    registered_at: list[dict] = field(default_factory=list)
    impl: ClassRef | None = None
    builder: ClassRef | None = None
    metadata: ClassRef | None = None
    upstream: ClassRef | None = None
    call_sites: list[CallSiteResult] = field(default_factory=list)
    error: str | None = None
    selected: list[dict] = field(default_factory=list)  # get_attn_backend_cls returns that name this class
    warnings: list[str] = field(default_factory=list)
    loads: bool = True  # False when the backend's module cannot be imported with the installed vLLM

    def to_json(self) -> dict:
        return {
            "name": self.name, "kind": self.kind, "enum": self.enum, "class": self.cls, "path": self.path,
            "line": self.line, "registered_at": self.registered_at,
            "impl": self.impl.to_json() if self.impl else None,
            "builder": self.builder.to_json() if self.builder else None,
            "metadata": self.metadata.to_json() if self.metadata else None,
            "upstream": self.upstream.to_json() if self.upstream else None,
            "call_sites": [c.to_json() for c in self.call_sites],
            "error": self.error,
            "selected": self.selected,
            "warnings": self.warnings,
            "loads": self.loads,
        }


def _kw(cs_or_deco, name):
    for k, v in cs_or_deco.kw_texts:
        if k == name:
            return v
    return None


def _str(text: str | None) -> str | None:
    if not text:
        return None
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return v if isinstance(v, str) else None


class Registry:
    """The plugin's backend registrations and what vLLM would select: ``entries`` (one
    :class:`BackendEntry` per registered or selectable backend and custom op, with its parts, upstream
    counterpart, selection conditions and whether its module loads), ``scan_registrations``,
    ``broken_imports`` (the module-level imports that fail against the installed packages),
    ``call_sites_of_class`` / ``kernel_call`` (the kernel call sites of a backend's classes). Built on a
    resolver per request; outside the core reached through ``Query.backends`` / ``Query.kernel_sites``.
    """

    def __init__(self, resolver, keep_chains: bool = True):
        self.r = resolver
        # ``keep_chains``: keep each traced site's chain for the next request (an editor asks again after every
        # keystroke); a batch that traces every site once (`attnlens sites`) does not
        self.keep_chains = keep_chains
        self._registrar_params: dict = {}  # registrar dotted name -> its positional parameter names

    def _is_registrar(self, mod, scope: str, func: str, line: int) -> str | None:
        last = func.rpartition(".")[2]
        if not REGISTRAR.match(last):
            return None
        v = self.r.resolve_dotted(mod, scope, func, Walk(), line=line)
        if v.kind == ValKind.FUNCTION and v.module is not None and REGISTRAR.match(v.qual.rpartition(".")[2]):
            self._registrar_params[v.dotted] = [p.name for p in v.func.params if p.kind in ("posonly", "pos")] if v.func else []
            return v.dotted
        if v.kind == ValKind.NOT_INSTALLED:
            return func  # upstream missing: still a registration, resolved later as unresolved
        return None

    def _positional(self, registrar: str, arg_texts: tuple, str_args: tuple, kw_texts: tuple) -> dict:
        """The registrar's arguments by parameter name, read with the installed vLLM's signature."""
        names = self._registrar_params.get(registrar) or ["backend", "class_path"]
        out = {}
        for i, text in enumerate(arg_texts):
            if i < len(names):
                out[names[i]] = (text, str_args[i] if i < len(str_args) else None)
        for k, text in kw_texts:
            out[k] = (text, _str(text))
        return out

    def entries(self, with_call_sites: bool = True, include_custom_ops: bool = True) -> list[BackendEntry]:
        out = self.scan_registrations()
        if include_custom_ops:
            from .customops import collect

            for reg in collect(self.r):
                key = ("custom_op", reg.name)
                prev = out.get(key)
                e = BackendEntry(reg.name, "custom_op", None, reg.replacement.dotted, reg.replacement.path,
                                 reg.replacement.line)
                e.registered_at.append({"path": reg.path, "line": reg.line, "form": reg.form})
                # the counterpart is the class it replaces: the base in its MRO named like the registration
                same = [b for b in self.r.mro(reg.replacement.module, reg.replacement.qual)[1:]
                        if b.qual.rpartition(".")[2] == reg.name and b.module is not None and not b.module.workspace]
                if same:
                    e.upstream = ClassRef(same[0].dotted, same[0].path, same[0].cls.line if same[0].cls else same[0].line)
                elif reg.base is not None and reg.base.qual not in ("CustomOp", "PluggableLayer"):
                    e.upstream = ClassRef(reg.base.dotted, reg.base.path, reg.base.line)
                else:
                    e.upstream = self._custom_op_upstream(reg.replacement.module, reg.replacement.qual)
                if prev is not None:
                    e.error = (f"{reg.name} is registered twice ({prev.cls} and {e.cls}); vLLM asserts on a duplicate "
                               "op name at import time")
                out[key] = e
        self._add_selected(out)
        self._add_exported_selectors(out)
        entries = sorted(out.values(), key=lambda e: (e.kind != "attention", e.kind, e.name))
        for e in entries:
            self._fill(e, with_call_sites)
        return entries

    def scan_registrations(self) -> dict:
        """(kind, member) -> BackendEntry of the backend registrations alone (no selection, no parts): what the
        resolver needs to know which class an enum member names (``Resolver.enum_overrides``)."""
        out: dict[tuple, BackendEntry] = {}
        idx = self.r.index
        # only modules whose text spells a registrar's name (REGISTRAR): a call or decorator is a candidate by that
        # name, so the others cannot register anything (summarising every module made the first hover on upstream
        # vLLM, 2,234 modules, wait 16-20 s; 7 of them spell it)
        for mod in idx.workspace_modules_matching(REGISTRAR_TEXT):
            # the calls and class decorators named like a registrar, kept per file text: after a keystroke
            # the scan of every workspace module's calls was 30-60 ms of each first request (real checkout)
            calls, decos = idx.per_text(mod.path, "registry.registrar_candidates", lambda _t, m=mod: _candidates(m.summary))
            for cs in calls:
                reg = self._is_registrar(mod, cs.scope, cs.func, cs.line)
                if reg is None:
                    continue
                enum_text = _kw(cs, "backend") or (cs.arg_texts[0] if cs.arg_texts else None)
                class_path = _str(_kw(cs, "class_path")) or (cs.str_args[1] if len(cs.str_args) > 1 else None)
                if not class_path:
                    continue  # a decorator factory call is handled with the class
                self._add(out, mod, cs.scope, reg, enum_text, class_path, cs.line, "call")
            for q, d in decos:
                reg = self._is_registrar(mod, "", d.func, d.line)
                if reg is not None:
                    args = self._positional(reg, d.arg_texts, d.str_args, d.kw_texts)
                    enum_text = (args.get("backend") or (None, None))[0]
                    given = args.get("class_path")
                    if given is not None and given[1]:
                        # the installed signature takes this string as the class path: vLLM stores it and
                        # returns a no-op decorator, so the decorated class itself is not registered
                        e = self._add(out, mod, "", reg, enum_text, given[1], d.line, "decorator")
                        e.warnings.append(
                            f"@{d.func}({enum_text}, \"{given[1]}\") at {os.path.basename(mod.path)}:{d.line}: the second "
                            f"positional argument is `class_path` in the installed vLLM, so \"{given[1]}\" is stored as the "
                            f"class path and {mod.name}.{q} is not registered")
                        continue
                    self._add(out, mod, "", reg, enum_text, f"{mod.name}.{q}", d.line, "decorator")
        return out

    def _add(self, out, mod, scope, registrar, enum_text, class_path, line, form) -> None:
        kind = "mla_prefill" if "mla_prefill" in registrar else "attention"
        member = enum_text.rpartition(".")[2] if enum_text else "?"
        key = (kind, member)
        e = out.get(key)
        if e is None:
            e = BackendEntry(member, kind, enum_text, class_path, None, None)
            out[key] = e
            e.upstream = self._upstream(mod, scope, enum_text, line)
        elif e.cls != class_path:
            first = e.registered_at[0] if e.registered_at else {}
            e.error = (f"{member} is registered twice: {e.cls} ({os.path.basename(first.get('path') or '?')}:{first.get('line')}) and "
                       f"{class_path} ({os.path.basename(mod.path)}:{line}); vLLM keeps the registration that runs last at import time")
        e.registered_at.append({"path": mod.path, "line": line, "form": form, "registrar": registrar})
        return e

    def _add_selected(self, out: dict) -> None:
        """Every class path the platform's selector can return, with the conditions that lead to it."""
        from .selection import Selector

        registered = {k[1]: e.cls for k, e in out.items() if k[0] == "attention"}

        def enum_paths(mod, scope, enum_text):
            member = enum_text.rpartition(".")[2]
            if member in registered:
                return registered[member]
            ref = self._upstream(mod, scope, enum_text, None)
            return ref.cls if ref is not None else None

        # carried across edits that neither the platform's classes nor what evaluating their selector read
        # (``Index.carried``): a paste into a backend module recomputed it (20-40 ms of a first request)
        plat = tuple(sorted({cv.module.name for cv in self.r.profile.info.classes if cv.module is not None}))
        try:
            cands = self.r.index.carried(
                ("registry.selector", plat, tuple(sorted(registered.items()))),
                lambda: Selector(self.r, enum_paths, sorted(registered.items())).candidates(), reads=plat)
        except RecursionError:
            return
        by_cls = {e.cls: e for k, e in out.items() if k[0] == "attention"}
        for c in cands:
            info = c.to_json()
            if c.class_path is None:
                e = out.setdefault(("attention", "?selector"), BackendEntry("?", "attention", None, "?", None, None))
                e.error = "the selector returns values that could not be read statically"
                e.selected.append(info)
                continue
            e = by_cls.get(c.class_path)
            if e is None:
                name = c.enum.rpartition(".")[2] if c.enum else c.class_path.rpartition(".")[2]
                e = BackendEntry(name, "attention", c.enum, c.class_path, None, None)
                if c.enum:
                    e.upstream = self._upstream_for_enum(c)
                out[("attention", f"selected:{c.class_path}")] = e
                by_cls[c.class_path] = e
            e.selected.append(info)

    def _add_exported_selectors(self, out: dict) -> None:
        """Registries that vLLM reads through a selector function of the registrar's package (the MLA prefill
        backends: ``get_mla_prefill_backend(vllm_config)``, exported next to ``register_mla_prefill_backend``):
        every class the selector can return, with the conditions of that path (an upstream class the plugin
        does not register becomes an entry of its own)."""
        kinds = {}
        for (kind, _m), e in list(out.items()):
            for reg in e.registered_at:
                if kind != "attention" and kind != "custom_op" and reg.get("registrar"):
                    kinds.setdefault(kind, reg["registrar"].rpartition(".")[0].rpartition(".")[0])
        for kind, package in kinds.items():
            if not package:
                continue
            found = self.r.index.carried(("registry.exported-selector", package),
                                         lambda package=package: self._exported_selector(package), reads=(package,))
            if found is None:
                continue
            name, path, line, leaves = found
            by_cls = {e.cls: e for k, e in out.items() if k[0] == kind}
            for dotted, qual, cpath, cline, conds, reach in leaves:
                e = by_cls.get(dotted)
                if e is None:
                    e = BackendEntry(qual, kind, None, dotted, cpath, cline)
                    out[(kind, f"selected:{dotted}")] = e
                    by_cls[dotted] = e
                e.selected.append({"class_path": dotted, "conditions": list(conds), "reachability": M.reach_word(reach),
                                   "path": path, "line": line, "via": f"{name}(...) of {package}",
                                   "enum": None, "reason": None})

    def _exported_selector(self, package: str):
        """(name, path, line, class leaves) of the first ``get_*`` function of ``package`` whose result holds
        classes: the registry's selector; None when it has none."""
        pm = self.r.index.module(package)
        if pm is None:
            return None
        for name in sorted(pm.summary.bindings):
            if not name.startswith("get_"):
                continue
            fv = self.r.resolve_dotted(pm, "", name, Walk())
            if fv.kind != ValKind.FUNCTION or fv.func is None or fv.module is None:
                continue
            rv = self.r.result_of_call(fv.module, fv.func.qualname, name, fv.func.line, fv.dotted, fv, Walk())
            leaves = tuple((cv.dotted, cv.qual, cv.path, cv.line, tuple(conds), reach)
                           for cv, conds, reach in _class_leaves(rv, [], True))
            if leaves:
                return name, fv.path, fv.func.line, leaves
        return None

    def _upstream_for_enum(self, c) -> ClassRef | None:
        mod = self.r.index.module_for_path(c.path) if c.path else None
        return self._upstream(mod, "", c.enum, c.line) if mod is not None else None

    def _upstream(self, mod, scope, enum_text, line) -> ClassRef | None:
        if not enum_text or "." not in enum_text:
            return None
        enum_cls, _, member = enum_text.rpartition(".")
        ev = self.r.resolve_dotted(mod, scope, enum_cls, Walk(), line=line)
        if ev.kind != ValKind.CLASS or ev.cls is None:
            return ClassRef(None, None, None, note=f"enum {enum_cls} not resolved: {ev.reason}")
        b = ev.cls.attrs.get(member)
        if b is None:
            return ClassRef(None, ev.path, ev.line, note=f"{enum_cls} has no member {member} in the installed vLLM")
        path = _str(b.target) if b.target else None
        if not path:
            return ClassRef(None, ev.path, b.line, note=f"{enum_cls}.{member} has no default class path")
        uv = self.r.resolve_symbol(path)
        if uv.kind == ValKind.CLASS:
            return ClassRef(path, uv.path, uv.cls.line if uv.cls else uv.line)
        return ClassRef(path, None, None, note=uv.reason or "upstream class not found")

    def _custom_op_upstream(self, mod, q) -> ClassRef | None:
        bases = self.r.class_bases(mod, q)
        for b in bases:
            if b.kind == "class" and b.module is not None and not b.module.workspace:
                return ClassRef(b.dotted, b.path, b.cls.line if b.cls else b.line)
        return None

    def broken_imports(self, mod) -> list[str]:
        """Unguarded module-level imports of ``mod`` that fail against the installed packages: a name
        that does not exist in an installed module, or a module of an installed package that does not
        exist. (Not-installed packages are a different story: AL107.)"""
        out = []
        for name, bindings in mod.summary.bindings.items():
            for b in bindings:
                if b.kind not in ("from", "import") or b.guards or b.scope:
                    continue
                if self._import_loads(mod, b):
                    continue
                w = Walk()
                v = self.r.binding_value(mod, b, w, scope="")
                reason = v.reason or ""
                if v.kind == ValKind.UNKNOWN and ("does not exist in" in reason or "not found (package" in reason):
                    out.append(f"`{b.target}{'.' + b.attr if b.kind == 'from' else ''}` at "
                               f"{os.path.basename(mod.path)}:{b.line}: {reason}")
        return out

    def _import_loads(self, mod, b) -> bool:
        """A cheap yes for an import that loads: the module exists and, for ``from m import x``, ``x`` is a
        submodule of ``m`` or a name ``m`` binds at module level (``Index.top_level_names``: no summary of
        ``m`` is built for it). False means "look closer": the full resolution decides. Half of the
        registry's cost in a cold check was resolving every import of each backend module this way."""
        idx = self.r.index
        target = self.r.abs_module(mod, b.target or "", b.level)
        if not target:
            return False
        if b.kind == "import":
            return idx.locate(target) is not None
        attr = b.attr or ""
        if not attr or attr == "*" or target == mod.name:
            return False
        if idx.locate(f"{target}.{attr}") is not None:
            return True
        names = idx.top_level_names(target)
        return names is not None and attr in names

    def _fill(self, e: BackendEntry, with_call_sites: bool) -> None:
        v = self.r.resolve_symbol(e.cls)
        if v.kind != ValKind.CLASS or v.module is None:
            e.error = e.error or f"class {e.cls} not found: {v.reason}"
            return
        e.path, e.line = v.path, v.cls.line if v.cls else v.line
        if v.module.workspace:
            broken = self.r.index.carried(("registry.broken-imports", v.module.name),
                                          lambda m=v.module: self.broken_imports(m), reads=(v.module.name,))
            if broken:
                e.loads = False
                e.error = (f"{os.path.basename(v.module.path)} cannot be imported with the installed vLLM, so vLLM cannot "
                           f"load this backend (get_class() raises ImportError and it is never selected): {broken[0]}"
                           + (f" (+{len(broken) - 1} more)" if len(broken) > 1 else ""))
                for sel in e.selected:
                    sel["reachability"] = M.Reach.DEAD
                    sel["reason"] = "the backend's module cannot be imported"
        classes = [v]
        if e.kind != "custom_op":
            for attr, meth in PART_METHODS:
                ref, cv = self.part(v, meth)
                setattr(e, attr, ref)
                if cv is not None:
                    classes.append(cv)
            e.metadata = self._metadata(v, e)
        if with_call_sites:
            seen = set()
            for cv in classes:
                for site in self.call_sites_of_class(cv):
                    k = (site.path, site.line, site.col)
                    if k not in seen:
                        seen.add(k)
                        e.call_sites.append(site)

    def part(self, v: Val, meth: str):
        """(ClassRef, class Val) of what backend class ``v``'s ``meth`` (``get_impl_cls``, ...) returns."""
        fv = self.r.class_attr(v.module, v.qual, meth, Walk())
        if fv is None or fv.func is None or fv.module is None:
            return ClassRef(None, None, None, note=f"{meth} not found"), None
        f = fv.func
        names = [r for r in f.returns if r]
        inherited = None if fv.module.workspace else fv.dotted
        for name in names:
            cv = self.r.resolve_dotted(fv.module, f.qualname, name, Walk(), line=f.end_line)
            if cv.kind == ValKind.CLASS:
                return ClassRef(cv.dotted, cv.path, cv.cls.line if cv.cls else cv.line, inherited_from=inherited,
                                note=f"{meth} inherited from upstream: the plugin does not override it" if inherited else None), cv
        return ClassRef(None, fv.path, f.line, inherited_from=inherited, note=f"{meth} returns {', '.join(names) or 'nothing resolvable'}"), None

    def _metadata(self, v: Val, e: BackendEntry) -> ClassRef | None:
        # builder's generic parameter or a *Metadata dataclass in the backend module
        mod = v.module
        for q, c in mod.summary.classes.items():
            if c.is_dataclass and q.endswith("Metadata") and "Builder" not in q:
                return ClassRef(f"{mod.name}.{q}", mod.path, c.line)
        return None

    def _memo_chain(self, mod, cs, receiver=None):
        """Trace a call site, reusing the previous chain when no file it went through changed.

        Editors re-run the registry after every keystroke: only the call sites whose
        module or chain files were edited are traced again.
        """
        if not self.keep_chains:
            return self.r.trace_call(mod, cs, receiver=receiver)
        index = self.r.index
        memo = self.r.site_memo
        key = (mod.path, cs.line, cs.col, cs.func, cs.launch, (receiver[0].name, receiver[1]) if receiver else None)
        hit = memo.get(key)
        if hit is not None:
            gen, sha, chain, touched = hit
            if sha == mod.sha:
                changed = index.changed_since(gen)
                if changed is not None and not (changed & touched):
                    return chain
        chain = self.r.trace_call(mod, cs, receiver=receiver)
        real = index.realpath
        touched = {real(h.path) for h in chain.hops if h.path}
        if chain.final.path:
            touched.add(real(chain.final.path))
        touched.add(real(mod.path))
        if len(memo) > 20000:
            memo.clear()
        memo[key] = (index.generation, mod.sha, chain, touched)
        return chain

    def _root_is_imported(self, mod, cs) -> bool:
        """Is the callee's first name bound by an import (not a parameter/local value)?"""
        root = cs.func.split(".", 1)[0]
        if root in ("self", "cls"):
            return False
        where, bs = mod.summary.binding_of(cs.scope, root)
        kinds = ("import", "from") if where == "local" else ("import", "from", "assign")  # module aliases count
        return bool(bs) and all(b.kind in kinds or (b.kind == "call" and (b.target or "").rpartition(".")[2] in ("import_module", "getattr")) for b in bs)

    def _class_sites(self, cv: Val):
        """(module, call site, receiver) of every call in the workspace-defined methods of a class,
        inherited ones included (the first definition in the MRO wins; `self` there is the class)."""
        if cv.module is None or not cv.module.workspace or cv.cls is None:
            return
        recv = (cv.module, cv.qual)
        done: set = set()
        for bv in self.r.mro(cv.module, cv.qual):
            mod, c = bv.module, bv.cls
            if mod is None or c is None or not mod.workspace:
                continue
            for name, fq in c.methods.items():
                if name in done:
                    continue
                done.add(name)
                r = None if bv is None or (mod.name, bv.qual) == (cv.module.name, cv.qual) else recv
                for cs in mod.summary.calls_in(fq):
                    yield mod, cs, r
                f = mod.summary.functions.get(fq)
                for inner in (f.inner_defs if f else ()):
                    for cs in mod.summary.calls_in(inner):
                        yield mod, cs, r

    def call_sites_of_class(self, cv: Val) -> list[CallSiteResult]:
        """Kernel call sites in the workspace-defined methods of a class."""
        out = []
        for mod, cs, recv in self._class_sites(cv):
            res = self.kernel_call(mod, cs, recv)
            if res is not None:
                out.append(res)
        return out

    def warm_steps(self, budget_s: float = 0.05):
        """Trace the backend classes' call sites a little at a time (yields after each
        ``budget_s``): the chains land in the resolver's site memo, so a following
        ``entries()`` only assembles them. For background indexing in the server."""
        entries = self.entries(with_call_sites=False)
        t0 = time.perf_counter()
        yield len(entries)
        for e in entries:
            # the classes _fill collects call sites from: the entry's own and its parts
            refs = [e.cls] + [ref.cls for attr, _m in PART_METHODS if (ref := getattr(e, attr, None)) and ref.cls]
            for cv in (v for v in map(self.r.resolve_symbol, refs) if v.kind == ValKind.CLASS):
                for mod, cs, recv in self._class_sites(cv):
                    self.kernel_call(mod, cs, recv)
                    if time.perf_counter() - t0 >= budget_s:
                        yield len(entries)
                        t0 = time.perf_counter()

    def kernel_call(self, mod, cs, receiver=None) -> CallSiteResult | None:
        if not is_candidate(cs):
            return None
        if cs.scope and _inside_jit(mod, cs.scope):
            return None  # a device-function call inside a Triton kernel body
        chain = self._memo_chain(mod, cs, receiver)
        if not is_kernel_chain(chain):
            return None
        if chain.final.kind == M.FinalKind.UNRESOLVED and not self._root_is_imported(mod, cs):
            return None
        # (`d[key](...)`: an item of a dict or container called, not a launch on a grid)
        item = cs.launch and bool(chain.hops) and chain.hops[0].kind == HopKind.CALL
        return CallSiteResult(mod.path, cs.line, cs.col, cs.func + (f"[{cs.subscript or '...'}]" if item else "[grid]" if cs.launch else ""),
                              cs.scope, chain)


def _class_leaves(v, conds: list, reach):
    """(class Val, conditions from the root, reachability) of each class a selector's value can be."""
    if v.kind == ValKind.CLASS:
        yield v, conds, reach
    elif v.kind == ValKind.ALTS:
        for a in v.extra["alts"]:
            yield from _class_leaves(a.val, conds + ([a.condition] if a.condition else []),
                                     M.combine_reachability([reach, a.reachable]))


def _inside_jit(mod, scope: str) -> bool:
    q = scope
    while q:
        f = mod.summary.functions.get(q)
        if f is not None and triton_decorated(f.decorators, wrappers=False):
            return True
        q = q.rpartition(".")[0]
    return False


_SKIP_ROOTS = {"super", "super()", "logger", "np", "math", "os", "sys", "envs", "dataclasses", "copy", "triton", "tl"}


def is_candidate(cs) -> bool:
    if not cs.func:
        return False
    if cs.launch or cs.func.startswith("torch.ops."):
        return True
    root = cs.func.split(".", 1)[0]
    if root == "super()":
        return super_method(cs.func)  # (`super().forward(x)` runs the base class's method; not a constructor)
    if root in _SKIP_ROOTS:
        return False
    if root == "torch":
        return cs.func.startswith("torch.ops.")
    return True


def is_kernel_chain(chain: M.Chain) -> bool:
    """Does this chain end in (or pass through) something kernel-like?"""
    k = chain.final.kind
    if any(h.kind == HopKind.PLATFORM for h in chain.hops) and k not in M.KERNEL_KINDS:
        return False  # platform queries (capability checks) are not kernel calls
    if k in M.RUNTIME_LEAF_KINDS:
        return True
    if any(h.kind in (HopKind.TORCH_OP, HopKind.PATCH) for h in chain.hops):
        return True
    if k == M.FinalKind.FORK:
        # a choice point counts when a branch reaches kernel-like code (a fork of constructors or of
        # subclasses' pure-Python methods does not)
        return chain.reaches_runtime()
    if k == M.FinalKind.UNRESOLVED:
        # only unresolved calls that came through an import of kernel-ish code
        via = (HopKind.IMPORT, HopKind.CONDITIONAL_IMPORT, HopKind.LAZY_IMPORT, HopKind.DYNAMIC_IMPORT, HopKind.ALIAS)
        # (not the unknown result of a call in a chain: `base64.b64encode(b).decode` came through an import, of a
        # function whose result is not known; it is no kernel)
        return any(h.kind in via for h in chain.hops) and not any(
            h.kind == HopKind.PLATFORM for h in chain.hops) and "(not followed)" not in (chain.final.reason or "") and "builtin" not in (chain.final.reason or "") \
            and not (chain.final.symbol or "").endswith(")")
    return False
