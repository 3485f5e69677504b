"""Hover content: an ordered list of *sections*, each a small provider.

A section provider gets a :class:`HoverContext` (worker thread, read-only use
of the analysis) and returns Markdown or None. Built-in sections: the chain
(the verdict, the final Python function's signature, the folded chain) and the
backend registry entry. The sections are per server (:class:`HoverSections`,
``AttnLensServer.hover_sections``): other parts of AttnLens (navigation hints,
probe evidence, drift) add theirs to the server's when they register their
feature; a failing provider is logged and skipped, never breaking the hover.

A hover exists only when there is something kernel-related to say
(``HoverContext.relevant``): a chain with a kernel, op, dummy or missing
package among its leaves, a backend class or part, or a class whose methods
reach kernels. Everything else (``torch.empty``, a local variable, plain
Python) gets no hover at all, so that next to Pylance no box is stacked on
every identifier.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote

from .. import model as M
from ..render import (chain_folded_markdown, has_kernel_story, leaf_paths, md_code, md_escape, md_link,
                      signature_markdown, unreadable_code, verdict_markdown)
from .analysis import Analysis, DefRef
from .convert import link

log = logging.getLogger(__name__)

COPY_COMMAND = "attnlens.copyMarkdown"  # client command: copies the whole tree (server command attnlens.markdown)


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
    defaults: object = None  # envflags.PlatformDefaults: env flags at their defaults
    signature: str | None = None  # Markdown of the final Python function (signature, first docstring line)
    copy_args: dict | None = None  # arguments of the Copy as Markdown link (None: no link)
    class_kernels: object = None  # lens.Counts of a hovered class's kernel call sites
    sections: tuple | None = None  # (order, name, provider) to render (None: the built-in sections)
    _related: tuple | None = field(default=None, repr=False)  # (chain, kernel_related(chain))

    def link(self, path: str, line: int | None) -> str:
        return link(path, line)

    def chain_related(self) -> bool:
        """Is the chain worth showing (:func:`kernel_related`)? Asked by the hover, :meth:`relevant` and the
        chain section: computed once per chain."""
        if self._related is None or self._related[0] is not self.chain:
            self._related = (self.chain, self.chain is not None and kernel_related(self.chain))
        return self._related[1]

    def relevant(self) -> bool:
        """Is there anything kernel-related to say here (else: no hover at all)?"""
        if self.chain_related():
            return True
        if self.symbol and self.analysis is not None and self.analysis.role_of(self.symbol) is not None:
            return True
        return bool(self.class_kernels)


def kernel_related(chain: M.Chain) -> bool:
    """A chain worth a hover: a partial one (the rest is coming), one with a kernel, op, dummy or missing package
    among its leaves, one that `attnlens sites` counts as a kernel call site (a name missing from the kernel code
    it imports from included), or one stopped by a file that cannot be read."""
    from ..query import is_kernel_chain

    return chain.partial or has_kernel_story(chain) or is_kernel_chain(chain) or unreadable_code(chain)


Section = Callable[[HoverContext], "str | None"]


class HoverSections:
    """The ordered hover sections of one server (the built-in ones to start with)."""

    def __init__(self, builtin: bool = True) -> None:
        self._items: tuple[tuple[int, str, Section], ...] = ()
        if builtin:
            for name, provider, order in BUILTIN_SECTIONS:
                self.register(name, provider, order)

    def register(self, name: str, provider: Section, order: int = 100) -> None:
        """Add (or replace) a section; lower ``order`` renders first."""
        items = [s for s in self._items if s[1] != name] + [(order, name, provider)]
        self._items = tuple(sorted(items, key=lambda t: (t[0], t[1])))

    def unregister(self, name: str) -> None:
        self._items = tuple(s for s in self._items if s[1] != name)

    def names(self) -> list[str]:
        return [name for _, name, _ in self._items]

    def snapshot(self) -> tuple:
        """The sections as they are now (an immutable tuple: what a worker job renders)."""
        return self._items


def render(ctx: HoverContext) -> str | None:
    if not ctx.relevant():
        return None
    parts = []
    for _, name, provider in ctx.sections if ctx.sections is not None else HoverSections().snapshot():
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


def copy_link(args: dict | None) -> str | None:
    """``[Copy as Markdown](command:attnlens.copyMarkdown?…)``: the client copies the whole tree."""
    if args is None:
        return None
    target = f"command:{COPY_COMMAND}?{quote(json.dumps([args]))}"
    return md_link("Copy as Markdown", target, "Copy the whole tree (every branch and hop) as Markdown")


# -- built-in sections ---------------------------------------------------------


def chain_section(ctx: HoverContext) -> str | None:
    """The verdict (one ``Runs:`` line per leaf that can run), the final Python function, the folded chain."""
    ch = ctx.chain
    if not ctx.chain_related():
        return None
    lines = verdict_markdown(ch, ctx.link, ctx.defaults)
    if ch.partial:
        lines.append("*partial answer: the time budget was reached; hover again for the whole tree*")
    out = ["  \n".join(lines)]  # hard line breaks: one verdict per line
    if ctx.signature:
        out.append(ctx.signature)
    live = [lp for lp in leaf_paths(ch) if lp.leaf.reachable is not False]
    if len(live) == 1 and live[0].final.kind == M.TRITON_KERNEL:  # what the launch must pass as compile-time constants
        ce = live[0].final.constexprs
        out.append(f"constexpr: {md_code(', '.join(ce))}" if ce else "constexpr: none")
    tail = [chain_folded_markdown(ch, ctx.link)]
    cl = copy_link(ctx.copy_args)
    if cl:
        tail.append(cl)
    out.append("  \n".join(tail))
    return "\n\n".join(out)


def signature_of(a: Analysis, path: str, line: int) -> str | None:
    """Markdown of the Python function whose ``def`` is at ``path:line`` (signature, first docstring line)."""
    mod = a.module(path)
    if mod is None:
        return None
    for q, f in mod.summary.functions.items():
        if f.deco_line <= line <= f.line:
            return signature_markdown(f.name, f.params, f.docstring, f.is_async)
    return None


def final_python_function(a: Analysis, chain: M.Chain) -> tuple[str, int] | None:
    """(path, def line) of the last Python function the path to the first leaf that can run goes through: the
    leaf itself when it is a Python def (a Triton kernel, a dummy, a pure-PyTorch function), else the
    function whose body makes the last call on the way (the wrapper around a torch op)."""
    lps = leaf_paths(chain)
    live = [x for x in lps if x.leaf.reachable is not False]
    fk = chain.final.fork
    if fk is not None and fk.path and fk.line and len({(x.final.kind, x.final.symbol) for x in live}) > 1:
        d = a.defref_at_line(fk.path, fk.line)  # several leaves: the function where they part
        if d is not None and d.kind != "class":
            return d.path, d.line
    lp = live[0] if live else lps[0] if lps else None
    if lp is None:
        return None
    f = lp.final
    if f.kind in (M.PYTHON_FUNCTION, M.TRITON_KERNEL, M.DUMMY) and f.path and f.line and f.path.endswith(".py"):
        return f.path, f.line
    for i in range(len(lp.hops) - 1, 0, -1):  # hop 0 is the call under the cursor
        h = lp.hops[i]
        if h.kind in (M.HopKind.CALL, M.HopKind.TRITON_LAUNCH) and h.path and h.line and h.path.endswith(".py"):
            d = a.enclosing_def(h.path, h.line)
            if d is not None:
                return d.path, d.line
    return None


def backend_section(ctx: HoverContext) -> str | None:
    """A backend class or part: what it is, its parts, and the kernels its call sites reach (grouped)."""
    from .kernels import backend_summary, class_summary

    if ctx.symbol:
        a = ctx.analysis
        a.backends(allow_stale=True)  # computed once per index generation (at indexing)
        role = a.role_of(ctx.symbol)
        if role is not None:
            text = backend_summary(a, role, ctx.link, ctx.max_kernels)
            if not a.backends_fresh():
                ctx.cacheable = False
                text += "  \n*Registry from the previous index state; refreshing in the background.*"
            return text
    if ctx.class_kernels and ctx.definition is not None:
        return class_summary(ctx.definition, ctx.class_kernels, ctx.link)
    return None


def upstream_section(ctx: HoverContext) -> str | None:
    up = ctx.chain.upstream if ctx.chain is not None else None
    if not up:
        return None
    items = ", ".join(f"{k}: {md_code(str(v))}" for k, v in up.items() if v is not None)
    return f"Upstream counterpart: {items}" if items else None


def notes_section(ctx: HoverContext) -> str | None:
    return "\n".join(f"*{md_escape(n)}*" for n in ctx.notes) if ctx.notes else None


BUILTIN_SECTIONS = (("chain", chain_section, 10), ("backend", backend_section, 20), ("upstream", upstream_section, 30),
                    ("notes", notes_section, 1000))
