"""The workspace symbol table and file outlines.

Mixed into :class:`~attnlens.lsp.analysis.Analysis`; worker thread only.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Iterator

from .records import DefRef, Sym

log = logging.getLogger(__name__)


class SymbolsMixin:
    # -- symbols ---------------------------------------------------------------
    def symbols(self) -> list[Sym]:
        gen = self.generation
        if self._symbols is not None and self._symbols[0] == gen:
            return self._symbols[1]
        for _ in self.symbol_steps(None):
            pass
        out: list[Sym] = []
        for name in sorted(self._sym_parts):
            for dotted, sym in self._sym_parts[name]:
                role = self.role_of(dotted) if dotted is not None else None
                out.append(replace(sym, detail=role[2]) if role else sym)
        for e in (self._backends[1] if self._backends else []):
            if e.path and e.line:
                out.append(Sym(e.name, "backend", e.cls, e.path, e.line, 0, f"{e.kind} backend"))
        out.extend(self._cpp_ops())
        self._symbols = (gen, out)
        return out

    def symbol_steps(self, budget_s: float | None) -> Iterator[int]:
        """Bring each workspace module's symbols up to date (the modules changed since the last time, new ones;
        all after a full refresh), yielding the modules done about every ``budget_s`` (None: no yield). On a large
        workspace a module not loaded yet is read without being kept (``Query.scan_module``)."""
        gen = self.generation
        names = self.q.workspace_module_names()
        parts = self._sym_parts
        changed = (self.q.workspace_names_changed_since(self._sym_parts_gen)
                   if self._sym_parts_gen is not None else None)
        keep = set(names)
        for gone in [n for n in parts if n not in keep]:
            del parts[gone]
        t0 = time.perf_counter()
        for i, name in enumerate(names, 1):
            if name in parts and changed is not None and name not in changed:
                continue
            mod = self.q.scan_module(name)
            parts[name] = self._module_symbols(mod) if mod is not None else []
            if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                yield i
                t0 = time.perf_counter()
        self._sym_parts_gen = gen

    def _module_symbols(self, mod) -> list[tuple[str | None, Sym]]:
        """(the class's dotted name, or None; its symbol without a role) of each definition of ``mod``."""
        out: list[tuple[str | None, Sym]] = []
        s = mod.summary
        for q, c in s.classes.items():
            out.append((f"{mod.name}.{q}", Sym(c.name, "class", _container(mod.name, q), mod.path, c.line, c.col, "")))
        for q, f in s.functions.items():
            kind = self._func_kind(f)
            out.append((None, Sym(f.name, kind, _container(mod.name, q), mod.path, f.line, f.col,
                                  "Triton kernel" if kind == "triton" else "")))
        out.extend((None, sym) for sym in self._python_ops(mod))
        return out

    def _python_ops(self, mod) -> list[Sym]:
        out = []
        s = mod.summary
        for cs in s.calls:
            if cs.func.rpartition(".")[2] == "direct_register_custom_op":
                name = next((v for k, v in cs.kw_texts if k == "op_name"), None)
                name = _literal(name) or (cs.str_args[0] if cs.str_args and cs.str_args[0] else None)
                if name:
                    out.append(Sym(f"vllm::{name}", "op", "torch op (direct_register_custom_op)", mod.path, cs.line, cs.col))
        for f in s.functions.values():
            for d in f.decorators:
                if d.func.endswith("library.custom_op") and d.str_args and d.str_args[0]:
                    out.append(Sym(d.str_args[0], "op", "torch op (torch.library.custom_op)", mod.path, f.line, f.col))
        return out

    def _cpp_ops(self) -> list[Sym]:
        return [Sym(op, "op", "torch op (C++)", path, line, 0, schema) for op, path, line, schema in self.q.cpp_op_symbols()]

    def outline(self, path: str) -> list[tuple[DefRef, list]]:
        """Classes/functions of a file as a tree: [(DefRef, children)]."""
        mod = self.module(path)
        if mod is None:
            return []
        s = mod.summary
        nodes: dict[str, tuple[DefRef, list]] = {}
        for q, c in s.classes.items():
            nodes[q] = (self._defref(mod, q, c, "class"), [])
        for q, f in s.functions.items():
            nodes[q] = (self._defref(mod, q, f, self._func_kind(f)), [])
        roots = []
        for q in sorted(nodes, key=lambda k: (nodes[k][0].deco_line, k)):
            parent = q.rpartition(".")[0]
            # nested functions have qualnames like "f.<locals>.g" in some summaries
            parent = parent.replace(".<locals>", "")
            while parent and parent not in nodes:
                parent = parent.rpartition(".")[0]
            (nodes[parent][1] if parent else roots).append(nodes[q])
        return roots


def _container(module: str, qual: str) -> str:
    parent = qual.rpartition(".")[0]
    return f"{module}.{parent}" if parent else module


def _literal(text: str | None) -> str | None:
    if not text or len(text) < 2 or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    return text[1:-1]


def match_symbols(symbols: list[Sym], query: str, limit: int = 200) -> list[Sym]:
    """Rank symbols for a workspace/symbol query: exact, prefix, substring, subsequence."""
    q = query.strip().lower()
    if not q:
        return symbols[:limit]
    scored = []
    for s in symbols:
        name = s.name.lower()
        if name == q:
            rank = 0
        elif name.startswith(q):
            rank = 1
        elif q in name:
            rank = 2
        elif q in f"{s.container}.{s.name}".lower():
            rank = 3
        elif _subsequence(q, name):
            rank = 4
        else:
            continue
        # kernels and backends first among equals: they are what this tool is about
        kind_rank = {"backend": 0, "op": 1, "triton": 1}.get(s.kind, 2)
        scored.append((rank, kind_rank, len(s.name), s.name, s))
    scored.sort(key=lambda t: t[:4])
    return [t[4] for t in scored[:limit]]


def _subsequence(q: str, name: str) -> bool:
    it = iter(name)
    return all(ch in it for ch in q)
