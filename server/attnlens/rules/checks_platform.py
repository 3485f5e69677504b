"""AL105: NVIDIA device-capability checks under the plugin's platform profile."""

from __future__ import annotations

import re

from ..walk import ValKind, Walk
from .checks_calls import _loc, _rel
from .api import Rule, check, rule

AL105 = rule(Rule(
    "AL105", "nvidia-capability-check", "warning",
    "An NVIDIA compute-capability check that is constant or vendor-meaningless on the plugin's platform.",
    "`is_device_capability_family()` is constant on an out-of-tree platform that overrides it, and "
    "`has_device_capability()`/`is_device_capability()`/comparisons of `get_device_capability()` compare "
    "vendor numbers with NVIDIA SM versions. The branch they decide is dead or taken for the wrong reason.",
    ("platform", "branch"),
))


def _branch_effect(b, value) -> str:
    """What a constant ``value`` of the use does to the branch it sits in."""
    if b is None:
        return ""
    tv = b.when_true if value else b.when_false
    span = lambda s: (f"lines {s[0]}-{s[1]}" if s and s[0] != s[1] else (f"line {s[0]}" if s else ""))
    if b.kind in ("if", "while"):
        if tv is False:
            return f"so the `{b.kind}` body at {span(b.body)} never runs"
        if tv is True:
            return (f"so the `else` branch at {span(b.orelse)} never runs" if b.orelse else f"so the `{b.kind}` at line {b.line} is always taken")
        return f"in the condition of the `{b.kind}` at line {b.line} ({span(b.body)})"
    if b.kind == "ifexp":
        if tv is False:
            return f"so the conditional expression at line {b.line} always yields its `else` value"
        if tv is True:
            return f"so the conditional expression at line {b.line} always yields its first value"
        return f"in the conditional expression at line {b.line}"
    if b.kind in ("return", "assign"):
        what = "the returned value" if b.kind == "return" else "the assigned value"
        if tv is not None:
            return f"so {what} at line {b.line} is always {tv}"
        return f"in {what} at line {b.line}"
    if b.kind == "assert":
        return f"in the assert at line {b.line}"
    return ""


def _guard_span(b) -> str:
    """What the use decides, for a message: "the `if` at line 26 (body 27-30)"."""
    if b is None:
        return ""
    if b.kind in ("if", "while") and b.body:
        s = b.body
        return f"the `{b.kind}` at line {b.line}, body " + (f"line {s[0]}" if s[0] == s[1] else f"lines {s[0]}-{s[1]}")
    if b.kind == "ifexp":
        return f"the conditional expression at line {b.line}"
    if b.kind in ("return", "assign"):
        return f"the {'returned' if b.kind == 'return' else 'assigned'} value at line {b.line}"
    return ""


def _platform_facts(engine):
    def compute():
        query = engine.ws.query
        info = query.platform_info()
        classes = list(info.classes)
        names = " / ".join(c.qual for c in classes) or "the platform"
        getters = []
        getter_none = bool(classes)
        for cv in classes:
            fv = query.class_attr(cv.module, cv.qual, "get_device_capability")
            if fv is None or fv.func is None:
                getter_none = False
                continue
            getters.append(fv)
            rc = fv.func.returns_const
            if not (rc is not None and rc[1] is None):
                getter_none = False
        ws_classes = set()
        for cv in classes:
            try:
                for m in query.mro(cv.module, cv.qual):
                    if m.module is not None and m.module.workspace:
                        ws_classes.add((m.module.name, m.qual))
            except RecursionError:
                pass
        return {
            "names": names,
            "enum": info.enum,
            "cap_source": _capability_source(query, classes, engine.ws.root),
            "is_cuda": query.platform_method_value("is_cuda"),
            "getters": getters,
            "getter_none": getter_none,
            "ws_classes": ws_classes,
        }

    return engine.memo("platform_facts", compute)


def _capability_source(query, classes, root) -> str | None:
    """Where the capability a backend's ``supports_compute_capability`` / ``validate_configuration`` receives
    comes from: the ``get_device_capability()`` call inside the platform's ``get_attn_backend_cls`` (the plugin's
    override, else the inherited one), as ``Owner.get_attn_backend_cls (path:line)``; None when no such call is
    visible (the text then says nothing about its origin)."""
    for cv in classes:
        try:
            fv = query.class_attr(cv.module, cv.qual, "get_attn_backend_cls")
        except RecursionError:
            fv = None
        if fv is None or fv.func is None or fv.module is None:
            continue
        for cs in fv.module.summary.calls_in(fv.qual):
            if cs.func.rpartition(".")[2] == "get_device_capability":
                return f"{fv.owner or fv.dotted}.get_attn_backend_cls ({_rel(fv.module.path, root)}:{cs.line})"
    return None


def _documented_capability(engine):
    """The capability the plugin says its device reports: a comment like ``# On MACA it's 8.0`` within
    three lines above capability code (most frequent value; its place is the evidence)."""
    def compute():
        from .capability_eval import documented_capability

        idx = engine.ws.index
        votes: dict = {}
        for m in idx.workspace_modules_matching(_DOC_BYTES):
            lines = (idx.source_text(m.path) or "").splitlines()
            for i, text in enumerate(lines, 1):
                if "capabilit" not in text or text.lstrip().startswith("#"):
                    continue
                got = documented_capability(lines, i)
                if got is not None:
                    cap, ln = got
                    votes.setdefault(cap, []).append((m.path, ln))
        if not votes:
            return None
        cap, where = max(votes.items(), key=lambda kv: len(kv[1]))
        return cap, sorted(set(where))[0]

    return engine.memo("documented_capability", compute)


_DOC_BYTES = rb"(?i)#[^\n]*\b(?:it'?s|is|reports?|returns?|=)\s*(?:sm[_ ]?)?\d{1,2}\.\d\b"


def _norm_text(text: str) -> str:
    try:
        import ast

        return ast.unparse(ast.parse(text.strip(), mode="eval"))
    except (SyntaxError, ValueError):
        return " ".join(text.split())


def _backend_of(ctx, scope: str) -> str | None:
    """``FLASHMLA`` when ``scope`` is a method of a registered backend class of this module."""
    from .checks_upstream import registry_pairs

    cq = ctx.r.enclosing_class(ctx.mod, scope) if scope else None
    if not cq:
        return None
    for p in registry_pairs(ctx.engine):
        pv = p["plugin"]
        if p["kind"] == "backend" and pv.module is not None and (pv.module.name, pv.qual) == (ctx.mod.name, cq):
            return p["entry"]
    return None


@check("AL105")
def capability_checks(ctx):
    r = ctx.r
    prof = r.profile
    pf = _platform_facts(ctx.engine)
    if not pf["names"] or pf["enum"] is None and not pf["getters"]:
        return
    root = ctx.ws.root
    cls_scope_cache = {}
    getters_txt = "; ".join(f"{g.owner or g.dotted}.get_device_capability ({_loc(g, root)})" for g in pf["getters"][:3])
    calls_by_pos = {(cs.line, cs.col): cs for cs in ctx.s.calls}
    groups: dict[tuple, list] = {}  # one finding per decided statement/expression
    for u in ctx.facts.caps:
        # inside the platform class itself: the definitions, not uses
        if u.scope:
            cq = cls_scope_cache.get(u.scope)
            if cq is None:
                cq = r.enclosing_class(ctx.mod, u.scope) or ""
                cls_scope_cache[u.scope] = cq
            if (ctx.mod.name, cq) in pf["ws_classes"]:
                continue
        cs = calls_by_pos.get((u.line, u.col))
        guard_cs = cs or _enclosing_call(ctx, u)
        if guard_cs is not None and ctx.call_dead(guard_cs):
            continue  # under a statement guard that is False on this platform (e.g. `if is_cuda():`)
        if any(_conjunct_false(ctx, u, t) for t in u.conj):
            continue  # short-circuited: `get_fa_version() == 3 and <this>` where the first operand folds to False
        if u.kind != "param_compare":
            try:
                bv = r.resolve_dotted(ctx.mod, u.scope, u.base, Walk(), line=u.line) if u.base else None
            except RecursionError:
                bv = None
            if bv is None or bv.kind != ValKind.PLATFORM:
                continue
        key = (u.branch.kind, u.branch.line) if u.branch is not None and u.branch.kind != "other" else ("at", u.line)
        groups.setdefault(key, []).append((u, cs))
    for uses in groups.values():
        _capability_finding(ctx, uses, pf, getters_txt, root)


def _capability_finding(ctx, uses: list, pf: dict, getters_txt: str, root) -> None:
    r = ctx.r
    prof = r.profile
    u, cs = uses[0]
    chain = ctx.trace(cs) if cs is not None else None
    text = _norm_text(u.text).removeprefix("current_platform.")
    if len(uses) > 1 and u.branch is not None and u.branch.test and len(_norm_text(u.branch.test)) <= 100:
        text = _norm_text(u.branch.test)  # several tests of one expression: name the expression
    more = f" (and {len(uses) - 1} more test{'s' if len(uses) > 2 else ''} of the same expression)" if len(uses) > 1 else ""
    related = [ctx.site(x.line, x.col, x.end_line, x.end_col, f"`{_norm_text(x.text)}`") for x, _cs in uses[1:]]
    const = None
    if u.kind == "call":
        const = prof.method_value(u.method)
        if const is None and u.method in ("has_device_capability", "is_device_capability") and pf["getter_none"]:
            const = False
    common = dict(chain=chain, platform=pf["names"], branch=_branch_json(u.branch), related=related)
    if const is not None and isinstance(const, bool):
        fv = None
        for cv in prof.info.classes:
            fv = r.class_attr(cv.module, cv.qual, u.method, Walk())
            if fv is not None:
                break
        where = ""
        if fv is not None and fv.func is not None:
            where = (f"{fv.owner or fv.dotted}.{u.method} ({_loc(fv, root)}) returns {const}" if fv.func.returns_const
                     else "get_device_capability() returns None there")
        eff = _branch_effect(u.branch, const)
        b = u.branch
        if b is not None and b.kind in ("assert", "assign", "return", "if", "while", "ifexp") and b.test:
            from .capability_eval import reduce

            folded = reduce(b.test, u.text, const)
            what = {"assert": "the assert", "assign": "the assigned value", "return": "the returned value"}.get(b.kind, "the test")
            if folded is not None and b.kind in ("assert", "assign", "return"):
                eff = f"{what} at line {b.line} reduces to `{folded}`"
        msg = f"`{text}` is always {const} on this platform" + (f": {eff.removeprefix('so ')}" if eff else "") + "."
        detail = f"On {pf['names']}" + (f", {where}" if where else "") + "." + more
        ctx.add("AL105", u.line, u.col, u.end_line, u.end_col, msg, constant=const, detail=detail,
                dead_lines=_dead_lines(u.branch, const), **common)
        return
    if pf["is_cuda"] is True:
        return  # an NVIDIA platform: the numbers mean what upstream thinks
    from .capability_eval import evaluate

    doc = _documented_capability(ctx.engine)
    value = None
    if doc is not None:
        vals = {evaluate(x.text, doc[0], x.method) for x, _cs in uses}
        whole = evaluate(u.branch.test, doc[0]) if u.branch is not None and u.branch.test else None
        value = whole if whole is not None else (vals.pop() if len(vals) == 1 else None)
    backend = _backend_of(ctx, u.scope) if u.scope.rpartition(".")[2] == "supports_compute_capability" else None
    if value is not None:
        cap, (dpath, dline) = doc
        reported = f"the platform reports {cap.major}.{cap.minor} ({_rel(dpath, root)}:{dline})"
        if backend is not None:
            effect = f"{backend} is never selected on this platform" if value is False else f"{backend} passes the capability check for an NVIDIA reason"
            msg = f"{effect}: `{text}` compares NVIDIA SM numbers and {reported}."
        else:
            msg = f"`{text}` is {value} on this platform: it compares NVIDIA SM numbers and {reported}."
    else:
        what = "an NVIDIA SM version" if u.kind == "call" else "NVIDIA SM numbers"
        eff = _guard_span(u.branch)
        msg = (f"`{text}` compares the vendor's capability with {what}: "
               + (f"{backend} is accepted or rejected" if backend else "it is taken or skipped")
               + " for the wrong reason" + (f" ({eff})" if eff else "") + ".")
    detail = (f"On {pf['names']} get_device_capability() reports vendor values, not an NVIDIA architecture"
              + (f" (from {getters_txt})" if getters_txt else "") + "."
              + (f" The capability is what {pf['cap_source']} obtains and passes to the backend's checks."
                 if u.kind == "param_compare" and pf.get("cap_source") else "")
              + more)
    ctx.add("AL105", u.line, u.col, u.end_line, u.end_col, msg, constant=value, detail=detail,
            documented=(f"{doc[0].major}.{doc[0].minor}" if value is not None else None), backend=backend, **common)


def _dead_lines(b, value) -> list | None:
    """[first, last] lines of the branch body that never runs when the use is the constant ``value``."""
    if b is None or b.kind not in ("if", "while"):
        return None
    tv = b.when_true if value else b.when_false
    if tv is False and b.body:
        return list(b.body)
    if tv is True and b.orelse:
        return list(b.orelse)
    return None


def _conjunct_false(ctx, u, text: str) -> bool:
    """Is an ``and`` operand evaluated before the use False here (a vendor guard, or anything the
    platform profile folds: constant-returning functions, module constants, ``self.x`` set once)?"""
    if _vendor_guard_false(ctx, u, text):
        return True
    try:
        return ctx.r.profile.evaluate(ctx.mod, u.scope, text) is False
    except RecursionError:
        return False


_VENDOR_GUARD = re.compile(r"\.is_(cuda|rocm|xpu|cpu|tpu|neuron|hpu)\(\)")


def _vendor_guard_false(ctx, u, text: str) -> bool:
    """Is ``text`` a vendor guard (``current_platform.is_cuda()``, or ``self.x`` assigned only
    from such guards in the same class) that is False on this platform?"""
    prof = ctx.r.profile
    m = re.fullmatch(r"self\.(\w+)", text.strip())
    if m:
        cq = ctx.r.enclosing_class(ctx.mod, u.scope) if u.scope else None
        vals = ctx.facts.self_assigns.get((cq, m.group(1)), []) if cq else []
        return bool(vals) and all(_VENDOR_GUARD.search(v) and prof.evaluate(ctx.mod, u.scope, v) is False for v in vals)
    return bool(_VENDOR_GUARD.search(text)) and prof.evaluate(ctx.mod, u.scope, text) is False


def _enclosing_call(ctx, u):
    """A call site on the use's line(s) in the same scope: its guards are the statement's guards."""
    best = None
    for cs in ctx.s.calls:
        if cs.scope != u.scope or not (cs.line <= u.line <= cs.end_line or u.line <= cs.line <= u.end_line):
            continue
        span = (cs.end_line - cs.line, cs.end_col - cs.col)
        if best is None or span < best[0]:
            best = (span, cs)
    return best[1] if best else None


def _sm(args) -> str:
    if not args:
        return ""
    a = args[0].strip()
    if a.isdigit() and len(a) >= 2:
        return f"{a[:-1]}.{a[-1]} (`{a}`)"
    return f"`{a}`"


def _branch_json(b):
    if b is None:
        return None
    return {"kind": b.kind, "line": b.line, "test": b.test, "body": list(b.body), "orelse": list(b.orelse)}

