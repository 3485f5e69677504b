"""One answer per position, whichever door asks: `sites` (after a whole census), `trace` (a fresh
workspace, one position) and the editor's implementation targets give the same leaves."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")

ROOTS = [EXAMPLE, EXAMPLE.parent / "tiny-npu"]


def _leaves(chain):
    return json.dumps([lf.to_json() for lf in chain.leaves()], sort_keys=True)


@pytest.mark.parametrize("root", ROOTS, ids=lambda p: p.name)
def test_sites_and_trace_agree_on_every_kernel_call_site(root, tmp_path):
    census = Workspace(root, python=sys.executable, cache_dir=tmp_path / "a")
    sites = census.kernel_sites()
    assert len(sites) > 20
    fresh = Workspace(root, python=sys.executable, cache_dir=tmp_path / "b")
    differ = []
    for s in sites:
        one = fresh.trace_at(s.path, s.line, s.col)  # what `attnlens trace FILE:LINE:COL` answers
        if one is None or _leaves(one) != _leaves(s.chain):
            differ.append(f"{s.path}:{s.line} {s.call}")
    assert differ == []


def test_installed_modules_never_count_as_workspace(tmp_path):
    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "c")
    loc = ws.index.locate("vllm")
    assert not ws.index.is_workspace_path(loc.path)
    ws.index.module_for_path(loc.path)  # learns the installed path's module name
    assert not ws.index.is_workspace_path(loc.path)


@pytest.mark.parametrize("root", ROOTS, ids=lambda p: p.name)
def test_editor_and_cli_agree_on_every_kernel_call_site(root, tmp_path):
    """Issue 16 item 1: `attnlens trace --json` (the CLI's own code path), the chain the hover renders and
    the Go to Implementation targets give the same leaves at every kernel call site (bench/agree.py, which
    also runs on a sample of the real checkout: docs/vscode.md)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("agree", Path(__file__).resolve().parents[1] / "bench" / "agree.py")
    agree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agree)
    census = Workspace(root, python=sys.executable, cache_dir=tmp_path / "census")
    sites = census.kernel_sites()
    defs = agree.definition_positions(census)  # issue 12's acceptance: every `def` too
    census.close()
    rows = agree.compare(str(root), sys.executable, sites + defs + _readme_positions(root), str(tmp_path / "c"))
    assert len(rows) > 20 + len(defs) and len(defs) > 20
    assert [r for r in rows if not (r["leaves_agree"] and r["impl_agree"])] == []
    # the comparison sees the leaves: every row has some, and the torch-op rows are checked at their C++ function
    assert all(r["cli"] for r in rows[:len(sites)])
    assert any(k == "torch_op" for r in rows for k, _s, _r in r["cli"])


def _readme_positions(root: Path) -> list:
    """The call texts of the example's README table ("| kind | `file` | `call` |"), at their first occurrence."""
    import re
    from types import SimpleNamespace

    out = []
    readme = root / "README.md"
    for line in readme.read_text(encoding="utf-8").splitlines() if readme.is_file() else []:
        m = re.match(r"^\| (.+?) \| `([^`]+)` \| `(.+)` \|$", line)
        if not m or not (root / m.group(2)).is_file():
            continue
        for i, ln in enumerate((root / m.group(2)).read_text(encoding="utf-8").split("\n"), 1):
            if m.group(3) in ln:
                out.append(SimpleNamespace(path=str(root / m.group(2)), line=i, col=ln.index(m.group(3)), call=m.group(3)))
                break
    return out
