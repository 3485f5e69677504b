"""Incoming calls in the server's analysis layer (lsp/calls.py over attnlens.callindex): what a request
waits for, and what it answers while an edit is being caught up."""

from __future__ import annotations

import shutil
import sys

import pytest

from attnlens.lsp.analysis import Analysis
from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, find, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="needs vllm installed in the test interpreter")

FA = "mini_metax/attention/backends/flash_attn.py"
MERGE_ITEM = {"t": "def", "module": "mini_metax.attention.ops.merge_attn_states", "qual": "merge_attn_states"}


@pytest.fixture
def analysis(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    a = Analysis(Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache"), index_budget_s=None)
    return root, a


def callers(a: Analysis, item: dict) -> list[tuple]:
    return [(it.name, it.path, spans) for it, spans in a.incoming(item)]


def test_a_request_waits_for_the_first_build_only(analysis):
    root, a = analysis
    steps = 0
    while True:  # what call_hierarchy.catch_up does, one SOON job per step
        must, answer = a.calls_request_step(0.02, 0.0)
        steps += 1
        if answer:
            break
        assert must
    assert not must and a.calls.untraced() == 0 and steps > 1
    path, line, col = find(root / FA, "merge_attn_states(")
    _p, line2, col2 = find(root / FA, "self._forward_cascade(")
    got = [c for c in callers(a, MERGE_ITEM) if c[1] == path]
    assert got == [("forward", path, [(line2, col2, col2 + len("self._forward_cascade"))]),  # sorted by caller line
                   ("_forward_cascade", path, [(line, col, col + len("merge_attn_states"))])]
    # after an edit: answered at once from the records as they are (no tracing), lines moved
    text = (root / FA).read_text()
    a.ws.index.set_overlay(path, "# a line above\n" + text)
    a.ws.index.module_for_path(path)  # a hover read the buffer
    traces = a.calls.traces
    assert a.calls_request_step(0.02, 0.0) == (False, True)
    assert a.calls.traces == traces
    assert [c for c in callers(a, MERGE_ITEM) if c[1] == path] == [
        ("forward", path, [(line2 + 1, col2, col2 + len("self._forward_cascade"))]),
        ("_forward_cascade", path, [(line + 1, col, col + len("merge_attn_states"))])]


def test_an_edited_buffer_nobody_summarised_is_not_summarised_for_incoming_calls(analysis):
    root, a = analysis
    while not a.calls_step(5.0):
        pass
    path = str(root / FA)
    a.ws.index.set_overlay(path, "\n\n" + (root / FA).read_text())  # pasted lines: not read by anyone yet
    name = "mini_metax.attention.backends.flash_attn"
    assert a.calls_request_step(0.02, 0.0) == (False, True)
    got = [c for c in callers(a, MERGE_ITEM) if c[1] == path]
    assert not a.ws.index.is_loaded(name)  # the answer did not build its summary
    _p, line, col = find(root / FA, "merge_attn_states(")
    _p, line2, col2 = find(root / FA, "self._forward_cascade(")
    # the callers named from their records, at their calls (the lines are the last traced ones)
    assert got == [("forward", path, [(line2, col2, col2 + len("self._forward_cascade"))]),
                   ("_forward_cascade", path, [(line, col, col + len("merge_attn_states"))])]
    items = [it for it, _spans in a.incoming(MERGE_ITEM) if it.path == path]
    assert [(it.kind, it.line, it.data) for it in items] == [
        ("method", line2, {"t": "def", "module": name, "qual": "MiniFlashAttentionImpl.forward", "path": path}),
        ("method", line, {"t": "def", "module": name, "qual": "MiniFlashAttentionImpl._forward_cascade", "path": path})]
