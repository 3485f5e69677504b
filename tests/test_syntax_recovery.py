"""A syntax error blanks the broken statement only (pyrecover): the rest of the file keeps its
summary, the error is reported with its position, and the answers depend on the text alone."""

from __future__ import annotations

import ast
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from attnlens.cache import Cache
from attnlens.index import Index
from attnlens.pyindex import parse_source, summarize
from attnlens.pyrecover import MAX_ROUNDS, SyntaxIssue, parse_tolerant
from attnlens.target import TargetInfo
from tests.helpers import EXAMPLE

# the shape of a backend file: conditional imports, a class with methods, module functions, a
# kernel launch and a torch op call (written for this test)
SOURCE = '''\
import torch

try:
    from fastpkg import fused_kernel
except ImportError:
    fused_kernel = None

from .ops import write_cache, launch_grid


class DemoImpl:
    scale = 1.0

    def forward(self, q, k, v, cache):
        out = torch.empty_like(q)
        write_cache(k, v, cache)
        torch.ops._demo_C.paged_attention(out, q, cache, self.scale)
        return out

    def prepare(self, meta):
        n = meta.num_tokens
        blocks = meta.block_table[:n]
        launch_grid[(n,)](blocks, BLOCK=64)
        return blocks

    def finish(self, out):
        if fused_kernel is not None:
            return fused_kernel(out)
        return out


def helper(x, y):
    total = x + y
    return torch.ops._demo_C.combine(total)


def other(a):
    return helper(a, a)
'''

PREPARE_LINE = "        blocks = meta.block_table[:n]"


def _view(s) -> dict:
    """Every function and class of a summary, comparable (calls resolved from their indices)."""
    out = {}
    for q, f in s.functions.items():
        d = asdict(f)
        d["calls"] = [asdict(s.calls[i]) for i in f.calls]
        out["def " + q] = d
    for q, c in s.classes.items():
        out["class " + q] = asdict(c)
    return out


def _broken(old: str, new: str) -> str:
    assert SOURCE.count(old) == 1, old
    text = SOURCE.replace(old, new)
    with pytest.raises(SyntaxError):
        ast.parse(text)
    return text


def _cpython_error(text: str) -> tuple[int, int, str]:
    """(line, 0-based column, message) of the error CPython reports (its wording varies between
    Python versions: the tests compare with it, not with a copy)."""
    try:
        ast.parse(text)
    except SyntaxError as e:
        return e.lineno, e.offset - 1, e.msg
    raise AssertionError("no syntax error")


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if needle in line)


def test_stray_paren_mid_line_keeps_every_other_function_and_class():
    good = summarize(SOURCE, "demo.py", "")
    text = _broken(PREPARE_LINE, "        blocks = meta.block_t)able[:n]")
    s = summarize(text, "demo.py", "")
    line = _line_of(text, "block_t)able")
    assert s.error is None
    assert s.syntax_errors == (SyntaxIssue(line, 29, line, 30, _cpython_error(text)[2]),)
    assert _cpython_error(text)[:2] == (line, 29)
    a, b = _view(good), _view(s)
    assert sorted(a) == sorted(b)
    for key in a:
        if key in ("def DemoImpl.prepare", "class DemoImpl"):
            continue
        assert b[key] == a[key], key
    # the broken method keeps its other statements: only the broken one is gone
    prep = s.functions["DemoImpl.prepare"]
    assert [c.func for c in s.calls_in("DemoImpl.prepare")] == ["launch_grid"]
    assert (prep.line, prep.end_line) == (good.functions["DemoImpl.prepare"].line, good.functions["DemoImpl.prepare"].end_line)
    assert s.classes["DemoImpl"].methods == good.classes["DemoImpl"].methods
    # module bindings (the guarded import included) are untouched
    assert s.bindings == good.bindings


@pytest.mark.parametrize("old,new,kept_calls", [
    # typing a call: an unclosed bracket (CPython points at its opener)
    (PREPARE_LINE, "        blocks = meta.block_table[:n](", ["launch_grid"]),
    # typing an attribute: `ops.` at the end of a line
    (PREPARE_LINE, "        blocks = meta.block_table[:n] ops.", ["launch_grid"]),
    # a broken def header: the header is replaced, the body stays analysed
    ("    def prepare(self, meta):", "    def prepare(self meta):", ["launch_grid"]),
    # a missing colon
    ("    def prepare(self, meta):", "    def prepare(self, meta)", ["launch_grid"]),
    # an unterminated string: the rest of the file is not swallowed
    (PREPARE_LINE, '        blocks = "meta.block_table[:n]', ["launch_grid"]),
])
def test_typing_errors_keep_the_rest(old, new, kept_calls):
    good = summarize(SOURCE, "demo.py", "")
    text = _broken(old, new)
    s = summarize(text, "demo.py", "")
    line = _line_of(text, new.strip())
    assert s.error is None
    assert [(i.line, i.col, i.message) for i in s.syntax_errors] == [_cpython_error(text)]
    assert s.syntax_errors[0].line == line
    assert [c.func for c in s.calls_in("DemoImpl.prepare")] == kept_calls
    a, b = _view(good), _view(s)
    for key in ("def DemoImpl.forward", "def DemoImpl.finish", "def helper", "def other"):
        assert b[key] == a[key], key


def test_def_without_a_body_does_not_take_the_next_one():
    text = SOURCE.replace("def other(a):\n", "def unfinished(a):\n\n\ndef other(a):\n")
    s = summarize(text, "demo.py", "")
    assert [(i.line, i.col, i.message) for i in s.syntax_errors] == [_cpython_error(text)]
    assert s.syntax_errors[0].line == _line_of(text, "def other")  # where CPython notices it
    assert "unfinished" not in s.functions
    assert [c.func for c in s.calls_in("other")] == ["helper"]


def test_two_independent_errors_are_both_reported():
    text = _broken("    total = x + y", "    total = x + )y")
    text = text.replace("        out = torch.empty_like(q)", "        out = torch.empty_like(q))")
    s = summarize(text, "demo.py", "")
    first = _cpython_error(text)
    second = _cpython_error(text.replace("empty_like(q))", "empty_like(q)"))
    assert [(i.line, i.col, i.message) for i in s.syntax_errors] == [first, second]
    assert (first[0], second[0]) == (_line_of(text, "empty_like(q))"), _line_of(text, "x + )y"))
    assert [c.func for c in s.calls_in("helper")] == ["torch.ops._demo_C.combine"]
    assert [c.func for c in s.calls_in("DemoImpl.forward")] == ["write_cache", "torch.ops._demo_C.paged_attention"]


def test_blanking_keeps_lines_and_columns():
    text = _broken(PREPARE_LINE, "        blocks = meta.block_t)able[:n]")
    p = parse_tolerant(text)
    assert len(p.text) == len(text) and p.text.count("\n") == text.count("\n")
    line = _line_of(text, "block_t)able")
    assert p.blanked == ((line, line),)
    assert p.text.split("\n")[line - 1] == "        pass" + " " * (len(PREPARE_LINE) + 1 - len("        pass"))
    assert [ln for ln in p.text.split("\n") if ln.strip() != "pass"] == [
        ln for ln in text.split("\n") if "block_t)able" not in ln]


def test_no_error_costs_nothing_and_hopeless_text_still_raises():
    p = parse_tolerant(SOURCE)
    assert p.text is SOURCE and p.errors == () and p.blanked == ()
    hopeless = "".join(f"print 'line {i}'\n" for i in range(MAX_ROUNDS + 5))
    with pytest.raises(SyntaxError):
        parse_tolerant(hopeless)
    s = summarize(hopeless, "py2.py", "")
    line, col, msg = _cpython_error(hopeless)
    assert s.error == f"syntax error: {msg}"
    assert [(i.line, i.col, i.message) for i in s.syntax_errors] == [(line, col, msg)] and line == 1


def test_summary_and_rule_facts_share_the_recovered_parse():
    text = _broken(PREPARE_LINE, "        blocks = meta.block_t)able[:n]")
    parse_source.cache_clear()
    p = parse_source(text)
    summarize(text, "demo.py", "")
    assert parse_source(text) is p  # one recovery for the summary and the rules' facts


def _index(root: Path, cache: Path) -> Index:
    target = TargetInfo(python=sys.executable, sys_path=[], stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    return Index(root, target, Cache(cache))


def test_answers_depend_on_the_text_not_on_the_edits(tmp_path):
    """The broken text as an unsaved buffer over the clean file, and the same text on disk opened
    fresh: the same summary."""
    broken = _broken(PREPARE_LINE, "        blocks = meta.block_t)able[:n]")
    a = tmp_path / "a" / "demo"
    a.mkdir(parents=True)
    (a / "__init__.py").write_text("")
    (a / "impl.py").write_text(SOURCE)
    idx = _index(tmp_path / "a", tmp_path / "cache-a")
    assert idx.module("demo.impl").summary.syntax_errors == ()
    idx.set_overlay(str(a / "impl.py"), SOURCE.replace("return out\n", "return out)\n", 1))  # another broken version first
    idx.set_overlay(str(a / "impl.py"), broken)
    edited = idx.module("demo.impl").summary
    b = tmp_path / "b" / "demo"
    b.mkdir(parents=True)
    (b / "__init__.py").write_text("")
    (b / "impl.py").write_text(broken)
    fresh = _index(tmp_path / "b", tmp_path / "cache-b").module("demo.impl").summary
    assert fresh.syntax_errors == edited.syntax_errors and fresh.syntax_errors
    assert _view(fresh) == _view(edited)
    assert fresh.bindings == edited.bindings and fresh.calls == edited.calls


def test_cached_summary_keeps_the_syntax_errors(tmp_path):
    broken = _broken(PREPARE_LINE, "        blocks = meta.block_t)able[:n]")
    pkg = tmp_path / "ws" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "impl.py").write_text(broken)
    first = _index(tmp_path / "ws", tmp_path / "cache").module("demo.impl").summary
    again = _index(tmp_path / "ws", tmp_path / "cache").module("demo.impl").summary  # from the pickle
    assert again is not first and again.syntax_errors == first.syntax_errors
    assert [(i.line, i.col, i.message) for i in again.syntax_errors] == [_cpython_error(broken)]


def test_unsaved_new_files_are_modules(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE / "mini_metax", root / "mini_metax")
    idx = _index(root, tmp_path / "cache")
    new = root / "mini_metax" / "attention" / "backends" / "brand_new.py"
    assert idx.module_for_path(str(new)) is None
    idx.set_overlay(str(new), "def go(x):\n    return x\n")
    m = idx.module_for_path(str(new))
    assert (m.name, m.workspace, list(m.summary.functions)) == ("mini_metax.attention.backends.brand_new", True, ["go"])
    assert idx.ws_files["mini_metax.attention.backends.brand_new"] == str(new)
    idx.set_overlay(str(new), "def go(x):\n    return x\n\n\ndef more():\n    pass\n")
    assert list(idx.module_for_path(str(new)).summary.functions) == ["go", "more"]
    # a buffer outside every package: a module of its own, not a workspace module
    untitled = "/attnlens-untitled/Untitled-1.py"
    idx.set_overlay(untitled, "def scratch():\n    pass\n")
    u = idx.module_for_path(untitled)
    assert u.name.startswith("_buffer_Untitled_1_") and not u.workspace and list(u.summary.functions) == ["scratch"]
    assert u.name not in idx.ws_files
    # closed without saving: gone
    idx.set_overlay(str(new), None)
    idx.set_overlay(untitled, None)
    assert idx.module_for_path(str(new)) is None and idx.module_for_path(untitled) is None
    assert "mini_metax.attention.backends.brand_new" not in idx.ws_files
    # saved, then closed: found on disk as a normal module
    idx.set_overlay(str(new), "def go(x):\n    return x\n")
    new.write_text("def go(x):\n    return x\n")
    idx.set_overlay(str(new), None)
    m = idx.module_for_path(str(new))
    assert m.name == "mini_metax.attention.backends.brand_new" and list(m.summary.functions) == ["go"]
