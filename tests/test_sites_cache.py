"""`attnlens sites` reuses its whole output when nothing it read changed, and never otherwise."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.helpers import EXAMPLE, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")


def _sites(root, cache):
    r = subprocess.run([sys.executable, "-m", "attnlens.cli", "sites", "--root", str(root), "--python", sys.executable,
                        "--cache-dir", str(cache)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_warm_output_is_reused_and_invalidated_by_edits(tmp_path):
    root = tmp_path / "plugin"
    shutil.copytree(EXAMPLE, root)
    cache = tmp_path / "cache"
    cold = _sites(root, cache)
    assert any(p.name.startswith("sites-") for p in cache.rglob("*")), "the output was not cached"
    assert _sites(root, cache) == cold
    # an edit in the workspace: a new kernel call site appears in the next answer
    ops = root / "mini_metax/attention/ops/dispatch.py"
    ops.write_text(ops.read_text() + "\n\ndef added(src, dst):\n    _copy_launch(src, dst)\n")
    edited = _sites(root, cache)
    assert edited != cold
    assert any(line.startswith("mini_metax/attention/ops/dispatch.py:") and "added" not in line and "_copy_launch" in line
               for line in edited.splitlines() if line not in cold.splitlines())
