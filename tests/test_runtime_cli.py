"""`attnlens env` and `attnlens probe list|run` through cli_cmds.add_subparsers (in-process)."""

from __future__ import annotations

import argparse
import json

import pytest

from attnlens.cache import Cache
from attnlens.runtime import cli_cmds
from attnlens.runtime import evidence as ev
from tests.probe_fixtures.runtime_support import fixture_pythonpath, require_target, scratch_dir, shared_pool


@pytest.fixture(scope="module")
def cli_dirs(tmp_path_factory):
    # one cache for the module: the environment record is collected once, then reused
    base = tmp_path_factory.mktemp("cli")
    (base / "plugin").mkdir()
    return base / "plugin", base / "cache"


@pytest.fixture
def cli(request, cli_dirs, monkeypatch):
    py = require_target(triton=True)
    monkeypatch.setattr(cli_cmds, "_POOL", shared_pool(request.config))
    parser = argparse.ArgumentParser(prog="attnlens")
    sub = parser.add_subparsers(dest="cmd")
    cli_cmds.add_subparsers(sub)
    root, cache_dir = cli_dirs
    # the same environment as the other runtime tests, so the shared agents are reused
    common = ["--python", py, "--env", f"PYTHONPATH={fixture_pythonpath()}", "--env", f"PROBEFIX_DIR={scratch_dir()}",
              "--root", str(root), "--cache-dir", str(cache_dir)]

    def run(*argv, common_args=True):
        args = parser.parse_args(list(argv) + (common if common_args else []))
        return args.func(args)

    run.cache = Cache.for_workspace(root, cache_dir)
    return run


def test_probe_list_json_and_text(cli, capsys):
    assert cli("probe", "list", "--json", common_args=False) == 0
    fams = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in fams] == ["varlen", "kv_cache_write", "lse_merge", "decode", "topk"]
    assert all(f["convention"] and f["component"] for f in fams)
    assert cli("probe", "list", common_args=False) == 0
    out = capsys.readouterr().out
    assert "kv_cache_write" in out and "sinks_must_differ" in out


def test_probe_run_pass_fail_and_evidence(cli, capsys):
    rc = cli("probe", "run", "lse_merge", "--target", "probefix.lse_merge:merge_attn_states", "--json")
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["verdict"] == "pass" and d["exit_code"] == 0
    assert d["interpret"] is True and d["device"] == "cpu"
    rec = ev.read(cli.cache, d["id"])
    assert rec is not None and rec.verdict == "pass"

    rc = cli("probe", "run", "lse_merge", "--target", "probefix.lse_merge:merge_attn_states_exp2")
    out = capsys.readouterr().out
    assert rc == 1
    assert "verdict: FAIL" in out and "FAIL  basic" in out and "evidence: lse_merge-" in out


def test_probe_run_options_and_interpret_flag(cli, capsys):
    rc = cli("probe", "run", "topk", "--target", "probefix.topk:topk_functional", "--option", "convention=functional",
             "--option", "k=16", "--json")
    d = json.loads(capsys.readouterr().out)
    assert rc == 0, d
    assert d["options"] == {"convention": "functional", "k": 16}
    assert all(c["shapes"]["k"] == 16 for c in d["cases"])


def test_probe_run_findings_and_errors(cli, capsys):
    assert cli("probe", "run", "varlen", "--target", "probefix.badimport:f") == 1
    out = capsys.readouterr().out
    assert "IMPORT_ERROR" in out and "libmcruntime.so" in out
    assert cli("probe", "run", "topk", "--target", "probefix.topk:missing") == 2
    assert cli("probe", "run", "topk", "--target", "x", "--option", "novalue") == 2
    assert "expects KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli("probe", "run", "nosuchfamily", "--target", "x")
    assert e.value.code == 2


def test_probe_run_crash_is_reported(cli, capsys):
    rc = cli("probe", "run", "topk", "--target", "probefix.crash:crash_now")
    out = capsys.readouterr().out
    assert rc == 1 and "CRASHED" in out and "probe crashed: signal 11" in out and "Segmentation fault" in out


def test_env_command(cli, capsys):
    assert cli("env", "--json") == 0
    d = json.loads(capsys.readouterr().out)
    assert len(d["hash"]) == 16 and d["record"]["torch"]["version"] and d["summary"]
    assert cli("env") == 0
    out = capsys.readouterr().out
    assert "hash:" in out and "(unchanged)" in out and "torch:" in out


def test_evidence_ids_are_validated():
    for bad in ("../x", "a/b", "", ".hidden", "x" * 200, "a..b"):
        with pytest.raises(ValueError):
            ev.validate_id(bad)
    rid = ev.new_id("varlen", "../../etc/passwd:f" + "y" * 300, "20260101T000000000000Z", {"a": 1})
    assert ev.validate_id(rid) == rid and "/" not in rid and len(rid) <= 123
    rid2 = ev.new_id("topk", "torch.ops._C.top_k_per_row_prefill", "20260101T000000000000Z")
    assert rid2.startswith("topk-torch.ops._C.top_k_per_row_prefill-20260101T000000000000Z-")


def test_real_cli_process_exit_codes_and_no_leftovers(tmp_path):
    """`python -m attnlens probe run ...` as a user runs it: exit code 1 on a caught bug, no agent left behind."""
    import os
    import subprocess
    import sys
    import uuid

    py = require_target(triton=True)
    marker = uuid.uuid4().hex
    argv = [sys.executable, "-m", "attnlens", "probe", "run", "topk",
            "--target", "probefix.topk:top_k_per_row_prefill_ignores_padding", "--python", py,
            "--env", f"PYTHONPATH={fixture_pythonpath()}", "--env", f"ATTNLENS_TEST_MARKER={marker}",
            "--root", str(tmp_path), "--cache-dir", str(tmp_path / "cache")]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    assert "verdict: FAIL" in p.stdout and "short_rows_padded" in p.stdout
    left = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if marker.encode() in f.read():
                        left.append(int(d))
            except OSError:
                pass
    assert left == [], f"agent processes left running: {left}"
