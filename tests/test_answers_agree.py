"""One answer per position, whichever door asks: `sites` (after a whole census), `trace` (a fresh
workspace, one position) and the editor's implementation targets give the same leaves."""

from __future__ import annotations

import json
import sys

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
