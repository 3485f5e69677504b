"""The server's workspace symbol table is kept per module (issue 13: upstream vLLM's 2,234 summaries, all kept by
the background indexing to build it, were 230 MB of the server's memory).

* after an edit only the edited module's symbols are read again, and the table equals a fresh server's;
* above ``Index.SCAN_RETAIN_MAX_MODULES`` workspace modules the table reads the summaries it has not loaded without keeping
  them: the same table, and no workspace module is left loaded by it."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

from attnlens.lsp.analysis import Analysis
from attnlens.workspace import Workspace

from .helpers import EXAMPLE


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _analysis(root: Path, cache: Path) -> Analysis:
    return Analysis(Workspace(root, python=sys.executable, cache_dir=cache))


def _indexed(root: Path, cache: Path) -> Analysis:
    """A server's analysis after its background indexing (the backends' roles are known then)."""
    a = _analysis(root, cache)
    for _ in a.indexing_steps():
        pass
    return a


def _table(a: Analysis) -> list[tuple]:
    return [dataclasses.astuple(s) for s in a.symbols()]


def _reference(a: Analysis) -> list[tuple]:
    """The table as the server built it before: every workspace module loaded and walked, roles looked up."""
    out = []
    for mod in a.q.workspace_modules():
        for dotted, sym in a._module_symbols(mod):
            role = a.role_of(dotted) if dotted else None
            out.append(dataclasses.astuple(dataclasses.replace(sym, detail=role[2]) if role else sym))
    for e in a.backends():
        if e.path and e.line:
            out.append((e.name, "backend", e.cls, e.path, e.line, 0, f"{e.kind} backend"))
    out.extend(dataclasses.astuple(s) for s in a._cpp_ops())
    return out


def test_an_edit_reads_only_the_edited_modules_symbols_again(tmp_path):
    root = _copy(tmp_path)
    a = _indexed(root, tmp_path / "c1")
    before = _table(a)
    assert before == _reference(a)
    names = a.q.workspace_module_names()
    assert len(before) > 100 and len(names) > 10

    target = next(p for p in sorted(root.rglob("*.py")) if "def " in p.read_text())
    text = target.read_text() + "\n\nclass AddedWhileEditing:\n    def added_method(self):\n        return 1\n"
    a.q.set_overlay(str(target), text)
    read = []
    real = a._module_symbols
    a._module_symbols = lambda mod: (read.append(mod.name), real(mod))[1]
    after = _table(a)
    assert read == [a.q.module_for_path(str(target)).name]  # only the edited module
    assert after == _reference(a)
    added = [s for s in after if s[0] in ("AddedWhileEditing", "added_method")]
    assert [(s[0], s[1], s[3]) for s in added] == [("AddedWhileEditing", "class", str(target)),
                                                    ("added_method", "method", str(target))]

    # the same text saved to disk and read by a fresh server: the same table
    target.write_text(text)
    fresh = _indexed(root, tmp_path / "c2")
    assert _table(fresh) == after
    read.clear()
    assert _table(a) == after and read == []  # nothing changed since: the table is kept


def test_a_large_workspace_reads_symbols_without_keeping_the_summaries(tmp_path):
    root = _copy(tmp_path)
    want = _table(_indexed(root, tmp_path / "c1"))

    a = _analysis(root, tmp_path / "c2")
    a.ws.index.SCAN_RETAIN_MAX_MODULES = 0  # every workspace is "large"
    names = a.q.workspace_module_names()
    for _ in a.symbol_steps(0.0):
        pass
    assert not [n for n in names if a.q.is_loaded(n)]  # read for the table, none kept
    for _ in a.indexing_steps():  # the whole indexing: the registry's steps load what they read, no more
        pass
    assert _table(a) == want
    assert len([n for n in names if a.q.is_loaded(n)]) < len(names)
    # the summaries were cached on the way: a later request reads them from the cache folder
    b = _analysis(root, tmp_path / "c2")
    assert b.q.module(names[0]) is not None
