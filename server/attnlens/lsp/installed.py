"""Kernels of installed packages for ``workspace/symbol``: Triton kernels and Python-registered torch ops.

The packages are those the workspace's chains reach (the top-level packages of the installed modules
the index has loaded, ``vllm`` first of all) plus the kernel modules the platform imports. Their files
are read as bytes and searched with a few patterns (``@triton.jit`` / ``@triton.autotune`` /
``@triton.heuristics`` / ``@jit`` over a ``def``, the core's ``Query.triton_decorator_pattern``;
``direct_register_custom_op(...)``, ``@torch.library.custom_op("ns::name")``): no summary is built
or kept, so a search over upstream vLLM (2,200 files) costs a tenth of a second once and no memory
beyond the symbols.
Memoised per set of package folders on the server's :class:`~attnlens.lsp.analysis.Analysis`;
installed files are not watched (a restart, which builds a new analysis, re-reads them).
"""

from __future__ import annotations

import os
import re

from ..query import Query
from .records import Sym

_PREFILTER = (b"jit", b"direct_register_custom_op(", b"library.custom_op")
_DEF = re.compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.M)
_DRCO = re.compile(rb"\bdirect_register_custom_op\(")
_OP_NAME = re.compile(rb"""op_name\s*=\s*['"](\w+)['"]|^\s*['"](\w+)['"]""")
_LIB_OP = re.compile(rb"""@(?:torch\.)?library\.custom_op\(\s*['"]([\w:.]+)['"]""")
SKIP_DIRS = ("tests", "benchmarks", "examples")


def _module_name(path: str, top_dir: str, top: str) -> str:
    rel = os.path.relpath(path, top_dir)[:-3].replace(os.sep, ".")
    rel = rel[: -len(".__init__")] if rel.endswith(".__init__") else "" if rel == "__init__" else rel
    return f"{top}.{rel}" if rel else top


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def scan_file(path: str, data: bytes, module: str, package: str, triton_deco=None) -> list[Sym]:
    """The kernels one installed file defines. ``triton_deco``: the core's Triton decorator pattern
    (``Query.triton_decorator_pattern``; asked here when not given)."""
    out: list[Sym] = []
    seen: set[int] = set()
    if triton_deco is None:
        triton_deco = Query.triton_decorator_pattern()
    for m in triton_deco.finditer(data):
        d = _DEF.search(data, m.end())
        if d is None or d.start() in seen:
            continue
        between = data[m.end():d.start()]
        if between.count(b"\n") > 40:  # not the decorator of that def
            continue
        seen.add(d.start())
        line = _line_of(data, d.start())
        col = d.start(1) - (data.rfind(b"\n", 0, d.start()) + 1)
        out.append(Sym(d.group(1).decode(), "triton", module, path, line, col, f"Triton kernel · installed {package}"))
    for m in _DRCO.finditer(data):
        window = data[m.end():m.end() + 400]
        n = _OP_NAME.search(window)
        if n is None:
            continue
        name = (n.group(1) or n.group(2)).decode()
        out.append(Sym(f"vllm::{name}" if package == "vllm" else name, "op", module, path, _line_of(data, m.start()), 0,
                       f"torch op (direct_register_custom_op) · installed {package}"))
    for m in _LIB_OP.finditer(data):
        out.append(Sym(m.group(1).decode(), "op", module, path, _line_of(data, m.start()), 0,
                       f"torch op (torch.library.custom_op) · installed {package}"))
    return out


def installed_kernels(a) -> list[Sym]:
    """Every kernel symbol of the installed packages ``Query.installed_kernel_packages`` names (memoised
    in ``a.installed_symbols``, per set of package folders, and each package's per folder: the set grows
    as chains load modules of more packages, and each new set re-read every folder, vllm's 2,200 files
    included: 280 ms of a workspace-symbol request, not yielding)."""
    q, memo = a.q, a.installed_symbols
    folders = tuple(q.installed_kernel_packages())
    hit = memo.get(folders)
    if hit is not None:
        return hit
    out: list[Sym] = []
    triton_deco = q.triton_decorator_pattern()
    for top, folder in folders:
        one = memo.get(("folder", top, folder))
        if one is None:
            one = []
            for path, data in q.installed_sources(folder, SKIP_DIRS):
                if any(p in data for p in _PREFILTER):
                    one.extend(scan_file(path, data, _module_name(path, folder, top), top, triton_deco))
            memo[("folder", top, folder)] = one
        out.extend(one)
    if len(memo) > 64:
        memo.clear()
    memo[folders] = out
    return out
