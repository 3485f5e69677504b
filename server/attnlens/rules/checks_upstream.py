"""Upstream drift against the installed vLLM.

AL108 missing-upstream-name, AL109 missing-base-attribute, AL110 override-signature,
AL111 missing-upstream-hook, AL112 metadata-field-drift.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..walk import Val, ValKind, Walk
from .checks_calls import _loc, _rel, _short
from .classes import mro as full_mro
from .classes import mro_complete
from .api import Rule, check, content_memo, prepare, rule, short_list

AL108 = rule(Rule(
    "AL108", "missing-upstream-name", "error",
    "An import (or module attribute) of a name that the installed version of that upstream module does not define.",
    "Upstream removed or renamed it. Unguarded, the import fails; under try/except ImportError the fallback "
    "runs silently instead of the upstream code the plugin was written against.",
    ("upgrade", "import"),
))
AL109 = rule(Rule(
    "AL109", "missing-base-attribute", "error",
    "`super().x` or `self.x(...)` where no class of the (fully resolved) MRO defines `x` in the installed vLLM.",
    "The plugin class calls a method its upstream base no longer has: AttributeError at run time, or a "
    "hook that upstream no longer calls.",
    ("upgrade", "inheritance"),
))
AL110 = rule(Rule(
    "AL110", "override-signature", "warning",
    "A method override whose signature is incompatible with the upstream base method it overrides.",
    "Upstream calls the hook with its own signature: a dropped or renamed parameter, a new required "
    "parameter or a lost default breaks those calls or binds arguments to the wrong names.",
    ("upgrade", "signature"),
))
AL111 = rule(Rule(
    "AL111", "missing-upstream-hook", "warning",
    "A hook the upstream base declares and the upstream counterpart backend overrides, but this backend does not.",
    "The plugin class falls back to the base's default (or abstract) implementation where the upstream "
    "backend it replaces has its own behaviour.",
    ("upgrade", "backend"),
))
AL112 = rule(Rule(
    "AL112", "metadata-field-drift", "warning",
    "Attention metadata dataclass fields that differ from the upstream counterpart's metadata.",
    "Upstream code paths (inherited builder/impl methods, model runners, spec decode) read fields by name; "
    "missing or retyped fields break them, extra fields are MetaX adaptations to account for.",
    ("upgrade", "metadata"),
))

_OBJECT_ATTRS = set(dir(object)) | {"__init_subclass__", "__class_getitem__", "__post_init__", "__getattr__",
                                     "__call__", "__enter__", "__exit__", "__iter__", "__len__", "__getitem__"}


# --------------------------------------------------------------------------- helpers


def _installed_version(engine, top: str) -> str | None:
    def compute():
        for d in getattr(engine.ws.target, "sys_path", []) or []:
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for n in names:
                if n.endswith(".dist-info") and n.split("-", 1)[0].replace("_", "-").lower() == top.replace("_", "-").lower():
                    parts = n[: -len(".dist-info")].split("-")
                    if len(parts) >= 2:
                        return parts[1]
        return None

    return engine.outside_memo(("version", top), compute)


def module_has(r, m, name: str, depth: int = 0) -> bool:
    s = m.summary
    if s.error or s.has_getattr or depth > 4:
        return True
    if name in s.bindings:
        return True
    if m.is_package and r.index.locate(f"{m.name}.{name}") is not None:
        return True
    for star in s.bindings.get("*", []):
        target = r.abs_module(m, star.target or "", star.level)
        sub = r.index.module(target) if target else None
        if sub is None:
            return True  # cannot tell
        if module_has(r, sub, name, depth + 1):
            return True
    return False


_COL0_BINDING = re.compile(
    r"^(?:async[ \t]+def|def|class)[ \t]+(\w+)"  # def / class
    r"|^(\w+)[ \t]*(?::[^\n=]*)?=(?!=)"  # NAME = ..., NAME: T = ...
    r"|^from[ \t]+[\w.]+[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)"  # from M import a, b as c / ( ... )
    r"|^import[ \t]+([^\n]*)",  # import a.b, c as d
    re.M)


def col0_bindings(text: str) -> frozenset:
    """Names bound by statements that start in column 0 (certainly top-level unless inside a
    multi-line string): a cheap, parse-free answer to "does this module define NAME?" that is
    only ever used to say *yes*; a name not found here is checked on the full summary."""
    out = set()
    for m in _COL0_BINDING.finditer(text):
        d, a, frm, imp = m.groups()
        if d or a:
            out.add(d or a)
            continue
        items = (frm or imp or "").strip()
        if items.startswith("("):
            items = items[1:-1] if items.endswith(")") else items[1:]
        for item in re.sub(r"#[^\n]*", "", items).replace("\\\n", " ").split(","):
            parts = item.split()
            if len(parts) == 3 and parts[1] == "as":
                out.add(parts[2])
            elif len(parts) == 1:
                out.add(parts[0].split(".", 1)[0] if imp else parts[0])
    return frozenset(out)


def upstream_defines(ctx, target: str, name: str) -> bool:
    """Does installed module ``target`` define ``name``? The column-0 scan answers most names
    without summarising the module (57 upstream modules of the real checkout are read only for
    this question); otherwise the summary decides (star imports, guarded definitions, ...)."""
    engine = ctx.engine
    idx = ctx.ws.index
    if not idx.is_loaded(target) and name:
        sha = engine.current_sha(target)
        loc = idx.locate(target)
        if sha is not None and loc is not None:
            ctx.note_dep(target, sha)

            def scan():
                text = idx.source_text(loc.path)
                return col0_bindings(text) if text is not None else frozenset()

            if name in content_memo(("col0", loc.path, sha), scan):
                return True
    m = idx.module(target)
    return m is None or m.workspace or module_has(ctx.r, m, name)


def _name_pos(ctx, line: int, name: str, after: str = "import"):
    """Position of ``name`` in an import statement starting at ``line`` (multi-line aware)."""
    lines = ctx.lines
    for ln in range(line, min(line + 40, len(lines)) + 1):
        text = lines[ln - 1]
        start = 0
        if ln == line and after in text:
            start = text.index(after) + len(after)
        m = re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", text[start:])
        if m:
            return ln, start + m.start(), ln, start + m.end()
    return ctx.name_range(line, name)


def _severity_for_guards(ctx, guards, scope) -> str | None:
    kinds = {g[0] for g in guards}
    if guards:
        try:
            if ctx.r.guard_value(ctx.mod, guards, scope) is False:
                return None
        except RecursionError:
            pass
    if "typecheck" in kinds:
        return "info"
    if "try" in kinds or "except" in kinds:
        return "warning"
    if "if" in kinds or "else" in kinds:
        return "warning"
    return "error"


def _upstream_classes(mro) -> list:
    return [cv for cv in mro[1:] if cv.module is not None and not cv.module.workspace]


# --------------------------------------------------------------------------- AL108


@check("AL108")
def missing_upstream_names(ctx):
    r = ctx.r
    idx = ctx.ws.index
    ws_tops = {n.split(".", 1)[0] for n in idx.ws_files}
    items = []
    for bs in ctx.s.bindings.values():
        items.extend(("", b) for b in bs)
    for q, f in ctx.s.functions.items():
        for bs in f.locals.values():
            items.extend((q, b) for b in bs)
    seen = set()
    for scope, b in items:
        yield
        if b.kind not in ("from", "import"):
            continue
        target = r.abs_module(ctx.mod, b.target or "", b.level)
        if not target:
            continue
        top = target.split(".", 1)[0]
        if top in ws_tops or top in r.stdlib or top == "torch":
            continue
        if idx.locate(top) is None:
            continue  # not installed: AL107 reports the calls
        full = target
        missing = None
        if b.kind == "import":
            full = b.alternatives[0] if b.alternatives else target
            if idx.locate(full) is None:
                missing = ("module", full, full.rpartition(".")[2])
        else:
            loc = idx.locate(target)
            if loc is None:
                missing = ("module", target, target.rpartition(".")[2])
            elif loc.kind == "py":
                if not upstream_defines(ctx, target, b.attr or ""):
                    missing = ("name", target, b.attr or "")
            elif loc.kind == "namespace" and idx.locate(f"{target}.{b.attr}") is None:
                missing = ("name", target, b.attr or "")
        if missing is None:
            continue
        sev = _severity_for_guards(ctx, b.guards, scope)
        if sev is None:
            continue
        kind, where, nm = missing
        key = (b.line, nm)
        if key in seen:
            continue
        seen.add(key)
        ver = _installed_version(ctx.engine, top)
        vtxt = f"{top} {ver}" if ver else f"the installed {top}"
        if kind == "module":
            msg = f"module `{where}` does not exist in {vtxt}"
            pos = _name_pos(ctx, b.line, where.rpartition(".")[2], after="import" if b.kind == "import" else "from")
        else:
            mp = idx.locate(where)
            pos = _name_pos(ctx, b.line, nm)
            effect = {"error": "importing this module fails", "warning": "the guarded import fails",
                      "info": "only under TYPE_CHECKING"}.get(sev, "the import fails")
            if sev == "warning" and any(g[0] in ("try", "except") for g in b.guards):
                effect = "the ImportError fallback runs instead, silently"
            msg = f"`{nm}` is not in `{where}` of {vtxt}: {effect}. " + _history_sentence(ctx, top, where, nm)
            ctx.add("AL108", *pos, msg, severity=sev, module=where, name=nm, installed=ver,
                    detail=f"Looked up in {_short(mp.path) if mp else where}"
                           + (f"; guarded by `{r.guard_text(b.guards)}`" if sev == "warning" and b.guards else "") + ".",
                    **_history(ctx, top, where, nm))
            continue
        if sev == "warning" and any(g[0] in ("try", "except") for g in b.guards):
            msg += "; the ImportError fallback runs instead, silently"
        elif sev == "warning":
            msg += f"; guarded by `{r.guard_text(b.guards)}`"
        elif sev == "info":
            msg += " (only under TYPE_CHECKING)"
        ctx.add("AL108", *pos, msg, severity=sev, module=where, name=nm, installed=ver)
    # module attributes: alias.attr where alias is an upstream module
    for cs in ctx.s.calls:
        yield
        if not cs.func or "." not in cs.func:
            continue
        _check_attr_text(ctx, cs.scope, cs.func, cs.fline, cs.fcol, cs.guards, seen)
    for bs in ctx.s.bindings.values():
        for b in bs:
            if b.kind == "assign" and b.target and "." in b.target:
                _check_attr_text(ctx, "", b.target, b.line, 0, b.guards, seen)


def _older_sources(engine, package: str) -> list[tuple[str, str]]:
    """(version, folder holding <package>/) of the upstream versions in the cache root that are older
    than the installed one, newest first (``attnlens upstream fetch`` puts them there)."""
    def compute():
        from ..upgrade.upstream import cached_versions  # the fetcher owns the cache layout

        folder = getattr(engine.ws.cache, "folder", None)
        if folder is None:
            return []
        installed = _vkey(_installed_version(engine, package) or "")
        got = [(u.version, u.root) for u in cached_versions(Path(folder).parent, package)
               if _vkey(u.version) < installed]
        return sorted(got, key=lambda x: _vkey(x[0]), reverse=True)

    return engine.memo(("older_sources", package), compute)


def _vkey(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.+-]", v or "0")[:4])


def _defined_in_text(path: str, name: str) -> bool:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    n = re.escape(name)
    return re.search(rf"(?m)^(?:class|def|async\s+def)\s+{n}\b|^{n}\s*[:=]|^from\s+\S+\s+import\s+.*\b{n}\b|^\s+{n},?\s*$", text) is not None


def _history(ctx, package: str, module: str, name: str) -> dict:
    """Was ``module.name`` defined by an older cached upstream version? And which name of the installed
    module is the closest (a rename or a typo)?"""
    import difflib

    last = None
    known = [v for v, _f in _older_sources(ctx.engine, package)]
    for v, folder in _older_sources(ctx.engine, package):
        base = Path(folder, *module.split("."))
        if any(_defined_in_text(str(p), name) for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()):
            last = v
            break
    m = ctx.ws.index.module(module)
    names = []
    if m is not None:
        names = [q for q in list(m.summary.classes) + list(m.summary.functions) + list(m.summary.bindings) if "." not in q]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
    return {"defined_in": last, "known_versions": known, "closest": close[0] if close else None}


def _history_sentence(ctx, package: str, module: str, name: str) -> str:
    h = _history(ctx, package, module, name)
    tail = f" (closest: `{h['closest']}`)" if h["closest"] else ""
    if h["defined_in"]:
        return f"{package} {h['defined_in']} had it: removed or renamed upstream{tail}."
    if h["known_versions"]:
        return f"Not defined there in {package} {', '.join(h['known_versions'])} either: a local name?{tail}"
    return f"No older {package} version is cached to tell a removal from a local name{tail}."


def _check_attr_text(ctx, scope, text, line, col, guards, seen):
    parts = text.split(".")
    head = parts[0]
    if head in ("self", "cls", "torch", "super"):
        return
    r = ctx.r
    try:
        v = r.lookup_name(ctx.mod, scope, head, Walk(), line)
    except RecursionError:
        return
    for p in parts[1:]:
        if v.kind != ValKind.MODULE or v.module is None or v.module.workspace:
            return
        m = v.module
        if not module_has(r, m, p):
            key = (line, p)
            if key in seen:
                return
            seen.add(key)
            sev = _severity_for_guards(ctx, guards, scope)
            if sev is None:
                return
            top = m.name.split(".", 1)[0]
            ver = _installed_version(ctx.engine, top)
            vtxt = f"{top} {ver}" if ver else f"the installed {top}"
            pos = ctx.name_range(line, p, col)
            ctx.add("AL108", *pos, f"`{m.name}` has no attribute `{p}` in {vtxt} ({_short(m.path)}): upstream removed or renamed it",
                    severity=sev, module=m.name, name=p, installed=ver)
            return
        try:
            v = r.attr(v, p, Walk())
        except RecursionError:
            return


# --------------------------------------------------------------------------- AL109


def _class_val(ctx, cq: str) -> Val:
    c = ctx.s.classes[cq]
    return Val(ValKind.CLASS, ctx.mod, cq, ctx.path, c.line)


def _defines(cv: Val, name: str, instance: bool = True) -> bool:
    c = cv.cls
    if c is None:
        return False
    if name in c.methods or name in c.attrs:
        return True
    if any(fl[0] == name for fl in c.fields):
        return True
    return instance and name in c.inst_attrs


@check("AL109")
def missing_base_attributes(ctx):
    r = ctx.r
    root = ctx.ws.root
    mros: dict = {}

    def mro_for(cq):
        if cq not in mros:
            mros[cq] = mro_complete(ctx.engine, _class_val(ctx, cq))
        return mros[cq]

    def cls_of(scope):
        return r.enclosing_class(ctx.mod, scope) if scope else None

    for su in ctx.facts.supers:
        cq = cls_of(su.scope or ctx.s.scope_at(su.line))
        if cq is None or su.name in _OBJECT_ATTRS:
            continue
        mro = mro_for(cq)
        if mro is None or not _upstream_classes(mro):
            continue
        if any(_defines(cv, su.name, instance=False) or _defines(cv, su.name) for cv in mro[1:]):
            continue
        if any("__getattr__" in (cv.cls.methods if cv.cls else {}) for cv in mro):
            continue
        bases = ", ".join(f"{cv.dotted} ({_loc(cv, root)})" for cv in mro[1:4])
        ctx.add("AL109", su.line, su.col, su.end_line, su.end_col,
                f"`super().{su.name}`: no base class of {cq} defines `{su.name}` in the installed vLLM (MRO: {bases}"
                + (", ..." if len(mro) > 4 else "") + "); upstream removed or renamed it",
                cls=f"{ctx.mod.name}.{cq}", name=su.name)
    for cs in ctx.s.calls:
        parts = cs.func.split(".") if cs.func else []
        if len(parts) != 2 or parts[0] != "self":
            continue
        name = parts[1]
        if name in _OBJECT_ATTRS:
            continue
        cq = cls_of(cs.scope)
        if cq is None:
            continue
        mro = mro_for(cq)
        if mro is None or not _upstream_classes(mro):
            continue
        if any(_defines(cv, name) for cv in mro):
            continue
        if any(("__getattr__" in cv.cls.methods or "__getattribute__" in cv.cls.methods) for cv in mro if cv.cls):
            continue
        if _assigned_dynamically(ctx, name):
            continue
        ups = _upstream_classes(mro)
        ctx.add("AL109", cs.fline, cs.fcol, cs.fend_line, cs.fend_col,
                f"`self.{name}(...)`: neither {cq} nor its bases define `{name}` (upstream bases: "
                + ", ".join(f"{cv.dotted} ({_loc(cv, root)})" for cv in ups[:3]) + "); upstream removed or renamed it",
                cls=f"{ctx.mod.name}.{cq}", name=name)


def _assigned_dynamically(ctx, name: str) -> bool:
    """``setattr(self, "name", ...)`` or a tuple assignment ``self.a, self.name = ...`` in the module."""
    pat = re.compile(r"setattr\(\s*self\s*,\s*['\"]" + re.escape(name) + r"['\"]")
    for line in ctx.lines:
        if pat.search(line):
            return True
        if "self." + name in line:
            m = re.match(r"([^=]*?)(?<![=!<>])=(?!=)", line)
            if m and "," in m.group(1) and re.search(r"\bself\." + re.escape(name) + r"\b", m.group(1)):
                return True
    return False


# --------------------------------------------------------------------------- AL110


def _sig_params(f, static: bool):
    ps = list(f.params)
    if not static and ps and ps[0].kind in ("pos", "posonly"):
        ps = ps[1:]
    return ps


def _is_static(f) -> bool:
    return any(d.func.rpartition(".")[2] == "staticmethod" for d in f.decorators)


def _is_property(f) -> bool:
    return any(d.func.rpartition(".")[2] in ("property", "cached_property", "setter", "getter") or d.func.endswith(".setter") for d in f.decorators)


def signature_problems(base_f, over_f) -> list[str]:
    bp = _sig_params(base_f, _is_static(base_f))
    op = _sig_params(over_f, _is_static(over_f))
    if any(p.kind in ("vararg", "kwarg") for p in bp):
        return []  # a generic base signature: overrides narrow it on purpose
    o_var = any(p.kind == "vararg" for p in op)
    o_kw = any(p.kind == "kwarg" for p in op)
    o_names = {p.name: p for p in op}
    probs = []
    b_pos = [p for p in bp if p.kind in ("posonly", "pos")]
    o_pos = [p for p in op if p.kind in ("posonly", "pos")]
    for i, p in enumerate(b_pos):
        if i < len(o_pos):
            q = o_pos[i]
            if q.name != p.name and p.kind == "pos" and p.name not in o_names and not o_kw:
                probs.append(f"parameter {i + 1} is `{q.name}` where upstream has `{p.name}` (only keyword callers break)")
        elif p.name in o_names:
            continue
        elif not o_var:
            probs.append(f"drops upstream parameter `{p.name}`" + ("" if o_kw else " (callers passing it get TypeError)"))
    for p in bp:
        if p.kind == "kwonly" and p.name not in o_names and not o_kw:
            probs.append(f"drops upstream keyword-only parameter `{p.name}`")
    b_names = {p.name for p in bp}
    for i, q in enumerate(op):
        if q.kind in ("vararg", "kwarg") or q.has_default or q.name in b_names:
            continue
        if q.kind in ("pos", "posonly") and i < len(b_pos):
            continue  # renamed positional, reported above
        probs.append(f"adds required parameter `{q.name}` that upstream callers do not pass")
    return probs


@check("AL110")
def override_signatures(ctx):
    # classes upstream constructs itself (registered backend parts): their __init__ is a hook too
    constructed = {p["plugin"].qual for p in registry_pairs(ctx.engine)
                   if p["plugin"].module is not None and p["plugin"].module.path == ctx.path}
    for cq, c in ctx.s.classes.items():
        mro, _ok = full_mro(ctx.engine, _class_val(ctx, cq))
        if len(mro) < 2 or not _upstream_classes(mro):
            continue
        for name, fq in c.methods.items():
            if name.startswith("__") and name not in ("__init__", "__call__"):
                continue
            if name == "__init__" and cq not in constructed:
                continue  # constructed by the plugin's own code with its own arguments
            f = ctx.s.functions.get(fq)
            if f is None or _is_property(f):
                continue
            base = None
            for cv in mro[1:]:
                if cv.cls is not None and name in cv.cls.methods:
                    base = cv
                    break
            if base is None or base.module is None or base.module.workspace:
                continue
            bf = base.module.summary.functions.get(base.cls.methods[name])
            if bf is None or _is_property(bf) or any(d.func.rpartition(".")[2] == "overload" for d in bf.decorators):
                continue
            probs = signature_problems(bf, f)
            if not probs:
                continue
            pos = ctx.def_range(f)
            only_renames = all("only keyword callers break" in x for x in probs)
            more = f" ({len(probs) - 1} more difference{'s' if len(probs) > 2 else ''})" if len(probs) > 1 else ""
            ctx.add("AL110", *pos, severity="info" if only_renames else None, message=
                    f"`{cq.rpartition('.')[2]}.{name}` does not match upstream `{base.qual}.{name}`: {probs[0]}{more}.",
                    base=f"{base.dotted}.{name}", base_location=f"{base.module.path}:{bf.line}", problems=probs,
                    detail=f"Overrides {base.dotted}.{name} ({_short(base.module.path)}:{bf.line}): " + "; ".join(probs) + ".")


# --------------------------------------------------------------------------- registry pairs (AL111, AL112)


def _part_class(query, cv: Val, meth: str) -> Val | None:
    """The class backend class ``cv``'s ``meth`` (``get_impl_cls``, ...) returns (``query``: the workspace's)."""
    fv = query.class_attr(cv.module, cv.qual, meth)
    if fv is None or fv.func is None or fv.module is None:
        return None
    f = fv.func
    for name in [x for x in f.returns if x]:
        try:
            v = query.resolve_dotted(fv.module, f.qualname, name, line=f.end_line)
        except RecursionError:
            continue
        if v.kind == ValKind.CLASS:
            return v
    return None


def _metadata_class(cv: Val, like: str | None = None) -> Val | None:
    mod = cv.module
    cands = [(q, c) for q, c in mod.summary.classes.items() if c.is_dataclass and q.endswith("Metadata") and "Builder" not in q and "." not in q]
    if not cands:
        return None
    if like:
        exact = [(q, c) for q, c in cands if like.endswith(q) or q.endswith(like)]
        if exact:
            cands = exact
        else:
            stem = re.sub(r"^[A-Z][a-z0-9]*(?=[A-Z])", "", like)  # a vendor prefix word: `XyzFlashMetadata`
            exact = [(q, c) for q, c in cands if q == stem]
            if exact:
                cands = exact
    q, c = min(cands, key=lambda x: (len(x[0]), x[0]))
    return Val(ValKind.CLASS, mod, q, mod.path, c.line)


@prepare("registry")
def registry_pairs(engine) -> list[dict]:
    def compute():
        query = engine.ws.query
        out = []
        try:
            entries = engine.ws.backends(with_call_sites=False)
        except Exception as e:  # pragma: no cover  # noqa: BLE001 - analysis must not fail on a bad input
            engine.errors.append(f"registry: {type(e).__name__}: {e}")
            return out
        for e in entries:
            if e.kind == "custom_op" or e.upstream is None or not e.upstream.cls:
                continue
            pv = query.resolve_symbol(e.cls)
            uv = query.resolve_symbol(e.upstream.cls)
            if pv.kind != ValKind.CLASS or uv.kind != ValKind.CLASS or pv.module is None or not pv.module.workspace:
                continue
            out.append({"kind": "backend", "plugin": pv, "upstream": uv, "entry": e.name})
            for meth, kind in (("get_impl_cls", "impl"), ("get_builder_cls", "builder")):
                pp = _part_class(query, pv, meth)
                up = _part_class(query, uv, meth)
                if pp is not None and up is not None and pp.module is not None and pp.module.workspace:
                    out.append({"kind": kind, "plugin": pp, "upstream": up, "entry": e.name})
            pm = _metadata_class(pv)
            if pm is not None:
                um = _metadata_class(uv, like=pm.qual)
                if um is not None:
                    out.append({"kind": "metadata", "plugin": pm, "upstream": um, "entry": e.name})
        return out

    return engine.memo("registry_pairs", compute)


def _abstract(f) -> bool:
    return f.is_abstract or f.dummy == "raises NotImplementedError"


@check("AL111")
def missing_hooks(ctx):
    done = set()
    for pair in registry_pairs(ctx.engine):
        if pair["kind"] not in ("backend", "impl", "builder"):
            continue
        pv, uv = pair["plugin"], pair["upstream"]
        if pv.module is None or pv.module.path != ctx.mod.path:
            continue
        key = (pv.qual, uv.dotted)
        if key in done:
            continue
        done.add(key)
        pmro = mro_complete(ctx.engine, pv)
        umro, _ok = full_mro(ctx.engine, uv)
        if pmro is None or any(cv.dotted == uv.dotted for cv in pmro):
            continue  # the plugin class inherits the upstream counterpart itself
        uc = uv.cls
        missing = []
        for h, fq in sorted(uc.methods.items()):
            if h.startswith("__") and h != "__init__":
                continue
            decl = next((cv for cv in umro[1:] if cv.cls is not None and h in cv.cls.methods), None)
            if decl is None or (decl.module is not None and decl.module.workspace):
                continue
            owner = next((cv for cv in pmro if cv.cls is not None and (h in cv.cls.methods or h in cv.cls.attrs)), None)
            if owner is not None and owner.module is not None and owner.module.workspace:
                continue
            if owner is not None and owner.dotted != decl.dotted:
                continue  # some other upstream class provides it
            df = decl.module.summary.functions.get(decl.cls.methods[h])
            uf = uv.module.summary.functions.get(fq)
            missing.append((h, decl, df, uf, owner is None))
        if missing:
            _hooks_finding(ctx, pair, pv, uv, missing)


def _hook_answer(ctx, decl, uv, h):
    """(upstream's answer, the inherited answer) on this platform, each None when not a decided constant."""
    r = ctx.r
    try:
        up = r.class_attr(uv.module, uv.qual, h, Walk())
        base = r.class_attr(decl.module, decl.qual, h, Walk())
    except RecursionError:
        return None, None
    prof = r.profile
    return (prof.result_of(up) if up is not None and up.kind == ValKind.FUNCTION else None,
            prof.result_of(base) if base is not None and base.kind == ValKind.FUNCTION else None)


def _override_same_here(ctx, uv, h: str, uf) -> bool:
    """Does upstream's override answer like the inherited default on this platform? True when each of
    its returns delegates to the base (``super().h(...)``), sits under a guard the platform profile proves
    False, or, for a narrow input case (``param == "literal"``), returns a value the profile folds to False
    (an NVIDIA-only feature such as an SM100 family test)."""
    if uf is None or not uf.return_alts:
        return False
    params = {p.name for p in uf.params}
    prof = ctx.r.profile
    deleg = re.compile(r"^super\(\)\." + re.escape(h) + r"\(")
    lines = (ctx.ws.index.source_text(uv.module.path) or "").splitlines()
    for text, guards, line in uf.return_alts:
        text = text or _return_expr(lines, line)
        if deleg.match(text.strip()):
            continue
        gv = ctx.r.guard_value(uv.module, guards, uf.qualname) if guards else True
        if gv is False:
            continue
        narrow = any(re.match(r"^(\w+)\s*(==|in)\s*[\"'\[(]", g[1]) and re.match(r"^(\w+)", g[1]).group(1) in params
                     for g in guards if g[0] == "if")
        if narrow and prof.evaluate(uv.module, uf.qualname, text) is False:
            continue
        return False
    return True


def _return_expr(lines: list[str], line: int) -> str:
    """The expression of the ``return`` statement starting on ``line`` (1-based), over several lines."""
    import ast

    if not 0 < line <= len(lines):
        return ""
    first = lines[line - 1].strip()
    if not first.startswith("return"):
        return ""
    buf = first[len("return"):]
    for extra in range(0, 12):
        try:
            ast.parse(buf.strip(), mode="eval")
            return " ".join(buf.split())
        except SyntaxError:
            if line + extra >= len(lines):
                break
            buf += "\n" + lines[line + extra]
    return ""


def _hook_sentence(entry: str, h: str, up, inh, uv) -> str:
    if isinstance(up, bool) and isinstance(inh, bool) and h.startswith("supports_"):
        what = h[len("supports_"):].replace("_", " ")
        if up and not inh:
            return f"{entry} is rejected for {what} on this platform: upstream {uv.qual} now returns True, the plugin inherits False."
        return f"{entry} claims {what}, which upstream {uv.qual} now refuses: upstream returns False, the plugin inherits True."
    if up is not None and inh is not None:
        return f"`{h}` answers differently on this platform: upstream {uv.qual} returns {up!r}, the plugin inherits {inh!r}."
    return f"`{h}` is overridden by upstream {uv.qual} but inherited here: its answer may differ."


def _hooks_finding(ctx, pair, pv, uv, missing) -> None:
    """One AL111 finding per plugin class: the hooks upstream's counterpart overrides that the plugin
    inherits, kept only when upstream's answer on this platform differs (or cannot be decided)."""
    entry = f"{pair['entry']} {pair['kind']}" if pair["kind"] != "backend" else pair["entry"]
    rows = []
    for h, decl, df, uf, absent in missing:
        abstract = df is not None and _abstract(df)
        up, inh = (None, None) if abstract else _hook_answer(ctx, decl, uv, h)
        if not abstract and up is not None and inh is not None and up == inh:
            continue  # same answer on this platform
        if not abstract and (up is None or inh is None) and _override_same_here(ctx, uv, h, uf):
            continue  # the override differs only under guards that are False here (`is_xpu()`, SM100 family)
        if abstract:
            text = f"`{h}` is abstract in {decl.qual} and {pv.qual} does not implement it."
        else:
            text = _hook_sentence(entry, h, up, inh, uv)
        rank = 0 if abstract else (1 if up is not None and inh is not None else 2)
        rows.append((rank, h, text, decl, df, uf, abstract, up, inh))
    if not rows:
        return
    rows.sort(key=lambda x: (x[0], x[1]))
    first = rows[0]
    msg = first[2]
    if len(rows) > 1:
        msg += f" {len(rows) - 1} more inherited hook{'s' if len(rows) > 2 else ''}: {short_list((x[1] for x in rows[1:]), 80)}."
    detail = []
    for _rank, h, text, decl, df, uf, abstract, up, inh in rows:
        detail.append(f"`{h}`: declared by {decl.dotted} ({'abstract' if abstract else 'with a default'}, "
                      f"{_short(decl.module.path)}:{df.line if df else '?'}), overridden by {uv.dotted} "
                      f"({_short(uv.module.path)}:{uf.line if uf else '?'})" +
                      (f"; on this platform upstream returns {up!r}, the inherited one {inh!r}" if up is not None and inh is not None else "") + ".")
    pc = pv.cls
    pos = ctx.name_range(pc.line, pc.name)
    hooks = [{"hook": h, "declared_by": f"{decl.dotted}.{h}", "upstream_override": f"{uv.dotted}.{h}",
              "upstream_location": f"{uv.module.path}:{uf.line if uf else 0}", "abstract": abstract,
              "upstream_value": up, "inherited_value": inh}
             for _rank, h, _t, decl, _df, uf, abstract, up, inh in rows]
    ctx.add("AL111", *pos, msg, severity="error" if any(x[6] for x in rows) else "warning",
            detail="\n".join(detail), hook=hooks[0]["hook"], declared_by=hooks[0]["declared_by"],
            upstream_override=hooks[0]["upstream_override"], upstream_location=hooks[0]["upstream_location"],
            hooks=hooks)


def _norm_ann(a: str) -> str:
    a = (a or "").replace(" ", "")
    m = re.fullmatch(r"(?:typing\.)?Optional\[(.+)\]", a)
    if m:
        a = m.group(1) + "|None"
    a = re.sub(r"\btorch\.", "", a)
    return a


def _fields(engine, cv: Val) -> dict:
    out: dict = {}
    mro, _ok = full_mro(engine, cv)
    for dv in reversed(mro):
        c = dv.cls
        if c is not None and c.is_dataclass:
            for name, ann, has_default, line in c.fields:
                if (ann or "").startswith(("ClassVar", "typing.ClassVar")):
                    continue
                out[name] = (ann, has_default, line, dv)
    return out


def _reads_that_run(engine, pair: dict, names: list[str]) -> dict:
    """field -> (path, line) of a read of it that runs with the plugin's metadata: in an upstream
    method that the plugin's backend, impl or builder class of the same entry inherits without
    overriding (its own class or any upstream base: ``MLACommonImpl.forward`` for an MLA impl), off a
    name holding the metadata (``rules.readers.reads_in``). Reads in upstream methods the plugin
    replaces, in other backends that share the upstream class, or at module level do not count."""
    from .classes import class_attr
    from .readers import reads_in

    uv = pair["upstream"]
    if not names or uv.module is None:
        return {}
    cls = uv.cls.name if uv.cls else uv.qual.rpartition(".")[2]
    key = ("AL112 reads", pair["entry"], uv.dotted, tuple(names))

    def compute():
        quals: dict[str, set] = {}  # upstream module path -> inherited method qualnames
        for p in registry_pairs(engine):
            if p["entry"] != pair["entry"] or p["kind"] not in ("backend", "impl", "builder"):
                continue
            pv = p["plugin"]
            for cv in full_mro(engine, pv)[0]:
                if cv.module is None or cv.module.workspace or cv.cls is None:
                    continue
                for meth, fq in cv.cls.methods.items():
                    owner = class_attr(engine, pv, meth)[1]
                    if owner is not None and owner.module is cv.module and owner.qual == cv.qual:
                        quals.setdefault(cv.module.path, set()).add(fq)
        out: dict = {}
        for path in sorted(quals):
            left = tuple(n for n in names if n not in out)
            qs = frozenset(quals[path])
            # the scan reads installed code only: kept across edits of the workspace (it was 70 ms per edit)
            reads = engine.outside_memo(("AL112 reads_in", path, qs, cls, left), lambda p=path, q=qs, lf=left: reads_in(p, q, cls, lf))
            for n, hits in reads.items():
                out[n] = hits[0]
        return out

    return engine.memo(key, compute)


@check("AL112")
def metadata_drift(ctx):
    done = set()
    for pair in registry_pairs(ctx.engine):
        if pair["kind"] != "metadata":
            continue
        pv, uv = pair["plugin"], pair["upstream"]
        if pv.module is None or pv.module.path != ctx.mod.path or (pv.qual, uv.dotted) in done:
            continue
        done.add((pv.qual, uv.dotted))
        pf = _fields(ctx.engine, pv)
        uf = _fields(ctx.engine, uv)
        missing = [n for n in uf if n not in pf]
        extra = [n for n in pf if n not in uf]
        changed = [n for n in pf if n in uf and _norm_ann(pf[n][0]) != _norm_ann(uf[n][0]) and pf[n][0] and uf[n][0]]
        # a field that no code running with this metadata reads breaks nothing: missing or retyped
        read_at = _reads_that_run(ctx.engine, pair, missing + changed)
        unread = [n for n in missing + changed if n not in read_at]
        missing = [n for n in missing if n in read_at]
        changed = [n for n in changed if n in read_at]
        required_now = [n for n in pf if n in uf and uf[n][1] and not pf[n][1]]
        if not (missing or changed or required_now):
            continue  # plugin-only fields alone are the plugin's own design: only its code reads them
        parts = []
        if missing:
            parts.append("missing upstream field(s) " + ", ".join(
                f"`{n}` (read at {_short(read_at[n][0])}:{read_at[n][1]})" for n in missing))
        if unread:
            parts.append("not counted (no code that runs with this metadata reads them): " + short_list(unread, 120))
        if changed:
            parts.append("retyped " + ", ".join(f"`{n}` ({pf[n][0]} vs upstream {uf[n][0]}; read at "
                                                f"{_short(read_at[n][0])}:{read_at[n][1]})" for n in changed))
        if required_now:
            parts.append("required here but defaulted upstream: " + ", ".join(f"`{n}`" for n in required_now))
        if extra:
            parts.append("plugin-only field(s) " + ", ".join(f"`{n}`" for n in extra))
        sev = "warning" if (missing or changed or required_now) else "info"
        pc = pv.cls
        pos = ctx.name_range(pc.line, pc.name)
        if missing:
            msg = f"`{pc.name}` lacks {len(missing)} field{'s' if len(missing) > 1 else ''} of upstream `{uv.qual}`: {short_list(missing, 70)}."
        elif changed or required_now:
            msg = f"`{pc.name}` declares fields unlike upstream `{uv.qual}`: {short_list(changed + required_now, 70)}."
        else:
            msg = f"`{pc.name}` has {len(extra)} plugin-only field{'s' if len(extra) > 1 else ''} upstream `{uv.qual}` lacks: {short_list(extra, 70)}."
        others = [x for x in (f"{len(changed)} retyped" if changed and missing else "",
                              f"{len(required_now)} required here, defaulted upstream" if required_now and missing else "",
                              f"{len(extra)} plugin-only" if extra and (missing or changed or required_now) else "") if x]
        if others:
            msg = msg[:-1] + f" ({', '.join(others)})."
        ctx.add("AL112", *pos, msg, severity=sev, upstream=uv.dotted, missing=missing, extra=extra, changed=changed,
                required_now=required_now, read_at={n: list(read_at[n]) for n in missing + changed},
                detail=f"Upstream {uv.dotted} ({_short(uv.module.path)}:{uv.cls.line}): " + "; ".join(parts) + ".")


_ = (Path, _rel)
