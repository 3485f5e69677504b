"""Plain-text and Markdown renderings of chains (trees) and registry entries."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from . import model as M

KIND_LABEL = {
    M.PYTHON_FUNCTION: "Python function",
    M.PYTHON_CLASS: "Python class",
    M.TORCH_OP: "torch custom op",
    M.TRITON_KERNEL: "Triton kernel",
    M.EXTENSION_FUNCTION: "native extension",
    M.DUMMY: "DUMMY (does nothing)",
    M.NOT_INSTALLED: "NOT INSTALLED",
    M.UNRESOLVED: "unresolved",
    M.FORK: "fork",
}

# how a branch / leaf stands on this platform, in plain words
TAKEN = "taken on this platform"
DEAD = "DEAD on this platform"
RUNTIME = "decided at run time"

# hops that bind a name by an import statement (where a not-installed leaf is "defined")
IMPORT_HOPS = ("import", "conditional_import", "lazy_import", "dynamic_import", "reexport")


def _loc(path: str | None, line: int | None) -> str:
    if not path:
        return "-"
    return f"{path}:{line}" if line else path


def _reach(v) -> str:
    return {True: "live", False: "DEAD on this platform", None: "unknown"}[v]


def reach_words(v: bool | None) -> str:
    """A branch's or leaf's reachability in plain words."""
    return TAKEN if v is True else DEAD if v is False else RUNTIME


def short_symbol(f: M.Final) -> str:
    """The last name of a leaf's symbol (an op keeps its ``ns::name``)."""
    s = f.symbol or "?"
    if f.kind == M.TORCH_OP or "::" in s:
        return s
    return s.rpartition(".")[2] or s


def conditions_words(conds: list[str]) -> str:
    return " and ".join(conds) if conds else "always"


# -- the tree, flattened with the hops on each leaf's path ---------------------


@dataclass
class LeafPath:
    """A :class:`model.Leaf` plus every hop from the root to it (trunk first)."""

    leaf: M.Leaf
    hops: list[M.Hop]

    @property
    def final(self) -> M.Final:
        return self.leaf.final

    def conditions(self) -> list[str]:
        """The branch conditions from the root, then the guards of hops on the way that are not
        known to hold (a runtime or dead guard on the trunk explains a runtime or dead leaf)."""
        out = list(self.leaf.conditions)
        for h in self.hops:
            if h.condition and h.reachable is not True and h.condition not in out:
                out.append(h.condition)
        return out

    def binding_import(self) -> M.Hop | None:
        """The last import statement hop on the way (the one that binds a not-installed name)."""
        for h in reversed(self.hops):
            if h.kind in IMPORT_HOPS and h.path and h.line:
                return h
        return None


def leaf_paths(chain: M.Chain) -> list[LeafPath]:
    """``chain.leaves()`` in the same (depth-first) order, each with the hops on its path."""
    hop_lists: list[list[M.Hop]] = []

    def walk(c: M.Chain, hops: list[M.Hop]) -> None:
        hops = hops + list(c.hops)
        if c.final.fork is None:
            hop_lists.append(hops)
            return
        for b in c.final.fork.branches:
            walk(b.chain, hops)

    walk(chain, [])
    leaves = chain.leaves()
    if len(leaves) != len(hop_lists):  # pragma: no cover - both walk the same tree
        hop_lists = [list(chain.hops)] * len(leaves)
    return [LeafPath(lf, hs) for lf, hs in zip(leaves, hop_lists)]


def leaf_summary(lf: M.Leaf, conditions: list[str] | None = None) -> str:
    """One plain line: kind, short symbol, file:line, condition path, reachability."""
    f = lf.final
    extra = f"  ({f.reason})" if f.kind in (M.UNRESOLVED, M.NOT_INSTALLED) and f.reason else ""
    conds = lf.conditions if conditions is None else conditions
    return (f"{f.kind} {short_symbol(f)} @ {_loc(f.path, f.line)}  if {conditions_words(conds)}"
            f" -> {reach_words(lf.reachable)}{extra}")


def site_leaves_text(chain: M.Chain) -> str:
    """``1 leaf: kind symbol`` or ``N leaves: kind (dead), kind`` for census lines."""
    leaves = chain.leaves()
    if len(leaves) == 1:
        f = leaves[0].final
        r = leaves[0].reachable
        dead = " (dead)" if r is False else " (runtime)" if r is None else ""
        extra = f"  ({f.reason})" if f.kind == M.UNRESOLVED and f.reason else ""
        return f"1 leaf: {f.kind} {f.symbol}{dead}{extra}"
    parts = []
    for lf in leaves:
        mark = " (dead)" if lf.reachable is False else " (runtime)" if lf.reachable is None else ""
        parts.append(f"{lf.final.kind}{mark}")
    trunc = " (truncated)" if chain.truncated() else ""
    return f"{len(leaves)} leaves: {', '.join(parts)}{trunc}"


# -- plain text -----------------------------------------------------------------


def _final_text(f: M.Final, pad: str) -> list[str]:
    out = [f"{pad}==> {KIND_LABEL.get(f.kind, f.kind)}: {f.symbol}  @ {_loc(f.path, f.line)}"]
    if f.reason:
        out.append(f"{pad}    reason: {f.reason}")
    if f.schema:
        out.append(f"{pad}    schema: {f.schema}")
    for r in f.registrations:
        extra = f" -> {r.function} @ {_loc(r.function_path, r.function_line)}" if r.function else ""
        cond = f"  [if {r.condition}]" if r.condition else ""
        out.append(f"{pad}    registration: {r.kind} {r.dispatch_key or ''} @ {_loc(r.path, r.line)}{extra}{cond}")
    if f.providers:
        out.append(f"{pad}    provided by: {'; '.join(f.providers)}")
    if f.constexprs:
        out.append(f"{pad}    constexpr: {', '.join(f.constexprs)}")
    return out


def _node_text(chain: M.Chain, pad: str, out: list[str]) -> None:
    for i, h in enumerate(chain.hops):
        cond = f"  [if {h.condition} -> {_reach(h.reachable)}]" if h.condition else ""
        out.append(f"{pad}{i:2d}. {h.kind:<18} {h.symbol}  @ {_loc(h.path, h.line)}{cond}")
        if h.detail:
            out.append(f"{pad}    {'':<18} {h.detail}")
    f = chain.final
    fk = f.fork
    if fk is None:
        out.extend(_final_text(f, pad))
        return
    decided = f", decided by {fk.decided_by}" if fk.decided_by else ""
    out.append(f"{pad}==> fork ({fk.kind}) {fk.symbol} @ {_loc(fk.path, fk.line)}{decided}")
    if f.detail:
        out.append(f"{pad}    {f.detail}")
    for b in fk.branches:
        cond = f"if {b.condition}" if b.condition else "always"
        where = f"  @ {_loc(b.path, b.line)}" if b.path else ""
        out.append(f"{pad}    [{cond} -> {reach_words(b.reachable)}] {b.label}{where}")
        _node_text(b.chain, pad + "        ", out)
    if fk.truncated:
        out.append(f"{pad}    TRUNCATED: {fk.truncated} (more branches exist than are shown)")


def chain_text(chain: M.Chain) -> str:
    """The chain as an indented tree, then one line per leaf."""
    out: list[str] = []
    _node_text(chain, "", out)
    out.append(f"    reachable on this platform: {_reach(chain.reachable)}" + ("  (PARTIAL: time budget hit)" if chain.partial else ""))
    lps = leaf_paths(chain)
    live = sum(1 for lp in lps if lp.leaf.reachable is not False)
    out.append(f"leaves: {len(lps)} ({live} can run on this platform)"
               + ("  TRUNCATED: the tree hit its bounds, more leaves exist" if chain.truncated() else ""))
    for lp in lps:
        out.append(f"  - {leaf_summary(lp.leaf, lp.conditions())}")
    return "\n".join(out)


def _rel(path: str | None, root: Path) -> str:
    if not path:
        return "-"
    try:
        return os.path.relpath(path, root) if path.startswith(str(root)) else path
    except ValueError:
        return path


def backends_table(entries, root: Path) -> str:
    lines = []
    for e in entries:
        lines.append(f"{e.kind}:{e.name}  {e.cls}  ({_rel(e.path, root)}:{e.line})")
        for r in e.registered_at:
            lines.append(f"    registered ({r['form']}) at {_rel(r['path'], root)}:{r['line']}")
        for sel in getattr(e, "selected", None) or []:
            cond = " and ".join(sel["conditions"]) or "always"
            lines.append(f"    selected if {cond} -> {reach_words({'live': True, 'dead': False}.get(sel['reachability']))}"
                         f"  ({_rel(sel['path'], root)}:{sel['line']}, {sel['via']})"
                         + (f"  [{sel['reason']}]" if sel.get("reason") else ""))
        for wmsg in getattr(e, "warnings", None) or []:
            lines.append(f"    WARNING: {wmsg}")
        for label, ref in (("impl", e.impl), ("builder", e.builder), ("metadata", e.metadata), ("upstream", e.upstream)):
            if ref is None:
                continue
            note = f"  [{ref.note}]" if ref.note else ""
            lines.append(f"    {label:<9} {ref.cls or '-'}  ({_rel(ref.path, root)}:{ref.line}){note}")
        if e.error:
            lines.append(f"    ERROR: {e.error}")
        if e.call_sites:
            lines.append(f"    kernel call sites: {len(e.call_sites)}")
            for c in e.call_sites:
                dead = "  (dead branch)" if c.chain.reachable is False else ""
                if c.chain.is_tree():
                    lines.append(f"      {_rel(c.path, root)}:{c.line}  {c.call} -> {site_leaves_text(c.chain)}{dead}")
                    for lf in c.chain.leaves():
                        f = lf.final
                        lines.append(f"        - {f.kind} {f.symbol}  if {conditions_words(lf.conditions)}"
                                     f" -> {reach_words(lf.reachable)}")
                else:
                    f = c.chain.final
                    lines.append(f"      {_rel(c.path, root)}:{c.line}  {c.call} -> {f.kind} {f.symbol}{dead}")
        lines.append("")
    return "\n".join(lines)


# -- Markdown -------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*\[\]<>~])")
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md_escape(text: str) -> str:
    """Escape Markdown syntax in plain text (``kernel[grid]``, ``__init__``).

    Underscores inside a word (``merge_attn_states``) cannot start emphasis and stay as they are.
    """
    text = _MD_SPECIAL.sub(r"\\\1", text or "")
    return _MD_UNDERSCORE.sub(lambda m: "\\_", text)


def md_code(text: str) -> str:
    """``text`` as an inline code span, safe for backticks inside."""
    text = text or ""
    if "`" not in text:
        return f"`{text}`"
    n = max(len(m) for m in re.findall(r"`+", text)) + 1
    fence = "`" * n
    return f"{fence} {text} {fence}"


def _md_loc(path: str | None, line: int | None, link) -> str:
    if not path:
        return ""
    label = f"{os.path.basename(path)}:{line}" if line else os.path.basename(path)
    return f"[{md_escape(label)}]({link(path, line or 1)})"


def _md_condition(lf: M.Leaf, conditions: list[str]) -> str:
    if not conditions:
        words = {True: "always " + TAKEN, False: DEAD + " (a guard on the way is false)",
                 None: RUNTIME}[lf.reachable]
        return words
    cond = " and ".join(md_code(c) for c in conditions)
    return f"if {cond}: {reach_words(lf.reachable)}"


def runs_lines(chain: M.Chain, link) -> list[str]:
    """The lead of a hover: one "Runs:" line per leaf that can run, one folded line for dead ones."""
    out = []
    lps = leaf_paths(chain)
    leaves = [lp.leaf for lp in lps]
    for lp in lps:
        lf = lp.leaf
        if lf.reachable is False:
            continue
        f = lf.final
        where = _md_loc(f.path, f.line, link)
        imp = lp.binding_import() if f.kind == M.NOT_INSTALLED and not f.path else None
        if imp is not None:  # nothing to show of a missing package: the import that names it
            where = f"imported at {_md_loc(imp.path, imp.line, link)}"
        parts = [p for p in (where, _md_condition(lf, lp.conditions())) if p]
        out.append(f"Runs: {md_code(short_symbol(f))} ({', '.join(parts)}) — {KIND_LABEL.get(f.kind, f.kind)}")
    dead = [lf for lf in leaves if lf.reachable is False]
    if dead:
        n = len(dead)
        items = "; ".join(f"{KIND_LABEL.get(lf.final.kind, lf.final.kind)} {md_code(short_symbol(lf.final))}"
                          + (f" if {' and '.join(md_code(c) for c in lf.conditions)}" if lf.conditions else "")
                          for lf in dead)
        out.append(f"*{n} branch{'es' if n != 1 else ''} dead on this platform:* {items}")
    if chain.truncated():
        out.append("*truncated: the tree hit its bounds; more leaves exist than are shown*")
    return out


def _final_md_details(f: M.Final, link) -> list[str]:
    out = []
    if f.schema:
        out.append(f"schema: {md_code(f.schema)}")
    if f.registrations:
        regs = []
        for r in f.registrations:
            fn = (f" → {md_code(r.function or '?')} {_md_loc(r.function_path, r.function_line, link)}" if r.function_path
                  else (f" → {md_code(r.function)}" if r.function else ""))
            cond = f" *if* {md_code(r.condition)}" if r.condition else ""
            regs.append(f"{r.kind} {r.dispatch_key or ''} {_md_loc(r.path, r.line, link)}{fn}{cond}")
        out.append("registrations:")
        out.extend(f"- {x}" for x in regs)
    if f.providers:
        out.append("provided by: " + "; ".join(md_escape(p) for p in f.providers))
    if f.kind == M.TRITON_KERNEL:
        out.append(f"parameters: {md_code(', '.join(f.params))}")
        if f.constexprs:
            out.append(f"constexpr: {md_code(', '.join(f.constexprs))}")
    return out


def _hop_md(h: M.Hop, link) -> str:
    where = _md_loc(h.path, h.line, link)
    cond = f" — *if* {md_code(h.condition)} → **{_reach(h.reachable)}**" if h.condition else ""
    detail = f" — {md_escape(h.detail)}" if h.detail else ""
    return f"{md_code(h.kind)} {md_code(h.symbol)} {where}{cond}{detail}"


def _leaf_md(f: M.Final, link) -> str:
    reason = f" — {f.reason}" if f.reason else ""
    return f"⇒ **{KIND_LABEL.get(f.kind, f.kind)}** {md_code(f.symbol)} {_md_loc(f.path, f.line, link)}{reason}".rstrip()


def _fork_md(f: M.Final, link) -> str:
    fk = f.fork
    decided = f", decided by {md_code(fk.decided_by)}" if fk.decided_by else ""
    return f"⇒ **fork** ({fk.kind}) {md_code(fk.symbol)} {_md_loc(fk.path, fk.line, link)}{decided}"


def _branch_head_md(b: M.Branch, link) -> str:
    cond = f"*if* {md_code(b.condition)}" if b.condition else "*always*"
    where = _md_loc(b.path, b.line, link)
    return f"[{cond} → **{reach_words(b.reachable)}**] {md_escape(b.label)} {where}".rstrip()


def _branch_md(b: M.Branch, link, pad: str, out: list[str]) -> None:
    head = _branch_head_md(b, link)
    if b.reachable is False:
        # folded: the dead branch in one line (what it would have reached)
        lvs = b.chain.leaves()
        what = ", ".join(f"{KIND_LABEL.get(lf.final.kind, lf.final.kind)} {md_code(short_symbol(lf.final))}" for lf in lvs)
        hops = sum(1 for _ in _all_hops(b.chain))
        out.append(f"{pad}- ~~dead~~ {head} — folded ({hops} hop{'s' if hops != 1 else ''}): would reach {what}")
        return
    out.append(f"{pad}- {head}")
    _subtree_md(b.chain, link, pad + "  ", out)


def _all_hops(chain: M.Chain):
    yield from chain.hops
    if chain.final.fork is not None:
        for b in chain.final.fork.branches:
            yield from _all_hops(b.chain)


def _subtree_md(chain: M.Chain, link, pad: str, out: list[str]) -> None:
    for h in chain.hops:
        out.append(f"{pad}- {_hop_md(h, link)}")
    f = chain.final
    if f.fork is None:
        out.append(f"{pad}- {_leaf_md(f, link)}")
        for d in _final_md_details(f, link):
            out.append(f"{pad}  {d}" if d.startswith("- ") else f"{pad}  - {d}")
        return
    out.append(f"{pad}- {_fork_md(f, link)}")
    for b in f.fork.branches:
        _branch_md(b, link, pad + "  ", out)
    if f.fork.truncated:
        out.append(f"{pad}  - *truncated: {md_escape(f.fork.truncated)}*")


def chain_markdown(chain: M.Chain, title: str | None = None, link=None) -> str:
    """Markdown for hovers. ``link(path, line)`` builds a clickable target.

    Leads with what runs (one line per leaf that can run, dead leaves folded into
    one line), then the trunk's hops and, for a tree, its forks and branches.
    """
    link = link or (lambda p, l: f"file://{p}#L{l}")
    out = []
    if title:
        out.append(title)
    f = chain.final
    if f.fork is None:
        if chain.reachable is not False:
            out.extend(line + "  " for line in runs_lines(chain, link))
        out.append(f"**{KIND_LABEL.get(f.kind, f.kind)}** {md_code(f.symbol)} {_md_loc(f.path, f.line, link)}".rstrip())
        if chain.reachable is False:
            out.append("\n> **Dead on this platform**: a guard on this path is false under the platform profile.")
        if f.reason:
            out.append(f"\n> {f.reason}")
    else:
        out.extend(line + "  " for line in runs_lines(chain, link))  # hard line breaks
        if chain.reachable is False:
            out.append("\n> **Dead on this platform**: a guard on this path is false under the platform profile.")
    out.append("")
    for i, h in enumerate(chain.hops):
        out.append(f"{i + 1}. {_hop_md(h, link)}")
    if f.fork is None:
        details = _final_md_details(f, link)
        for d in details:
            out.append(d if d.startswith("- ") else f"\n{d}" if not d.startswith("constexpr") else d)
    else:
        out.append("")
        out.append(_fork_md(f, link))
        if f.detail:
            out.append(f"\n{md_escape(f.detail)}\n")
        for b in f.fork.branches:
            _branch_md(b, link, "", out)
        if f.fork.truncated:
            out.append(f"- *truncated: {md_escape(f.fork.truncated)}*")
    if chain.partial:
        out.append("\n*partial answer: the time budget ran out*")
    return "\n".join(out)
