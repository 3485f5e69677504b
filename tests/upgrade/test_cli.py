"""`attnlens drift`, `attnlens inventory` and `attnlens upstream` through the CLI entry point."""

from __future__ import annotations

import json
import sys

from attnlens.cli import main

from .fixtures import make


def test_drift_and_inventory_commands(tmp_path, capsys):
    ws, old, new = make(tmp_path)
    ws.close()
    base = ["--root", str(ws.root), "--python", sys.executable, "--cache-dir", str(tmp_path / "cache")]
    assert main(["drift", *base, "--from", old.root, "--to", new.root, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["old"]["version"] == "1.0.0" and out["new"]["version"] == "2.0.0"
    assert out["subject"]["kind"] == "worktree"
    assert {f["rule"] for f in out["findings"]} >= {"AL301", "AL302", "AL303"}
    assert main(["drift", *base, "--from", old.root, "--to", new.root, "--fail-on", "flagged"]) == 1
    text = capsys.readouterr().out
    assert "changed_upstream" in text and "FlashBuilder.build" in text and "flagged for review" in text
    assert main(["inventory", *base, "--from", old.root, "--to", new.root, "--format", "json"]) == 0
    inv = json.loads(capsys.readouterr().out)
    assert inv["subject"]["kind"] == "worktree" and inv["old"]["version"] == "1.0.0"
    assert any(f["path"].endswith("unused.py") for f in inv["files"])
    assert main(["inventory", *base, "--to", new.root]) == 0
    assert "# AttnLens upgrade inventory" in capsys.readouterr().out


def test_missing_version_is_an_error(tmp_path, capsys):
    ws, _old, _new = make(tmp_path)
    ws.close()
    try:
        main(["drift", "--root", str(ws.root), "--python", sys.executable, "--cache-dir", str(tmp_path / "cache"),
              "--from", "9.9.9"])
    except SystemExit as e:
        assert "attnlens upstream fetch 9.9.9" in str(e)
    else:
        raise AssertionError("expected SystemExit")
    assert main(["upstream", "list", "--cache-dir", str(tmp_path / "cache")]) == 0
