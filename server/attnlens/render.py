"""Plain-text and Markdown renderings of chains and registry entries."""

from __future__ import annotations

import os
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
}


def _loc(path: str | None, line: int | None) -> str:
    if not path:
        return "-"
    return f"{path}:{line}" if line else path


def _reach(v) -> str:
    return {True: "live", False: "DEAD on this platform", None: "unknown"}[v]


def chain_text(chain: M.Chain) -> str:
    out = []
    for i, h in enumerate(chain.hops):
        cond = f"  [if {h.condition} -> {_reach(h.reachable)}]" if h.condition else ""
        out.append(f"{i:2d}. {h.kind:<18} {h.symbol}  @ {_loc(h.path, h.line)}{cond}")
        if h.detail:
            out.append(f"    {'':<18} {h.detail}")
    f = chain.final
    out.append(f"==> {KIND_LABEL.get(f.kind, f.kind)}: {f.symbol}  @ {_loc(f.path, f.line)}")
    if f.reason:
        out.append(f"    reason: {f.reason}")
    if f.schema:
        out.append(f"    schema: {f.schema}")
    for r in f.registrations:
        extra = f" -> {r.function} @ {_loc(r.function_path, r.function_line)}" if r.function else ""
        out.append(f"    registration: {r.kind} {r.dispatch_key or ''} @ {_loc(r.path, r.line)}{extra}")
    if f.providers:
        out.append(f"    provided by: {'; '.join(f.providers)}")
    if f.constexprs:
        out.append(f"    constexpr: {', '.join(f.constexprs)}")
    if f.calls:
        out.append(f"    launches: {'; '.join(f.calls)}")
    out.append(f"    reachable on this platform: {_reach(chain.reachable)}" + ("  (PARTIAL: time budget hit)" if chain.partial else ""))
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
                f = c.chain.final
                dead = "  (dead branch)" if c.chain.reachable is False else ""
                lines.append(f"      {_rel(c.path, root)}:{c.line}  {c.call} -> {f.kind} {f.symbol}{dead}")
        lines.append("")
    return "\n".join(lines)


def chain_markdown(chain: M.Chain, title: str | None = None, link=None) -> str:
    """Markdown for hovers. ``link(path, line)`` builds a clickable target."""
    link = link or (lambda p, l: f"file://{p}#L{l}")
    out = []
    if title:
        out.append(title)
    f = chain.final
    loc = f"[{os.path.basename(f.path)}:{f.line}]({link(f.path, f.line or 1)})" if f.path else ""
    out.append(f"**{KIND_LABEL.get(f.kind, f.kind)}** `{f.symbol}` {loc}")
    if chain.reachable is False:
        out.append("\n> **Dead on this platform**: a guard on this path is false under the platform profile.")
    if f.reason:
        out.append(f"\n> {f.reason}")
    out.append("")
    for i, h in enumerate(chain.hops):
        where = f"[{os.path.basename(h.path)}:{h.line}]({link(h.path, h.line)})" if h.path else ""
        cond = f" — *if* `{h.condition}` → **{_reach(h.reachable)}**" if h.condition else ""
        detail = f" — {h.detail}" if h.detail else ""
        out.append(f"{i + 1}. `{h.kind}` `{h.symbol}` {where}{cond}{detail}")
    if f.schema:
        out.append(f"\nschema: `{f.schema}`")
    if f.registrations:
        out.append("\nregistrations:")
        for r in f.registrations:
            fn = f" → `{r.function}` [{os.path.basename(r.function_path)}:{r.function_line}]({link(r.function_path, r.function_line)})" if r.function_path else (f" → `{r.function}`" if r.function else "")
            where = f"[{os.path.basename(r.path)}:{r.line}]({link(r.path, r.line or 1)})" if r.path else ""
            out.append(f"- {r.kind} {r.dispatch_key or ''} {where}{fn}")
    if f.providers:
        out.append("\nprovided by: " + "; ".join(f.providers))
    if f.kind == M.TRITON_KERNEL:
        out.append(f"\nparameters: `{', '.join(f.params)}`")
        if f.constexprs:
            out.append(f"constexpr: `{', '.join(f.constexprs)}`")
    if f.calls:
        out.append("\nlaunches: " + "; ".join(f"`{c}`" for c in f.calls))
    if chain.partial:
        out.append("\n*partial answer: the time budget ran out*")
    return "\n".join(out)
