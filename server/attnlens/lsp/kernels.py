"""Kernel call sites counted and grouped: what code lens, inlay hints, class hovers and the Kernels tree show.

Per file, the kernel call sites come from the same machinery as ``attnlens sites``
(``Query.kernel_tracer``, whose chains the resolver's site memo keeps until a
file they went through changes, then ``Query.mark_selection``), computed a few
sites at a time (:func:`file_sites` with a budget) so that a hover is never
queued behind a whole file; the work in progress and the last complete sites of
each file live on the :class:`~attnlens.lsp.analysis.Analysis` (``site_progress``,
``last_sites``). Per backend, they are the registry entry's call sites
(``Query.backends``, computed at indexing). A *target* (:class:`Target`) is a distinct
leaf (same kind, name and definition) and carries the call sites that reach it.

Worker thread only; plain data (no LSP types).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from .. import model as M
from ..render import KIND_TAG, KIND_WORDS, LeafName, _loc_md, md_code, md_escape, md_link, verdicts
from .records import DefRef

KERNEL_KINDS = (M.TORCH_OP, M.TRITON_KERNEL, M.EXTENSION_FUNCTION)


@dataclass
class Site:
    """One kernel call site of a file (1-based lines, code point columns)."""

    path: str
    line: int
    col: int
    end_line: int  # the end of the call (after its closing parenthesis)
    end_col: int
    scope: str
    call: str
    chain: M.Chain


@dataclass
class Target:
    """A distinct leaf and the call sites that reach it."""

    name: LeafName
    kind: str
    reachable: bool | None  # the best over its call sites: True, else None (run time), else False
    reason: str | None = None
    sites: list = field(default_factory=list)  # (path, line, col, call)

    def to_json(self) -> dict:
        return {"name": self.name.short, "full": self.name.full, "kind": self.kind, "tag": KIND_TAG.get(self.kind, self.kind),
                "path": self.name.path, "line": self.name.line, "reachability": M.reach_word(self.reachable),
                "reason": self.reason,
                "sites": [{"path": p, "line": ln, "col": c, "call": call} for p, ln, c, call in self.sites]}


def _better(a: bool | None, b: bool | None) -> bool | None:
    """The reachability of a target reached both ways: taken beats run time beats dead."""
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def group_targets(sites) -> list[Target]:
    """Distinct leaves over ``sites`` (objects with path, line, col, call and chain), first-seen order."""
    out: dict[tuple, Target] = {}
    for s in sites:
        live, dead = verdicts(s.chain)
        for v in live + dead:
            nm = v.name
            key = (v.final.kind, nm.full, nm.path, nm.line)
            t = out.get(key)
            if t is None:
                t = out[key] = Target(nm, v.final.kind, v.reachable, v.final.reason)
            else:
                t.reachable = _better(t.reachable, v.reachable)
            loc = (s.path, s.line, s.col, s.call)
            if loc not in t.sites:
                t.sites.append(loc)
    return list(out.values())


@dataclass
class Counts:
    """Distinct targets by kind: those that can run here, and how many only on dead branches."""

    kernels: int = 0
    not_installed: int = 0
    dummy: int = 0
    python: int = 0
    unresolved: int = 0
    dead: int = 0

    def __bool__(self) -> bool:
        return bool(self.kernels or self.not_installed or self.dummy or self.dead)

    def words(self) -> str:
        """``4 kernels · 2 not installed · 1 dummy`` (zero counts left out)."""
        def n(k, one, many):
            return f"{k} {one if k == 1 else many}" if k else ""

        parts = [n(self.kernels, "kernel", "kernels"), n(self.not_installed, "not installed", "not installed"),
                 n(self.dummy, "dummy", "dummies"), n(self.unresolved, "unresolved", "unresolved"),
                 n(self.dead, "not taken here", "not taken here")]
        return " · ".join(p for p in parts if p) or "no kernels"


def count(targets: list[Target]) -> Counts:
    c = Counts()
    for t in targets:
        if t.reachable is False:
            c.dead += 1
        elif t.kind in KERNEL_KINDS:
            c.kernels += 1
        elif t.kind == M.NOT_INSTALLED:
            c.not_installed += 1
        elif t.kind == M.DUMMY:
            c.dummy += 1
        elif t.kind == M.UNRESOLVED:
            c.unresolved += 1
        else:
            c.python += 1
    return c


# -- per file, computed a few sites at a time -----------------------------------------------------


@dataclass
class _Progress:
    generation: int
    sha: str
    next_call: int = 0
    sites: list = field(default_factory=list)
    done: bool = False


def file_sites(a, path: str, budget_s: float | None = None) -> list[Site] | None:
    """The kernel call sites of ``path`` (the same as ``attnlens sites`` on that file), or None when
    ``budget_s`` ran out first (call again: the work done is kept). Memoised per index generation."""
    mod = a.module(path)
    if mod is None:
        return []
    memo = a.site_progress
    gen = a.generation
    p = memo.get(path)
    if p is None or p.generation != gen or p.sha != mod.summary.sha:
        if len(memo) > 64:
            memo.clear()
        p = memo[path] = _Progress(gen, mod.summary.sha)
    if p.done:
        return p.sites
    trace = a.q.kernel_tracer()
    never = a.q.never_selected()
    deadline = None if budget_s is None else time.perf_counter() + budget_s
    calls = mod.summary.calls
    while p.next_call < len(calls):
        if deadline is not None and time.perf_counter() >= deadline and p.next_call:
            return None
        cs = calls[p.next_call]
        p.next_call += 1
        try:
            res = trace(mod, cs)
        except Exception:  # noqa: BLE001 - one site's failure never loses the others
            continue
        if res is None:
            continue
        chain = a.q.mark_selection(mod, cs.line, res.chain, never)  # as `attnlens sites` does
        p.sites.append(Site(mod.path, cs.line, cs.col, cs.end_line, cs.end_col, cs.scope, res.call, chain))
    p.done = True
    a.last_sites[path] = p.sites
    a.q.trim_memos()
    return p.sites


def _site_key(scope: str, call: str, nth: int) -> tuple:
    return (scope, call, nth)


def provisional_sites(a, path: str) -> list[Site] | None:
    """While a file's sites are being traced again after an edit: its last complete sites, moved to where the
    same calls are now (same function, same callee text, same occurrence); calls that are new have none yet.
    None when the file was never complete."""
    last = a.last_sites.get(path)
    mod = a.module(path)
    if last is None or mod is None:
        return None
    old: dict[tuple, Site] = {}
    seen: dict[tuple, int] = {}
    for st in last:
        k = (st.scope, st.call)
        old[_site_key(st.scope, st.call, seen.get(k, 0))] = st
        seen[k] = seen.get(k, 0) + 1
    out, seen = [], {}
    for cs in mod.summary.calls:
        call = cs.func + ("[grid]" if cs.launch else "")
        k = (cs.scope, call)
        st = old.get(_site_key(cs.scope, call, seen.get(k, 0)))
        seen[k] = seen.get(k, 0) + 1
        if st is not None:
            out.append(Site(mod.path, cs.line, cs.col, cs.end_line, cs.end_col, cs.scope, call, st.chain))
    return out


def complete_sites(a, path: str) -> list[Site] | None:
    """The file's sites when they are complete for this index generation (no work done here)."""
    mod = a.module(path)
    p = a.site_progress.get(path)
    if mod is None:
        return []
    if p is not None and p.done and p.generation == a.generation and p.sha == mod.summary.sha:
        return p.sites
    return None


def current_sites(a, path: str) -> list[Site]:
    """The file's kernel call sites if complete for this index generation, else the provisional ones."""
    sites = complete_sites(a, path)
    if sites is not None:
        return sites
    return provisional_sites(a, path) or []


def sites_in(sites: list[Site], qual: str) -> list[Site]:
    """The sites inside function ``qual`` (its nested functions included)."""
    return [s for s in sites if s.scope == qual or s.scope.startswith(qual + ".")]


# -- Markdown for hovers ----------------------------------------------------------------------------


def targets_markdown(targets: list[Target], link, limit: int = 6) -> list[str]:
    """One line per target that can run (at most ``limit``): name, kind, where, call sites."""
    live = [t for t in targets if t.reachable is not False]
    out = []
    for t in live[:limit]:
        loc = _loc_md(t.name.path, t.name.line, link, f"{KIND_WORDS.get(t.kind, t.kind)}: {t.name.full}")
        n = len(t.sites)
        out.append(f"- {md_code(t.name.short)} ({', '.join(x for x in (KIND_TAG.get(t.kind, t.kind), loc) if x)})"
                   f" — {n} call site{'s' if n != 1 else ''}"
                   + ("" if t.reachable is True else ", decided at run time"))
    if len(live) > limit:
        out.append(f"- … and {len(live) - limit} more")
    return out


def _ref_md(label: str, cls: str | None, path: str | None, line: int | None, link) -> str:
    """``impl [MiniFlashAttentionImpl](…)``: a part of a backend by its short name, the full name in the title."""
    short = (cls or "?").rpartition(".")[2]
    return f"{label} {md_link(short, link(path, line or 1), cls) if path else md_code(short)}"


def backend_summary(a, role, link, max_targets: int = 6) -> str:
    """A backend (or one of its parts) in a few lines: the verdict line with the counts, its parts, the kernels."""
    e, what, label = role
    targets = group_targets(e.call_sites)
    c = count(targets)
    if what == "backend":
        head = f"Backend {md_code(e.name)} ({md_escape(e.kind)}): {c.words()}"
    else:
        head = f"{md_escape(what.capitalize())} of backend {md_code(e.name)}: {c.words()}"
    lines = [head]
    parts = []
    for r in e.registered_at[:2]:
        parts.append(f"registered at {_loc_md(r['path'], r['line'], link)}")
    for name, ref in (("impl", e.impl), ("builder", e.builder), ("metadata", e.metadata), ("upstream", e.upstream)):
        if ref is not None and (ref.cls or ref.path):
            parts.append(_ref_md(name, ref.cls, ref.path, ref.line, link))
    if parts:
        lines.append(" · ".join(parts))
    if not e.loads:
        lines.append(f"*Not loadable with the installed vLLM: {md_escape(e.error or '?')}*")
    elif e.error:
        lines.append(f"*Registry error: {md_escape(e.error)}*")
    body = targets_markdown(targets, link, max_targets)
    text = "  \n".join(lines)
    return text + ("\n\n" + "\n".join(body) if body else "")


def class_summary(d: DefRef, c: "ClassKernels", link) -> str:
    head = f"Class {md_code(d.name)}: {c.counts.words()}"
    body = targets_markdown(c.targets, link)
    return head + ("\n\n" + "\n".join(body) if body else "")


@dataclass
class ClassKernels:
    counts: Counts
    targets: list

    def __bool__(self) -> bool:
        return bool(self.counts)


def class_kernels(a, d: DefRef, budget_s: float | None = None) -> ClassKernels | None:
    """The kernel call sites in the methods of class ``d`` (this file), counted; None when out of budget."""
    sites = complete_sites(a, d.path)
    if sites is None:
        prov = provisional_sites(a, d.path)  # after an edit: the last complete sites, where their calls are now
        sites = prov if prov is not None else file_sites(a, d.path, budget_s)
    if sites is None:
        return None
    mine = sites_in(sites, d.qual)
    targets = group_targets(mine)
    return ClassKernels(count(targets), targets)


def basename_line(path: str | None, line: int | None) -> str:
    return f"{os.path.basename(path)}:{line}" if path and line else os.path.basename(path or "") or "?"
