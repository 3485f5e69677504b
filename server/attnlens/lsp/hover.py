"""Hover content: an ordered list of *sections*, each a small provider.

A section provider gets a :class:`HoverContext` (worker thread, read-only use
of the analysis) and returns Markdown or None. Built-in sections: the chain
(hops, final target) and the backend registry entry. Other parts of AttnLens
(contract facts, probe evidence) add theirs with :func:`register_section`;
a failing provider is logged and skipped, never breaking the hover.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable

from .. import model as M
from ..render import chain_markdown, md_code, md_escape
from .analysis import Analysis, DefRef
from .convert import link

log = logging.getLogger(__name__)


@dataclass
class HoverContext:
    analysis: Analysis
    path: str
    line: int  # 1-based
    col: int  # code points
    chain: M.Chain | None = None
    definition: DefRef | None = None
    symbol: str | None = None  # dotted name of the class/function hovered, when known
    max_kernels: int = 40
    notes: list[str] = field(default_factory=list)
    cacheable: bool = True  # a section showing provisional data clears it

    def link(self, path: str, line: int | None) -> str:
        return link(path, line)


Section = Callable[[HoverContext], "str | None"]
_SECTIONS: list[tuple[int, str, Section]] = []


def register_section(name: str, provider: Section, order: int = 100) -> None:
    """Add (or replace) a hover section; lower ``order`` renders first."""
    unregister_section(name)
    _SECTIONS.append((order, name, provider))
    _SECTIONS.sort(key=lambda t: (t[0], t[1]))


def unregister_section(name: str) -> None:
    _SECTIONS[:] = [s for s in _SECTIONS if s[1] != name]


def sections() -> list[str]:
    return [name for _, name, _ in _SECTIONS]


def render(ctx: HoverContext) -> str | None:
    parts = []
    for _, name, provider in list(_SECTIONS):
        try:
            text = provider(ctx)
        except Exception:  # noqa: BLE001 - one section must not break the hover
            log.warning("hover section %s failed", name, exc_info=True)
            continue
        if text:
            parts.append(text.strip())
    if not parts:
        return None
    return "\n\n---\n\n".join(parts)


# -- built-in sections ---------------------------------------------------------


def chain_section(ctx: HoverContext) -> str | None:
    ch = ctx.chain
    if ch is None:
        return None
    title = "### AttnLens" + (" — partial answer (time budget reached; hover again for the full chain)" if ch.partial else "")
    text = chain_markdown(ch, title=title, link=ctx.link)
    if not ch.is_tree() and ch.final.kind == M.TRITON_KERNEL and not ch.final.constexprs:
        text += "\nconstexpr: none"
    return text


def definition_section(ctx: HoverContext) -> str | None:
    d = ctx.definition
    if d is None or ctx.chain is not None:
        return None
    what = {"class": "class", "triton": "Triton kernel", "method": "method", "function": "function"}.get(d.kind, d.kind)
    return f"### AttnLens\n**{what}** `{d.dotted}` [{os.path.basename(d.path)}:{d.line}]({ctx.link(d.path, d.line)})"


def backend_section(ctx: HoverContext) -> str | None:
    if not ctx.symbol:
        return None
    a = ctx.analysis
    a.backends(allow_stale=True)  # computed once per index generation (at indexing)
    role = a.role_of(ctx.symbol)
    if role is None:
        return None
    e, what, label = role
    lk = ctx.link
    out = [f"#### Registry: {label}" if what != "backend" else f"#### Registered backend `{e.name}` ({e.kind})"]
    if e.enum:
        out.append(f"enum: `{e.enum}`")
    for r in e.registered_at:
        where = f"[{os.path.basename(r['path'])}:{r['line']}]({lk(r['path'], r['line'])})"
        out.append(f"- registered ({r.get('form', '?')}) at {where}")
    rows = [("backend", _ref(e.cls, e.path, e.line, None, lk))]
    for name, ref in (("impl", e.impl), ("builder", e.builder), ("metadata", e.metadata), ("upstream", e.upstream)):
        if ref is not None:
            rows.append((name, _ref(ref.cls, ref.path, ref.line, ref.note, lk)))
    out.extend(f"- **{k}**: {v}" for k, v in rows)
    if e.error:
        out.append(f"\n> registry error: {e.error}")
    if e.call_sites:
        n = len(e.call_sites)
        out.append(f"\n**kernels reached** ({n} call site{'s' if n != 1 else ''}):")
        for c in e.call_sites[: ctx.max_kernels]:
            out.append(f"- [{md_escape(os.path.basename(c.path))}:{c.line}]({lk(c.path, c.line)}) "
                       f"{md_code(c.call)} → {_site_leaves_md(c.chain)}")
        if n > ctx.max_kernels:
            out.append(f"- … {n - ctx.max_kernels} more (command `attnlens.backends`)")
    if not a.backends_fresh():
        ctx.cacheable = False
        out.append("\n*registry from the previous index state; refreshing in the background*")
    return "\n".join(out)


def _site_leaves_md(chain: M.Chain) -> str:
    """What a kernel call site reaches: its one leaf, or its leaves with the dead ones marked."""
    dead_site = " — *dead on this platform*" if chain.reachable is False else ""
    leaves = chain.leaves()
    if len(leaves) == 1:
        f = leaves[0].final
        return f"{_KIND.get(f.kind, f.kind)} {md_code(f.symbol)}{dead_site}"
    parts = []
    for lf in leaves:
        f = lf.final
        mark = " *(dead)*" if lf.reachable is False else " *(run time)*" if lf.reachable is None else ""
        parts.append(f"{_KIND.get(f.kind, f.kind)} {md_code(f.symbol)}{mark}")
    more = " …truncated" if chain.truncated() else ""
    return f"{len(leaves)} leaves: " + ", ".join(parts) + more + dead_site


def _ref(cls, path, line, note, lk) -> str:
    if not cls and not path:
        return f"— ({note})" if note else "—"
    where = f" [{os.path.basename(path)}:{line}]({lk(path, line)})" if path else ""
    return f"`{cls or '?'}`{where}" + (f" — {note}" if note else "")


_KIND = {M.PYTHON_FUNCTION: "Python", M.PYTHON_CLASS: "class", M.TORCH_OP: "torch op", M.TRITON_KERNEL: "Triton",
         M.EXTENSION_FUNCTION: "extension", M.DUMMY: "DUMMY", M.NOT_INSTALLED: "NOT INSTALLED", M.UNRESOLVED: "unresolved",
         M.FORK: "fork"}


def upstream_section(ctx: HoverContext) -> str | None:
    up = ctx.chain.upstream if ctx.chain is not None else None
    if not up:
        return None
    items = ", ".join(f"{k}: `{v}`" for k, v in up.items() if v is not None)
    return f"upstream counterpart: {items}" if items else None


def notes_section(ctx: HoverContext) -> str | None:
    return "\n".join(f"*{n}*" for n in ctx.notes) if ctx.notes else None


register_section("chain", chain_section, order=10)
register_section("definition", definition_section, order=10)
register_section("backend", backend_section, order=20)
register_section("upstream", upstream_section, order=30)
register_section("notes", notes_section, order=1000)
