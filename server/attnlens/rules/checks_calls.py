"""Call-site rules: keywords, dummies, packages that are not installed, torch op schemas.

AL101 unaccepted-keyword, AL102 swallowed-keyword, AL106 dummy-callee,
AL107 not-installed-callee, AL113 torch-op-schema.
"""

from __future__ import annotations

import ast
import os
import re
import textwrap

from .. import model as M
from ..pyindex import is_passthrough
from ..walk import Val, ValKind, Walk
from .classes import mro_complete
from .api import Rule, check, content_memo, rule, short_list

AL101 = rule(Rule(
    "AL101", "unaccepted-keyword", "error",
    "A keyword argument that the resolved callee (or the function its **kwargs are forwarded to) does not accept.",
    "The call resolves (through aliases, re-exports, patches and *args/**kwargs forwarding) to a Python "
    "function or dataclass constructor with no parameter of that name and no **kwargs: it raises TypeError "
    "when this line runs.",
    ("correctness", "signature"),
))
AL102 = rule(Rule(
    "AL102", "swallowed-keyword", "warning",
    "A keyword that ends in a **kwargs that is never read on the resolved path: accepted is not implemented.",
    "The keyword is accepted only into **kwargs (possibly after forwarding through wrappers) and no function "
    "on the path reads it (`kwargs['x']`, `kwargs.get('x')`, `'x' in kwargs`) or forwards it further. The "
    "option has no effect even though the call succeeds.",
    ("semantics", "signature"),
))
AL106 = rule(Rule(
    "AL106", "dummy-callee", "warning",
    "A call whose resolved callee is a dummy or stub (only logs, returns None, passes or raises NotImplementedError).",
    "The name looks like a kernel, but what runs on this platform is a placeholder.",
    ("semantics",),
))
AL107 = rule(Rule(
    "AL107", "not-installed-callee", "info",
    "A call whose resolved callee comes from a package that is not installed in the target environment.",
    "The chain ends in an import of a package the target interpreter cannot find, so nothing about the "
    "kernel (signature, capabilities) can be checked here; run the check against the MetaX environment or "
    "probe the kernel.",
    ("environment",),
))
AL113 = rule(Rule(
    "AL113", "torch-op-schema", "error",
    "A torch custom op called with arguments that do not fit its registered schema (count, names, keyword-only).",
    "The schema comes from the workspace's C++ `ops.def(...)` registration (or a schema baked into an "
    "installed extension). A call that does not bind fails at run time, or binds arguments to the wrong "
    "parameters when only the count matches by accident.",
    ("correctness", "torch-op"),
))

# decorators that keep the decorated function's signature besides the pass-through ones (registrations, markers)
SIGNATURE_KEEPING = frozenset({"compile", "custom_op", "triton_op", "register_fake", "deprecated", "overload", "final",
                               "timed", "_timed"})

_CALL_SKIP_ROOTS = {"super", "logger", "logging", "np", "math", "os", "sys", "warnings", "print", "len", "isinstance",
                    "dataclasses", "copy", "functools", "itertools", "collections", "typing", "json", "re", "time"}


def _decorators_ok(ctx, v: Val) -> bool:
    f = v.func
    if f is None:
        return False
    for d in f.decorators:
        last = d.func.rpartition(".")[2]
        if not d.func:
            return False
        if is_passthrough(d.func) or last in SIGNATURE_KEEPING:
            continue
        try:
            if v.module is not None and ctx.r.patch_decorator(v.module, d) is not None:
                continue
        except Exception:  # noqa: BLE001, S110 - analysis must not fail on a bad input
            pass
        return False
    return True


# --------------------------------------------------------------------------- **kwargs usage


def _kwargs_usage(engine, v: Val):
    """(forwarding call positions, dynamic use?) for the **kwargs of function ``v``."""
    f = v.func
    mod = v.module
    key = ("kwuse", mod.path, mod.summary.sha, f.qualname)

    def compute():
        kwarg = next((p.name for p in f.params if p.kind == "kwarg"), None)
        if kwarg is None:
            return ((), False)
        if kwarg not in (f.names_read or ()):
            return ((), False)
        text = engine.ws.index.source_text(mod.path) or ""
        lines = text.splitlines()
        seg = "\n".join(lines[f.line - 1 : f.end_line])
        try:
            node = ast.parse(textwrap.dedent(seg)).body[0]
        except (SyntaxError, IndexError, ValueError):
            return ((), True)
        fwd = []
        other = False
        parents = {}
        for n in ast.walk(node):
            for c in ast.iter_child_nodes(n):
                parents[c] = n
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id == kwarg and isinstance(n.ctx, ast.Load):
                p = parents.get(n)
                if isinstance(p, ast.keyword) and p.arg is None:
                    call = parents.get(p)
                    fwd.append(call.lineno + f.line - 1)
                elif isinstance(p, ast.Attribute) and p.attr in ("get", "pop", "setdefault"):
                    call = parents.get(p)
                    if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                        continue
                    other = True
                elif isinstance(p, ast.Subscript) and isinstance(p.slice, ast.Constant) or isinstance(p, ast.Compare) and p.comparators and p.comparators[0] is n:
                    continue
                else:
                    other = True
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and n is not node:
                for m in ast.walk(n):
                    if isinstance(m, ast.Name) and m.id == kwarg:
                        other = True
        return (tuple(fwd), other)

    return content_memo(key, compute)  # keyed by path and content sha


def _forward_targets(ctx, v: Val, lines: tuple):
    mod = v.module
    f = v.func
    out = []
    for cs in mod.summary.calls_in(f.qualname):
        if cs.line in lines and cs.star_kwargs:
            if cs.guards and ctx.r.guard_value(mod, cs.guards, cs.scope) is False:
                continue
            try:
                tv = ctx.r.resolve_dotted(mod, cs.scope, cs.func, Walk(), line=cs.line) if cs.func else Val(ValKind.UNKNOWN)
            except RecursionError:
                tv = Val(ValKind.UNKNOWN)
            out.append((cs, ctx.engine.apply_patch(tv)))
    return out


def is_placeholder(v: Val | None) -> bool:
    """vLLM's stand-ins for packages that are missing in the *analysis* environment (TritonPlaceholder...)."""
    if v is None:
        return False
    name = v.module.name if v.module is not None else ""
    return "Placeholder" in (v.qual or "") or name == "vllm.triton_utils.importing"


def _fname(v: Val) -> str:
    return v.dotted


def _loc(v: Val, root) -> str:
    f = v.func
    line = f.line if f is not None else v.line
    path = v.path or (v.module.path if v.module else "")
    try:
        rel = os.path.relpath(path, root)
        if rel.startswith(".."):
            rel = _short(path)
    except ValueError:
        rel = path
    return f"{rel}:{line}"


def _short(path: str) -> str:
    i = path.find("site-packages/")
    return path[i + len("site-packages/"):] if i >= 0 else path


def _flow(ctx, kw: str, v: Val, path: list, depth: int = 0):
    """Where keyword ``kw`` goes when passed to function ``v``.

    Returns (state, path) with state in accepted | read | swallowed | rejected | unknown | dummy.
    """
    path = path + [v]
    f = v.func
    if f is None or v.module is None or depth > 6:
        return "unknown", path
    if not _decorators_ok(ctx, v):
        return "unknown", path
    if f.dummy:
        return "dummy", path
    named = [p for p in f.params if p.name == kw]
    if named and named[0].kind in ("pos", "kwonly"):
        return "accepted", path
    kwarg = next((p for p in f.params if p.kind == "kwarg"), None)
    if kwarg is None:
        return "rejected", path
    if kw in (f.kw_reads or ()):
        return "read", path
    fwd, other = _kwargs_usage(ctx.engine, v)
    if other:
        return "unknown", path
    if not fwd:
        return "swallowed", path
    states = []
    for cs, tv in _forward_targets(ctx, v, fwd):
        if kw in cs.keywords:
            return "unknown", path  # also passed explicitly: TypeError or shadowing, not our question
        if tv.kind == ValKind.FUNCTION:
            states.append(_flow(ctx, kw, tv, path, depth + 1))
        elif tv.kind == ValKind.CLASS:
            st = _ctor_flow(ctx, kw, tv, path, depth + 1)
            states.append(st)
        else:
            states.append(("unknown", path + [tv]))
    if not states:
        return "unknown", path
    for want in ("unknown", "accepted", "read"):
        for s, p in states:
            if s == want:
                return s, p
    for s, p in states:
        if s == "rejected":
            return s, p
    return states[0]


def _mro_complete(ctx, v: Val):
    """The class's MRO when every base of every class in it resolves, else None."""
    return mro_complete(ctx.engine, v)


def _ctor_params(ctx, v: Val):
    """Constructor parameter names of class ``v`` (None when not known statically)."""
    mro = _mro_complete(ctx, v)
    if mro is None:
        return None
    for cv in mro:
        c = cv.cls
        if c.is_dataclass and "__init__" not in c.methods:
            names = set()
            for dv in reversed(mro):
                dc = dv.cls
                if dc is not None and dc.is_dataclass:
                    for fld in dc.fields:
                        ann = fld[1] or ""
                        if not ann.startswith(("ClassVar", "typing.ClassVar")):
                            names.add(fld[0])
            return ("dataclass", names, False, cv)
        if "__new__" in c.methods or any(d.func.rpartition(".")[2] not in ("dataclass",) for d in c.decorators if d.func):
            return None
        if "__init__" in c.methods:
            fq = c.methods["__init__"]
            f = cv.module.summary.functions.get(fq)
            if f is None:
                return None
            fv = Val(ValKind.FUNCTION, cv.module, fq, cv.module.path, f.line, owner=cv.qual)
            return ("init", fv, None, cv)
    return ("object", set(), False, None)


def _ctor_flow(ctx, kw: str, v: Val, path: list, depth: int):
    info = _ctor_params(ctx, v)
    path = path + [v]
    if info is None:
        return "unknown", path
    kind, x, _, _cv = info
    if kind == "dataclass":
        return ("accepted" if kw in x else "rejected"), path
    if kind == "init":
        return _flow(ctx, kw, x, path[:-1], depth)
    return "rejected", path


def _kw_range(ctx, cs, kw: str):
    lines = ctx.lines
    for ln in range(cs.line, min(cs.end_line, len(lines)) + 1):
        text = lines[ln - 1]
        start = cs.col if ln == cs.line else 0
        end = cs.end_col if ln == cs.end_line else len(text)
        m = re.search(r"(?<![\w.])" + re.escape(kw) + r"\s*=(?!=)", text[start:end])
        if m:
            return ln, start + m.start(), ln, start + m.start() + len(kw)
    return cs.line, cs.col, cs.end_line, cs.end_col


def _describe_path(p: list) -> str:
    names = []
    for v in p:
        q = v.qual.rpartition(".")[2] if v.qual else v.dotted
        names.append(q + ("()" if v.kind == ValKind.FUNCTION else ""))
    return " -> ".join(names)


@check("AL101", "AL102")
def keyword_flow(ctx):
    root = ctx.ws.root
    for cs in ctx.s.calls:
        yield
        if not cs.keywords or not cs.func or cs.launch:
            continue
        head = cs.func.split(".", 1)[0]
        if head in _CALL_SKIP_ROOTS or head == "torch":
            continue
        if ctx.call_dead(cs):
            continue
        v = ctx.resolve_call(cs)
        if v.kind not in (ValKind.FUNCTION, ValKind.CLASS) or ctx.uncertain(cs):
            continue
        for kw in cs.keywords:
            if v.kind == ValKind.CLASS:
                state, path = _ctor_flow(ctx, kw, v, [], 0)
            else:
                state, path = _flow(ctx, kw, v, [])
            if state in ("rejected", "swallowed"):
                if any(is_placeholder(x) for x in [v] + path):
                    continue
                last = path[-1]
                l0, c0, l1, c1 = _kw_range(ctx, cs, kw)
                via = f" (path: {_describe_path(path)})" if len(path) > 1 else ""
                if state == "rejected":
                    if last.kind == ValKind.CLASS:
                        what = f"dataclass {last.dotted} ({_loc(last, root)}) has no field `{kw}`"
                    else:
                        what = f"{last.dotted} ({_loc(last, root)}) has no parameter `{kw}` and no **kwargs"
                    msg = f"`{kw}=` is not accepted: {what}{via}; this call raises TypeError when it runs"
                    ctx.add("AL101", l0, c0, l1, c1, msg, chain=ctx.trace(cs), keyword=kw,
                            callee=last.dotted, callee_location=_loc(last, root))
                else:
                    f = last.func
                    kwname = next((p.name for p in f.params if p.kind == "kwarg"), "kwargs")
                    msg = (f"`{kw}=` is accepted only into `**{kwname}` of {last.dotted} ({_loc(last, root)}) and never "
                           f"read on the resolved path{via}: accepted is not implemented")
                    ctx.add("AL102", l0, c0, l1, c1, msg, chain=ctx.trace(cs), keyword=kw,
                            callee=last.dotted, callee_location=_loc(last, root))


# --------------------------------------------------------------------------- dummies / not installed


def _root_val(ctx, cs) -> Val | None:
    head = cs.func.split(".", 1)[0]
    if head in ("self", "cls"):
        return None
    try:
        return ctx.r.lookup_name(ctx.mod, cs.scope, head, Walk(), cs.line)
    except RecursionError:
        return None


def _import_hop(chain):
    if chain is None:
        return None
    for h in chain.hops:
        if h.kind in M.IMPORT_HOP_KINDS:
            return h
    return None


def _head_binding_kind(ctx, cs) -> str:
    """How the callee's first name is bound: workspace | upstream | missing | local | other."""
    head = cs.func.split(".", 1)[0]
    r = ctx.r
    idx = ctx.ws.index
    where, bs = ctx.s.binding_of(cs.scope, head)
    if where == "param":
        return "local"
    if not bs:
        return "other"
    kinds = set()
    for b in bs:
        if b.kind in ("from", "import"):
            target = r.abs_module(ctx.mod, b.target or "", b.level) or ""
            top = target.split(".", 1)[0]
            if not top:
                kinds.add("other")
            elif top in ctx.engine.ws_tops:
                kinds.add("workspace")
            elif top in r.stdlib or top == "torch":
                kinds.add("upstream")
            elif idx.locate(top) is None:
                kinds.add("missing")
            else:
                kinds.add("upstream")
        elif b.kind in ("def", "class", "assign", "call", "ifexp"):
            kinds.add("workspace")
        else:
            kinds.add("other")
    if kinds == {"upstream"}:
        return "upstream"
    return "workspace"


_KERNELISH = re.compile(r"(attn|attention|flash|mla|kvcache|cache|gemm|moe|kernel|fwd|topk|top_k|rope|rotary|quant|"
                        r"varlen|paged|mqa|gqa|sparse|fused|gated_delta|_decode|_prefill)", re.IGNORECASE)
_DSL_DECOS = {"jit", "prim_func", "macro", "autotune", "heuristics", "kernel"}


def _in_dsl_kernel(ctx, scope: str) -> bool:
    q = scope
    while q:
        f = ctx.s.functions.get(q)
        if f is not None and any(d.func.rpartition(".")[2] in _DSL_DECOS for d in f.decorators):
            return True
        q = q.rpartition(".")[0]
    return False


def _self_alias(ctx, cs) -> bool:
    """``self.x(...)`` where ``x`` is an attribute bound to a callable (not a method)."""
    parts = cs.func.split(".")
    if len(parts) != 2:
        return False
    cq = ctx.r.enclosing_class(ctx.mod, cs.scope) if cs.scope else None
    c = ctx.s.classes.get(cq) if cq else None
    if c is None or parts[1] in c.methods:
        return False
    b = c.inst_attrs.get(parts[1]) or c.attrs.get(parts[1])
    return b is not None and b.kind in ("assign", "call", "ifexp")


@check("AL106", "AL107")
def dummy_and_missing(ctx):
    root = ctx.ws.root
    missing: dict[str, list] = {}  # cause (a package missing here) -> [(call site, Val, chain, contract, import hop)]
    for cs in ctx.s.calls:
        yield
        if not cs.func:
            continue
        head = cs.func.split(".", 1)[0]
        if head in _CALL_SKIP_ROOTS or head == "torch":
            continue
        if head in ("self", "cls"):
            if not _self_alias(ctx, cs):
                continue
        elif _head_binding_kind(ctx, cs) in ("upstream", "local", "other"):
            continue  # upstream callees are not placeholders of this plugin; locals are values
        if ctx.call_dead(cs):
            continue
        v = ctx.resolve_call(cs)
        if v.kind == ValKind.NOT_INSTALLED:
            if _in_dsl_kernel(ctx, cs.scope):
                continue  # DSL code inside a @triton.jit / @tilelang.jit body: compiled, not called
            c = ctx.engine.contracts.match(v.qual)
            if c is None and not _KERNELISH.search(v.qual.rpartition(".")[2]):
                continue  # a utility package (tqdm, zmq, msgspec, ...), not a kernel behind attention code
            pkg = v.extra.get("package") or v.qual.split(".", 1)[0]
            chain = ctx.trace(cs)
            h = _import_hop(chain)
            missing.setdefault(pkg, []).append((cs, v, chain, c, h))
        elif v.kind == ValKind.FUNCTION and v.func is not None and v.func.dummy and not is_placeholder(v) and not ctx.uncertain(cs):
            f = v.func
            if head in ("self", "cls") and f.class_name:
                continue  # dynamic dispatch: a subclass may override the placeholder
            rv = _root_val(ctx, cs)
            if rv is not None and rv.kind == ValKind.PLATFORM:
                continue  # platform hooks (AL105 covers capability queries)
            if not ctx.is_workspace(v) and f.dummy in ("empty body", "body is only `pass`"):
                continue  # upstream no-op hooks are intentional
            chain = ctx.trace(cs)
            c = ctx.engine.contracts.match(v.dotted)
            msg = f"`{cs.func}` is a placeholder here ({f.dummy}): the work it names does not happen on this platform."
            detail = f"It resolves to {v.dotted} ({_loc(v, root)})"
            if v.extra.get("patched_from"):
                detail += f", which replaces {v.extra['patched_from']} through a patch"
            ctx.add_at_call("AL106", cs, msg, chain=chain, contract=c.id if c else None,
                            probe=c.probe_for() if c else None, callee=v.dotted, reason=f.dummy, detail=detail + ".")
    for pkg, sites in missing.items():
        _not_installed_finding(ctx, pkg, sites, root)


def _not_installed_finding(ctx, pkg: str, sites: list, root) -> None:
    """One AL107 finding per package missing in this module: anchored at its first import here (where a
    fix or a guard belongs), else at the first call; every call is a related location. The message names
    what to verify: keywords beyond the installed reference API of the same name, and the probe family
    that can decide the calls (or that none can yet). Its cause is the package and the workspace import that binds
    it: modules that reach it through one re-export are one finding in a workspace report (``merge_causes``)."""
    local = [x for x in sites if x[4] is not None and x[4].path == ctx.path]
    cs0, v0, chain0, _c0, h = min(local, key=lambda x: x[4].line) if local else sites[0]
    per_name: dict[str, list] = {}
    for x in sites:
        per_name.setdefault(x[1].qual.rpartition(".")[2], []).append(x)
    contract = next((x[3] for x in sites if x[3] is not None), None)
    counted = short_list((f"{n} ×{len(xs)}" if len(xs) > 1 else n
                          for n, xs in sorted(per_name.items(), key=lambda x: (-len(x[1]), x[0]))), 60, "{}")
    beyond: dict[str, list] = {}  # name -> keywords its installed reference API does not accept
    refs = {}
    for n, xs in per_name.items():
        ref = _reference_params(ctx, next((x[3] for x in xs if x[3] is not None), None), n)
        if ref is not None:
            refs[n] = ref[0]
            extra = sorted({k for x in xs for k in x[0].keywords if k and k not in ref[1]})
            if extra:
                beyond[n] = extra
    routes = _routes(sites)
    at_import = h is not None and h.path == ctx.path
    n_imports = len({x[4].line for x in local})
    calls = f"{len(sites)} call{'s' if len(sites) > 1 else ''}" + (
        f" via {n_imports} imports" if n_imports > 1 else " via this import" if at_import else "")
    msg = f"`{pkg}` is not installed: {calls} {'are' if len(sites) > 1 else 'is'} unchecked ({counted})."
    if beyond:
        kw = sorted({k for ks in beyond.values() for k in ks})
        msg += f" Verify {short_list(kw, 40, '{}=')}: upstream's API has no such keyword."
    fitting = [r for r in routes.values() if r.probe]
    misfit = [(n, r) for n, r in routes.items() if r.probe is None]
    if fitting and (contract is not None or not misfit):
        act = fitting[0].text("")
        if len(msg) + len(act) > 160 and "(" in act:
            act = act.split(" (")[0] + "."  # the keywords it does not pass are in the detail
        msg += " " + act
        if misfit:
            msg = msg[:-1] + f"; none covers `{misfit[0][0]}` yet."
    elif misfit and contract is not None:
        msg += f" No probe covers {short_list((n for n, _r in misfit), 50)} yet."

    def at(hop) -> str:
        return f"{_rel(hop.path, root)}:{hop.line}" + (f" under `{hop.condition}`" if hop.condition else "")

    bh = _binding_hop(ctx, chain0)
    where = ""
    if bh is not None and h is not None and (bh.path, bh.line) != (h.path, h.line):
        where = f" is imported at {at(bh)} (and from there at {at(h)})"  # another module's import, re-exported here
    elif h is not None:
        where = f" is imported at {at(h)}"
    detail = [f"`{v0.qual}`{where}; the target environment has no `{pkg}`, so its signature and capabilities cannot "
              "be read."]
    if contract is not None:
        detail.append(f"Contract {contract.id} ({contract.family}) lists what is known.")
    for n, rname in sorted(refs.items()):
        detail.append(f"`{n}`: reference API `{rname}` (installed here)" +
                      (f" has no {', '.join(k + '=' for k in beyond[n])}." if n in beyond else " accepts every keyword passed."))
    if contract is not None or fitting:
        for n, r in routes.items():
            detail.append(f"`{n}`: " + r.text(n))
    related = [ctx.site(cs.line, cs.col, cs.end_line, cs.end_col,
                        f"call of {v.qual.rpartition('.')[2]}" + (f" with {', '.join(k + '=' for k in cs.keywords if k)}" if any(cs.keywords) else ""))
               for cs, v, *_r in sites]
    data = dict(chain=chain0, contract=contract.id if contract else None, probe=fitting[0].probe if fitting else None,
                package=pkg, symbol=v0.qual, symbols=sorted(per_name), unverified_keywords=beyond, calls=len(sites),
                detail="\n".join(detail))
    if bh is not None:
        # one cause: the package and the workspace import that binds it (the modules reaching it through one
        # re-export are merged into the first in a workspace report, the others its related locations)
        data["cause"] = f"AL107:{pkg}@{_rel(bh.path, root)}:{bh.line}"
    if at_import:
        name = v0.qual.rpartition(".")[2] if h.symbol is None else h.symbol.rpartition(".")[2]
        l0, c_0, l1, c_1 = ctx.name_range(h.line, name)
        ctx.add("AL107", l0, c_0, l1, c_1, msg, related=related, **data)
    else:
        ctx.add_at_call("AL107", cs0, msg, related=related[1:], **data)


def _binding_hop(ctx, chain):
    """The import hop that binds the missing package itself: the last import hop of the chain (re-exports
    followed), when it is in a workspace file; else None."""
    if chain is None:
        return None
    last = None
    for hop in chain.hops:
        if hop.kind in M.IMPORT_HOP_KINDS:
            last = hop
    if last is None or not last.path or not ctx.ws.index.is_workspace_path(last.path):
        return None
    return last


def _routes(sites: list) -> dict:
    """Per called name: the probe family that can decide its calls (by name and the keywords they pass)."""
    from .probe_routing import route

    by_name: dict[str, tuple] = {}
    for cs, v, _chain, c, _h in sites:
        n = v.qual.rpartition(".")[2]
        probe, kws = by_name.get(n, (None, ()))
        by_name[n] = (probe or (c.probe_for() if c is not None else None), kws + tuple(k for k in cs.keywords if k))
    return {n: route(p, kws, n) for n, (p, kws) in sorted(by_name.items())}


def _reference_params(ctx, contract, name: str) -> tuple[str, set] | None:
    """The installed function of the same name in another contract of the same family (upstream's
    API the missing kernel mirrors): (its dotted name, its keyword names), or None."""
    if contract is None:
        return None
    for c in ctx.engine.contracts.contracts:
        if c is contract or c.family != contract.family:
            continue
        for cov in c.covers:
            if not cov.endswith("." + name) or any(ch in cov for ch in "*?["):
                continue
            try:
                v = ctx.r.resolve_symbol(cov)
            except RecursionError:
                continue
            f = v.func if v.kind == ValKind.FUNCTION else None
            if f is None or any(p.kind == "kwarg" for p in f.params):
                continue
            return v.dotted, {p.name for p in f.params if p.kind != "posonly"}
    return None


def _rel(path: str, root) -> str:
    try:
        rel = os.path.relpath(path, root)
        return _short(path) if rel.startswith("..") else rel
    except ValueError:
        return path


# --------------------------------------------------------------------------- torch op schemas


def op_schemas(engine, ns: str, op: str) -> list:
    """[(Schema, where, from_workspace)] for torch op ns::op."""

    def compute():
        from ..cppindex import parse_schema

        out = []
        cpp_op = engine.ws.query.cpp_op
        try:  # while the CLI's worker builds the C++ index this raises CppNotReady: checked again later
            info = cpp_op(f"{ns}::{op}")
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            info = None
        if info is not None:
            for d in info.defs:
                if "(" not in (d.schema or ""):
                    continue
                try:
                    out.append((parse_schema(d.schema), f"{d.path}:{d.line}", True))
                except ValueError:
                    continue
        # Schemas baked into installed extensions (vLLM's own NVIDIA build) are not what a
        # plugin registers for its device, so they are not used as evidence here.
        return out

    return engine.memo(("schema", ns, op), compute)


def _fit(schemas, overload, nargs, keywords):
    if overload and overload != "default":
        cands = [s for s in schemas if s[0].overload == overload]
    elif overload == "default":
        cands = [s for s in schemas if not s[0].overload]
    else:
        cands = schemas
    if not cands:
        return None
    results = []
    for sch, where, ws in cands:
        probs = sch.check_call(nargs, keywords)
        if not probs:
            return None
        results.append((sch, where, ws, probs))
    return results[0]


def _op_of(v: Val):
    ns = v.extra.get("ns") or v.qual.split("::")[0]
    op = v.extra.get("op") or v.qual.split("::")[-1]
    return ns, op, v.extra.get("overload")


@check("AL113")
def torch_op_schema(ctx):
    root = ctx.ws.root
    for cs in ctx.s.calls:
        if not cs.func or cs.star_args or cs.star_kwargs or cs.launch:
            continue
        head = cs.func.split(".", 1)[0]
        if head in _CALL_SKIP_ROOTS:
            continue
        if head == "torch" and not cs.func.startswith("torch.ops."):
            continue
        if head != "torch" and not _may_reach_op(ctx, cs):
            continue
        if ctx.call_dead(cs):
            continue
        v = ctx.resolve_call(cs)
        if v.kind == ValKind.TORCH_OP:
            ns, op, ovl = _op_of(v)
            schemas = op_schemas(ctx.engine, ns, op)
            if not schemas:
                continue
            bad = _fit(schemas, ovl, cs.nargs, cs.keywords)
            if bad is None:
                continue
            sch, where, _ws, probs = bad
            loc = _rel(where.rsplit(':', 1)[0], root) + (f":{where.rsplit(':', 1)[1]}" if ":" in where else "")
            record = _schema_of_record(ctx, where, ns)
            msg = (f"`torch.ops.{ns}.{op}` does not fit its source-build schema ({loc}): {_problem(probs, op)}; {record}."
                   if record else
                   f"`torch.ops.{ns}.{op}` does not fit its schema ({loc}): {_problem(probs, op)}; the call fails when it runs.")
            detail = (f"Called with {cs.nargs} positional argument(s)" + (f" and keyword(s) {', '.join(cs.keywords)}" if cs.keywords else "")
                      + f"; schema `{sch}` ({loc}): " + "; ".join(probs) + ".")
            from .checks_loading import _uncalled_function

            unused = _uncalled_function(ctx, cs.scope)
            extra = {}
            if unused:
                # a stale wrapper nothing calls: worth deleting or updating, not an error of what runs
                msg = msg[:-1] + f"; nothing in the workspace calls `{unused}`."
                extra["severity"] = "info"
            ctx.add_at_call("AL113", cs, msg, chain=ctx.trace(cs), schema=str(sch), schema_source=where, problems=probs,
                            detail=detail, **extra)
        elif v.kind == ValKind.FUNCTION and v.module is not None and not v.module.workspace and v.func is not None:
            inner = _upstream_op_call(ctx, v)
            if inner is None:
                continue
            ics, ns, op, ovl = inner
            schemas = [s for s in op_schemas(ctx.engine, ns, op) if s[2]]
            if not schemas:
                continue
            bad = _fit(schemas, ovl, ics.nargs, ics.keywords)
            if bad is None:
                continue
            sch, where, _ws, probs = bad
            upath = _short(v.module.path)
            loc = f"{_rel(where.rsplit(':', 1)[0], root)}:{where.rsplit(':', 1)[-1]}"
            record = _schema_of_record(ctx, where, ns)
            if record:
                msg = (f"`{cs.func}` fails in a source build: upstream `{v.qual}` passes {ics.nargs} arguments to "
                       f"`{ns}::{op}` ({loc}: {_problem(probs, op, verb=True)}); {record}.")
            else:
                msg = (f"`{cs.func}` fails on this platform: upstream `{v.qual}` calls `{ns}::{op}` with {ics.nargs} "
                       f"arguments and the schema registered here ({loc}) {_problem(probs, op, verb=True)}.")
            detail = (f"Upstream call at {upath}:{ics.line} ({v.dotted}); the schema this workspace registers ({loc}) is `{sch}`: "
                      + "; ".join(probs) + ".")
            ctx.add_at_call("AL113", cs, msg, chain=ctx.trace(cs), schema=str(sch), schema_source=where, problems=probs,
                            upstream_call=f"{upath}:{ics.line}", detail=detail, cause=f"AL113:{ns}::{op}@{upath}:{ics.line}")


def _schema_of_record(ctx, where: str, ns: str) -> str:
    """When the schema comes from the workspace's C++ (the source build) but the platform's default
    configuration loads a precompiled provider of namespace ``ns`` instead, say which one and that it is not
    installed here."""
    if not where or not ctx.ws.index.is_workspace_path(where.rsplit(":", 1)[0]):
        return ""
    prov = ctx.ws.query.platform_defaults().provider_for(ns)
    if prov is None or prov.guard is None or "not installed" not in (prov.status or ""):
        return ""
    flag = prov.flags[0].text.rpartition(".")[2] if prov.flags else prov.guard
    return f"by default (`{flag}`) `{prov.module}` is loaded instead, not installed here"


def _problem(probs: list, op: str, verb: bool = False) -> str:
    """The first schema problem without the op-name prefix; with ``verb``, phrased after "the schema"."""
    p = probs[0] if probs else "it does not bind"
    p = p.removeprefix(f"{op}: ").removeprefix(f"{op} ")
    if verb:
        p = p.replace("missing required argument(s)", "requires").replace("has no argument named", "has no argument")
        return p if p.startswith(("requires", "has", "takes")) else f"rejects it ({p})"
    return p


def _may_reach_op(ctx, cs) -> bool:
    """Can this call be a torch op or an upstream op wrapper? (keeps the schema rule from
    resolving every call): the callee's first name is bound in the workspace, or imported
    from an ``*ops*`` module (``vllm._custom_ops``), or aliased from one."""
    head = cs.func.split(".", 1)[0]
    if head in ("self", "cls"):
        return False
    _where, bs = ctx.s.binding_of(cs.scope, head)  # a parameter has no bindings: False below
    if not bs:
        return False
    for b in bs:
        if b.kind in ("from", "import"):
            target = (ctx.r.abs_module(ctx.mod, b.target or "", b.level) or "") + "." + (b.attr or "")
            top = target.split(".", 1)[0]
            if top in ctx.engine.ws_tops or "ops" in target.lower():
                return True
        elif b.kind in ("assign", "ifexp", "call"):
            return True
    return False


def _upstream_op_call(ctx, v: Val):
    mod = v.module
    f = v.func
    found = []
    for ics in mod.summary.calls_in(f.qualname):
        if ics.star_args or ics.star_kwargs or not ics.func:
            continue
        if not ics.func.startswith("torch.ops.") and ics.func.split(".", 1)[0] in _CALL_SKIP_ROOTS:
            continue
        if ics.guards and ctx.r.guard_value(mod, ics.guards, ics.scope) is False:
            continue
        if ics.func.startswith("torch.ops.") or ics.func.split(".", 1)[0] in ("ops",):
            try:
                tv = ctx.r.resolve_dotted(mod, ics.scope, ics.func, Walk(), line=ics.line)
            except RecursionError:
                continue
            if tv.kind == ValKind.TORCH_OP:
                found.append((ics,) + _op_of(tv))
    if len(found) != 1:
        return None
    return found[0]


_ = M
