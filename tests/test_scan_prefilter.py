"""Whole-workspace scans that summarise only the modules whose text can matter (registrations, the
never-selected set, the registry's carry inputs), and the dependency a rules check records for the
modules such a scan left out. On upstream vLLM opened as the workspace (2,234 modules) the first hover
summarised every module for these (16-20 s); the answers must be the same as with every module loaded."""

from __future__ import annotations

import os
import shutil
import sys
import time

from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, have_vllm

import pytest

pytestmark = pytest.mark.skipif(not have_vllm(), reason="needs vllm installed")

FILLER = "def helper_{i}(x):\n    return x + {i}\n\n\nclass Thing{i}:\n    def run(self, y):\n        return helper_{i}(y)\n"


def _workspace_with_filler(tmp_path, n=30):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root)
    filler = root / "mini_metax" / "filler"
    filler.mkdir()
    (filler / "__init__.py").write_text("")
    for i in range(n):
        (filler / f"mod{i}.py").write_text(FILLER.format(i=i))
    return root


def test_never_selected_reads_no_module_that_cannot_matter(tmp_path):
    root = _workspace_with_filler(tmp_path)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c1")
    never = ws.never_selected()
    backends = [(e.kind, e.name, e.cls) for e in ws.backends(with_call_sites=False)]
    loaded = {n for n in ws.index.ws_files if ws.index.is_loaded(n)}
    assert not {n for n in loaded if n.startswith("mini_metax.filler.")}
    assert backends
    # the same answers when every module is loaded first
    full = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c2")
    for n in sorted(full.index.ws_files):
        full.index.module(n)
    assert full.never_selected() == never
    assert [(e.kind, e.name, e.cls) for e in full.backends(with_call_sites=False)] == backends


def test_never_selected_memo_records_modules_loaded_later(tmp_path):
    """The never-selected memo keeps the selection facts of loaded modules; a module loaded after it was
    computed is recorded on the next call, so a body edit of that module keeps the memo."""
    root = _workspace_with_filler(tmp_path, n=3)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c")
    never = ws.never_selected()
    name = "mini_metax.filler.mod1"
    assert not ws.index.is_loaded(name)
    ws.index.module(name)
    assert ws.never_selected() == never
    memo = ws._never_memo
    path = str(root / "mini_metax" / "filler" / "mod1.py")
    assert os.path.realpath(path) in memo[2]
    ws.index.set_overlay(path, FILLER.format(i=1).replace("x + 1", "x + 2"))
    assert ws.never_selected() == never
    assert ws._never_memo[1] is memo[1]  # not recomputed


def test_a_text_matching_scan_records_the_modules_it_left_out(tmp_path):
    """A rules check that reads the registry depends on every module that could register a backend: the
    modules a text-matching scan leaves out are recorded as "still does not match", and writing a match
    into one of them makes the recorded dependencies stale."""
    from attnlens.registry import REGISTRAR_TEXT
    from attnlens.rules.engine import Engine, _merge_deps, _Recorder

    root = _workspace_with_filler(tmp_path, n=3)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c")
    eng = Engine(ws)
    with _Recorder(ws.index) as (hard, soft):
        got = [m.name for m in ws.index.workspace_modules_matching(REGISTRAR_TEXT)]
    assert got and all("filler" not in n for n in got)
    deps = _merge_deps(hard, soft)
    assert deps["mini_metax.filler.mod2"][0] == "s" and set(got) <= set(hard)
    assert eng._deps_fresh(deps)
    p = root / "mini_metax" / "filler" / "mod2.py"
    time.sleep(0.01)
    p.write_text(FILLER.format(i=2) + "\n# register_x_backend(...) would register here\n")
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 10_000_000))
    assert not Engine(ws)._deps_fresh(deps)
