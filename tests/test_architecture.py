"""The architecture contract (`.importlinter`, import-linter) holds, and it catches a wrong import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

LINT = Path(sys.executable).with_name("lint-imports")
pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install import-linter)")


def _lint(server_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(server_dir))
    return subprocess.run([str(LINT), str(REPO / ".importlinter"), "--no-cache"], cwd=server_dir, env=env,
                          capture_output=True, text=True, timeout=300)


def test_contracts_are_kept():
    r = _lint(REPO / "server")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "4 kept, 0 broken" in r.stdout


def test_a_core_module_importing_the_lsp_breaks_the_contract(tmp_path):
    shutil.copytree(REPO / "server" / "attnlens", tmp_path / "attnlens", ignore=shutil.ignore_patterns("__pycache__"))
    res = tmp_path / "attnlens" / "resolver.py"
    res.write_text(res.read_text() + "\n\ndef _wrong():\n    from .lsp import server  # noqa: F401\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert "Core analysis does not import the features above it BROKEN" in r.stdout
    assert "attnlens.resolver -> attnlens.lsp.server" in r.stdout
