"""Plugin symbols and their upstream counterparts, on one side (one upstream version).

A :class:`Side` is the plugin checkout analysed against one upstream version: a
:class:`~attnlens.workspace.Workspace` over the same root whose target ``sys.path``
starts with that version's folder. Looking a dotted name up on a side gives an
:class:`UpSym` with its signature, normalised body hash and class shape.

Counterparts (:func:`class_counterpart`, :func:`function_counterpart`) are found, in order:

1. an explicit ``upstream-map`` entry (longest prefix wins);
2. the registry: a registered backend's enum default class; the impl/builder that the
   upstream default backend returns from ``get_impl_cls``/``get_builder_cls``; an
   out-of-tree CustomOp's upstream base;
3. the same module path (``vllm_metax.X`` -> ``vllm.X``), same name, then the name
   without a vendor prefix (``MacaFlashAttentionBackend`` -> ``FlashAttentionBackend``);
4. a direct upstream base class defined in that same-path module or with that name.

Methods are looked up on the counterpart class through its upstream MRO; a method of a
class without counterpart is compared with the upstream method it overrides
(signature only).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..target import TargetInfo
from ..walk import ValKind
from . import astsyms as A

_DEF_RE = re.compile(rb"^(?:async[ \t]+)?def[ \t]+([A-Za-z_][A-Za-z0-9_]*)|^class[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.M)
_FROM_RE = re.compile(rb"^[ \t]*from[ \t]+([A-Za-z_][\w.]*)[ \t]+import[ \t]*(\([^)]*\)|[^\n]*)", re.M)


@dataclass
class UpSym:
    dotted: str  # as asked
    kind: str  # function | class | module | other
    defined: str  # module.qual where it is defined (after re-exports)
    module: str
    qual: str
    path: str | None
    line: int | None
    node: object = None
    owner: str | None = None  # class qualname that defines a method
    sig: A.Signature | None = None
    body: str | None = None
    shape: A.ClassShape | None = None
    trivial: bool = False

    def link(self) -> str | None:
        if not self.path:
            return None
        return f"file://{self.path}" + (f"#L{self.line}" if self.line else "")


class Side:
    """The plugin checkout seen against one upstream version."""

    def __init__(self, ws, label: str, source=None, store: A.SourceStore | None = None):
        self.ws = ws
        self.label = label
        self.source = source
        self.store = store or A.SourceStore()
        self._memo: dict = {}
        self._registry = None
        self._subclass_index: dict | None = None

    @classmethod
    def for_upstream(cls, ws, source, label: str, store: A.SourceStore | None = None) -> "Side":
        """A side whose ``vllm`` comes from ``source`` (an UpstreamSource) and the rest from ``ws``'s target."""
        from ..workspace import Workspace

        t = ws.target
        sp = [source.root] + [p for p in (t.sys_path or []) if os.path.realpath(p) != os.path.realpath(source.root)]
        target = TargetInfo(python=t.python, sys_path=sp, version=t.version, prefix=t.prefix, purelib=t.purelib,
                            ext_suffixes=list(t.ext_suffixes or [".so"]), stdlib=list(t.stdlib or []))
        cache_root = ws.cache.folder.parent if ws.cache.enabled else None
        other = Workspace(ws.root, target=target, cache_dir=cache_root, use_cache=ws.cache.enabled)
        return cls(other, label, source, store)

    # -- lookups ---------------------------------------------------------------
    def lookup(self, dotted: str | None) -> UpSym | None:
        """The upstream (non-workspace) function/class/module ``dotted`` on this side, or None."""
        if not dotted:
            return None
        if dotted in self._memo:
            return self._memo[dotted]
        out = None
        try:
            v = self.ws.query.resolve_symbol(dotted)
        except RecursionError:
            v = None
        if v is not None and v.module is not None and not v.module.workspace:
            if v.kind in (ValKind.FUNCTION, ValKind.CLASS):
                out = self._mk(dotted, v)
            elif v.kind == ValKind.MODULE:
                out = UpSym(dotted, "module", v.module.name, v.module.name, "", v.module.path, 1)
            elif v.kind == ValKind.UNKNOWN and v.extra.get("binding") is not None:
                b = v.extra["binding"]
                out = UpSym(dotted, "other", v.qual, v.module.name, v.qual, v.module.path, b.line)
        elif v is not None and v.kind == ValKind.MODULE and v.module is not None:
            out = UpSym(dotted, "module", v.module.name, v.module.name, "", v.module.path, 1)
        self._memo[dotted] = out
        return out

    def exists(self, dotted: str) -> bool:
        """Does ``dotted`` name anything upstream on this side (functions, classes, modules, values)?"""
        key = ("exists", dotted)
        if key in self._memo:
            return self._memo[key]
        ok = False
        try:
            v = self.ws.query.resolve_symbol(dotted)
            if v.kind in (ValKind.FUNCTION, ValKind.CLASS, ValKind.MODULE, ValKind.NAMESPACE, ValKind.INSTANCE,
                          ValKind.EXT_MODULE, ValKind.EXT_ATTR, ValKind.TORCH_OP, ValKind.PLATFORM):
                ok = True
            elif v.kind == ValKind.UNKNOWN:
                r = v.reason or ""
                ok = not ("does not exist" in r or "not found" in r or "not bound" in r)
            elif v.kind == ValKind.NOT_INSTALLED:
                ok = False
        except RecursionError:
            ok = False
        self._memo[key] = ok
        return ok

    def _mk(self, dotted: str, v) -> UpSym:
        node = self.store.node(v.module.path, v.qual)
        s = UpSym(dotted, v.kind, f"{v.module.name}.{v.qual}", v.module.name, v.qual, v.module.path, v.line, node,
                  owner=v.owner)
        if v.kind == ValKind.FUNCTION:
            s.sig = A.signature(node)
            s.body = A.body_hash(node)
            s.trivial = A.is_trivial(node)
        else:
            s.shape = A.class_shape(node)
        return s

    def module(self, name: str):
        return self.ws.index.module(name)

    def resolve_in(self, modname: str, scope: str, text: str, line: int | None):
        m = self.ws.index.module(modname)
        if m is None:
            return None
        try:
            return self.ws.query.resolve_dotted(m, scope, text, line=line)
        except RecursionError:
            return None

    # -- registry --------------------------------------------------------------
    def registry(self) -> dict:
        """plugin class dotted -> (role, entry name, upstream counterpart dotted or None)."""
        if self._registry is not None:
            return self._registry
        out: dict = {}
        try:
            entries = self.ws.backends(with_call_sites=False, include_custom_ops=True)
        except Exception:
            entries = []
        query = self.ws.query
        for e in entries:
            up = e.upstream.cls if e.upstream is not None else None
            role = "custom_op" if e.kind == "custom_op" else "backend"
            out.setdefault(e.cls, (role, e.name, up))
            if e.kind == "custom_op":
                continue
            uv = self.ws.query.resolve_symbol(up) if up else None
            for attr, meth in (("impl", "get_impl_cls"), ("builder", "get_builder_cls")):
                ref = getattr(e, attr, None)
                if ref is None or not ref.cls:
                    continue
                up_part = None
                if uv is not None and uv.kind == ValKind.CLASS and uv.module is not None:
                    try:
                        uref, _ = query.backend_part(uv, meth)
                        up_part = uref.cls
                    except Exception:
                        up_part = None
                if ref.inherited_from:
                    continue  # the plugin runs the upstream part itself: not a plugin symbol
                out.setdefault(ref.cls, (attr, e.name, up_part))
            if e.metadata is not None and e.metadata.cls:
                out.setdefault(e.metadata.cls, ("metadata", e.name, None))
        self._registry = out
        return out

    # -- subclasses (for "who else overrides this new hook") ---------------------
    def subclasses_of(self, base: UpSym, packages: list[str]) -> list[UpSym]:
        """Upstream classes under ``packages`` that derive from ``base`` (transitively)."""
        idx = self._subclasses(tuple(sorted(set(packages))))
        out = []
        seen = set()
        frontier = [base.defined]
        while frontier:
            cur = frontier.pop()
            for cand in idx.get(cur, []):
                if cand not in seen:
                    seen.add(cand)
                    frontier.append(cand)
        for d in sorted(seen):
            s = self.lookup(d)
            if s is not None and s.kind == "class":
                out.append(s)
        return out

    def _subclasses(self, packages: tuple) -> dict:
        key = ("subidx", packages)
        if key in self._memo:
            return self._memo[key]
        idx: dict = {}
        for pkg in packages:
            loc = self.ws.index.locate(pkg)
            if loc is None or loc.kind != "py" or not loc.is_package:
                continue
            top = os.path.dirname(loc.path)
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
                for fn in filenames:
                    if not fn.endswith(".py"):
                        continue
                    rel = os.path.relpath(os.path.join(dirpath, fn), top)[:-3].replace(os.sep, ".")
                    name = pkg if rel == "__init__" else f"{pkg}.{rel[:-9] if rel.endswith('.__init__') else rel}"
                    m = self.ws.index.module(name)
                    if m is None or m.workspace:
                        continue
                    for q, c in m.summary.classes.items():
                        if "." in q:
                            continue
                        for bv in self.ws.query.class_bases(m, q):
                            if bv.kind == ValKind.CLASS and bv.module is not None:
                                idx.setdefault(f"{bv.module.name}.{bv.qual}", []).append(f"{m.name}.{q}")
        self._memo[key] = idx
        return idx

    # -- where names are defined (moved symbols, renamed modules) -------------------------
    def _scan(self, package: str) -> tuple[dict, dict]:
        """One text pass over the upstream package on this side: top-level ``def``/``class`` name ->
        [module], and ``(module, name)`` of every ``from module import name`` -> [importing module]."""
        key = ("scan", package)
        if key in self._memo:
            return self._memo[key]
        defs: dict = {}
        imports: dict = {}
        loc = self.ws.index.locate(package)
        if loc is not None and loc.kind == "py" and loc.is_package and not self.ws.index.is_workspace_path(loc.path):
            top = os.path.dirname(loc.path)
            from ..index import iter_py_bytes

            for p, data in iter_py_bytes(top):
                rel = os.path.relpath(p, top)[:-3].replace(os.sep, ".")
                if rel == "__init__":
                    modname = package
                elif rel.endswith(".__init__"):
                    modname = f"{package}.{rel[:-9]}"
                else:
                    modname = f"{package}.{rel}"
                for mt in _DEF_RE.finditer(data):
                    name = (mt.group(1) or mt.group(2)).decode()
                    defs.setdefault(name, []).append(modname)
                for mt in _FROM_RE.finditer(data):
                    target = mt.group(1).decode()
                    body = re.sub(rb"#[^\n]*", b"", mt.group(2)).replace(b"\\\n", b" ").strip(b"() \t\r\n")
                    for item in body.split(b","):
                        parts = item.split()
                        if parts:
                            imports.setdefault((target, parts[0].decode()), []).append(modname)
        self._memo[key] = (defs, imports)
        return defs, imports

    def definitions(self, package: str) -> dict:
        """Top-level ``def``/``class`` name -> [module] over the upstream package on this side (text scan)."""
        return self._scan(package)[0]

    def importers(self, package: str, module: str, name: str) -> list[str]:
        """Upstream modules on this side whose text has ``from module import name`` (any indentation)."""
        return self._scan(package)[1].get((module, name), [])

    def find_by_name(self, name: str, package: str, near: str = "", kind: str | None = None) -> list[str]:
        """Dotted names ``module.name`` where ``name`` is defined at top level, closest to ``near`` first."""
        mods = self.definitions(package).get(name, [])
        out = []
        for m in mods:
            s = self.lookup(f"{m}.{name}")
            if s is not None and (kind is None or s.kind == kind):
                out.append(s.defined)
        near_parts = near.split(".")

        def score(d):
            parts = d.rpartition(".")[0].split(".")
            common = 0
            for a, b in zip(parts, near_parts):
                if a != b:
                    break
                common += 1
            same_leaf = parts[-1] == near_parts[-1] if near_parts else False
            return (-int(same_leaf), -common, d)

        return sorted(dict.fromkeys(out), key=score)

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:
            pass


# ----------------------------------------------------------------------------- counterparts


@dataclass
class Counterpart:
    dotted: str | None
    via: str  # config | registry | impl | builder | custom_op | same_module | prefix | base | override | patch | none
    relation: str = "copy"  # copy | override | patch
    notes: list = field(default_factory=list)


def upstream_module_name(modname: str, cfg) -> str | None:
    m = cfg.map_prefix(modname)
    if m is not None:
        k, v = m
        return v + modname[len(k):]
    top, _, rest = modname.partition(".")
    return f"{cfg.upstream_package}.{rest}" if rest else cfg.upstream_package


def strip_prefix(name: str, prefixes) -> list[str]:
    out = []
    for p in sorted(prefixes, key=len, reverse=True):
        if name.startswith(p) and len(name) > len(p) and name[len(p)].isupper():
            out.append(name[len(p):])
        if name.startswith(p + "_") and len(name) > len(p) + 1:
            out.append(name[len(p) + 1:])
    low = [p.lower() + "_" for p in prefixes]
    for p in low:
        if name.startswith(p):
            out.append(name[len(p):])
    return list(dict.fromkeys(out))


def class_counterpart(side: Side, plugin_ws, modname: str, qual: str, cfg) -> Counterpart:
    dotted = f"{modname}.{qual}"
    m = cfg.map_prefix(dotted)
    if m is not None and m[0] != modname:  # a symbol-level mapping (module-level ones are used below)
        k, v = m
        target = v + dotted[len(k):]
        if _is_class(side.lookup(target)):
            return Counterpart(target, "config")
    reg = side.registry().get(dotted)
    if reg is not None:
        role, name, up = reg
        if up and _is_class(side.lookup(up)):
            return Counterpart(up, "registry" if role == "backend" else role)
    umod = upstream_module_name(modname, cfg)
    if umod:
        top_name = qual.split(".")[-1]
        parent = qual.rpartition(".")[0]
        prefix = f"{umod}.{parent}." if parent else f"{umod}."
        for cand, via in [(top_name, "same_module")] + [(n, "prefix") for n in strip_prefix(top_name, cfg.class_prefixes)]:
            s = side.lookup(prefix + cand)
            if _is_class(s):
                notes = [] if s.module == umod else [f"{prefix + cand} is re-exported from {s.defined}"]
                return Counterpart(prefix + cand, via if m is None else "config", notes=notes)
    # a direct upstream base class from the same-path module or with the same (unprefixed) name
    pm = plugin_ws.index.module(modname)
    if pm is not None and qual in pm.summary.classes:
        names = {qual.split(".")[-1], *strip_prefix(qual.split(".")[-1], cfg.class_prefixes)}
        for b in plugin_ws.query.class_bases(pm, qual):
            if b.kind == "class" and b.module is not None and not b.module.workspace:
                bd = f"{b.module.name}.{b.qual}"
                if (umod and b.module.name == umod) or b.qual.split(".")[-1] in names:
                    if _is_class(side.lookup(bd)):
                        return Counterpart(bd, "base")
    return _by_name(side, modname, qual.split(".")[-1], cfg, "class") if "." not in qual else Counterpart(None, "none")


def _by_name(side: Side, modname: str, name: str, cfg, kind: str) -> Counterpart:
    """A ported module: the one upstream definition of the same (or unprefixed) name, if unambiguous."""
    umod = upstream_module_name(modname, cfg) or ""
    for cand in [name] + strip_prefix(name, cfg.class_prefixes):
        found = side.find_by_name(cand, cfg.upstream_package, umod, kind)
        if not found:
            continue
        leaf = umod.rpartition(".")[2]
        same_leaf = [d for d in found if d.rpartition(".")[0].rpartition(".")[2] == leaf]
        if len(found) == 1 or len(same_leaf) == 1:
            d = found[0] if len(found) == 1 else same_leaf[0]
            return Counterpart(d, "name", notes=[f"counterpart found by name: {d} (module path differs)"])
    return Counterpart(None, "none")


def function_counterpart(side: Side, modname: str, qual: str, cfg) -> Counterpart:
    dotted = f"{modname}.{qual}"
    m = cfg.map_prefix(dotted)
    if m is not None and m[0] != modname:
        k, v = m
        target = v + dotted[len(k):]
        if _is_func(side.lookup(target)):
            return Counterpart(target, "config")
    umod = upstream_module_name(modname, cfg)
    if umod:
        for cand, via in [(qual, "same_module")] + [(n, "prefix") for n in strip_prefix(qual, cfg.class_prefixes)]:
            s = side.lookup(f"{umod}.{cand}")
            if _is_func(s):
                return Counterpart(f"{umod}.{cand}", via if m is None else "config")
    return _by_name(side, modname, qual, cfg, "function") if "." not in qual else Counterpart(None, "none")


def _is_class(s: UpSym | None) -> bool:
    return s is not None and s.kind == "class"


def _is_func(s: UpSym | None) -> bool:
    return s is not None and s.kind == "function"
