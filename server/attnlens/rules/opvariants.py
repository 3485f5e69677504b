"""Plugin custom ops that mirror an upstream custom op, and the parameters they lack.

A plugin often registers its own variant of an upstream custom op: the same role, its own
kernels, registered with vLLM's ``direct_register_custom_op(op_name=..., op_func=...,
fake_impl=...)``. Upstream then adds a parameter to its op function (and its ``*_fake``
twin); the plugin's variant must accept it too, or the layer that calls it breaks once it
follows upstream. This module pairs the variants with their upstream op, from the code
only:

* **by name**: the plugin's op name or op function name, as is or without its first
  ``_``-separated token (a vendor prefix: ``mx_sparse_attn_indexer`` ->
  ``sparse_attn_indexer``), is an op that upstream registers with
  ``direct_register_custom_op``;
* **by call site**: a plugin class that calls ``torch.ops.<ns>.<plugin op>`` (directly or
  through a local) derives from an upstream class whose own code calls
  ``torch.ops.<ns>.<upstream op>``; among several, the upstream op whose name the plugin
  op's name contains (``mx_sparse_attn_indexer_bf16`` -> ``sparse_attn_indexer``).

:func:`align` maps parameter names between two signatures: common names, and within a
gap between common names, a name that starts with the same ``_``-token (``q_fp8`` ->
``q_quant``, ``k_bf16`` -> ``k``) is the same parameter renamed. What is left over on the
upstream side is missing. Used by AL120 (``check``, one version), by drift's AL308 (two
versions: only what upstream *gained*) and by their quick fixes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..pyindex import interned_names
from ..walk import ValKind

_OPS_RE = re.compile(r"torch\.ops\.([A-Za-z_]\w*)\.([A-Za-z_]\w*)")
REGISTER = "direct_register_custom_op"
_REGISTER_B = REGISTER.encode()


@dataclass(frozen=True)
class OpReg:
    ns: str
    op: str
    module: object  # index Module
    line: int  # the registration call
    func: str  # qualname of the op function in ``module`` ('' when not resolved)
    fake: str  # qualname of the fake impl ('' when none)

    @property
    def qualname(self) -> str:
        return f"{self.ns}::{self.op}"

    def function(self, which: str = "func"):
        q = self.func if which == "func" else self.fake
        return self.module.summary.functions.get(q) if q else None


@dataclass(frozen=True)
class Variant:
    plugin: OpReg
    upstream: OpReg
    via: str  # name | call_site


def _strip(text: str) -> str:
    return (text or "").strip().strip("'\"")


def _local_function(query, m, scope: str, text: str) -> str:
    """The qualname (in ``m``) of the function ``text`` names, '' when it is not a function of ``m``."""
    if not text:
        return ""
    if text in m.summary.functions and "." not in text:
        return text
    try:
        v = query.resolve_dotted(m, scope, text)
    except (RecursionError, Exception):  # noqa: BLE001 - a registration that does not resolve is skipped
        return ""
    if v is not None and v.kind == ValKind.FUNCTION and v.module is not None and v.module.name == m.name:
        return v.qual
    return ""


def registrations_in(query, m, op: str | None = None) -> list[OpReg]:
    """``direct_register_custom_op`` calls of module ``m`` (only those of ``op`` when given); ``query``: the
    workspace's :class:`~attnlens.query.Query`."""
    out = []
    for cs in m.summary.calls:
        if cs.func.rpartition(".")[2] != REGISTER:
            continue
        kw = dict(cs.kw_texts)
        name = _strip(kw.get("op_name", "")) or (cs.str_args[0] if cs.str_args and cs.str_args[0] else "")
        if not name or (op is not None and name != op):
            continue
        func = kw.get("op_func") or (cs.arg_texts[1] if len(cs.arg_texts) > 1 else "")
        fake = kw.get("fake_impl") or (cs.arg_texts[3] if len(cs.arg_texts) > 3 else "")
        ns = "vllm"
        if kw.get("target_lib"):
            ns = query.library_ns(m, cs.scope, kw["target_lib"]) or "?"
        out.append(OpReg(ns, name, m, cs.line, _local_function(query, m, cs.scope, func),
                         _local_function(query, m, cs.scope, fake) if fake and fake != "None" else ""))
    return out


def upstream_registration(ws, ns: str, op: str) -> OpReg | None:
    """See :func:`_upstream_registration`; memoised until installed code changes (it reads only that)."""
    return ws.index.outside_memo(("opvariants.upstream_registration", ns, op),
                                 lambda: _upstream_registration(ws, ns, op))


_LITERAL_REG = re.compile(rb"(?<![\w.])" + re.escape(_REGISTER_B) + rb"\(\s*(?:op_name\s*=\s*)?[\"']([A-Za-z_]\w*)[\"']")
_ANY_REG = re.compile(rb"(?<![\w.])" + re.escape(_REGISTER_B) + rb"\(")
_DEF_REG = re.compile(rb"def\s+" + re.escape(_REGISTER_B) + rb"\(")
_REG_FACTS: dict = {}  # file bytes -> (op names registered with a literal name, has a registration without one)


def _registered_names(data: bytes) -> tuple[frozenset, bool]:
    """The op names a file registers with ``direct_register_custom_op("name", ...)`` / ``(op_name="name",
    ...)``, and whether it also calls it with a name that is not a literal (``op_name=self.op_name``), for
    which only the whole-word test remains. One scan per file content: the per-op search of 53 names over
    66 registering files of vLLM 0.26.0 summarised every file that merely mentioned a name."""
    hit = _REG_FACTS.get(data)
    if hit is None:
        literal = _LITERAL_REG.findall(data)
        calls = len(_ANY_REG.findall(data)) - len(_DEF_REG.findall(data))
        hit = (frozenset(m.decode() for m in literal), calls > len(literal))
        if len(_REG_FACTS) > 4096:
            _REG_FACTS.clear()
        _REG_FACTS[data] = hit
    return hit


def _upstream_registration(ws, ns: str, op: str) -> OpReg | None:
    """Where the installed upstream registers ``ns::op`` with ``direct_register_custom_op``. Only the
    installed modules that spell the registration call and the op name as a whole word are
    summarised: most names asked about (a plugin op's name and its vendor-less forms, ``pre`` of
    ``mhc_pre``) are registered nowhere, and the every-API substring search of
    ``python_registrations_all`` summarised each module that merely contains them."""
    query = ws.query
    name = op.encode()
    word = re.compile(rb"(?<!\w)" + re.escape(name) + rb"(?!\w)")

    def match(data: bytes) -> bool:
        if _REGISTER_B not in data or name not in data:
            return False
        literal, other = _registered_names(data)
        return op in literal or (other and word.search(data) is not None)

    try:
        mods = query.installed_modules_matching(ns, match)
    except Exception:  # noqa: BLE001 - no registration found is an answer
        return None
    for m in mods:
        if m.workspace:
            continue
        for o in registrations_in(query, m, op):
            if o.func and o.ns == ns:
                return o
    return None


def _ws_files(idx) -> list[tuple[str, str]]:
    """(module name, path) of every workspace file, in name order."""
    return sorted(idx.ws_files.items())


_OPS_PREFIX = "torch.ops."
_RUN = re.compile(r"[\w.]*")
_PLAIN_NEEDLE = re.compile(r"[\w.]+")


def _ops_refs(text: str | None) -> tuple:
    """The ``torch.ops.`` references of a text: from each place it spells ``torch.ops.``, the run of word
    characters and dots that follows, sorted, each once (interned). A text contains ``torch.ops.ns.op`` exactly
    when one of them starts with it (every character of such a needle is a word character or a dot)."""
    if not text:
        return ()
    out = set()
    i = text.find(_OPS_PREFIX)
    while i >= 0:
        out.add(text[i:_RUN.match(text, i + len(_OPS_PREFIX)).end()])
        i = text.find(_OPS_PREFIX, i + 1)
    return interned_names(out)


def _has(idx, path: str, needle: str) -> bool:
    """Does the text of ``path`` contain ``needle`` (memoised per file content: ``Index.per_text``)? A
    ``torch.ops.`` needle is answered from the file's :func:`_ops_refs`, one scan per file for every op asked
    (upstream vLLM as the workspace: ~45 op needles, each a read of all 2,234 files when the texts are not kept)."""
    if needle.startswith(_OPS_PREFIX) and _PLAIN_NEEDLE.fullmatch(needle):
        return any(r.startswith(needle) for r in idx.per_text(path, ("torch-ops-refs",), _ops_refs))

    def has(text) -> bool:
        return text is not None and needle in text

    return idx.per_text(path, ("contains", needle), has)


def _ws_modules_with(idx, needle: str, files: list | None = None):
    """(module, text) of the workspace files whose text contains ``needle``, in name order; only those texts are
    read (:func:`_has`)."""
    for name, path in (files if files is not None else _ws_files(idx)):
        if not _has(idx, path, needle):
            continue
        text = idx.source_text(path)
        m = idx.module(name) if text else None
        if m is not None:
            yield m, text


def _name_candidates(reg: OpReg) -> list[str]:
    out = []
    for n in (reg.op, reg.func.rpartition(".")[2]):
        if not n:
            continue
        out.append(n)
        head, sep, rest = n.partition("_")
        if sep and rest:
            out.append(rest)
    return list(dict.fromkeys(out))


def _class_ops(text_lines: list[str], start: int, end: int) -> set:
    found = set()
    for ln in text_lines[max(start - 1, 0):end]:
        for mt in _OPS_RE.finditer(ln):
            found.add((mt.group(1), mt.group(2)))
    return found


def _by_call_site(ws, reg: OpReg, memo: dict, files: list | None = None) -> OpReg | None:
    """The upstream op whose call sites in upstream base classes match the plugin op's call sites; memoised
    by the content of the workspace modules that call it (and installed code)."""
    needle = f"torch.ops.{reg.ns}.{reg.op}"
    mods = list(_ws_modules_with(ws.index, needle, files))
    key = ("opvariants.by_call_site", reg.ns, reg.op, tuple((m.name, m.summary.sha) for m, _t in mods))
    return ws.index.outside_memo(key, lambda: _by_call_site_in(ws, reg, memo, needle, mods))


def _by_call_site_in(ws, reg: OpReg, memo: dict, needle: str, mods: list) -> OpReg | None:
    idx = ws.index
    query = ws.query
    cands: dict = {}
    for m, text in mods:
        lines = text.splitlines()
        for i, ln in enumerate(lines, 1):
            if not re.search(re.escape(needle) + r"\b", ln):
                continue
            scope = m.summary.scope_at(i)
            cq = query.enclosing_class(m, scope) if scope else None
            if cq is None:
                continue
            try:
                mro = query.mro(m, cq)
            except RecursionError:
                continue
            for cv in mro[1:]:
                if cv.module is None or cv.module.workspace or cv.cls is None:
                    continue
                key = (cv.module.name, cv.qual)
                if key not in memo:
                    utext = idx.source_text(cv.module.path) or ""
                    memo[key] = _class_ops(utext.splitlines(), cv.cls.line, cv.cls.end_line)
                for ns, op in memo[key]:
                    if ns == reg.ns:
                        cands.setdefault(op, None)
    best = None
    for op in sorted(cands, key=lambda o: (-len(o), o)):
        if op in reg.op or len(cands) == 1:
            best = op
            break
    return upstream_registration(ws, reg.ns, best) if best else None


def variants(ws) -> list[Variant]:
    """Every workspace ``direct_register_custom_op`` registration paired with the upstream op it mirrors."""
    idx = ws.index
    memo: dict = {}
    files = _ws_files(idx)
    out = []
    for m, _text in _ws_modules_with(idx, REGISTER, files):
        out.extend(variants_in(ws, m, memo, files))
    return out


def variants_in(ws, m, memo: dict | None = None, files: list | None = None) -> list[Variant]:
    """The registrations of workspace module ``m`` paired with the upstream ops they mirror (what
    :func:`variants` collects for one module: a check of one module needs no other module's pairs).
    ``memo`` / ``files``: the class-op memo and the workspace files, shared by the callers that pair
    several modules."""
    from .api import run_steps

    return run_steps(variant_steps_in(ws, m, memo, files))


def variant_steps_in(ws, m, memo: dict | None = None, files: list | None = None):
    """:func:`variants_in` as steps (``rules.api.run_steps``): a generator that yields after each
    registration and returns the list."""
    if not m.workspace:
        return []
    memo = memo if memo is not None else {}
    out = []
    for reg in registrations_in(ws.query, m):
        yield
        if not reg.func:
            continue
        up = None
        via = "name"
        for cand in _name_candidates(reg):
            up = upstream_registration(ws, reg.ns, cand)
            if up is not None:
                break
        if up is None:
            if files is None:
                files = _ws_files(ws.index)
            up = _by_call_site(ws, reg, memo, files)
            via = "call_site"
        if up is not None and up.module is not m:
            out.append(Variant(reg, up, via))
    return out


# ----------------------------------------------------------------------------- parameters


def _token(name: str) -> str:
    return name.strip("_").split("_", 1)[0]


def align(plugin: list[str], upstream: list[str]) -> dict:
    """upstream parameter name -> plugin parameter name, for the parameters both have (same name,
    or renamed within a gap between common names: same first ``_``-token)."""
    common = [u for u in upstream if u in plugin]
    out = {u: u for u in common}
    anchors = [None] + common + [None]
    for a, b in zip(anchors, anchors[1:]):
        ua = upstream.index(a) + 1 if a is not None else 0
        ub = upstream.index(b) if b is not None else len(upstream)
        pa = plugin.index(a) + 1 if a is not None else 0
        pb = plugin.index(b) if b is not None else len(plugin)
        pool = [p for p in plugin[pa:pb] if p not in out.values()]
        for u in upstream[ua:ub]:
            if u in out:
                continue
            hit = next((p for p in pool if _token(p) == _token(u)), None)
            if hit is not None:
                out[u] = hit
                pool.remove(hit)
    return out


def param_names(f, skip_self: bool = False) -> list[str]:
    """Names of a summary function's named parameters (no ``*args``/``**kwargs``)."""
    ps = [p for p in f.params if p.kind not in ("vararg", "kwarg")]
    if skip_self and ps and ps[0].name in ("self", "cls"):
        ps = ps[1:]
    return [p.name for p in ps]


def accepts_any_keyword(f) -> bool:
    return any(p.kind == "kwarg" for p in f.params)


def missing(plugin_f, upstream_f, gained: list[str] | None = None) -> list[str]:
    """Upstream parameters (of ``gained`` when given: what upstream added between two versions)
    that the plugin function does not accept, in upstream order."""
    if plugin_f is None or upstream_f is None or accepts_any_keyword(plugin_f):
        return []
    un = param_names(upstream_f)
    m = align(param_names(plugin_f), un)
    return [u for u in un if u not in m and (gained is None or u in gained)]


def gained(old_f, new_f) -> list[str]:
    """Parameters ``new_f`` has that ``old_f`` did not (renames within a gap are not gains)."""
    if old_f is None or new_f is None:
        return []
    nn = param_names(new_f)
    m = align(param_names(old_f), nn)
    return [u for u in nn if u not in m]
