"""Results reused across index generations: the registry (Workspace.backends without call sites) after
an edit the registry cannot see, recomputed after one it can; Index.outside_memo until installed code
changes."""

from __future__ import annotations

import shutil
import sys

import pytest

from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="needs vllm installed in the test interpreter")

FA = "mini_metax/attention/backends/flash_attn.py"
PLATFORM = "mini_metax/platform.py"


@pytest.fixture()
def ws(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    w = Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache")
    yield w
    w.close()


def _names(entries):
    return sorted((e.name, e.kind, e.cls, e.impl.cls if e.impl else None) for e in entries)


def test_registry_is_reused_after_a_body_edit_and_recomputed_after_a_registration(ws):
    path = str(ws.root / FA)
    first = ws.backends(with_call_sites=False)
    text = (ws.root / FA).read_text()
    # a value typed in a method body (same lines): the registry cannot see it
    edited = text.replace("self.kv_sharing_target_layer_name is None", "self.kv_sharing_target_layer_name is None  ", 1)
    assert edited != text
    ws.index.set_overlay(path, edited)
    assert ws.backends(with_call_sites=False) is first
    # a registration removed from the platform module: recomputed, and the backend is gone
    ptext = (ws.root / PLATFORM).read_text()
    line = next(ln for ln in ptext.splitlines() if "register_backend(backend=AttentionBackendEnum.TRITON_MLA" in ln)
    ws.index.set_overlay(str(ws.root / PLATFORM), ptext.replace(line, "    pass"))
    second = ws.backends(with_call_sites=False)
    assert second is not first
    assert ("TRITON_MLA" in [e.name for e in first]) and _names(second) != _names(first)
    # back to the disk's text: the same entries as a fresh workspace's
    ws.index.set_overlay(str(ws.root / PLATFORM), None)
    ws.index.set_overlay(path, None)
    fresh = Workspace(ws.root, python=sys.executable, cache_dir=ws.cache.folder.parent / "fresh")
    try:
        assert _names(ws.backends(with_call_sites=False)) == _names(fresh.backends(with_call_sites=False))
    finally:
        fresh.close()


def test_outside_memo_lasts_until_something_outside_the_workspace_changes(ws):
    idx = ws.index
    calls = []
    assert idx.outside_memo("k", lambda: calls.append(1) or len(calls)) == 1
    idx.set_overlay(str(ws.root / FA), (ws.root / FA).read_text() + "\n# edited\n")  # a workspace module
    assert idx.outside_memo("k", lambda: calls.append(1) or len(calls)) == 1
    idx.invalidate(str(ws.root / "csrc" / "cache_kernels.cu"))  # a C++ file: outside the Python modules
    assert idx.outside_memo("k", lambda: calls.append(1) or len(calls)) == 2
