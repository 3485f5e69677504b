"""The editor's two "is this a Triton kernel" checks go through the core (issue 12): the outline's and the
symbols' kind (``Analysis._func_kind``, was ``records.is_triton``) asks ``Query.triton_kernel_decorated``, and
the installed packages' scan (``installed.scan_file``, was a regex of its own) uses
``Query.triton_decorator_pattern``; both are made of ``pyindex.TRITON_JIT_NAMES`` / ``TRITON_WRAPPERS``. The
answers are those of the two checks they replace (kept here as the reference), on every spelling below and on
every def and file of the examples; ``lsp/`` names no Triton decorator itself."""

from __future__ import annotations

import ast
import re

import pytest

from attnlens.lsp.installed import scan_file
from attnlens.pyindex import summarize
from attnlens.query import Query
from tests.helpers import EXAMPLE, REPO

LSP = REPO / "server" / "attnlens" / "lsp"

# the two checks as they were in lsp/ (records.is_triton, installed._TRITON_DECO): the answers to keep
_OLD_NAMES = ("triton.jit", "jit", "triton.autotune", "triton.heuristics", "autotune", "heuristics")
_OLD_DECO = re.compile(rb"^[ \t]*@(?:triton\.)?(?:jit|autotune|heuristics)\b", re.M)


def _old_is_triton(decorators) -> bool:
    return any(d.func in _OLD_NAMES or d.func.startswith("triton.") for d in decorators)


SPELLINGS = [
    "@triton.jit", "@triton.jit(do_not_specialize=['n'])", "@jit", "@jit()", "@autotune(configs=[], key=[])",
    "@heuristics({})", "@triton.autotune(configs=[], key=[])", "@triton.heuristics({'B': lambda a: 1})",
    "@triton.constexpr_function", "@triton.testing.perf_report([])", "@cute.jit", "@gluon.jit", "@tilelang.jit",
    "@torch.jit.script", "@numba.jit", "@staticmethod\n@cute.jit", "@functools.cache", "@tl.jit",
    "@triton.jit\n@functools.wraps(f)", "@registry['x']", "@jitter", "@autotuned",
]


def _defs(source: str):
    return summarize(source, "/x/m.py", "sha").functions.values()


@pytest.mark.parametrize("deco", SPELLINGS)
def test_the_kind_of_a_def_is_the_one_it_was(deco):
    src = f"{deco}\ndef kernel(x):\n    pass\n"
    (f,) = _defs(src)
    assert Query.triton_kernel_decorated(f.decorators) == _old_is_triton(f.decorators), [d.func for d in f.decorators]
    got = [s.name for s in scan_file("/x/m.py", src.encode(), "m", "pkg")]
    want = ["kernel"] if _OLD_DECO.search(src.encode()) else []
    assert got == want


def test_qualified_names_of_other_packages_are_not_triton():
    """What the core's name-only check (``triton_decorated``, which the resolver narrows by where the decorator
    comes from) would call a kernel: ``@cute.jit`` (753 defs of CUTLASS DSL in upstream vLLM) is not one here."""
    (f,) = _defs("@cute.jit\ndef k():\n    pass\n")
    assert not Query.triton_kernel_decorated(f.decorators)
    (g,) = _defs("import triton\n@triton.jit\ndef k():\n    pass\n")
    assert Query.triton_kernel_decorated(g.decorators)


def test_the_examples_keep_their_answers():
    files = sorted(p for root in (EXAMPLE.parent, REPO / "tests" / "fixtures") for p in root.rglob("*.py"))
    assert len(files) > 30
    kernels = 0
    for p in files:
        data = p.read_bytes()
        try:
            fns = _defs(data.decode("utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            fns = []
        for f in fns:
            assert Query.triton_kernel_decorated(f.decorators) == _old_is_triton(f.decorators), (p, f.name)
            kernels += _old_is_triton(f.decorators)
        assert [m.span() for m in Query.triton_decorator_pattern().finditer(data)] == \
            [m.span() for m in _OLD_DECO.finditer(data)], p
    assert kernels >= 5


def _code_strings(tree: ast.Module) -> list[tuple[int, str]]:
    """String and bytes constants of a module that are not docstrings."""
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(n.lineno, n.value if isinstance(n.value, str) else n.value.decode("latin-1")) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)) and id(n) not in docs]


def test_the_language_server_names_no_triton_decorator_of_its_own():
    found = []
    for py in sorted(LSP.rglob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"), str(py))
        rel = py.relative_to(LSP).as_posix()
        found += [f"{rel}:{ln} {s!r}" for ln, s in _code_strings(tree)
                  if re.search(r"autotune|heuristics|triton\.jit|\(\?:jit", s)]
        found += [f"{rel}:{n.lineno} def {n.name}" for n in ast.walk(tree)
                  if isinstance(n, ast.FunctionDef) and "triton" in n.name.lower()]
    assert found == []
