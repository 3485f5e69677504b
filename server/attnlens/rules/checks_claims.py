"""Capability claims: ``supports_*()`` constants (AL103) and claim comments/docstrings (AL104).

A claim is *backed* only by the resolved callee: its signature (does the kernel
have a parameter for it at all?), its body (is the keyword read or swallowed?),
or a contract capability read from code. Everything else is either
contradicted (warning) or decidable only by a probe on the device (info, with
the probe family in ``data.probe``).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from .. import model as M
from ..pyindex import triton_decorated
from ..walk import Val, ValKind, Walk
from .checks_calls import _flow, _loc, _rel, _short, op_schemas
from .classes import class_attr
from .api import Rule, check, fact_prefilter, rule

AL103 = rule(Rule(
    "AL103", "capability-method-claim", "warning",
    "A `supports_*()` capability method that returns a constant the resolved kernels or their contracts do not back.",
    "vLLM's selector believes these methods. A constant True is a claim about every kernel the backend "
    "reaches; it is contradicted when a kernel on one of the paths has no parameter for the feature (or its "
    "contract says no), and only a probe can decide it when the kernel is not installed or its contract says unknown.",
    ("claim", "capability"),
))
AL104 = rule(Rule(
    "AL104", "capability-comment-claim", "warning",
    "A comment or docstring claim (\"supports sinks\", \"FP8 shares this API\", \"cache is contiguous\", "
    "\"DCP supported\", \"supports 512\", ...) that the resolved callee does not back.",
    "Comments are not evidence. The claim is checked against what the line or function it documents "
    "resolves to: a swallowed keyword, a parameter the body never reads, a kernel without the parameter, a "
    "contract that says no (warning), or a kernel that is not installed / a contract that says unknown "
    "(info: only a probe can decide).",
    ("claim", "capability"),
))

ATTN_FAMILIES = {"varlen_attention", "paged_attention", "decode_attention", "triton_attention", "mla_decode", "mla_prefill"}
CAP_FAMILIES = {
    "sinks": ATTN_FAMILIES, "softcap": ATTN_FAMILIES, "sliding_window": ATTN_FAMILIES, "alibi": ATTN_FAMILIES,
    "gqa": ATTN_FAMILIES, "head_sizes": ATTN_FAMILIES, "diff_head_dims": ATTN_FAMILIES, "block_sizes": ATTN_FAMILIES,
    "fp8_kv_cache": ATTN_FAMILIES | {"kv_cache_write", "kv_cache_gather"},
    "int8_kv_cache": ATTN_FAMILIES | {"kv_cache_write", "kv_cache_gather"},
    "scale_layout": ATTN_FAMILIES | {"kv_cache_write", "kv_cache_gather"},
    "kv_layout": ATTN_FAMILIES | {"kv_cache_write", "kv_cache_gather"},
    "lse_base": {"lse_merge"} | ATTN_FAMILIES, "return_lse": {"lse_merge"} | ATTN_FAMILIES,
    "dcp": ATTN_FAMILIES | {"lse_merge"},
}
CAP_PROBE = {
    "sinks": "varlen", "softcap": "varlen", "sliding_window": "varlen",
    "alibi": "varlen", "gqa": "varlen", "head_sizes": "varlen",
    "diff_head_dims": "varlen", "block_sizes": "varlen",
    "fp8_kv_cache": "kv_cache_write", "int8_kv_cache": "kv_cache_write", "scale_layout": "kv_cache_write",
    "kv_layout": "kv_cache_write", "lse_base": "lse_merge", "return_lse": "lse_merge", "dcp": "lse_merge",
}
CAP_PARAMS = {
    "sinks": re.compile(r"^(s_aux|sinks?|attn_sinks?|learnable_sinks?)$"),
    "softcap": re.compile(r"(softcap|soft_cap|logit_cap|logits_soft_cap)"),
    "sliding_window": re.compile(r"(window|sliding)"),
    "alibi": re.compile(r"alibi"),
    "fp8_kv_cache": re.compile(r"^(kv_cache_dtype|cache_dtype|k_scale|v_scale|kv_scale|k_descale|v_descale|q_descale|fp8_dtype|kv_quant_mode)$"),
    "int8_kv_cache": re.compile(r"^(kv_cache_dtype|cache_dtype|k_scale|v_scale|kv_scale|k_descale|v_descale|kv_quant_mode)$"),
    "dcp": re.compile(r"(cp_world_size|cp_rank|dcp|cp_tot_seqused_k)"),
}
CAP_WORD = {
    "sinks": "attention sinks", "softcap": "softcap", "sliding_window": "sliding window", "alibi": "ALiBi",
    "fp8_kv_cache": "FP8 KV cache", "int8_kv_cache": "INT8 KV cache", "scale_layout": "per-head quant scales",
    "kv_layout": "a contiguous cache layout", "dcp": "DCP", "head_sizes": "head size", "lse_base": "the LSE base",
    "diff_head_dims": "different Q/K and V head dims", "block_sizes": "block sizes", "gqa": "GQA",
}

SUPPORTS_CAP = {
    "supports_sink": "sinks", "supports_sinks": "sinks", "flash_attn_supports_sinks": "sinks",
    "supports_sliding_window": "sliding_window", "supports_head_size": "head_sizes",
    "supports_kv_cache_dtype": "fp8_kv_cache", "supports_fp8": "fp8_kv_cache", "supports_alibi_sqrt": "alibi",
    "supports_alibi": "alibi", "supports_per_head_quant_scales": "scale_layout",
    "supports_dcp": "dcp", "supports_softcap": "softcap",
}

# names of attention kernels (used only when no contract covers a callee)
_ATTNISH = re.compile(r"(^|_)(flash_attn\w*|\w*attention(_fwd)?|\w*attn_fwd|\w*varlen\w*|flash_mla\w*|\w*mla_decode\w*|"
                      r"\w*_fwd|\w*_kernel|paged_attention\w*)$", re.IGNORECASE)
_NOT_ATTN = re.compile(r"(merge|lse|rotary|rope|topk|top_k|reshape_and_cache|concat_and_cache|copy|gather|swap|quant|norm|"
                       r"scale_cache|metadata|schedul|convert|index)", re.IGNORECASE)
_PREDICATE = re.compile(r"^_*(can|is|has|supports?|use|should|check|get|set|make|build|compute|maybe|reshape|split|"
                        r"prepare|init|create|infer)_|_(supports?|available|enabled|version)(_|$)", re.IGNORECASE)
_CACHEISH = re.compile(r"(reshape_and_cache|concat_and_cache|cache_kv|store_kv|_store$)", re.IGNORECASE)
_NEGATED = re.compile(r"\b(not|no|never|until|yet|todo|fixme|only|unsupported|cannot|can't|without|isn't|aren't|doesn't|don't|won't)\b|n't\b", re.IGNORECASE)

CLAIMS = [
    (re.compile(r"\b(supports?|supported|handles?)\b[^.;:]{0,30}\bsinks?\b|\ball\s+sinks?\b|\bsinks?\b[^.;:]{0,20}\b(are\s+|is\s+)?supported", re.IGNORECASE), "sinks", True),
    (re.compile(r"\b(fp8|fp4)(/\w+)?\b[^.;:]{0,30}\b(share|shares|same)\b[^.;:]{0,20}\bapi\b|\bsupports?\s+fp8\b(?!\s*(output|out\b|gemm|weight|linear|moe|activation|input|dtype for input|quant))|\bfp8\s+(kv[\s_-]?cache\s+)?(is\s+)?supported", re.IGNORECASE), "fp8_kv_cache", True),
    (re.compile(r"\bint8\b[^.;:]{0,30}\b(share|shares|same)\b[^.;:]{0,20}\bapi\b|\bsupports?\s+int8\b|\bint8\s+(kv[\s_-]?cache\s+)?(is\s+)?supported", re.IGNORECASE), "int8_kv_cache", True),
    (re.compile(r"\bcache\s+is\s+contiguous|\bcontiguous\s+(kv[\s_-]?)?cache\b|\bno\s+need\s+to\s+check\s+strides?", re.IGNORECASE), "kv_layout", True),
    (re.compile(r"\bdcp\b[^.;:]{0,20}\b(is\s+)?supported|\bsupports?\s+dcp\b", re.IGNORECASE), "dcp", True),
    (re.compile(r"\bsoftcap\b[^.;:]{0,40}\b(is\s+)?(applied|supported|handled)|\bsupports?\s+softcap", re.IGNORECASE), "softcap", True),
    (re.compile(r"\bsliding[\s_-]?window\b[^.;:]{0,20}\b(is\s+)?supported|\bsupports?\s+sliding[\s_-]?window", re.IGNORECASE), "sliding_window", True),
    (re.compile(r"\balibi\b[^.;:]{0,20}\b(is\s+)?supported|\bsupports?\s+alibi", re.IGNORECASE), "alibi", True),
    (re.compile(r"\bcannot\s+do\s+diff[\s_-]?kv|\bdoes\s+not\s+support\s+diff[\s_-]?kv", re.IGNORECASE), "diff_head_dims", False),
    (re.compile(r"\blse\b[^.;:]{0,40}\b(base[\s-]?2|log2|natural[\s-]log(arithm)?|base[\s-]?e)\b", re.IGNORECASE), "lse_base", True),
]
HEAD_CLAIM = re.compile(r"\bsupports?\s+(?:head[\s_-]?(?:size|dim)s?\s+)?(?:of\s+|up\s+to\s+)?(\d{2,3})\b", re.IGNORECASE)
# any claim at all in a file's raw text (lets the engine skip tokenizing files without one)
CLAIM_PREFILTER = fact_prefilter(re.compile("|".join(f"(?:{p.pattern})" for p, _c, _pos in CLAIMS) + f"|(?:{HEAD_CLAIM.pattern})", re.IGNORECASE))


# --------------------------------------------------------------------------- kernels behind a subject


class Kernel:
    def __init__(self, symbol: str, kind: str, val: Val | None, path: str, line: int, cs=None, via: str = ""):
        self.symbol = symbol
        self.kind = kind  # not_installed | torch_op | python | triton | dummy
        self.val = val
        self.path = path
        self.line = line
        self.cs = cs
        self.via = via


def _kernel_of(ctx, mod, cs, v: Val, via: str):
    if v.kind == ValKind.NOT_INSTALLED:
        return Kernel(v.qual, "not_installed", v, mod.path, cs.line, cs, via)
    if v.kind == ValKind.TORCH_OP:
        ns = v.extra.get("ns") or v.qual.split("::")[0]
        op = v.extra.get("op") or v.qual.split("::")[-1]
        return Kernel(f"{ns}::{op}", "torch_op", v, mod.path, cs.line, cs, via)
    if v.kind == ValKind.FUNCTION and v.func is not None:
        f = v.func
        if f.dummy:
            return Kernel(v.dotted, "dummy", v, mod.path, cs.line, cs, via)
        if triton_decorated(f.decorators, wrappers=False):
            return Kernel(v.dotted, "triton", v, mod.path, cs.line, cs, via)
        if v.module is not None and not v.module.workspace:
            return Kernel(v.dotted, "python", v, mod.path, cs.line, cs, via)
    return None


def _python_op_func(ctx, v: Val) -> Val | None:
    """The Python function behind a torch op registered from Python (no contract for the op itself)."""
    ns = v.extra.get("ns") or v.qual.split("::")[0]
    op = v.extra.get("op") or v.qual.split("::")[-1]
    if ctx.engine.contracts.match(f"{ns}::{op}") is not None:
        return None
    try:
        regs = ctx.r.ops.python_registrations(ns, op)
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        return None
    for m, line, scope, func, _key, _text in regs:
        if not func:
            continue
        try:
            fv = ctx.r.resolve_dotted(m, scope, func, Walk(), line=line)
        except RecursionError:
            continue
        if fv.kind == ValKind.FUNCTION:
            return fv
    return None


def gather_kernels(ctx, mod, qualnames, depth: int = 0, seen=None, via: str = "") -> list[Kernel]:
    """Kernel-like callees reached from the calls of workspace functions (depth-limited)."""
    r = ctx.r
    seen = seen if seen is not None else set()
    out: list[Kernel] = []
    for q in qualnames:
        if (mod.path, q) in seen:
            continue
        seen.add((mod.path, q))
        f = mod.summary.functions.get(q)
        if f is None:
            continue
        for cs in mod.summary.calls_in(q):
            if not cs.func:
                continue
            head = cs.func.split(".", 1)[0]
            if head in ("logger", "super", "len", "isinstance", "print", "getattr", "setattr", "hasattr", "int", "float", "range"):
                continue
            if head == "torch" and not cs.func.startswith("torch.ops."):
                continue
            if cs.guards:
                try:
                    if r.guard_value(mod, cs.guards, cs.scope) is False:
                        continue
                except RecursionError:
                    continue
            try:
                v = r.resolve_dotted(mod, cs.scope, cs.func, Walk(), line=cs.line)
            except RecursionError:
                continue
            for v in _live_alternatives(v):
                v = ctx.engine.apply_patch(v)
                _collect_kernel(ctx, mod, cs, v, q, depth, seen, via, out)
        for inner in f.inner_defs:
            out.extend(gather_kernels(ctx, mod, [inner], depth + 1, seen, via or q))
    return out


def _live_alternatives(v: Val, depth: int = 0) -> list[Val]:
    """A value chosen at run time among candidates (a fork) stands for each candidate that can run here:
    a claim is backed only if every live candidate backs it; a dead one does not count."""
    if v.kind != ValKind.ALTS or depth > 8:
        return [v]
    out: list[Val] = []
    for a in v.extra.get("alts", ()):
        if a.reachable is not False:
            out.extend(_live_alternatives(a.val, depth + 1))
    return out


def _collect_kernel(ctx, mod, cs, v: Val, q: str, depth: int, seen, via: str, out: list) -> None:
    if v.kind == ValKind.TORCH_OP:
        pv = _python_op_func(ctx, v)
        if pv is not None:
            if pv.module is not None and pv.module.workspace and depth < 3:
                out.extend(gather_kernels(ctx, pv.module, [pv.qual], depth + 1, seen, via or q))
                return
            if pv.module is not None and not pv.module.workspace:
                out.append(Kernel(pv.dotted, "python", pv, mod.path, cs.line, cs, via or q))
                return
    k = _kernel_of(ctx, mod, cs, v, via or q)
    if k is not None:
        out.append(k)
    elif v.kind == ValKind.FUNCTION and v.module is not None and v.module.workspace and depth < 3:
        out.extend(_workspace_kernels(ctx, mod, cs, v, depth + 1, seen, via or q))


def _workspace_kernels(ctx, mod, cs, v: Val, depth: int, seen, via: str) -> list[Kernel]:
    """Kernels inside a workspace function; the function itself when it is an attention
    kernel with no kernel calls of its own (a plugin-written kernel or stand-in)."""
    if (v.module.path, v.qual) in seen:
        return []
    sub = gather_kernels(ctx, v.module, [v.qual], depth, seen, via)
    if not sub and v.func is not None:
        name = v.qual.rpartition(".")[2]
        if _ATTNISH.search(name) and not _PREDICATE.search(name) and not _NOT_ATTN.search(name):
            return [Kernel(v.dotted, "python", v, mod.path, cs.line, cs, via)]
    return sub


def class_kernels(ctx, cv: Val) -> list[Kernel]:
    if cv.module is None or cv.cls is None or not cv.module.workspace:
        return []
    key = ("class_kernels", cv.module.name, cv.qual)

    def compute():
        return gather_kernels(ctx, cv.module, list(cv.cls.methods.values()))

    return ctx.engine.memo(key, compute)


def module_kernels(ctx) -> list[Kernel]:
    """Kernels bound at module level (``from pkg import kernel``, ``k = ops.k``)."""
    key = ("module_kernels", ctx.mod.name)

    def compute():
        out = []
        for name, bs in ctx.s.bindings.items():
            b = bs[-1]
            if b.kind not in ("from", "import", "assign"):
                continue
            try:
                v = ctx.r.lookup_name(ctx.mod, "", name, Walk(), None)
            except RecursionError:
                continue
            v = ctx.engine.apply_patch(v)

            # a call-site stand-in: its line, and how the name is bound there
            k = _kernel_of(ctx, ctx.mod, SimpleNamespace(line=b.line, bound="imported" if b.kind in ("from", "import") else "bound"), v, "")
            if k is not None:
                out.append(k)
        return out

    return ctx.engine.memo(key, compute)


def _params_of(ctx, k: Kernel):
    """(param names, open?) of a kernel, or None when unknown."""
    v = k.val
    if k.kind in ("python", "triton", "dummy") and v is not None and v.func is not None:
        ps = v.func.params
        return [p.name for p in ps], any(p.kind in ("vararg", "kwarg") for p in ps)
    if k.kind == "torch_op":
        ns, _, op = k.symbol.partition("::")
        schemas = op_schemas(ctx.engine, ns, op)
        if schemas:
            names = set()
            for s, _w, _ws in schemas:
                names.update(a.name for a in s.arguments)
            return sorted(names), False
    return None


def _relevant(ctx, k: Kernel, cap: str):
    c = ctx.engine.contracts.match(k.symbol)
    fams = CAP_FAMILIES.get(cap, ATTN_FAMILIES)
    if c is not None:
        return c if c.family in fams else False
    name = k.symbol.rpartition(".")[2] if "::" not in k.symbol else k.symbol.partition("::")[2]
    if _PREDICATE.search(name):
        return False
    if fams & ATTN_FAMILIES and _ATTNISH.search(name) and not _NOT_ATTN.search(name):
        return None
    if fams & {"kv_cache_write"} and _CACHEISH.search(name):
        return None
    return False


def judge(ctx, kernels: list[Kernel], cap: str, positive: bool = True, value=None):
    """Per-kernel verdicts: [(kernel, verdict, reason, contract)] with verdict in no|yes|unknown."""
    out = []
    seen = set()
    for k in kernels:
        if k.symbol in seen:
            continue
        rel = _relevant(ctx, k, cap)
        if rel is False:
            continue
        seen.add(k.symbol)
        c = rel
        if k.kind == "dummy":
            out.append((k, "no", f"{k.symbol} is a placeholder ({k.val.func.dummy if k.val and k.val.func else 'dummy'})", c))
            continue
        pat = CAP_PARAMS.get(cap)
        pinfo = _params_of(ctx, k)
        if pat is not None and pinfo is not None:
            names, open_ = pinfo
            hit = [n for n in names if pat.search(n)]
            if not hit and not open_:
                out.append((k, "no", f"{k.symbol} has no parameter for {CAP_WORD.get(cap, cap)}", c))
                continue
        if c is not None:
            capv = c.capability(cap)
            if capv is not None and capv.value == "no":
                out.append((k, "no", f"contract {c.id}: {cap} = no" + (f" ({capv.notes})" if capv.notes else ""), c))
                continue
            if capv is not None and capv.value == "yes":
                if cap == "head_sizes" and value is not None and capv.values and value not in capv.values:
                    out.append((k, "no", f"contract {c.id}: head sizes {capv.values} do not include {value}", c))
                    continue
                out.append((k, "yes", f"contract {c.id}: {cap} = yes", c))
                continue
            why = f"contract {c.id}: {cap} = {capv.value if capv else 'unknown'}"
            if k.kind == "not_installed":
                why = f"{k.symbol} is not installed here; " + why
            out.append((k, "unknown", why, c))
            continue
        if k.kind == "not_installed":
            out.append((k, "unknown", f"{k.symbol} is not installed here and no contract covers it", None))
        else:
            out.append((k, "unknown", f"{k.symbol}: no contract covers it" + (" (it accepts a parameter for it, which does not prove the semantics)" if pat is not None and pinfo is not None else ""), None))
    return out


def _verb(k: Kernel) -> str:
    """How the kernel is reached at its place: a call, or a module-level binding (an import names the kernel;
    it calls nothing there)."""
    return getattr(k.cs, "bound", None) or "called"


def _where(ctx, k: Kernel) -> str:
    return f"{_rel(k.path, ctx.ws.root)}:{k.line}"


def _summarise(ctx, verdicts, cap: str):
    no = [v for v in verdicts if v[1] == "no"]
    unk = [v for v in verdicts if v[1] == "unknown"]
    yes = [v for v in verdicts if v[1] == "yes"]
    contract = next((v[3].id for v in verdicts if v[3] is not None), None)
    probe = None
    for v in no + unk + yes:
        if v[3] is not None:
            probe = v[3].probe_for(cap)
            break
    probe = probe or CAP_PROBE.get(cap)
    return no, unk, yes, contract, probe


def _chain_for(ctx, k: Kernel):
    if k.cs is None or not hasattr(k.cs, "func"):
        return None
    mod = ctx.ws.index.module_for_path(k.path)
    if mod is None:
        return None
    try:
        return ctx.r.trace_call(mod, k.cs)
    except RecursionError:
        return None


def _first_clause(why: str) -> str:
    """The first clause of a kernel verdict, with dotted names shortened to their last part."""
    first = why.split("; ")[0].rstrip(".")
    # dotted names only: a file name (`decode.py:83`, a path) keeps its extension
    return re.sub(r"(?<![\w./])(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)\b(?![/:.])",
                  lambda m: m.group(0) if m.group(1) in _FILE_EXTS else m.group(1), first)


_FILE_EXTS = {"py", "pyi", "cpp", "cc", "cu", "cuh", "h", "hpp"}


def _cs_range(cs):
    if cs is None or not all(hasattr(cs, a) for a in ("line", "col", "end_line", "end_col")):
        return None
    return cs.line, cs.col, cs.end_line, cs.end_col


def _claim_action(probe, undecided: list, option: str | None = None) -> str:
    """The probe that decides the claim, or that none can: routed by the undecided kernels' names. ``option``: the
    probe option the claim needs (``head_size=512`` for a claim about head size 512: the default case would not
    test it)."""
    from .probe_routing import route

    if not probe:
        return "No probe family covers it yet."
    names = list(dict.fromkeys(k.symbol.rpartition(".")[2] for k in undecided))
    fit = [n for n in names if route(probe, (), n).probe]
    miss = [n for n in names if n not in fit]
    run = f"`{probe}` probe" + (f" (`--option {option}`)" if option else "")
    if miss and fit:
        return f"The {run} decides `{fit[0]}`; none covers `{miss[0]}` yet."
    if miss:
        return f"No probe family covers `{miss[0]}` yet."
    return f"Decide with the {run}."


def _report(ctx, rule_id, pos, claim_text, cap, verdicts, extra_no=(), subject="", probe_option=None, **data):
    no, unk, yes, contract, probe = _summarise(ctx, verdicts, cap)
    no = list(extra_no) + no
    if not no and not unk and yes:
        return
    first = (no or unk or yes or [None])[0]
    chain = _chain_for(ctx, first[0]) if first is not None and first[0] is not None else None
    kernels = [{"symbol": k.symbol, "kind": k.kind, "at": _where(ctx, k), "verdict": vd, "reason": why,
                "contract": c.id if c else None} for k, vd, why, c in verdicts]
    evidence = [f"{why} ({_verb(k)} at {_where(ctx, k)})" if k is not None else why for k, _vd, why, _c in no + unk + yes]
    if subject:
        evidence.insert(0, f"Kernels looked at:{subject}.")
        subject = ""
    action = _claim_action(probe, [k for k, *_r in unk if k is not None], probe_option)
    if no:
        why0 = _first_clause(no[0][2])
        if yes and not extra_no:
            msg = f"{claim_text} holds only on some paths{subject}: {why0}."
            sev = "info"
        else:
            msg = f"{claim_text} is not backed{subject}: {why0}."
            sev = "warning"
        if unk:
            msg += f" {len(unk)} more kernel{'s are' if len(unk) > 1 else ' is'} undecided."
    elif unk:
        msg = f"{claim_text} is undecided here{subject}: {_first_clause(unk[0][2]).replace(' is not installed here', ' is not installed')}. {action}"
        sev = "info"
    else:
        msg = f"{claim_text}: no kernel behind it was resolved, so nothing here can decide it."
        sev = "info"
    related = [ctx.site(*_cs_range(k.cs), f"{k.symbol}: {vd}") for k, vd, _why, _c in no + unk + yes
               if k is not None and _cs_range(k.cs) is not None and k.path == ctx.path]
    data["detail"] = "\n".join(evidence)
    data["related"] = related
    ctx.add(rule_id, *pos, msg, severity=sev, chain=chain, contract=contract, probe=probe, capability=cap,
            kernels=kernels, **data)


# --------------------------------------------------------------------------- AL103


def _const_claim(ctx, mod, f, depth: int = 0):
    """(value, via) when ``f`` always returns a literal (directly or through one call)."""
    if f.returns_const is not None:
        return f.returns_const[1], None
    if depth < 2 and len(f.returns) == 1:
        calls = [c for c in mod.summary.calls_in(f.qualname) if c.in_return and c.func]
        if len(calls) == 1 and not calls[0].nargs and not calls[0].keywords:
            c = calls[0]
            try:
                v = ctx.r.resolve_dotted(mod, f.qualname, c.func, Walk(), line=c.line)
            except RecursionError:
                return None, None
            if v.kind == ValKind.FUNCTION and v.func is not None and v.module is not None:
                val, _via = _const_claim(ctx, v.module, v.func, depth + 1)
                if val is not None:
                    return val, v
    return None, None


def _has_claim_text(claims: list, f, cap: str) -> bool:
    for cl in claims:
        if cl["cap"] == cap and f.deco_line <= cl["line"] <= f.end_line:
            return True
    return False


def _backend_impl_kernels(ctx, cv: Val):
    from .checks_upstream import _part_class

    iv = _part_class(ctx.ws.query, cv, "get_impl_cls")
    ks = []
    if iv is not None and iv.module is not None and iv.module.workspace:
        ks = class_kernels(ctx, iv)
        return ks, iv
    return ks, iv


@check("AL103")
def capability_methods(ctx):
    from .checks_upstream import registry_pairs

    root = ctx.ws.root
    backends = {p["plugin"].qual: p for p in registry_pairs(ctx.engine)
                if p["kind"] == "backend" and p["plugin"].module is not None and p["plugin"].module.path == ctx.path}
    # functions defined here
    for q, f in ctx.s.functions.items():
        yield
        cap = SUPPORTS_CAP.get(f.name)
        if cap is None:
            continue
        val, via = _const_claim(ctx, ctx.mod, f)
        if val is not True:
            continue
        if _has_claim_text((yield from claim_steps(ctx)), f, cap):
            continue  # AL104 reports the written claim
        via_txt = f" (via {via.dotted}, {_loc(via, root)})" if via is not None else ""
        if via is not None and via.module is not None and via.module.workspace and SUPPORTS_CAP.get(via.func.name) == cap \
                and not f.class_name:
            continue
        kernels = []
        subject = ""
        if f.class_name and f.class_name in ctx.s.classes:
            cv = Val(ValKind.CLASS, ctx.mod, f.class_name, ctx.path, ctx.s.classes[f.class_name].line)
            ks, iv = _backend_impl_kernels(ctx, cv)
            if iv is not None:
                subject = f" by {iv.qual}"
            kernels = ks
        else:
            kernels = module_kernels(ctx) + gather_kernels(ctx, ctx.mod, [q])
        verdicts = judge(ctx, kernels, cap)
        if f.class_name and _upstream_identical(ctx, f, backends.get(f.class_name)) and kernels \
                and not any(k.symbol.split(".", 1)[0] in ctx.engine.ws_tops for k in kernels):
            continue  # the same claim as upstream's, backed by upstream's own kernels: not the plugin's to answer
        pos = ctx.def_range(f)
        _report(ctx, "AL103", pos, f"`{f.qualname}()` always returns True{via_txt} (claims {CAP_WORD.get(cap, cap)})",
                cap, verdicts, subject=(f" for the kernels called{subject}" if subject else ""), claim=f.name)
    # capability methods a registered backend inherits from upstream while swapping the kernels
    for cq, pair in backends.items():
        yield
        c = ctx.s.classes.get(cq)
        if c is None:
            continue
        pv = pair["plugin"]
        ks, iv = _backend_impl_kernels(ctx, pv)
        if iv is None or not ks:
            continue
        for name, cap in SUPPORTS_CAP.items():
            if name in c.methods or not name.startswith("supports_"):
                continue
            fv, _owner = class_attr(ctx.engine, pv, name)
            if fv is None or fv.func is None or fv.module is None or fv.module.workspace:
                continue
            val, via = _const_claim(ctx, fv.module, fv.func)
            if val is not True:
                continue
            verdicts = judge(ctx, ks, cap)
            pos = ctx.name_range(c.line, c.name)
            _report(ctx, "AL103", pos,
                    f"{cq} inherits `{name}()` -> True from upstream {fv.owner or fv.dotted} ({_short(fv.module.path)}:{fv.func.line}), "
                    f"claiming {CAP_WORD.get(cap, cap)}", cap, verdicts, subject=f" by the kernels {iv.qual} calls",
                    claim=name, inherited_from=fv.dotted)


def _upstream_identical(ctx, f, pair) -> bool:
    """Is method ``f`` of a registered backend the same code as the method of that name on the upstream
    counterpart (docstrings and formatting aside)?"""
    if pair is None or pair.get("upstream") is None:
        return False
    uv = pair["upstream"]
    try:
        fv = ctx.r.class_attr(uv.module, uv.qual, f.name, Walk())
    except RecursionError:
        return False
    if fv is None or fv.func is None or fv.module is None:
        return False
    a = _body_dump(ctx.lines, f)
    b = _body_dump((ctx.ws.index.source_text(fv.module.path) or "").splitlines(), fv.func)
    return a is not None and a == b


def _body_dump(lines: list[str], f) -> str | None:
    import ast
    import textwrap

    try:
        src = textwrap.dedent("\n".join(lines[f.line - 1:f.end_line]))
        node = ast.parse(src).body[0]
    except (SyntaxError, IndexError, ValueError):
        return None
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return ast.dump(ast.Module(body=body, type_ignores=[]))


# --------------------------------------------------------------------------- AL104


def claim_steps(ctx):
    """The capability claims written in the module's comments and docstrings (memoised per engine and text),
    as steps (``api.run_steps``: yields after each comment; a pasted 5,000-line buffer has thousands)."""
    key = ("claims", ctx.mod.name, ctx.s.sha)

    def compute():
        out = []
        facts = ctx.facts
        for c in facts.comments:
            yield
            out.extend(_match_claims(c.text, c.line, c.col, "comment", own_line=c.own_line, ctx=ctx))
        for d in facts.docs:
            if d.kind == "module":
                continue
            for i, text in enumerate(d.text.splitlines()):
                ln = d.line + i
                src = ctx.line_text(ln)
                col = max(src.find(text.strip()[:20]), 0) if text.strip() else 0
                for cl in _match_claims(text, ln, col, "docstring", ctx=ctx):
                    cl["doc"] = d.qualname
                    cl["doc_kind"] = d.kind
                    out.append(cl)
        return out

    return (yield from ctx.engine.memo_steps(key, compute))


def _match_claims(text: str, line: int, col: int, kind: str, own_line: bool = True, ctx=None) -> list[dict]:
    out = []
    low = text.strip()
    if not low or low.lower().startswith(("attnlens:", "noqa", "type:", "pragma", "ruleid:", "ok:")):
        return out
    if re.match(r"^(todo|fixme|xxx|hack)\b", low, re.IGNORECASE):
        return out
    for pat, cap, positive in CLAIMS:
        m = pat.search(text)
        if m:
            if positive and _NEGATED.search(_clause(text, m.start(), m.end())):
                continue  # "does not support", "until kernels support", "only supports": not a capability claim
            out.append({"cap": cap, "positive": positive, "text": text.strip(), "line": line, "col": col, "kind": kind,
                        "own_line": own_line, "value": None})
    m = HEAD_CLAIM.search(text)
    if m and _NEGATED.search(_clause(text, m.start(), m.end())):
        m = None
    if m and not any(o["cap"] == "head_sizes" for o in out):
        fn = ctx.s.scope_at(line).rpartition(".")[2] if ctx is not None else ""
        if re.search(r"head|dim|fa2|fa3|flash", text, re.IGNORECASE) or fn == "supports_head_size":
            out.append({"cap": "head_sizes", "positive": True, "text": text.strip(), "line": line, "col": col, "kind": kind,
                        "own_line": own_line, "value": int(m.group(1))})
    return out


def _clause(text: str, start: int, end: int) -> str:
    """The clause around a match (between sentence/clause separators)."""
    a = max(text.rfind(sep, 0, start) for sep in ".;:,(") + 1
    bs = [i for i in (text.find(sep, end) for sep in ".;:,)") if i >= 0]
    b = min(bs) if bs else len(text)
    return text[a:b]


def _next_code_line(ctx, line: int) -> int | None:
    lines = ctx.lines
    for ln in range(line + 1, min(line + 8, len(lines)) + 1):
        t = lines[ln - 1].strip()
        if t and not t.startswith("#"):
            return ln
    return None


def _calls_at(ctx, line: int, trailing: bool):
    calls = [cs for cs in ctx.s.calls if cs.func]
    if trailing:
        cov = [cs for cs in calls if cs.line <= line <= cs.end_line]
        starting = [cs for cs in cov if cs.line == line]
        return starting or sorted(cov, key=lambda c: (c.end_line - c.line, c.end_col))[:1]
    starting = [cs for cs in calls if cs.line == line]
    if not starting:
        return []
    end = max(cs.end_line for cs in starting)
    return [cs for cs in calls if line <= cs.line <= end]


def _subject_function(ctx, line: int):
    q = ctx.s.scope_at(line)
    return ctx.s.functions.get(q) if q else None


def _function_param_evidence(ctx, f, cap: str):
    """Parameters of ``f`` that carry the capability but that its body never reads."""
    pat = CAP_PARAMS.get(cap)
    if pat is None:
        return None, []
    ps = [p.name for p in f.params if p.kind in ("pos", "posonly", "kwonly") and pat.search(p.name)]
    if not ps:
        return None, []
    unread = [p for p in ps if p not in (f.names_read or ())]
    return ps, unread


def _keyword_evidence(ctx, cs, cap: str):
    """A keyword of the claim's capability passed at ``cs`` that is swallowed or rejected."""
    pat = CAP_PARAMS.get(cap)
    if pat is None:
        return []
    v = ctx.resolve_call(cs)
    out = []
    if v.kind != ValKind.FUNCTION:
        return out
    for kw in cs.keywords:
        if not pat.search(kw):
            continue
        state, path = _flow(ctx, kw, v, [])
        last = path[-1] if path else v
        if state == "swallowed":
            out.append((None, "no", f"`{kw}=` ends in the **kwargs of {last.dotted} ({_loc(last, ctx.ws.root)}), which never reads it", None))
        elif state == "rejected":
            out.append((None, "no", f"`{kw}=` is not a parameter of {last.dotted}", None))
        elif state == "accepted" and last.func is not None and kw not in (last.func.names_read or ()):
            out.append((None, "no", f"{last.dotted} takes `{kw}` but its body never reads it", None))
    return out


@check("AL104")
def claim_comments(ctx):
    for cl in (yield from claim_steps(ctx)):
        yield
        cap = cl["cap"]
        word = CAP_WORD.get(cap, cap)
        quote = cl["text"] if len(cl["text"]) <= 80 else cl["text"][:77] + "..."
        claim_text = f"Claim \"{quote}\" ({word}{'' if cl['positive'] else ', negative'})"
        line = cl["line"]
        text = ctx.line_text(line)
        col = cl["col"]
        end = len(text) if cl["kind"] == "comment" else max(col + 1, len(text.rstrip()))
        pos = (line, col, line, end)
        extra_no = []
        verdicts = []
        subject = ""
        if cl["kind"] == "docstring" and cl.get("doc_kind") == "function":
            f = ctx.s.functions.get(cl["doc"])
            subj_fn = f
            calls = []
        elif cl["kind"] == "docstring":
            subj_fn = None
            calls = []
        else:
            target_line = line if not cl["own_line"] else _next_code_line(ctx, line)
            calls = _calls_at(ctx, target_line, not cl["own_line"]) if target_line else []
            subj_fn = None
            if not calls:
                f = _subject_function(ctx, line)
                nxt = ctx.line_text(target_line).strip() if target_line else ""
                if f is not None and (nxt.startswith("return") or "support" in f.name or f.line == target_line):
                    subj_fn = f
        if cap == "kv_layout":
            q = ctx.s.scope_at(line)
            if any(t.scope == q and re.search(r"contiguous|stride", t.text) for t in ctx.facts.tests):
                continue  # a visible layout check backs it
            kernels = []
            for cs in calls:
                v = ctx.resolve_call(cs)
                if v.kind == ValKind.FUNCTION and v.module is not None and v.module.workspace:
                    kernels.extend(gather_kernels(ctx, v.module, [v.qual]))
                else:
                    k = _kernel_of(ctx, ctx.mod, cs, v, "")
                    if k is not None:
                        kernels.append(k)
            verdicts = [(k, "unknown", f"{k.symbol} reads the cache through its strides/layout assumptions", ctx.engine.contracts.match(k.symbol))
                        for k in kernels if _relevant(ctx, k, cap) is not False]
            _report(ctx, "AL104", pos, f"{claim_text}: nothing on this path checks strides or storage offsets (a logical shape does not prove a physical layout)",
                    cap, verdicts, subject="", claim_kind=cl["kind"])
            continue
        if calls:
            kernels = []
            for cs in calls:
                extra_no.extend(_keyword_evidence(ctx, cs, cap))
                v = ctx.resolve_call(cs)
                if v.kind == ValKind.FUNCTION and v.module is not None and v.module.workspace and not v.func.dummy:
                    kernels.extend(_workspace_kernels(ctx, ctx.mod, cs, v, 0, set(), ""))
                else:
                    k = _kernel_of(ctx, ctx.mod, cs, v, "")
                    if k is not None:
                        kernels.append(k)
            verdicts = judge(ctx, kernels, cap, cl["positive"], cl.get("value"))
            subject = f" by `{calls[0].func}` on line {calls[0].line}"
        elif subj_fn is not None:
            ps, unread = _function_param_evidence(ctx, subj_fn, cap)
            if unread and len(unread) == len(ps) and not any(p.kind == "kwarg" for p in subj_fn.params):
                extra_no.append((None, "no", f"{subj_fn.qualname}() takes {', '.join(f'`{p}`' for p in unread)} but its body never reads "
                                 + ("it" if len(unread) == 1 else "them"), None))
            if subj_fn.class_name and subj_fn.class_name in ctx.s.classes and SUPPORTS_CAP.get(subj_fn.name):
                cv = Val(ValKind.CLASS, ctx.mod, subj_fn.class_name, ctx.path, ctx.s.classes[subj_fn.class_name].line)
                kernels, iv = _backend_impl_kernels(ctx, cv)
                if iv is not None:
                    subject = f" for the kernels {iv.qual} calls"
            elif "support" in subj_fn.name and not subj_fn.class_name:
                kernels = module_kernels(ctx) + gather_kernels(ctx, ctx.mod, [subj_fn.qualname])
                subject = f" by the kernels bound in {ctx.mod.name}"
            else:
                kernels = gather_kernels(ctx, ctx.mod, [subj_fn.qualname])
                subject = f" by what {subj_fn.name}() calls"
            verdicts = judge(ctx, kernels, cap, cl["positive"], cl.get("value"))
        elif cl["kind"] == "docstring" and cl.get("doc_kind") == "class" and cl.get("doc") in ctx.s.classes:
            cv = Val(ValKind.CLASS, ctx.mod, cl["doc"], ctx.path, ctx.s.classes[cl["doc"]].line)
            kernels, iv = _backend_impl_kernels(ctx, cv)
            if not kernels:
                kernels = class_kernels(ctx, cv)
            verdicts = judge(ctx, kernels, cap, cl["positive"], cl.get("value"))
        # backed when every relevant kernel says yes and nothing contradicts
        if not extra_no and verdicts and all(v[1] == "yes" for v in verdicts):
            continue
        if not extra_no and not verdicts:
            # no kernel behind the written claim was resolved: nothing here backs or contradicts it, and a finding
            # saying so is not one a maintainer can act on (the claim may even be decided by the platform, e.g. in
            # the docstring of a `supports_*` whose return is False here). A capability method (AL103) is what vLLM
            # acts on: its True is reported even then
            continue
        option = f"head_size={cl['value']}" if cap == "head_sizes" and cl.get("value") else None
        _report(ctx, "AL104", pos, claim_text, cap, verdicts, extra_no=extra_no, subject=subject, claim_kind=cl["kind"],
                probe_option=option)


_ = (M, _short)
