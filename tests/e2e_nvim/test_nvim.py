"""Drive `attnlens serve` from a real editor: headless Neovim (0.7.2 from Debian or newer)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLE = REPO / "examples" / "mini-metax"
NVIM = shutil.which("nvim")
TARGET = REPO / ".venv" / "bin" / "python"


@pytest.mark.skipif(NVIM is None, reason="nvim is not installed (Debian: apt-get install -y neovim)")
def test_hover_and_implementation_in_neovim(tmp_path):
    env = {
        **os.environ,
        "ATTNLENS_PYTHON": sys.executable,  # the interpreter that has attnlens + pygls
        "ATTNLENS_TARGET_PYTHON": str(TARGET if TARGET.exists() else sys.executable),
        "ATTNLENS_ROOT": str(EXAMPLE),
        "ATTNLENS_CACHE_DIR": str(tmp_path / "cache"),
        "ATTNLENS_TIMEOUT_MS": "20000",
        "XDG_STATE_HOME": str(tmp_path / "state"),  # nvim's lsp.log goes here, not to ~
        "XDG_CACHE_HOME": str(tmp_path / "xdgcache"),
    }
    proc = subprocess.run([NVIM, "--headless", "-n", "-i", "NONE", "-u", str(HERE / "attnlens_nvim.lua")],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=90)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "FAIL" not in output and "PASS hover names the torch op" in output
    assert "PASS implementation jumped to" in output and "cache_kernels.cu" in output
    # a `)` typed mid-line: the error is a diagnostic of its own, the rest of the file keeps answering
    line = next(i for i, ln in enumerate((EXAMPLE / "mini_metax/attention/backends/flash_attn.py").read_text().split("\n"), 1)
                if ln == "        n = md.num_actual_tokens" and "prefix_out" in
                (EXAMPLE / "mini_metax/attention/backends/flash_attn.py").read_text().split("\n")[i])
    assert f"PASS syntax error reported at {line}:{len('        n = md.num_act')} SyntaxError: unmatched ')'" in output, output
    assert "PASS hover still answers with the syntax error in the file" in output
    assert "PASS syntax error gone when undone" in output
    # a new file, never written: symbols and hover
    assert "PASS new buffer symbols: write_kv_demo@4" in output and "PASS new buffer hover names the torch op" in output
    assert not (EXAMPLE / "mini_metax/attention/backends/brand_new_nvim.py").exists()
