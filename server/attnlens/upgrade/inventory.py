"""The upgrade inventory: every file in scope, every backend/impl/op/wrapper in it.

For each item (top-level class or function of a file in scope):

* **registration**: the registry entry that activates it (backend enum, impl/builder/
  metadata of a registered backend, out-of-tree CustomOp), or the callers and importers
  that make it live; an item with neither is an *inactive* adaptation;
* **callers**: who calls, instantiates or imports it in the workspace;
* **upstream counterpart** (registry default, same module path, vendor prefix, base class,
  ``upstream-map``), with a ``file://`` link;
* **differences** from the installed upstream: methods whose body or signature differ,
  methods the plugin adds or lacks, attribute and field differences; each with the
  *reason* the code gives (a comment inside or just above the changed lines: ``Metax
  Modification`` banners, ``# Note:``, mentions of maca/metax, TODO/workaround) or
  ``unexplained``;
* **drift** (with ``--from OLD``): the two-version classification of :mod:`.drift`;
* **findings** of the rules engine (``attnlens.rules``) and of drift, with rule ids;
* **kernels** reached (final kind and symbol of each kernel call site) and **probe
  evidence** recorded for them (``attnlens.runtime.evidence``), with the environment record;
* a proposed **action**: ``fix`` (errors, reachable dummies, unresolved kernels, removed
  upstream names), ``sync`` (upstream changed since OLD and the plugin did not follow),
  ``probe`` (kernels reached without passing evidence, or unexplained differences on a
  kernel path), else ``keep``; each with how to validate it.

A file with no item still appears. Output: Markdown or JSON.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field

from .. import model as M
from ..pyindex import triton_decorated
from ..walk import ValKind
from . import astsyms as A
from .config import load_config
from .fixes import FIX_RULES as _FIX_RULES
from .mapping import Side, class_counterpart, function_counterpart
from .scope import default_globs, relpath, scope_files

ACTIONS = ("fix", "sync", "probe", "keep")
_ACTION_RANK = {a: i for i, a in enumerate(ACTIONS)}
REASON_RE = re.compile(
    r"metax|maca|mcop|mx[-_ ]|\bnote\b|\bnotes?:|todo|fixme|hack|workaround|\bwa\b|not support|unsupported|"
    r"modif|because|instead|only support|does not|doesn't|cannot|can't|disable|remove|keep|align|upstream",
    re.I)
BANNER_RE = re.compile(r"metax\s+modification", re.I)
MAX_DIFFS = 40


@dataclass
class Difference:
    what: str
    line: int | None
    end_line: int | None
    reason: str
    reason_line: int | None = None

    @property
    def explained(self) -> bool:
        return self.reason != "unexplained"


@dataclass
class Item:
    symbol: str
    name: str
    kind: str  # backend | impl | builder | metadata | custom_op | kernel | op | wrapper | dummy | class | function
    line: int
    end_line: int
    registration: list = field(default_factory=list)
    active: bool = False
    callers: list = field(default_factory=list)
    upstream: dict | None = None
    differences: list = field(default_factory=list)
    drift: dict | None = None
    findings: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    evidence: list = field(default_factory=list)
    action: str = "keep"
    why: str = ""
    validation: str = ""

    def to_json(self) -> dict:
        d = asdict(self)
        d["differences"] = [asdict(x) | {"explained": x.explained} for x in self.differences]
        return d


@dataclass
class FileEntry:
    path: str
    module: str
    items: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    action: str = "keep"
    fixes: list = field(default_factory=list)  # quick fixes offered (upgrade.fixes): id, rule, kind, title, line

    def to_json(self) -> dict:
        return {"path": self.path, "module": self.module, "action": self.action, "notes": self.notes,
                "fixes": self.fixes, "items": [i.to_json() for i in self.items]}


@dataclass
class Inventory:
    root: str
    subject: dict
    upstream: dict
    old: dict | None
    scope: list
    files: list
    environment: dict | None = None
    elapsed_s: float = 0.0
    timings: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)

    def counts(self) -> dict:
        out = {a: 0 for a in ACTIONS}
        for f in self.files:
            for it in f.items:
                out[it.action] += 1
        return out

    def to_json(self) -> dict:
        return {"root": self.root, "subject": self.subject, "upstream": self.upstream, "old": self.old,
                "scope": self.scope, "environment": self.environment, "elapsed_s": round(self.elapsed_s, 3),
                "timings": {k: round(v, 3) for k, v in self.timings.items()}, "errors": self.errors,
                "actions": self.counts(), "files": [f.to_json() for f in self.files]}


# ----------------------------------------------------------------------------- building


class InventoryBuilder:
    def __init__(self, ws, globs: list | None = None, old=None, new=None, rules: bool = True, drift_report=None):
        self._fixable: dict = {}  # realpath -> rule findings that may have a quick fix
        self.ws = ws
        self.cfg = load_config(ws.root)
        self.globs = list(globs or self.cfg.scope or default_globs(ws, wide=False))
        self.old = old
        self.new_src = new
        self.use_rules = rules
        self.drift = drift_report
        self.store = A.SourceStore()
        self.side = Side(ws, "installed", None, self.store) if new is None else Side.for_upstream(ws, new, new.label, self.store)
        self.timings: dict = {}
        self.errors: list = []

    def _t(self, name, t0):
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0

    def build(self) -> Inventory:
        from .drift import installed_source
        from .subjects import subject_of

        t_all = time.perf_counter()
        t0 = time.perf_counter()
        try:
            prewarm(self.ws)
        except Exception as e:
            self.errors.append(f"prewarm: {type(e).__name__}: {e}")
        self._t("prewarm", t0)
        files = scope_files(self.ws, self.globs)
        t0 = time.perf_counter()
        entries = self._entries()
        self._t("registry", t0)
        t0 = time.perf_counter()
        sites = self._sites(files)
        self._t("kernel_sites", t0)
        if self.old is not None and self.drift is None:
            t0 = time.perf_counter()
            from .drift import drift_report

            try:
                self.drift = drift_report(self.ws, self.old, self.new_src, globs=self.globs)
            except Exception as e:
                self.errors.append(f"drift: {type(e).__name__}: {e}")
            self._t("drift", t0)
        t0 = time.perf_counter()
        findings = self._rule_findings(files)
        self._t("rules", t0)
        t0 = time.perf_counter()
        evidence, env = self._evidence()
        self._t("evidence", t0)
        items_by_file = {}
        for p in files:
            m = self.ws.index.module_for_path(p)
            items_by_file[p] = (m, self._items(m) if m is not None else [])
        t0 = time.perf_counter()
        self._callers(items_by_file)
        self._t("callers", t0)
        out_files = []
        t0 = time.perf_counter()
        for p in files:
            m, items = items_by_file[p]
            fe = FileEntry(relpath(self.ws.root, p), m.name if m is not None else "")
            if m is None:
                fe.notes.append("not a module of the workspace (not importable)")
            elif m.summary.error:
                fe.notes.append(f"cannot be analysed: {m.summary.error}")
            for it in items:
                self._registration(it, entries)
                self._upstream(m, it)
                self._kernels(it, sites.get(p, []))
                self._findings(it, findings.get(os.path.realpath(p), []), m)
                self._drift(it)
                self._evidence_for(it, evidence)
                self._action(it)
                it.validation = it.validation.replace("{file}", fe.path)
            fe.items = items
            if not items:
                fe.notes.append("no classes or functions (imports, constants or an empty package marker)")
            unassigned = [f for f in findings.get(os.path.realpath(p), []) if not f.get("_assigned")]
            for f in unassigned:
                fe.notes.append(f"{f['rule']} {f['severity']} L{f['line']}: {f['message']}")
            if self.drift is not None:
                mod_item = self.drift.item(fe.module)
                if mod_item is not None:
                    for ch in mod_item.changes:
                        if ch.status in ("removed_upstream", "changed_upstream"):
                            fe.notes.append(f"drift {ch.rule or ''} L{ch.line}: {ch.message}".replace("  ", " "))
            try:
                fe.fixes = self._fixes(p)
            except Exception as e:  # noqa: BLE001 - the inventory stands without its fixes
                self.errors.append(f"{fe.path}: fixes: {type(e).__name__}: {e}")
            fe.action = min([it.action for it in items] + (["fix"] if any(f["severity"] == "error" for f in unassigned) else []) +
                            (["sync"] if any(n.startswith("drift AL302") for n in fe.notes) else []) + ["keep"],
                            key=lambda a: _ACTION_RANK[a])
            out_files.append(fe)
        self._t("items", t0)
        up = installed_source(self.ws, self.cfg.upstream_package) if self.new_src is None else self.new_src
        inv = Inventory(str(self.ws.root), subject_of(self.ws).to_json(), up.to_json(),
                        self.old.to_json() if self.old is not None else None, self.globs, out_files, env,
                        errors=self.errors + (self.drift.errors if self.drift is not None else []))
        inv.elapsed_s = time.perf_counter() - t_all
        inv.timings = self.timings
        return inv

    # -- inputs ------------------------------------------------------------------------
    def _entries(self):
        try:
            return self.side.ws.backends(with_call_sites=False, include_custom_ops=True)
        except Exception as e:
            self.errors.append(f"registry: {type(e).__name__}: {e}")
            return []

    def _sites(self, files) -> dict:
        out: dict = {}
        try:
            for s in self.side.ws.kernel_sites(files):
                out.setdefault(s.path, []).append(s)
        except Exception as e:
            self.errors.append(f"kernel sites: {type(e).__name__}: {e}")
        # kernel_sites reports the module path; index by the scope file path too
        real = {os.path.realpath(k): v for k, v in out.items()}
        return {p: real.get(os.path.realpath(p), []) for p in files}

    def _rule_findings(self, files) -> dict:
        out: dict = {}
        if not self.use_rules:
            return out
        try:
            from ..rules.engine import check_paths  # written concurrently: optional
        except Exception:
            return out
        try:
            found = check_paths(self.ws, files)
        except Exception as e:
            self.errors.append(f"rules engine: {type(e).__name__}: {e}")
            return out
        for f in found:
            d = {"rule": f.rule, "severity": f.severity, "line": f.line, "end_line": f.end_line, "message": f.message,
                 "source": "attnlens"}
            out.setdefault(os.path.realpath(f.path), []).append(d)
            if f.rule in _FIX_RULES:
                self._fixable.setdefault(os.path.realpath(f.path), []).append(f)
        return out

    def _fixes(self, path: str) -> list:
        """The quick fixes offered for a file's findings (analysis only: no edit is computed)."""
        from . import fixes as FX

        found = list(self._fixable.get(os.path.realpath(path), []))
        if self.drift is not None:
            found += [f for f in self.drift.findings() if f["rule"] in _FIX_RULES
                      and os.path.realpath(f["path"]) == os.path.realpath(path)]
        out, keys = [], set()
        for o in FX.offers(self.ws, found, self.drift):
            if o.key not in keys:
                keys.add(o.key)
                out.append({"id": o.id, "rule": o.rule, "kind": o.kind, "line": o.line, "title": o.title})
        return out

    def _evidence(self):
        env = None
        recs = []
        try:
            from ..runtime import evidence as ev
        except Exception:
            return recs, env
        try:
            recs = ev.list_records(self.ws.cache)
        except Exception as e:
            self.errors.append(f"evidence: {type(e).__name__}: {e}")
        try:
            from ..runtime import environment as envmod

            rec = envmod.stored(self.ws.target.python, self.ws.cache) if self.ws.target.python else None
            if rec:
                env = {"summary": envmod.summary(rec), "hash": rec.get("hash"), "collected_at": rec.get("collected_at")}
        except Exception:
            env = None
        return recs, env

    # -- items -------------------------------------------------------------------------
    def _items(self, m) -> list[Item]:
        s = m.summary
        out = []
        reg_roles = self.side.registry()
        for q, c in s.classes.items():
            if "." in q:
                continue
            role = reg_roles.get(f"{m.name}.{q}", ("class",))[0]
            out.append(Item(f"{m.name}.{q}", c.name, role, c.line, c.end_line))
        for q, f in s.functions.items():
            if "." in q or f.class_name:
                continue
            kind = "function"
            if triton_decorated(f.decorators):
                kind = "kernel"
            elif f.dummy:
                kind = "dummy"
            out.append(Item(f"{m.name}.{q}", f.name, kind, f.line, f.end_line))
        out.sort(key=lambda it: it.line)
        return out

    def _callers(self, items_by_file: dict) -> None:
        """Reverse references over the whole workspace, prefiltered by name, confirmed by resolution."""
        targets: dict = {}  # name -> [(module, qual, Item)]
        for p, (m, items) in items_by_file.items():
            for it in items:
                targets.setdefault(it.name, []).append((m.name, it.symbol[len(m.name) + 1:], it))
        if not targets:
            return
        query = self.ws.query
        for mod in self.ws.index.workspace_modules():
            s = mod.summary
            for cs in s.calls:
                if not cs.func:
                    continue
                parts = cs.func.split(".")
                hit = None
                for i, seg in enumerate(parts):
                    if seg in targets:
                        hit = (i, seg)
                        break
                if hit is None:
                    continue
                prefix = ".".join(parts[:hit[0] + 1])
                try:
                    v = query.resolve_dotted(mod, cs.scope, prefix, line=cs.line)
                except RecursionError:
                    continue
                if v.module is None or v.kind not in (ValKind.FUNCTION, ValKind.CLASS, ValKind.INSTANCE):
                    continue
                for tm, tq, it in targets[hit[1]]:
                    if v.module.name == tm and v.qual == tq:
                        where = f"{mod.name}.{cs.scope}" if cs.scope else mod.name
                        if cs.scope and where.startswith(it.symbol + "."):
                            continue  # its own methods
                        it.callers.append({"by": where, "path": relpath(self.ws.root, mod.path), "line": cs.line,
                                           "how": "calls" if prefix == cs.func else f"uses `{cs.func}`"})
            for name, bs in s.bindings.items():
                for b in bs:
                    if b.kind != "from" or (b.attr or "") not in targets:
                        continue
                    target = query.abs_module(mod, b.target or "", b.level)
                    for tm, tq, it in targets[b.attr]:
                        if target == tm and tq == b.attr and mod.name != tm:
                            it.callers.append({"by": mod.name, "path": relpath(self.ws.root, mod.path), "line": b.line,
                                               "how": "imports"})
        for p, (m, items) in items_by_file.items():
            for it in items:
                seen = set()
                uniq = []
                for c in it.callers:
                    k = (c["by"], c["line"], c["how"])
                    if k not in seen:
                        seen.add(k)
                        uniq.append(c)
                it.callers = uniq

    def _registration(self, it: Item, entries) -> None:
        for e in entries:
            if e.cls == it.symbol:
                for r in e.registered_at:
                    it.registration.append(f"{e.kind} {e.name} via {r.get('form', 'call')} at {relpath(self.ws.root, r['path'])}:{r['line']}")
            for attr in ("impl", "builder", "metadata"):
                ref = getattr(e, attr, None)
                if ref is not None and ref.cls == it.symbol:
                    it.registration.append(f"{attr} of {e.kind} {e.name}")
        it.active = bool(it.registration) or bool(it.callers)

    def _upstream(self, m, it: Item) -> None:
        q = it.symbol[len(m.name) + 1:]
        try:
            if it.kind in ("backend", "impl", "builder", "metadata", "custom_op", "class"):
                cp = class_counterpart(self.side, self.ws, m.name, q, self.cfg)
            else:
                cp = function_counterpart(self.side, m.name, q, self.cfg)
        except RecursionError:
            return
        if not cp.dotted:
            return
        up = self.side.lookup(cp.dotted)
        if up is None:
            return
        it.upstream = {"symbol": up.defined, "via": cp.via, "path": up.path, "line": up.line, "link": up.link(),
                       "notes": cp.notes}
        try:
            self._differences(m, it, q, up)
        except RecursionError:
            pass

    def _differences(self, m, it: Item, q: str, up) -> None:
        text = self.ws.index.source_text(m.path)
        pf = self.store.get(m.path, text)
        node = pf.defs.get(q) if pf is not None else None
        upf = self.store.get(up.path)
        if node is None or upf is None or up.node is None:
            return
        diffs: list[Difference] = []
        if up.kind == "function":
            diffs.extend(self._callable_diffs(pf, node, upf, up.node, it.name))
        elif up.kind == "class":
            pshape = A.class_shape(node)
            ushape = up.shape
            if pshape is None or ushape is None:
                return
            inherits = self._inherits(m, q, up.defined)
            for name, fnode in pshape.methods.items():
                un = ushape.methods.get(name)
                upath = up.path
                if un is None:
                    us = self.side.lookup(f"{up.defined}.{name}")
                    if us is not None and us.node is not None and us.owner and f"{us.module}.{us.owner}" != up.defined:
                        if inherits:
                            continue  # overrides a base hook; the counterpart does not: a plain override
                        un = us.node
                        upath = us.path
                    else:
                        r, rl = self._reason_near(pf, fnode.lineno - 3, fnode.lineno + 3, within=(fnode.lineno, fnode.end_lineno))
                        diffs.append(Difference(f"adds {name}()", fnode.lineno, fnode.end_lineno, r, rl))
                        continue
                diffs.extend(self._callable_diffs(pf, fnode, self.store.get(upath) or upf, un, f"{name}"))
            if not inherits:
                for name, un in ushape.methods.items():
                    if name not in pshape.methods and not name.startswith("__"):
                        r, rl = self._reason_text(pf, node, name)
                        diffs.append(Difference(f"lacks upstream {name}()", node.lineno, node.lineno, r, rl))
            pf_fields = {f[0]: f for f in pshape.fields}
            uf_fields = {f[0]: f for f in ushape.fields}
            for name in uf_fields:
                if name not in pf_fields:
                    diffs.append(Difference(f"lacks upstream field `{name}`", node.lineno, node.lineno, "unexplained"))
            for name, fld in pf_fields.items():
                if name not in uf_fields:
                    ln = _field_line(node, name)
                    r, rl = self._reason_near(pf, ln - 2, ln + 1) if ln else ("unexplained", None)
                    diffs.append(Difference(f"adds field `{name}`", ln, ln, r, rl))
                elif uf_fields[name] != fld:
                    ln = _field_line(node, name)
                    r, rl = self._reason_near(pf, ln - 2, ln + 1) if ln else ("unexplained", None)
                    diffs.append(Difference(f"field `{name}` differs ({uf_fields[name][1]} -> {fld[1]})", ln, ln, r, rl))
            for name, val in pshape.attrs.items():
                uval = ushape.attrs.get(name)
                if uval is not None and uval != val:
                    ln = _attr_line(node, name)
                    r, rl = self._reason_near(pf, (ln or node.lineno) - 2, (ln or node.lineno) + 1)
                    diffs.append(Difference(f"attribute `{name}` = {_short(val)} (upstream {_short(uval)})", ln, ln, r, rl))
        it.differences = diffs[:MAX_DIFFS]
        if len(diffs) > MAX_DIFFS:
            it.differences.append(Difference(f"... and {len(diffs) - MAX_DIFFS} more differences", None, None, "unexplained"))

    def _inherits(self, m, q: str, up_dotted: str) -> bool:
        try:
            for cv in self.ws.query.mro(m, q)[1:]:
                if cv.module is not None and f"{cv.module.name}.{cv.qual}" == up_dotted:
                    return True
        except RecursionError:
            pass
        return False

    def _callable_diffs(self, pf, pnode, upf, unode, name: str) -> list[Difference]:
        out = []
        ps, us = A.signature(pnode), A.signature(unode)
        if ps is not None and us is not None and ps != us:
            desc = A.describe_signature_change(us, ps, name)
            r, rl = self._reason_near(pf, pnode.lineno - 3, pnode.lineno + 1, within=(pnode.lineno, _sig_end(pnode)))
            out.append(Difference(f"{name}() signature: " + "; ".join(desc or ["annotations"]), pnode.lineno, _sig_end(pnode), r, rl))
        if A.body_hash(pnode) != A.body_hash(unode):
            a = A.segment(upf, unode)
            b = A.segment(pf, pnode)
            start = min([d.lineno for d in pnode.decorator_list] + [pnode.lineno])
            ranges = A.changed_ranges(a, b)
            if not ranges:
                return out
            reasons = []
            unexplained = 0
            for j1, j2 in ranges:
                lo, hi = start + j1, start + max(j2, j1 + 1) - 1
                r, rl = self._reason_near(pf, lo - 3, hi, within=(lo, hi))
                if r == "unexplained":
                    unexplained += 1
                elif (r, rl) not in reasons:
                    reasons.append((r, rl))
            first = start + ranges[0][0]
            last = start + max(ranges[-1][1], ranges[-1][0] + 1) - 1
            nchanged = sum(max(j2 - j1, 1) for j1, j2 in ranges)
            what = f"{name}() body differs ({len(ranges)} hunk{'s' if len(ranges) != 1 else ''}, {nchanged} lines)"
            if reasons:
                reason = " | ".join(r for r, _ in reasons[:3])
                if unexplained:
                    reason += f" | {unexplained} hunk{'s' if unexplained != 1 else ''} unexplained"
                out.append(Difference(what, first, last, reason, reasons[0][1]))
            else:
                out.append(Difference(what, first, last, "unexplained"))
        return out

    def _reason_near(self, pf, lo: int, hi: int, within: tuple | None = None) -> tuple[str, int | None]:
        """The first explanatory comment in lines [lo, hi] (1-based), preferring lines inside ``within``."""
        if pf is None:
            return "unexplained", None
        lines = pf.lines
        lo = max(lo, 1)
        hi = min(hi, len(lines))
        best = None
        banner = None
        for ln in range(lo, hi + 1):
            text = lines[ln - 1]
            c = _comment_of(text)
            if not c:
                continue
            if BANNER_RE.search(c):
                rest = BANNER_RE.sub("", c).strip(" :-/\\|=()[]")
                if len(rest) >= 8:  # "Metax Modification: <why>"
                    best = (c, ln)
                    break
                banner = banner or ln
                continue
            if REASON_RE.search(c):
                best = (c, ln)
                break
        if best is None and banner is not None:
            # a banner alone: the next plain comment below it, if any, says why
            for ln in range(banner + 1, min(banner + 4, len(lines)) + 1):
                c = _comment_of(lines[ln - 1])
                if c and not BANNER_RE.search(c) and len(c) > 3:
                    return c, ln
            return "marked `Metax Modification` (no further reason given)", banner
        if best is None:
            return "unexplained", None
        return best

    def _reason_text(self, pf, node, name: str) -> tuple[str, int | None]:
        for ln in range(node.lineno, (node.end_lineno or node.lineno) + 1):
            text = pf.lines[ln - 1] if ln - 1 < len(pf.lines) else ""
            c = _comment_of(text)
            if c and name in c:
                return c, ln
        return "unexplained", None

    def _kernels(self, it: Item, sites) -> None:
        q = it.symbol.rpartition(".")[2] if it.kind not in ("backend", "impl", "builder", "metadata", "custom_op", "class") else None
        qual = it.symbol.split(".")[-1]
        for s in sites:
            scope = s.scope or ""
            mine = scope == qual or scope.startswith(qual + ".")
            if not mine:
                continue
            f = s.chain.single_leaf() or s.chain.final
            it.kernels.append({"line": s.line, "call": s.call, "final": f.kind, "symbol": f.symbol,
                               "reachable": s.chain.reachable, "reason": f.reason,
                               "leaves": [{"kind": lf.final.kind, "symbol": lf.final.symbol,
                                           "reachability": M.reach_word(lf.reachable),
                                           "conditions": lf.conditions} for lf in s.chain.leaves()]})
        del q

    def _findings(self, it: Item, findings: list, m) -> None:
        for f in findings:
            if it.line <= f["line"] <= it.end_line or (f["line"] < it.line and f["line"] >= it.line - 3 and f["end_line"] >= it.line):
                it.findings.append({k: v for k, v in f.items() if not k.startswith("_")})
                f["_assigned"] = True

    def _drift(self, it: Item) -> None:
        if self.drift is None:
            return
        items = [d for d in self.drift.items if d.symbol == it.symbol or d.symbol.startswith(it.symbol + ".")]
        if not items:
            return
        worst = min(items, key=lambda d: ("removed_upstream", "changed_upstream", "new_hook", "retained_adaptation", "unchanged").index(d.status))
        flagged = [d for d in items if d.flagged]
        retained = [d for d in items if d.status == "retained_adaptation"]
        it.drift = {"status": worst.status, "flagged": [{"symbol": d.symbol, "status": d.status, "summary": d.summary()} for d in flagged],
                    "retained": [d.symbol for d in retained],
                    "old": self.drift.old_label, "new": self.drift.new_label}
        for d in flagged:
            for ch in d.changes:
                if ch.rule and ch.status in ("removed_upstream", "changed_upstream", "new_hook") and ch.severity != "info":
                    it.findings.append({"rule": ch.rule, "severity": ch.severity, "line": ch.line or d.line,
                                        "message": f"{d.symbol.rpartition('.')[2]}: {ch.message}", "source": "attnlens-drift"})

    def _evidence_for(self, it: Item, records) -> None:
        if not records:
            return
        targets = {it.symbol}
        for k in it.kernels:
            if k["symbol"]:
                targets.add(k["symbol"])
                if "::" in k["symbol"]:
                    ns, _, op = k["symbol"].partition("::")
                    targets.add(f"torch.ops.{ns}.{op}")
        latest: dict = {}
        for r in records:
            t = r.target.split(":", 1)[0] if ":" in r.target and "::" not in r.target else r.target
            if r.target in targets or t in targets or r.target.replace(":", ".") in targets:
                latest[(r.family, r.target)] = r
        for (fam, tgt), r in sorted(latest.items()):
            it.evidence.append({"id": r.id, "family": fam, "target": tgt, "verdict": r.verdict, "created": r.created,
                                "device": r.device, "summary": r.summary_line() if hasattr(r, "summary_line") else r.verdict})

    def _action(self, it: Item) -> None:
        reasons: dict = {a: [] for a in ACTIONS}
        validate: dict = {a: [] for a in ACTIONS}
        by_action: dict = {a: [] for a in ACTIONS}
        for f in it.findings:
            a = _action_for_finding(f)
            if a is not None:
                by_action[a].append(f)
        for a in ("fix", "sync", "probe"):
            if by_action[a]:
                ids = ", ".join(sorted({f["rule"] for f in by_action[a]}))
                reasons[a].append(f"{len(by_action[a])} finding(s) ({ids})")
                validate[a].append(f"`attnlens check {{file}}` no longer reports {ids} here")
        # one entry per leaf that can run on this platform (a fork's dead branches do not count)
        live_kernels = [dict(k, final=lf["kind"], symbol=lf["symbol"]) for k in it.kernels if k["reachable"] is not False
                        for lf in k.get("leaves") or [{"kind": k["final"], "symbol": k["symbol"], "reachability": M.Reach.LIVE}]
                        if lf["reachability"] != M.Reach.DEAD]
        dummies = [k for k in live_kernels if k["final"] == M.FinalKind.DUMMY]
        unresolved = [k for k in live_kernels if k["final"] == M.FinalKind.UNRESOLVED]
        kernel_like = [k for k in live_kernels
                       if k["final"] in M.KERNEL_KINDS + (M.FinalKind.NOT_INSTALLED, M.FinalKind.PYTHON_FUNCTION)]
        passed = [e for e in it.evidence if e["verdict"] == "pass"]
        failed = [e for e in it.evidence if e["verdict"] != "pass"]
        unexplained = [d for d in it.differences if not d.explained]
        if dummies:
            reasons["fix"].append("reaches dummy kernel(s): " + ", ".join(sorted({k["symbol"].rpartition(".")[2] for k in dummies})))
            validate["fix"].append("no dummy is reachable on MetaX (or it is backed by a real kernel)")
        if unresolved:
            reasons["fix"].append("unresolved kernel call(s): " + ", ".join(sorted({k["call"] for k in unresolved})))
            validate["fix"].append("`attnlens sites {file}` resolves every call")
        if failed:
            reasons["fix"].append("probe evidence not passing: " + ", ".join(f"{e['family']} {e['verdict']}" for e in failed))
            validate["fix"].extend(f"`attnlens probe run {e['family']} --target {e['target']}` passes" for e in failed)
        if it.drift and it.drift["flagged"]:
            reasons["sync"].append(f"upstream changed between {it.drift['old']} and {it.drift['new']}: " + ", ".join(
                f"{d['symbol'].rpartition('.')[2]} {d['status']}" for d in it.drift["flagged"][:6])
                + (f" and {len(it.drift['flagged']) - 6} more" if len(it.drift["flagged"]) > 6 else ""))
            validate["sync"].append(f"after porting the upstream change (drift diff, new-upstream link), "
                                    f"`attnlens drift --from {it.drift['old']}` lists these symbols as retained_adaptation or unchanged")
        if kernel_like and not passed:
            fams = _families_for(it)
            reasons["probe"].append(f"reaches {len(kernel_like)} kernel call(s) with no passing probe evidence"
                                    + (f"; {len(unexplained)} unexplained difference(s) from upstream" if unexplained else ""))
            validate["probe"].append("on the MetaX host: " + ", ".join(f"`attnlens probe run {f} --target {t}` passes" for f, t in fams)
                                     if fams else "a discriminating probe of the kernel(s) reached (no probe family covers them yet) passes on the MetaX host")
        action = next((a for a in ("fix", "sync", "probe") if reasons[a]), "keep")
        it.action = action
        if action == "keep":
            if it.differences:
                it.why = f"{len(it.differences)} difference(s) from upstream, {len(unexplained)} unexplained"
            elif it.upstream:
                it.why = "matches upstream"
            else:
                it.why = "plugin-only helper"
            if not it.active:
                it.why += "; inactive (not registered, not referenced)"
            it.validation = "no change; re-run `attnlens drift --from <old>` on the next upgrade" + (
                "; document the unexplained differences" if unexplained else "")
            return
        it.why = "; ".join(reasons[action])
        others = [f"{a}: {'; '.join(reasons[a])}" for a in ("fix", "sync", "probe") if a != action and reasons[a]]
        if others:
            it.why += " (also " + " / ".join(others) + ")"
        it.validation = "; ".join(validate[action])


_TAG_ACTION = (("upgrade", "sync"), ("claim", "probe"), ("semantics", "probe"), ("shape", "probe"),
               ("platform", "fix"), ("correctness", "fix"))
_RULE_TAGS: dict | None = None


def _action_for_finding(f: dict) -> str | None:
    """fix for errors; for warnings by the rule's tags (upgrade -> sync, claims/semantics -> probe); info: none."""
    global _RULE_TAGS
    sev = f.get("severity")
    if sev == "error":
        return "fix"
    if sev != "warning":
        return None
    if f.get("source") == "attnlens-drift":
        return "sync"
    if _RULE_TAGS is None:
        _RULE_TAGS = {}
        try:
            from ..rules.engine import rules_table

            _RULE_TAGS = {r.id: tuple(r.tags) for r in rules_table()}
        except Exception:
            pass
    tags = _RULE_TAGS.get(f.get("rule"), ())
    for tag, act in _TAG_ACTION:
        if tag in tags:
            return act
    return "fix"


def _families_for(it: Item) -> list[tuple[str, str]]:
    try:
        from ..runtime import probes
        fams = probes.families()
    except Exception:
        return []
    out = []
    targets = [k["symbol"] for k in it.kernels if k["symbol"]] + [it.symbol]
    for fam in fams:
        ups = fam.get("upstream") or []
        for t in targets:
            tl = re.split(r"::|\.", t)[-1]
            if any(t == u or (tl and re.split(r"::|\.| ", u.split(" (")[0])[-1] == tl) for u in ups):
                out.append((fam["name"], t))
                break
    return out


def _comment_of(line: str) -> str | None:
    i = line.find("#")
    if i < 0:
        return None
    # a crude but adequate test: a '#' outside quotes
    before = line[:i]
    if before.count('"') % 2 or before.count("'") % 2:
        return None
    c = line[i + 1:].strip().strip("#-/\\|= ").strip()
    return c or None


def _sig_end(fn) -> int:
    return fn.body[0].lineno - 1 if fn.body and fn.body[0].lineno > fn.lineno else fn.lineno


def _field_line(cls_node, name: str) -> int | None:
    import ast

    for st in cls_node.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name:
            return st.lineno
    return None


def _attr_line(cls_node, name: str) -> int | None:
    import ast

    for st in cls_node.body:
        if isinstance(st, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in st.targets):
            return st.lineno
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.target.id == name:
            return st.lineno
    return None


def _short(text, n: int = 60) -> str:
    t = str(text)
    return t if len(t) <= n else t[: n - 3] + "..."


def prewarm(ws) -> None:
    """Summarise the workspace's files in two processes (cold cache only): half in a forked child
    that writes the summaries to the cache, half here. Later lookups then load the cached summaries.
    A no-op without a cache, off POSIX, or when the summaries are already cached."""
    if not ws.cache.enabled or not hasattr(os, "fork") or not getattr(ws, "allow_fork", False):
        return  # forking is only safe in single-threaded CLI processes, never in the server
    paths = sorted(ws.index.ws_files.values())
    cold = [p for p in paths if not ws.index.has_known_sha(p)]
    if len(cold) < 40:
        return
    child = cold[::2]
    try:
        pid = os.fork()
    except OSError:
        return
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            for p in child:
                ws.index.module_for_path(p)
            ws.cache.flush()  # the parent reads these summaries back from the cache
        finally:
            os._exit(0)
    try:
        for p in cold[1::2]:
            ws.index.module_for_path(p)
    finally:
        try:
            os.waitpid(pid, 0)
        except OSError:
            pass


def build_inventory(ws, globs=None, old=None, new=None, rules: bool = True, drift_report=None) -> Inventory:
    return InventoryBuilder(ws, globs, old, new, rules, drift_report).build()


# ----------------------------------------------------------------------------- markdown


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def to_markdown(inv: Inventory) -> str:
    out = ["# AttnLens upgrade inventory", ""]
    out.append(f"- **Subject:** {inv.subject.get('description')}")
    up = inv.upstream
    out.append(f"- **Upstream (new):** {up.get('label')} at `{up.get('root')}`")
    if inv.old:
        out.append(f"- **Drift from (old):** {inv.old.get('label')} at `{inv.old.get('root')}`")
    else:
        out.append("- **Drift from (old):** not given (`--from`); no sync actions can be proposed")
    out.append(f"- **Environment:** {inv.environment['summary'] if inv.environment else 'no environment record (run `attnlens env`)'}")
    out.append(f"- **Scope:** {', '.join(f'`{g}`' for g in inv.scope)} ({len(inv.files)} files, "
               f"{sum(len(f.items) for f in inv.files)} items)")
    c = inv.counts()
    out.append(f"- **Actions:** fix {c['fix']}, sync {c['sync']}, probe {c['probe']}, keep {c['keep']}")
    out.append(f"- **Built in:** {inv.elapsed_s:.2f} s")
    if inv.errors:
        out.append(f"- **Analysis errors:** {len(inv.errors)} (see the JSON output)")
    out.append("")
    out.append("| file | items | action |")
    out.append("|---|---|---|")
    for f in inv.files:
        fx = f" ({len(f.fixes)} quick fix{'es' if len(f.fixes) != 1 else ''})" if f.fixes else ""
        out.append(f"| `{f.path}` | {len(f.items)} | {f.action}{fx} |")
    out.append("")
    for f in inv.files:
        out.append(f"## `{f.path}` — {f.action}")
        out.append("")
        for n in f.notes:
            out.append(f"- note: {_md_escape(n)}")
        for x in f.fixes:
            out.append(f"- quick fix `{x['id']}` (L{x['line']}): {_md_escape(x['title'])}; "
                       f"`attnlens fix --finding {x['id']} --diff`")
        if not f.items:
            out.append("")
            continue
        out.append("| item | kind | active | upstream | differences (unexplained) | findings | action |")
        out.append("|---|---|---|---|---|---|---|")
        for it in f.items:
            unexp = sum(1 for d in it.differences if not d.explained)
            upsym = it.upstream["symbol"].rpartition(".")[2] if it.upstream else "-"
            fids = ", ".join(sorted({x["rule"] for x in it.findings})) or "-"
            act = "yes" if it.active else "**no**"
            out.append(f"| `{it.name}` L{it.line} | {it.kind} | {act} | {_md_escape(upsym)} | {len(it.differences)} ({unexp}) | {fids} | **{it.action}** |")
        out.append("")
        for it in f.items:
            out.append(f"- **`{it.name}`** ({it.kind}, L{it.line}-{it.end_line}) — **{it.action}**: {_md_escape(it.why)}")
            if it.registration:
                out.append(f"  - registration: {'; '.join(it.registration)}")
            elif not it.active:
                out.append("  - registration: none; not referenced in the workspace (inactive adaptation)")
            if it.callers:
                shown = ", ".join(f"{c['by']} ({c['path']}:{c['line']}, {c['how']})" for c in it.callers[:5])
                more = f" and {len(it.callers) - 5} more" if len(it.callers) > 5 else ""
                out.append(f"  - callers: {_md_escape(shown)}{more}")
            if it.upstream:
                out.append(f"  - upstream: `{it.upstream['symbol']}` (via {it.upstream['via']}) [{os.path.basename(it.upstream['path'] or '')}:{it.upstream['line']}]({it.upstream['link']})")
            else:
                out.append("  - upstream: no counterpart (plugin-only)")
            for d in it.differences:
                where = f"L{d.line}" + (f"-{d.end_line}" if d.end_line and d.end_line != d.line else "") if d.line else ""
                rl = f" (L{d.reason_line})" if d.reason_line else ""
                out.append(f"  - difference {where}: {_md_escape(d.what)} — reason: {_md_escape(d.reason)}{rl}")
            if it.drift:
                fl = it.drift["flagged"]
                out.append(f"  - drift {it.drift['old']} -> {it.drift['new']}: {it.drift['status']}"
                           + (f"; retained adaptations: {len(it.drift['retained'])}" if it.drift["retained"] else ""))
                for d in fl[:8]:
                    out.append(f"    - `{d['symbol'].rpartition('.')[2]}` {d['status']}: {_md_escape(d['summary'][:300])}")
            for x in it.findings[:10]:
                out.append(f"  - finding {x['rule']} {x['severity']} L{x['line']}: {_md_escape(x['message'][:300])}")
            if it.kernels:
                kinds = {}
                for k in it.kernels:
                    for lf in k.get("leaves") or [{"kind": k["final"], "symbol": k["symbol"], "reachability": M.Reach.LIVE}]:
                        if lf["reachability"] == M.Reach.DEAD:
                            continue
                        kinds.setdefault(lf["kind"], set()).add(lf["symbol"].rpartition(".")[2] if "::" not in lf["symbol"] else lf["symbol"])
                out.append("  - kernels: " + "; ".join(f"{kk}: {', '.join(sorted(v)[:6])}" for kk, v in sorted(kinds.items())))
            if it.evidence:
                out.append("  - evidence: " + "; ".join(f"{e['family']} {e['verdict']} ({e['created']}, {e['id']})" for e in it.evidence))
            elif it.kernels:
                out.append("  - evidence: none recorded")
            out.append(f"  - validate: {it.validation.replace('{file}', f.path)}")
        out.append("")
    return "\n".join(out) + "\n"
