"""Two-version drift: what changed upstream for every plugin symbol in scope.

The plugin checkout is analysed twice, once against the OLD upstream version and once
against the NEW one (by default the vLLM installed in the target interpreter). For
every plugin symbol in scope (registered backends and their impl/builder/metadata
classes, every class and function of the scope's modules, their methods, and the
plugin's monkey patches) the upstream counterpart is found on both sides
(:mod:`.mapping`) and compared aspect by aspect:

========== =====================================================================
aspect      compared
========== =====================================================================
signature   parameters (kind, default, annotation), method kind, return annotation
body        normalised AST hash (comments, formatting, docstrings do not count)
fields      dataclass / annotated fields (name, annotation, default)
attributes  class attributes
hooks       methods new in the upstream MRO (base hooks), with the upstream
            classes that override them
imports     plugin imports of upstream names that no longer exist
calls       plugin calls of upstream callables whose signature changed
========== =====================================================================

Each aspect is classified from the plugin value P, the old upstream value O and the new
upstream value N:

* ``O == N`` and ``P == O``: ``unchanged``;
* ``O == N`` and ``P != O``: ``retained_adaptation`` (a MetaX difference upstream did not touch);
* ``O != N`` and ``P == N``: ``retained_adaptation`` (the plugin already differed from OLD in the
  same way: not a new problem);
* ``O != N`` otherwise: ``changed_upstream`` (review: port or confirm);
* counterpart in OLD but not in NEW: ``removed_upstream``;
* a method new in the upstream MRO that the plugin does not define: ``new_hook``.

A symbol's status is the most severe of its aspects. Findings use rule ids ``AL301``-
``AL307`` and the diagnostic source ``attnlens-drift``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field

from ..walk import ValKind
from . import DIAGNOSTIC_SOURCE
from . import astsyms as A
from .config import UpgradeConfig, load_config
from .mapping import (
    Counterpart,
    Side,
    UpSym,
    class_counterpart,
    function_counterpart,
    upstream_module_name,
)
from .scope import default_globs, relpath, scope_modules
from .upstream import UpstreamSource, read_version

STATUSES = ("removed_upstream", "changed_upstream", "new_hook", "retained_adaptation", "unchanged")
FLAGGED = ("removed_upstream", "changed_upstream", "new_hook")
_RANK = {s: i for i, s in enumerate(STATUSES)}

RULES = {
    "AL301": ("upstream-signature-changed", "warning", "The upstream counterpart's signature changed between the two versions."),
    "AL302": ("upstream-symbol-removed", "error", "The upstream counterpart, an imported upstream name or a called upstream callable no longer exists (or was renamed)."),
    "AL303": ("upstream-new-hook", "warning", "A method new in the upstream base classes, overridden by upstream siblings, that the plugin class does not define."),
    "AL304": ("upstream-dataclass-fields-changed", "warning", "The upstream metadata dataclass gained, lost or changed fields."),
    "AL305": ("upstream-body-changed", "warning", "The body of the upstream counterpart changed; the plugin copy may need the same change."),
    "AL306": ("upstream-class-attributes-changed", "info", "Class attributes of the upstream counterpart were added, removed or changed."),
    "AL307": ("upstream-callee-signature-changed", "warning", "The plugin calls an upstream callable whose signature changed."),
    "AL308": ("upstream-custom-op-parameters", "warning", "Upstream's custom op gained parameters that the plugin's variant of it (or its fake) does not accept."),
}


def rules_table() -> list[dict]:
    return [{"id": k, "name": v[0], "severity": v[1], "summary": v[2], "source": DIAGNOSTIC_SOURCE} for k, v in sorted(RULES.items())]


@dataclass
class Change:
    aspect: str
    status: str
    message: str
    rule: str | None = None
    severity: str = "info"
    data: dict = field(default_factory=dict)
    line: int | None = None  # a position of its own (calls, imports)
    col: int | None = None
    end_col: int | None = None

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


@dataclass
class DriftItem:
    symbol: str  # plugin dotted name (imports: module:name)
    kind: str  # class | method | function | patch | module
    role: str  # backend | impl | builder | metadata | custom_op | class | method | function | patch | module
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    counterpart_old: str | None = None
    counterpart_new: str | None = None
    via: str = "none"
    relation: str = "copy"
    status: str = "unchanged"
    changes: list = field(default_factory=list)
    old_link: str | None = None
    new_link: str | None = None
    notes: list = field(default_factory=list)

    def add(self, ch: Change) -> None:
        self.changes.append(ch)
        if _RANK[ch.status] < _RANK[self.status]:
            self.status = ch.status

    @property
    def flagged(self) -> bool:
        """Needs review: a removed/changed/new-hook aspect at warning or error severity."""
        return any(c.status in FLAGGED and c.severity != "info" for c in self.changes)

    @property
    def noted(self) -> bool:
        """Anything upstream-side to know, including informational new hooks and attribute changes."""
        return self.status in FLAGGED

    def summary(self) -> str:
        msgs = [c.message for c in self.changes if c.status in FLAGGED]
        if not msgs:
            msgs = [c.message for c in self.changes]
        return "; ".join(msgs)

    def to_json(self, root=None) -> dict:
        d = asdict(self)
        d["changes"] = [c.to_json() for c in self.changes]
        if root is not None:
            d["path"] = relpath(root, self.path)
        d["flagged"] = self.flagged
        return d


@dataclass
class DriftReport:
    old: dict
    new: dict
    root: str
    scope: list
    items: list
    subject: dict | None = None
    elapsed_s: float = 0.0
    errors: list = field(default_factory=list)
    # path -> lines of the text the analysis read (overlays included), for the findings' ids; filled by
    # Drift.run, else from the disk once per file (not once per ``findings()`` call: diagnostics ask per file)
    lines: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def old_label(self) -> str:
        return self.old.get("version") or self.old.get("spec") or "old"

    @property
    def new_label(self) -> str:
        return self.new.get("version") or self.new.get("spec") or "new"

    def counts(self) -> dict:
        out = {s: 0 for s in STATUSES}
        for it in self.items:
            out[it.status] += 1
        return out

    def item(self, symbol: str) -> DriftItem | None:
        for it in self.items:
            if it.symbol == symbol:
                return it
        return None

    def to_json(self) -> dict:
        return {
            "old": self.old, "new": self.new, "root": self.root, "subject": self.subject, "scope": self.scope,
            "counts": self.counts(), "elapsed_s": round(self.elapsed_s, 3), "errors": self.errors,
            "rules": rules_table(),
            "items": [it.to_json(self.root) for it in self.items],
            "findings": self.findings(),
        }

    def findings(self, include_retained: bool = False) -> list[dict]:
        out = []
        for it in self.items:
            for ch in it.changes:
                if ch.rule is None:
                    continue
                if ch.status not in FLAGGED and not include_retained:
                    continue
                line = ch.line or it.line
                col = ch.col if ch.col is not None else (it.col if ch.line is None else 0)
                end_col = ch.end_col if ch.end_col is not None else (it.end_col if ch.line is None else col + 1)
                data = {"symbol": it.symbol, "status": ch.status, "aspect": ch.aspect, "counterpart_old": it.counterpart_old,
                        "counterpart_new": it.counterpart_new, "old": self.old_label, "new": self.new_label,
                        "old_link": it.old_link, "new_link": it.new_link}
                data.update(ch.data)
                out.append({"rule": ch.rule, "severity": ch.severity, "source": DIAGNOSTIC_SOURCE, "path": it.path,
                            "line": line, "col": col, "end_line": line, "end_col": end_col,
                            "message": f"{ch.message} (upstream {self.old_label} -> {self.new_label})", "data": data})
        out.sort(key=lambda f: (f["path"], f["line"], f["col"], f["rule"]))
        from ..rules.ids import assign

        def lines_of(path):
            if path not in self.lines:
                try:
                    with open(path, encoding="utf-8", errors="replace") as fh:
                        self.lines[path] = fh.read().splitlines()
                except OSError:
                    self.lines[path] = []
            return self.lines[path]

        assign(out, self.root, lines_of)
        return out


def classify(p, o, n) -> str:
    if o == n:
        return "unchanged" if p == o else "retained_adaptation"
    if p == n:
        return "retained_adaptation"
    return "changed_upstream"


# ----------------------------------------------------------------------------- the analysis


def installed_source(ws, package: str = "vllm") -> UpstreamSource:
    for sp in ws.target.sys_path or []:
        if os.path.isfile(os.path.join(sp, package, "__init__.py")):
            return UpstreamSource("installed", os.path.realpath(sp), read_version(sp, package), "installed", package)
    return UpstreamSource("installed", "", "", "installed", package)


class Drift:
    """Upstream drift between two vLLM versions as it affects this plugin: ``run()`` compares what the plugin
    uses, overrides, registers and mirrors (classes, signatures, hooks, metadata fields, custom ops) in the
    old and the new upstream and returns the items of the report; ``close()`` releases the two upstream
    workspaces. Reached through ``attnlens drift`` / ``attnlens upgrade`` and the editor's drift diagnostics.
    """

    def __init__(self, ws, old: UpstreamSource, new: UpstreamSource | None = None, globs: list | None = None,
                 cfg: UpgradeConfig | None = None, patches: str = "scope"):
        self.ws = ws
        self.cfg = cfg or load_config(ws.root)
        self.store = A.SourceStore()
        self.old_src = old
        self.new_src = new or installed_source(ws, self.cfg.upstream_package)
        self.old = Side.for_upstream(ws, old, old.label, self.store)
        self.new = Side(ws, self.new_src.label, self.new_src, self.store) if new is None else Side.for_upstream(ws, new, new.label, self.store)
        self.globs = list(globs or self.cfg.scope or default_globs(ws, wide=True))
        self.patches_mode = patches
        self.errors: list[str] = []
        self._up_pkg = self.cfg.upstream_package

    # -- entry -------------------------------------------------------------------
    def run(self) -> DriftReport:
        t0 = time.perf_counter()
        items: list[DriftItem] = []
        mods = {m.name: m for m in scope_modules(self.ws, self.globs)}
        reg = self.new.registry()
        for dotted in list(reg) + list(self.old.registry()):
            mname = self._module_of(dotted)
            if mname and mname not in mods:
                m = self.ws.index.module(mname)
                if m is not None and m.workspace:
                    mods[mname] = m
        for name in sorted(mods):
            m = mods[name]
            try:
                items.extend(self._module_items(m))
            except RecursionError:
                self.errors.append(f"{m.path}: recursion limit")
            except Exception as e:  # keep going: one broken module must not hide the rest
                self.errors.append(f"{m.path}: {type(e).__name__}: {e}")
        if self.patches_mode != "none":
            known = {it.symbol: it for it in items}
            for pit in self._patch_items(set(mods)):
                if pit.symbol in known:  # a scope function that also replaces an upstream attribute
                    known[pit.symbol].notes.extend(pit.notes)
                    for ch in pit.changes:
                        if ch.aspect != "counterpart" or ch.status == "removed_upstream":
                            known[pit.symbol].add(ch)
                else:
                    items.append(pit)
        try:
            self._custom_ops(items)
        except RecursionError:
            self.errors.append("custom ops: recursion limit")
        except Exception as e:  # noqa: BLE001 - keep the rest of the report
            self.errors.append(f"custom ops: {type(e).__name__}: {e}")
        items.sort(key=lambda it: (relpath(self.ws.root, it.path), it.line, it.symbol))
        rep = DriftReport(self.old_src.to_json(), self.new_src.to_json(), str(self.ws.root), self.globs, items,
                          subject=_subject_of(self.ws), errors=self.errors)
        for path in {it.path for it in items if any(ch.rule for ch in it.changes)}:
            rep.lines[path] = (self.ws.index.source_text(path) or "").splitlines()
        rep.elapsed_s = time.perf_counter() - t0
        return rep

    def _module_of(self, dotted: str) -> str | None:
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            if ".".join(parts[:i]) in self.ws.index.ws_files:
                return ".".join(parts[:i])
        return None

    # -- per module --------------------------------------------------------------------
    def _module_items(self, m) -> list[DriftItem]:
        out = []
        pf = self.store.get(m.path, self.ws.index.source_text(m.path))
        s = m.summary
        reg = self.new.registry()
        for q, c in s.classes.items():
            if "." in q:
                if c.is_dataclass and q.rpartition(".")[0] in s.classes:
                    # a dataclass nested in a class (metadata parts): its fields drift like a top-level one's
                    out.append(self._class_item(m, q, c, pf.defs.get(q) if pf else None, pf, "class"))
                continue
            node = pf.defs.get(q) if pf else None
            role = reg.get(f"{m.name}.{q}", ("class",))[0]
            out.append(self._class_item(m, q, c, node, pf, role))
            for mname, fq in c.methods.items():
                f = s.functions.get(fq)
                if f is None:
                    continue
                fnode = pf.defs.get(fq) if pf else None
                out.append(self._method_item(m, q, mname, f, fnode, pf, role))
        for q, f in s.functions.items():
            if "." in q or f.class_name:
                continue
            fnode = pf.defs.get(q) if pf else None
            out.append(self._function_item(m, q, f, fnode, pf))
        mod_item = self._imports_item(m)
        if mod_item is not None:
            out.append(mod_item)
        self._calls(m, out)
        return [it for it in out if it is not None and (it.counterpart_old or it.counterpart_new or it.changes)]

    def _pos(self, m, name_line: int, name: str, col: int, end_line: int, pf) -> tuple[int, int, int, int]:
        text = pf.lines[name_line - 1] if pf and 0 < name_line <= len(pf.lines) else ""
        c = text.find(name, col)
        if c < 0:
            return name_line, col, name_line, col + len(name)
        return name_line, c, name_line, c + len(name)

    # -- classes ---------------------------------------------------------------------
    def _class_item(self, m, q, c, node, pf, role) -> DriftItem:
        line, col, el, ec = self._pos(m, c.line, c.name, c.col, c.end_line, pf)
        it = DriftItem(f"{m.name}.{q}", "class", role, m.path, line, col, el, ec)
        cp_o = class_counterpart(self.old, self.ws, m.name, q, self.cfg)
        cp_n = class_counterpart(self.new, self.ws, m.name, q, self.cfg)
        o = self.old.lookup(cp_o.dotted)
        n = self.new.lookup(cp_n.dotted) if cp_n.dotted else None
        if n is None and cp_o.dotted:
            n = self.new.lookup(cp_o.dotted)
            if n is not None:
                cp_n = Counterpart(cp_o.dotted, cp_o.via)
        if o is None and cp_n.dotted:
            o = self.old.lookup(cp_n.dotted)
            if o is not None:
                cp_o = Counterpart(cp_n.dotted, cp_n.via)
        it.counterpart_old = o.defined if o else None
        it.counterpart_new = n.defined if n else None
        it.via = cp_n.via if n else cp_o.via
        it.notes.extend(cp_o.notes + [x for x in cp_n.notes if x not in cp_o.notes])
        it.old_link = o.link() if o else None
        it.new_link = n.link() if n else None
        pshape = A.class_shape(node)
        if o is not None and n is None:
            it.add(self._removed(it, o, cp_o.dotted, kind="class"))
        elif o is None and n is not None:
            it.add(Change("counterpart", "retained_adaptation", f"upstream class {n.defined} is new in {self.new.label}; the plugin already has {c.name}"))
        elif o is not None and n is not None:
            if o.defined != n.defined:
                it.notes.append(f"upstream counterpart moved: {o.defined} -> {n.defined}")
            attrs = (self._effective_attrs(self.new, m.name, q), self._effective_attrs(self.old, o.module, o.qual),
                     self._effective_attrs(self.new, n.module, n.qual))
            self._compare_class_shapes(it, pshape, o, n, attrs)
        self._hooks(it, m, q, c, o, n)
        return it

    def _effective_attrs(self, side: Side, modname: str, qual: str) -> dict:
        """Class attributes as seen on the class: its own, then its bases' (first definition wins)."""
        m = side.module(modname)
        if m is None or qual not in m.summary.classes:
            return {}
        out: dict = {}
        try:
            mro = side.ws.query.mro(m, qual)
        except RecursionError:
            return out
        for cv in mro:
            if cv.module is None or cv.cls is None:
                continue
            text = self.ws.index.source_text(cv.module.path) if cv.module.workspace else None
            pf = self.store.get(cv.module.path, text)
            sh = A.class_shape(pf.defs.get(cv.qual)) if pf is not None else None
            if sh is None:
                continue
            for k, v in sh.attrs.items():
                out.setdefault(k, v)
            for k in sh.methods:
                out.setdefault(k, "<method>")
        return out

    def _compare_class_shapes(self, it: DriftItem, p: A.ClassShape | None, o: UpSym, n: UpSym, attrs: tuple) -> None:
        so, sn = o.shape, n.shape
        if so is None or sn is None:
            return
        pf = p.fields if p else ()
        if so.fields != sn.fields or (so.is_dataclass or sn.is_dataclass) and pf != so.fields:
            st = classify(pf, so.fields, sn.fields)
            if so.fields != sn.fields:
                msg = _fields_change(so.fields, sn.fields, n.qual)
                # the plugin may hold a (re)ordered copy: compare as sets per name for the retained check
                if st == "changed_upstream" and p is not None and _fields_cover(pf, so.fields, sn.fields):
                    st = "retained_adaptation"
                    msg += " (the plugin class already has the new fields)"
                it.add(Change("fields", st, msg, "AL304" if st == "changed_upstream" else None,
                              "warning", {"old_fields": [list(f) for f in so.fields], "new_fields": [list(f) for f in sn.fields]}))
            elif pf and pf != so.fields:
                it.add(Change("fields", "retained_adaptation", f"fields differ from upstream {n.qual}: {_fields_change(so.fields, pf, 'the plugin class')}"))
        pattrs, oattrs, nattrs = attrs
        own = set(so.attrs) | set(sn.attrs)  # attributes the counterpart itself sets in either version
        keys = sorted(k for k in own if oattrs.get(k) != nattrs.get(k) and "<method>" not in (oattrs.get(k), nattrs.get(k)))
        if keys:
            todo = [k for k in keys if pattrs.get(k) != nattrs.get(k)]
            msg = "; ".join(_attr_change(k, oattrs.get(k), nattrs.get(k)) for k in keys)
            if todo:
                # the plugin class does not match the new upstream value: sync (or confirm the MetaX value)
                sev = "warning"
                it.add(Change("attributes", "changed_upstream", f"class attributes of {n.qual} changed: {msg}", "AL306", sev,
                              {"attributes": {k: [oattrs.get(k), nattrs.get(k), pattrs.get(k)] for k in keys}}))
            else:
                it.add(Change("attributes", "retained_adaptation", f"class attributes of {n.qual} changed ({msg}); the plugin class already matches"))
        if so.bases != sn.bases:
            it.notes.append(f"upstream bases of {n.qual}: ({', '.join(so.bases)}) -> ({', '.join(sn.bases)})")

    # -- new hooks ------------------------------------------------------------------
    def _upstream_methods(self, side: Side, modname: str, q: str, counterpart: UpSym | None) -> tuple[dict, str | None]:
        """name -> owner dotted for methods in the upstream part of the MRO (counterpart first)."""
        out: dict = {}
        if counterpart is not None:
            m = side.module(counterpart.module)
            if m is None:
                return out, None
            mro = side.ws.query.mro(m, counterpart.qual)
        else:
            m = side.module(modname)
            if m is None or q not in m.summary.classes:
                return out, None
            mro = side.ws.query.mro(m, q)
        for cv in mro:
            if cv.module is None or cv.cls is None or cv.module.workspace:
                continue
            for name in cv.cls.methods:
                out.setdefault(name, f"{cv.module.name}.{cv.qual}")
        return out, (f"{counterpart.module}.{counterpart.qual}" if counterpart else None)

    def _hooks(self, it: DriftItem, m, q: str, c, o: UpSym | None, n: UpSym | None) -> None:
        if o is None and n is None:
            # no counterpart: new hooks of the upstream bases still matter
            pass
        elif o is None or n is None:
            return
        try:
            old_methods, _ = self._upstream_methods(self.old, m.name, q, o)
            new_methods, k = self._upstream_methods(self.new, m.name, q, n)
        except RecursionError:
            return
        if not new_methods:
            return
        # what the plugin class defines (its own and workspace bases) and whether it inherits the counterpart
        pm = self.new.module(m.name)
        plugin_defs: set = set()
        inherits_counterpart = False
        if pm is not None and q in pm.summary.classes:
            for cv in self.new.ws.query.mro(pm, q):
                if cv.module is None or cv.cls is None:
                    continue
                if cv.module.workspace:
                    plugin_defs.update(cv.cls.methods)
                    plugin_defs.update(cv.cls.attrs)
                elif k and f"{cv.module.name}.{cv.qual}" == k:
                    inherits_counterpart = True
        own_old = set(o.shape.methods) if o is not None and o.shape else set()
        own_new = set(n.shape.methods) if n is not None and n.shape else set()
        candidates = []
        for name, owner in sorted(new_methods.items()):
            if name.startswith("__") and name != "__init__":
                continue
            if name not in old_methods:
                if k and owner == k and name.startswith("_"):
                    continue  # a private helper of the counterpart: part of its body changes
                candidates.append((name, owner, "new"))
            elif k and name in own_new and name not in own_old and old_methods.get(name) != k:
                candidates.append((name, owner, "newly_overridden"))
        if not candidates:
            return
        for name, owner, why in candidates:
            if name in plugin_defs:
                it.add(Change("hooks", "retained_adaptation", f"{name}() is new upstream ({owner}); the plugin class already defines it",
                              data={"hook": name, "declared_in": owner}))
                continue
            if inherits_counterpart:
                it.add(Change("hooks", "new_hook", f"inherits new upstream {owner}.{name}() unchanged (runs upstream code on this platform)",
                              "AL303", "info", {"hook": name, "declared_in": owner, "inherited": True}))
                continue
            base_owner = self._declaring_base(name, new_methods, k, n)
            overriders, nsub = self._overriders(name, base_owner, n)
            k_overrides = bool(k) and name in own_new
            # a hook that the counterpart overrides, or that most upstream siblings override, needs a decision
            sev = "warning" if k_overrides or (overriders and len(overriders) * 2 >= max(nsub, 1)) else "info"
            if why == "newly_overridden":
                msg = f"upstream {n.qual} now overrides {name}() (declared in {base_owner or owner}); the plugin class does not"
            else:
                where = f"{owner}" if owner != k else f"{n.qual}"
                msg = f"new upstream hook {name}() in {where}"
                if k_overrides and owner != k:
                    msg += f"; the counterpart {n.qual} overrides it"
                msg += "; the plugin class does not define it"
            if overriders:
                shown = ", ".join(s.rpartition(".")[2] for s in overriders[:6]) + (f" and {len(overriders) - 6} more" if len(overriders) > 6 else "")
                msg += f" (upstream overriders: {shown})"
            data = {"hook": name, "declared_in": base_owner or owner, "counterpart_overrides": k_overrides,
                    "overridden_by": overriders}
            if k_overrides and n is not None and n.path:
                data["upstream_override"] = f"{n.defined}.{name}"
                data["upstream_location"] = f"{n.path}:{n.shape.methods[name].lineno}"
            it.add(Change("hooks", "new_hook", msg, "AL303", sev, data))

    def _declaring_base(self, name: str, new_methods: dict, k: str | None, n: UpSym | None) -> str | None:
        """The upstream base (not the counterpart) that declares ``name`` in NEW."""
        if n is None:
            return new_methods.get(name)
        m = self.new.module(n.module)
        if m is None:
            return new_methods.get(name)
        for cv in self.new.ws.query.mro(m, n.qual)[1:]:
            if cv.module is not None and cv.cls is not None and name in cv.cls.methods:
                return f"{cv.module.name}.{cv.qual}"
        return new_methods.get(name)

    def _overriders(self, name: str, base: str | None, n: UpSym | None) -> tuple[list[str], int]:
        """Upstream subclasses of ``base`` (other than the counterpart) that define ``name``, and how many subclasses."""
        if not base:
            return [], 0
        bs = self.new.lookup(base)
        if bs is None:
            return [], 0
        pkgs = {bs.module.rpartition(".")[0] or bs.module}
        if n is not None:
            pkgs.add(n.module.rpartition(".")[0] or n.module)
        out = []
        subs = [s for s in self.new.subclasses_of(bs, sorted(pkgs)) if n is None or s.defined != n.defined]
        for s in subs:
            if s.shape is not None and name in s.shape.methods:
                out.append(s.defined)
        return sorted(set(out)), len(subs)

    # -- methods and functions ----------------------------------------------------------
    def _method_item(self, m, cq: str, name: str, f, node, pf, class_role: str) -> DriftItem:
        line, col, el, ec = self._pos(m, f.line, name, f.col, f.end_line, pf)
        it = DriftItem(f"{m.name}.{cq}.{name}", "method", "method", m.path, line, col, el, ec)
        cp_o = class_counterpart(self.old, self.ws, m.name, cq, self.cfg)
        cp_n = class_counterpart(self.new, self.ws, m.name, cq, self.cfg)
        ko = cp_o.dotted or cp_n.dotted
        kn = cp_n.dotted or cp_o.dotted
        o = n = None
        relation = "copy"
        if ko and self.old.lookup(ko) is not None:
            o = self._method_on(self.old, ko, name)
        if kn and self.new.lookup(kn) is not None:
            n = self._method_on(self.new, kn, name)
        if (ko and self.old.lookup(ko) is not None) or (kn and self.new.lookup(kn) is not None):
            # the method's own upstream owner decides between a copy and an override of a base hook
            owner_o = o.owner if o else None
            owner_n = n.owner if n else None
            ok = (self.old.lookup(ko).qual if ko and self.old.lookup(ko) else None)
            nk = (self.new.lookup(kn).qual if kn and self.new.lookup(kn) else None)
            if (o is None or owner_o != ok) and (n is None or owner_n != nk):
                relation = "override"
            if o is not None and n is not None and owner_o == ok and owner_n != nk:
                it.add(Change("override", "changed_upstream",
                              f"upstream {ok}.{name}() was removed; the class now inherits {n.defined}", "AL302", "warning",
                              {"now_inherited_from": n.defined}))
        else:
            # no class counterpart: the method overrides an upstream base method (signature contract only)
            o = self._override_target(self.old, m.name, cq, name)
            n = self._override_target(self.new, m.name, cq, name)
            relation = "override"
        it.relation = relation
        it.via = (cp_n.via if cp_n.dotted else cp_o.via) if relation == "copy" else "override"
        self._compare_callable(it, node, pf, o, n, relation, self._container(self.old, ko), self._container(self.new, kn))
        return it

    def _method_on(self, side: Side, cls_dotted: str, name: str) -> UpSym | None:
        s = side.lookup(f"{cls_dotted}.{name}")
        return s if s is not None and s.kind == "function" else None

    def _container(self, side: Side, dotted: str | None) -> UpSym | None:
        return side.lookup(dotted) if dotted else None

    def _override_target(self, side: Side, modname: str, cq: str, name: str) -> UpSym | None:
        pm = side.module(modname)
        if pm is None or cq not in pm.summary.classes:
            return None
        for cv in side.ws.query.mro(pm, cq)[1:]:
            if cv.module is None or cv.cls is None or cv.module.workspace:
                continue
            if name in cv.cls.methods:
                return side.lookup(f"{cv.module.name}.{cv.qual}.{name}")
        return None

    def _function_item(self, m, q: str, f, node, pf) -> DriftItem:
        line, col, el, ec = self._pos(m, f.line, f.name, f.col, f.end_line, pf)
        it = DriftItem(f"{m.name}.{q}", "function", "function", m.path, line, col, el, ec)
        cp_o = function_counterpart(self.old, m.name, q, self.cfg)
        cp_n = function_counterpart(self.new, m.name, q, self.cfg)
        o = self.old.lookup(cp_o.dotted or cp_n.dotted)
        n = self.new.lookup(cp_n.dotted or cp_o.dotted)
        o = o if o is not None and o.kind == "function" else None
        n = n if n is not None and n.kind == "function" else None
        it.via = cp_n.via if cp_n.dotted else cp_o.via
        self._compare_callable(it, node, pf, o, n, "copy", self.old.lookup(_parent(cp_o.dotted or cp_n.dotted)),
                               self.new.lookup(_parent(cp_n.dotted or cp_o.dotted)))
        return it

    def _compare_callable(self, it: DriftItem, node, pf, o: UpSym | None, n: UpSym | None, relation: str,
                          o_container: UpSym | None, n_container: UpSym | None) -> None:
        it.relation = relation
        it.counterpart_old = o.defined if o else None
        it.counterpart_new = n.defined if n else None
        it.old_link = o.link() if o else None
        it.new_link = n.link() if n else None
        if o is None and n is None:
            return
        psig = A.signature(node)
        pbody = A.body_hash(node)
        name = it.symbol.rpartition(".")[2]
        if o is not None and n is None:
            it.add(self._removed(it, o, o.dotted, kind="function", container=n_container))
            return
        if o is None and n is not None:
            if relation == "override":
                it.add(Change("counterpart", "retained_adaptation", f"upstream {n.defined}() is new in {self.new.label}; the plugin already overrides it"))
            else:
                st = "retained_adaptation" if psig == n.sig else "changed_upstream"
                msg = f"upstream {n.defined}() is new in {self.new.label}; the plugin already defines {name}()"
                if st == "changed_upstream":
                    msg += ": " + "; ".join(A.describe_signature_change(psig, n.sig, name)) if psig and n.sig else ""
                it.add(Change("counterpart", st, msg, "AL301" if st == "changed_upstream" else None, "warning"))
            return
        if o.defined != n.defined:
            it.notes.append(f"upstream counterpart moved: {o.defined} -> {n.defined}")
        # signature
        if o.sig is not None and n.sig is not None:
            if o.sig != n.sig:
                st = classify(psig, o.sig, n.sig)
                desc = A.describe_signature_change(o.sig, n.sig, name)
                if st == "changed_upstream" and psig is not None and _sig_covers(psig, o.sig, n.sig):
                    st = "retained_adaptation"
                msg = "upstream signature changed: " + "; ".join(desc or ["(formatting of annotations)"])
                if st == "retained_adaptation":
                    msg += " (the plugin already has the new signature)"
                it.add(Change("signature", st, msg, "AL301" if st == "changed_upstream" else None, "warning",
                              {"old_signature": o.sig.text(name), "new_signature": n.sig.text(name),
                               "plugin_signature": psig.text(name) if psig else None}))
            elif psig is not None and psig != o.sig:
                desc = A.describe_signature_change(o.sig, psig, name)
                it.add(Change("signature", "retained_adaptation", "signature differs from upstream: " + "; ".join(desc or ["annotations"]),
                              data={"upstream_signature": o.sig.text(name), "plugin_signature": psig.text(name)}))
        # body
        if relation in ("copy", "patch") and not (o.trivial and n.trivial):
            if o.body != n.body:
                st = classify(pbody, o.body, n.body)
                pf_o = self.store.get(o.path)
                pf_n = self.store.get(n.path)
                a = A.segment(pf_o, o.node)
                b = A.segment(pf_n, n.node)
                diff = A.unified_diff(a, b, f"{self.old.label}/{o.defined}", f"{self.new.label}/{n.defined}")
                plus = sum(1 for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
                minus = sum(1 for ln in diff.splitlines() if ln.startswith("-") and not ln.startswith("---"))
                msg = f"upstream body of {n.qual}() changed (+{plus}/-{minus} lines)"
                if st == "retained_adaptation":
                    msg += "; the plugin body already matches the new upstream"
                elif pbody == o.body:
                    msg += "; the plugin still has the old upstream body"
                else:
                    msg += "; the plugin copy has its own changes too (merge by hand)"
                it.add(Change("body", st, msg, "AL305" if st == "changed_upstream" else None, "warning",
                              {"diff": diff, "old_link": o.link(), "new_link": n.link(), "plugin_equals_old": pbody == o.body}))
            elif pbody is not None and pbody != o.body:
                it.add(Change("body", "retained_adaptation", "body differs from upstream (plugin adaptation; upstream unchanged)"))

    def _removed(self, it: DriftItem, o: UpSym, dotted: str, kind: str, container: UpSym | None = None) -> Change:
        renamed = self._renamed(o, container)
        cont = container if container is not None else self.new.lookup(_parent(o.defined))
        leaf = o.qual.rpartition(".")[2]
        if renamed:
            msg = f"upstream {o.defined} was renamed to {renamed} in {self.new.label}"
        elif cont is not None and cont.kind == "class" and cont.shape is not None and (
                leaf in cont.shape.attrs or any(f[0] == leaf for f in cont.shape.fields)):
            msg = f"upstream {o.defined} is no longer a method in {self.new.label}: {cont.qual}.{leaf} is now a field/attribute"
        else:
            moved = self._moved_hint(o.defined) if o.kind in ("class", "function") and "." not in o.qual else None
            msg = f"upstream {o.defined} no longer exists in {self.new.label}" + (f"; a definition of the same name is at {moved}" if moved else "")
        return Change("counterpart", "removed_upstream", msg, "AL302", "error" if kind == "class" else "warning",
                      {"renamed_to": renamed, "old_link": o.link()})

    def _renamed(self, o: UpSym, container: UpSym | None) -> str | None:
        """A symbol of NEW with the same body (functions) or the same shape (classes) in the same container."""
        parent = _parent(o.defined)
        cont = container if container is not None else self.new.lookup(parent)
        if o.kind == "function" and o.body:
            if cont is not None and cont.kind == "class" and cont.shape is not None:
                for name, node in cont.shape.methods.items():
                    if A.body_hash(node) == o.body and name != o.qual.rpartition(".")[2]:
                        return f"{cont.defined}.{name}"
            elif cont is not None and cont.kind == "module":
                pf = self.store.get(cont.path)
                if pf is not None:
                    for q, node in pf.defs.items():
                        if "." not in q and hasattr(node, "args") and A.body_hash(node) == o.body and q != o.qual:
                            return f"{cont.defined}.{q}"
        if o.kind == "class" and o.shape is not None:
            mod = self.new.lookup(o.module)
            pf = self.store.get(mod.path) if mod is not None else None
            if pf is not None:
                best = None
                for q, node in pf.defs.items():
                    sh = A.class_shape(node) if "." not in q else None
                    if sh is None or q == o.qual:
                        continue
                    common = len(set(sh.methods) & set(o.shape.methods))
                    if common and common >= 0.8 * max(len(o.shape.methods), 1) and (best is None or common > best[0]):
                        best = (common, f"{o.module}.{q}")
                if best:
                    return best[1]
        return None

    # -- imports and calls --------------------------------------------------------------
    def _is_upstream(self, target: str | None) -> bool:
        return bool(target) and (target == self._up_pkg or target.startswith(self._up_pkg + "."))

    def _imports_item(self, m) -> DriftItem | None:
        it = DriftItem(m.name, "module", "module", m.path, 1, 0, 1, 0)
        seen = set()

        def check(b, scope_name):
            if b.kind not in ("from", "import") or b.level:
                return
            target = b.target or ""
            if not self._is_upstream(target):
                return
            dotted = f"{target}.{b.attr}" if b.kind == "from" else (b.alternatives[0] if b.alternatives else target)
            key = (dotted, b.line)
            if key in seen:
                return
            seen.add(key)
            in_old = self.old.exists(dotted)
            in_new = self.new.exists(dotted)
            guarded = any(g[0] in ("try", "except") for g in b.guards)
            if in_old and not in_new:
                hint = self._moved_hint(dotted)
                repl, why = self._replacement(dotted, m.name) if b.kind == "from" else (None, "")
                msg = f"`{dotted}` is imported here but no longer exists in {self.new.label}"
                if repl:
                    msg += f"; replaced by {repl} ({why})"
                elif hint:
                    msg += f"; now at {hint}"
                it.add(Change("imports", "removed_upstream", msg, "AL302", "warning" if guarded or scope_name else "error",
                              {"import": dotted, "moved_to": hint, "guarded": guarded, "scope": scope_name or None,
                               "name": b.name, "replacement": repl, "replacement_evidence": why or None},
                              line=b.line, col=b.col, end_col=b.col + 4))
            elif not in_old and in_new:
                it.add(Change("imports", "retained_adaptation", f"`{dotted}` exists only in {self.new.label} (already imported)",
                              data={"import": dotted}, line=b.line, col=b.col))

        for name, bs in m.summary.bindings.items():
            for b in bs:
                check(b, "")
        for q, f in m.summary.functions.items():
            for name, bs in f.locals.items():
                for b in bs:
                    check(b, q)
        return it if it.changes else None

    def _replacement(self, dotted: str, plugin_module: str) -> tuple[str | None, str]:
        """What replaces a removed upstream name, when the two versions show it: upstream's own code
        imported the name from the old module in OLD and imports it from another module in NEW (the
        same role, moved; the plugin module's counterpart counts first), or NEW defines a callable
        with the same body (moved or renamed)."""
        mod, _, name = dotted.rpartition(".")
        votes: dict = {}
        counterpart = upstream_module_name(plugin_module, self.cfg)
        for um in self.old.importers(self._up_pkg, mod, name):
            nm = self.new.module(um)
            if nm is None:
                continue
            for b in nm.summary.bindings.get(name, []):
                if b.kind == "from" and not b.level and b.target and b.target != mod and b.attr:
                    cand = f"{b.target}.{b.attr}"
                    if self.new.exists(cand):
                        votes.setdefault(cand, []).append(um)
        if votes:
            best = max(votes, key=lambda c: (counterpart in votes[c], len(votes[c]), c))
            users = votes[best]
            first = counterpart if counterpart in users else users[0]
            more = f" and {len(users) - 1} more" if len(users) > 1 else ""
            return best, (f"upstream {first}{more} imported it from {mod} in {self.old.label} "
                          f"and from {best.rpartition('.')[0]} in {self.new.label}")
        o = self.old.lookup(dotted)
        if o is not None and o.kind == "function" and o.body:
            renamed = self._renamed(o, None)
            if renamed:
                return renamed, f"the same body, renamed in {self.new.label}"
            for d in self.new.find_by_name(name, self._up_pkg, mod, "function"):
                s = self.new.lookup(d)
                if s is not None and s.body == o.body:
                    return d, f"the same body, moved in {self.new.label}"
        return None, ""

    def _moved_hint(self, dotted: str) -> str | None:
        """Where a removed name is defined now (a top-level def/class of the same name in NEW)."""
        name = dotted.rpartition(".")[2]
        found = self.new.find_by_name(name, self._up_pkg, dotted.rpartition(".")[0])
        return found[0] if found else None

    def _upstream_roots(self, m, scope: str) -> set:
        names = set()
        for name, bs in m.summary.bindings.items():
            if any(b.kind in ("from", "import") and not b.level and self._is_upstream(b.target) for b in bs):
                names.add(name)
        q = scope
        while q:
            f = m.summary.functions.get(q)
            if f is not None:
                for name, bs in f.locals.items():
                    if any(b.kind in ("from", "import") and not b.level and self._is_upstream(b.target) for b in bs):
                        names.add(name)
                    elif name in names:
                        names.discard(name)  # shadowed by a local
            q = q.rpartition(".")[0]
        return names

    def _calls(self, m, items: list[DriftItem]) -> None:
        by_symbol = {it.symbol: it for it in items}
        roots_memo: dict = {}
        pm_old = self.old.module(m.name)
        pm_new = self.new.module(m.name)
        if pm_old is None or pm_new is None:
            return
        for cs in m.summary.calls:
            if not cs.func or not cs.scope:
                continue
            root = cs.func.split(".", 1)[0]
            roots = roots_memo.get(cs.scope)
            if roots is None:
                roots = roots_memo[cs.scope] = self._upstream_roots(m, cs.scope)
            if root not in roots:
                continue
            vo = self.old.resolve_in(m.name, cs.scope, cs.func, cs.line)
            vn = self.new.resolve_in(m.name, cs.scope, cs.func, cs.line)
            if vo is None or vn is None:
                continue
            so = self._callable_sig(self.old, vo)
            exists_new = vn.kind in (ValKind.FUNCTION, ValKind.CLASS) and vn.module is not None
            owner = self._owner_item(m, cs.scope, by_symbol, items)
            if owner is None:
                continue
            reason = vn.reason or ""
            if so is not None and not exists_new and vn.kind == ValKind.UNKNOWN and ("does not exist" in reason or "not found" in reason):
                if "." not in cs.func and self._imported_directly(m, cs.scope, root):
                    continue  # the import itself is reported (module item): one finding per cause
                owner.add(Change("calls", "removed_upstream", f"calls `{cs.func}` ({vo.dotted}), which no longer exists in {self.new.label}",
                                 "AL302", "error", {"callee": vo.dotted}, line=cs.line, col=cs.fcol, end_col=cs.fend_col if cs.fend_line == cs.line else cs.fcol + len(cs.func)))
                continue
            sn = self._callable_sig(self.new, vn)
            if so is None or sn is None or so[0] == sn[0]:
                continue
            bound = so[1]
            name = cs.func.rpartition(".")[2]
            desc = A.describe_signature_change(so[0], sn[0], name)
            br_new = A.signature_breaks_call(sn[0], cs.nargs, cs.keywords, cs.star_args, cs.star_kwargs, bound)
            br_old = A.signature_breaks_call(so[0], cs.nargs, cs.keywords, cs.star_args, cs.star_kwargs, bound)
            sev = "error" if br_new and not br_old else "warning"
            msg = f"calls upstream `{vn.dotted}` whose signature changed: " + "; ".join(desc or ["annotations"])
            if br_new and not br_old:
                msg += "; this call no longer matches: " + "; ".join(br_new)
            owner.add(Change("calls", "changed_upstream", msg, "AL307", sev,
                             {"callee": vn.dotted, "old_signature": so[0].text(name), "new_signature": sn[0].text(name),
                              "breaks": br_new}, line=cs.line, col=cs.fcol,
                             end_col=cs.fend_col if cs.fend_line == cs.line else cs.fcol + len(cs.func)))

    def _imported_directly(self, m, scope: str, name: str) -> bool:
        q = scope
        while q:
            f = m.summary.functions.get(q)
            if f is not None and name in f.locals:
                return any(b.kind == "from" for b in f.locals[name])
            q = q.rpartition(".")[0]
        return any(b.kind == "from" for b in m.summary.bindings.get(name, []))

    def _callable_sig(self, side: Side, v) -> tuple | None:
        if v.kind == ValKind.FUNCTION and v.module is not None and not v.module.workspace:
            s = side.lookup(v.dotted)
            if s is not None and s.sig is not None:
                return s.sig, bool(v.owner) and s.sig.method_kind == "classmethod"
        if v.kind == ValKind.CLASS and v.module is not None and not v.module.workspace:
            init = side.lookup(f"{v.dotted}.__init__")
            if init is not None and init.sig is not None:
                return init.sig, True
            s = side.lookup(v.dotted)
            if s is not None and s.shape is not None and s.shape.is_dataclass:
                params = tuple(A.SigParam(n, "pos", d, a) for n, a, d in s.shape.fields)
                return A.Signature(params), False
        return None

    def _owner_item(self, m, scope: str, by_symbol: dict, items: list) -> DriftItem | None:
        q = scope
        while q:
            it = by_symbol.get(f"{m.name}.{q}")
            if it is not None:
                return it
            q = q.rpartition(".")[0]
        return None

    # -- custom ops (variants of upstream's ops) -----------------------------------------
    def _custom_ops(self, items: list[DriftItem]) -> None:
        """AL308: upstream's op function (or fake) gained parameters that the plugin's variant lacks."""
        from ..rules import opvariants as OV

        by_symbol = {it.symbol: it for it in items}
        for v in OV.variants(self.new.ws):
            o_reg = OV.upstream_registration(self.old.ws, v.upstream.ns, v.upstream.op)
            if o_reg is None:
                continue  # an op new upstream: nothing was gained
            for which in ("func", "fake"):
                pf = v.plugin.function(which)
                nf = v.upstream.function(which) or v.upstream.function("func")
                of = o_reg.function(which) or o_reg.function("func")
                gained = OV.gained(of, nf)
                lacks = OV.missing(pf, nf, gained)
                if pf is None or not lacks:
                    continue
                mod = v.plugin.module
                sym = f"{mod.name}.{pf.qualname}"
                it = by_symbol.get(sym)
                if it is None:
                    pfile = self.store.get(mod.path, self.ws.index.source_text(mod.path))
                    line, col, el, ec = self._pos(mod, pf.line, pf.name, pf.col, pf.end_line, pfile)
                    it = DriftItem(sym, "function", "custom_op", mod.path, line, col, el, ec)
                    items.append(it)
                    by_symbol[sym] = it
                un = v.upstream.module
                ufunc = f"{un.name}.{nf.qualname}"
                names = ", ".join(f"`{x}`" for x in lacks)
                role = "fake" if which == "fake" else "op function"
                msg = (f"upstream op {v.upstream.qualname} gained {names}; this {role} of the plugin's variant "
                       f"{v.plugin.qualname} does not accept {'it' if len(lacks) == 1 else 'them'}")
                data = {"op": v.plugin.qualname, "upstream_op": v.upstream.qualname, "role": which,
                        "variant": pf.qualname, "missing": lacks, "gained": gained, "upstream_function": ufunc,
                        "upstream_location": f"{un.path}:{nf.line}", "via": v.via}
                sig = next((c for c in it.changes if c.aspect == "signature" and c.rule == "AL301"), None)
                if sig is not None and it.counterpart_new == ufunc:
                    # one finding per cause: the counterpart's signature change *is* the op's
                    sig.aspect, sig.rule, sig.message = "custom_op", "AL308", msg
                    sig.data.update(data)
                else:
                    it.counterpart_new = it.counterpart_new or ufunc
                    it.add(Change("custom_op", "changed_upstream", msg, "AL308", "warning", data))

    # -- patches ------------------------------------------------------------------------
    def _patch_items(self, scope_mods: set) -> list[DriftItem]:
        out = []
        try:
            table = self.ws.query.patches()
        except Exception as e:
            self.errors.append(f"patches: {type(e).__name__}: {e}")
            return out
        for key in list(table.keys()):
            entry = table.get(key)
            if entry is None:
                continue
            rv, path, line, text = entry
            tm, attr = key
            if not self._is_upstream(tm):
                continue
            if self.patches_mode == "scope":
                in_scope = (rv.module is not None and rv.module.name in scope_mods) or any(x in tm for x in ("attention", "attn"))
                if not in_scope:
                    continue
            target = f"{tm}.{attr}"
            o = self.old.lookup(target)
            n = self.new.lookup(target)
            sym = rv.dotted if rv.module is not None else target
            pf = self.store.get(rv.path or path, self.ws.index.source_text(rv.path or path)) if (rv.path or path) else None
            node = pf.defs.get(rv.qual) if pf is not None and rv.module is not None else None
            it = DriftItem(sym, "patch", "patch", rv.path or path, line, 0, line, 0, via="patch", relation="patch")
            it.notes.append(f"{text} replaces {target}")
            if node is not None and rv.kind == ValKind.FUNCTION:
                fline = getattr(node, "lineno", line)
                it.line, it.col, it.end_line, it.end_col = self._pos(None, fline, node.name, 0, fline, pf)
            if o is None and n is None:
                it.add(Change("counterpart", "retained_adaptation" if not self.old.exists(target) else "removed_upstream",
                              f"patch target {target} is not a function or class in either version"))
            elif rv.kind == ValKind.FUNCTION:
                self._compare_callable(it, node, pf, o if o and o.kind == "function" else None,
                                       n if n and n.kind == "function" else None, "patch", None, None)
                if o is not None and n is None:
                    it.changes[-1].message = f"patch target {target} no longer exists in {self.new.label}: the patch is stale"
            elif o is not None and n is None:
                it.add(self._removed(it, o, target, kind="class"))
            it.counterpart_old = it.counterpart_old or (o.defined if o else None)
            it.counterpart_new = it.counterpart_new or (n.defined if n else None)
            out.append(it)
        return out

    def close(self) -> None:
        self.old.close()
        if self.new.ws is not self.ws:
            self.new.close()


def _parent(dotted: str | None) -> str:
    return dotted.rpartition(".")[0] if dotted else ""


def _sig_covers(p: A.Signature, o: A.Signature, n: A.Signature) -> bool:
    """The plugin signature already has what upstream added (names and required-ness), ignoring annotations."""
    pn = {x.name: x for x in p.params}
    on = {x.name for x in o.params}
    for x in n.params:
        if x.name not in on:
            if x.name not in pn and not any(y.kind == "kwarg" for y in p.params):
                return False
    nn = {x.name for x in n.params}
    for x in o.params:
        if x.name not in nn and x.name in pn and pn[x.name].default is None:
            return False
    return p.method_kind == n.method_kind


def _fields_cover(p: tuple, o: tuple, n: tuple) -> bool:
    pn = {f[0] for f in p}
    on = {f[0] for f in o}
    nn = {f[0] for f in n}
    return (nn - on) <= pn and not ((on - nn) & pn and (on - nn))


def _fields_change(o: tuple, n: tuple, owner: str) -> str:
    od = {f[0]: f for f in o}
    nd = {f[0]: f for f in n}
    parts = []
    for name in nd:
        if name not in od:
            parts.append(f"gained field `{name}: {nd[name][1]}`" + (f" = {nd[name][2]}" if nd[name][2] is not None else ""))
    for name in od:
        if name not in nd:
            parts.append(f"lost field `{name}`")
    for name in od:
        if name in nd and od[name] != nd[name]:
            a, b = od[name], nd[name]
            if a[1] != b[1]:
                parts.append(f"field `{name}` type {a[1]} -> {b[1]}")
            if a[2] != b[2]:
                parts.append(f"field `{name}` default {a[2]} -> {b[2]}")
    if not parts and [f[0] for f in o] != [f[0] for f in n]:
        parts.append("field order changed")
    return f"{owner}: " + "; ".join(parts or ["fields changed"])


def _attr_change(k: str, a, b) -> str:
    if a is None:
        return f"gained `{k}` = {b}"
    if b is None:
        return f"lost `{k}`"
    return f"`{k}` {a} -> {b}"


def _subject_of(ws) -> dict | None:
    s = getattr(ws, "subject", None)
    if s is None:
        return {"kind": "worktree", "description": f"working tree of {ws.root}", "path": str(ws.root)}
    return s.to_json() if hasattr(s, "to_json") else dict(s)


# ----------------------------------------------------------------------------- public helpers


def drift_report(ws, old, new=None, globs=None, patches: str = "scope", cfg: UpgradeConfig | None = None) -> DriftReport:
    """Run the drift analysis. ``old``/``new`` are UpstreamSource objects (``new`` None: installed)."""
    d = Drift(ws, old, new, globs, cfg, patches)
    try:
        return d.run()
    finally:
        d.close()


_MEMO_LOCK = threading.Lock()  # the memo itself is the workspace's own (``Query.state``)


def _resolve_old(ws, old):
    from .upstream import resolve

    if isinstance(old, UpstreamSource):
        return old
    cache_root = ws.cache.folder.parent if ws.cache.enabled else None
    return resolve(str(old), package=load_config(ws.root).upstream_package, cache_root=cache_root, download=False,
                   target=ws.target)


def cached_report(ws, old=None) -> DriftReport | None:
    """The drift report for ``ws`` against ``old`` (default: the configured ``[upgrade] from``), memoised
    per workspace generation. Never downloads; None when no old version is configured or available."""
    if old is None:
        old = load_config(ws.root).old or os.environ.get("ATTNLENS_UPSTREAM_FROM")
        if not old:
            return None
    try:
        src = _resolve_old(ws, old)
    except Exception:
        return None
    key = (src.root, ws.index.generation)
    memo = ws.query.state(__name__)
    with _MEMO_LOCK:
        hit = memo.get("report")
        if hit is not None and hit[0] == key:
            return hit[1]
    rep = drift_report(ws, src)
    with _MEMO_LOCK:
        memo["report"] = (key, rep)
    return rep


def memoised_report(ws) -> DriftReport | None:
    """The report :func:`cached_report` last memoised for ``ws`` (any generation), or None; never
    computes one (the editor's quick fixes use the report its drift diagnostics came from)."""
    with _MEMO_LOCK:
        hit = ws.query.state(__name__).get("report")
    return hit[1] if hit is not None else None


def drift_findings(ws, old, include_retained: bool = False) -> list[dict]:
    """Finding-like dicts (rule, severity, source, path, line, col, end_line, end_col, message, data).

    Lines are 1-based and columns 0-based code points with an exclusive end, as in the
    rules engine's :class:`Finding` (``Finding(**{k: d[k] for k in fields})`` works after
    dropping ``source``)."""
    rep = cached_report(ws, old)
    if rep is None:
        return []
    return rep.findings(include_retained)


def hover_note(ws, dotted_symbol: str, old=None) -> str | None:
    """One paragraph for the hover of a plugin symbol, or None when nothing changed upstream."""
    rep = cached_report(ws, old)
    if rep is None:
        return None
    it = rep.item(dotted_symbol)
    if it is None:
        return None
    flagged = [c for c in it.changes if c.status in FLAGGED]
    if not flagged:
        if it.status == "retained_adaptation":
            return (f"upstream {rep.old_label} -> {rep.new_label}: retained adaptation ("
                    + "; ".join(c.message for c in it.changes[:3]) + ")")
        return None
    parts = []
    for c in flagged[:5]:
        parts.append(c.message)
    more = f"; and {len(flagged) - 5} more" if len(flagged) > 5 else ""
    link = f" [new upstream]({it.new_link})" if it.new_link else ""
    return f"upstream changed between {rep.old_label} and {rep.new_label}: " + "; ".join(parts) + more + link
