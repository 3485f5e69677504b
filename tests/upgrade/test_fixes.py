"""Quick fixes (upgrade/fixes.py): one fixture per kind (before, finding, fix, exact after-text),
the fixed plugin re-checked, stale findings refused, the CLI, and libcst off the analysis path."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from attnlens.cli import main
from attnlens.rules import ids as IDS
from attnlens.upgrade import fixes as FX
from attnlens.upgrade.drift import drift_report

from . import fix_fixtures as FF

FLASH = "fixplug/attention/flash.py"
OPS = "fixplug/ops.py"


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fixes")
    ws, old, new = FF.make(tmp)
    rep = drift_report(ws, old)
    findings = FX.collect_findings(ws, None, rep)
    offers = FX.offers(ws, findings, rep)
    yield ws, old, rep, findings, offers
    ws.close()


def _offer(offers, rule, path):
    got = [o for o in offers if o.rule == rule and o.path.endswith(path)]
    assert len(got) == 1, [(o.rule, o.path) for o in offers]
    return got[0]


def _text(ws, rel):
    return (ws.root / rel).read_text()


def test_the_fixable_findings(state):
    _ws, _old, _rep, findings, offers = state
    assert sorted((f["rule"], f["path"].rpartition("/")[2], f["line"]) for f in findings) == [
        ("AL108", "flash.py", 5), ("AL111", "flash.py", 10), ("AL112", "flash.py", 22),
        ("AL120", "ops.py", 4), ("AL120", "ops.py", 8),
        ("AL302", "flash.py", 3), ("AL303", "flash.py", 10), ("AL304", "flash.py", 22),
        ("AL308", "ops.py", 4), ("AL308", "ops.py", 8)]
    assert all(IDS.split(f["id"]) is not None and f["data"]["id"] == f["id"] for f in findings)
    # check and drift describe the same five changes: one key each
    assert len({o.key for o in offers}) == 5 and len(offers) == 10


def test_import_moved_upstream(state):
    ws, _old, _rep, _f, offers = state
    o = _offer(offers, "AL108", FLASH)
    assert o.spec["mode"] == "rewrite" and (o.spec["replacement_module"], o.spec["replacement_name"]) == ("vllm.utils", "is_quantized")
    assert "upstream vllm.attention.backends.flash imported it from vllm.attention.backend in vllm 1.0.0" in o.title
    assert FX.apply(o, FF.FLASH) == FF.IMPORT_AFTER
    assert FX.apply(_offer(offers, "AL302", FLASH), FF.FLASH) == FF.IMPORT_AFTER


def test_hook_override_prefilled_with_upstream_body(state):
    _ws, _old, _rep, _f, offers = state
    o = _offer(offers, "AL111", FLASH)
    assert o.spec["upstream"] == "vllm/attention/backends/flash.py:21" and o.spec["after"] == ["get_name"]
    assert FX.apply(o, FF.FLASH) == FF.HOOK_AFTER
    assert FX.apply(_offer(offers, "AL303", FLASH), FF.FLASH) == FF.HOOK_AFTER


def test_metadata_field_upstream_reads(state):
    _ws, _old, _rep, _f, offers = state
    o = _offer(offers, "AL112", FLASH)
    # the read that runs with the plugin: num_queries, which its impl inherits (it overrides forward, line 32)
    assert o.spec["fields"] == [{"name": "seq_lens", "annotation": "list | None", "default": "None",
                                 "after": "block_size", "read_at": "vllm/attention/backends/flash.py:35"}]
    assert FX.apply(o, FF.FLASH) == FF.FIELDS_AFTER
    assert FX.apply(_offer(offers, "AL304", FLASH), FF.FLASH) == FF.FIELDS_AFTER


def test_custom_op_parameter_for_the_op_and_its_fake(state):
    _ws, _old, _rep, _f, offers = state
    func = next(o for o in offers if o.rule == "AL120" and o.spec["function"] == "mx_my_op")
    fake = next(o for o in offers if o.rule == "AL120" and o.spec["function"] == "mx_my_op_fake")
    assert func.spec["params"] == [{"name": "scale", "kind": "pos", "annotation": "float | None", "default": "None",
                                    "after": "out"}]
    assert FX.apply(func, FF.OPS) == FF.OPS_AFTER_FUNC
    assert FX.apply(fake, FF.OPS) == FF.OPS_AFTER_FAKE
    drift_fake = next(o for o in offers if o.rule == "AL308" and o.spec["function"] == "mx_my_op_fake")
    assert FX.apply(drift_fake, FF.OPS) == FF.OPS_AFTER_FAKE


def test_fixed_plugin_rechecked_has_the_findings_gone_and_no_new_one(state, tmp_path):
    ws, old, _rep, findings, offers = state
    fixed = tmp_path / "fixed"
    shutil.copytree(ws.root, fixed)
    texts = {}
    for o in {o.key: o for o in offers}.values():
        rel = o.path[len(str(ws.root)) + 1:]
        texts[rel] = FX.apply(o, texts.get(rel, _text(ws, rel)))
    for rel, text in texts.items():
        (fixed / rel).write_text(text)
    from attnlens.rules.engine import Engine
    from attnlens.workspace import Workspace

    before = {(f.rule, f.message) for f in Engine(ws).check_paths()}
    ws2 = Workspace(fixed, target=ws.target, cache_dir=tmp_path / "cache")
    after = Engine(ws2).check_paths()
    drift_after = drift_report(ws2, old).findings()
    ws2.close()
    fixable = [f for f in after if f.rule in FX.FIX_RULES] + [f for f in drift_after if f["rule"] in FX.FIX_RULES]
    assert fixable == []
    assert {(f.rule, f.message) for f in after} <= before  # nothing new


def test_stale_finding_is_refused(state, tmp_path):
    ws, _old, _rep, findings, offers = state
    fid = next(f["id"] for f in findings if f["rule"] == "AL112")
    moved = tmp_path / "plugin"
    shutil.copytree(ws.root, moved)
    # the finding's target line changed since the finding was computed
    p = moved / FLASH
    p.write_text(p.read_text().replace("class FlashMetadata:", "class FlashMetadata:  # edited"))
    from attnlens.workspace import Workspace

    ws2 = Workspace(moved, target=ws.target, cache_dir=tmp_path / "cache")
    now = FX.collect_findings(ws2)
    cur = next(f["id"] for f in now if f["rule"] == "AL112")
    assert IDS.same_key(cur, fid) and cur != fid
    with pytest.raises(FX.FixError) as e:
        FX.select(FX.offers(ws2, now), fid, [f["id"] for f in now])
    assert str(e.value) == (f"refused: the code of finding {fid} changed since it was computed (it is {cur} now); "
                            f"review it again: attnlens fix --finding {cur} --diff")
    ws2.close()
    with pytest.raises(FX.FixError, match="not a finding id"):
        FX.select([], "nonsense", [])


def test_an_edit_the_text_no_longer_allows_is_refused(state):
    _ws, _old, _rep, _f, offers = state
    o = _offer(offers, "AL111", FLASH)
    with pytest.raises(FX.FixError, match="already defines supports_sinks"):
        FX.apply(o, FF.HOOK_AFTER)
    with pytest.raises(FX.FixError, match="no class MiniFlashBackend"):
        FX.apply(o, "x = 1\n")
    with pytest.raises(FX.FixError, match="cannot parse"):
        FX.apply(o, "def (:\n")


def test_cli_diff_never_writes_and_apply_writes(tmp_path, capsys):
    ws, old, new = FF.make(tmp_path)
    ws.close()
    py = tmp_path / "python"  # a target interpreter whose only site is the fake vllm 2.0
    py.write_text(f"#!/bin/sh\nPYTHONPATH={new.root} exec {sys.executable} -S \"$@\"\n")
    py.chmod(0o755)
    base = ["--root", str(ws.root), "--python", str(py), "--cache-dir", str(tmp_path / "cache2")]
    assert main(["fix", *base, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    fid = next(o["id"] for o in listed if o["rule"] == "AL112")
    assert main(["fix", *base, "--finding", fid, "--diff"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:2] == [f"--- a/{FLASH}", f"+++ b/{FLASH}"] and "+    seq_lens: list | None = None" in out.splitlines()
    assert (ws.root / FLASH).read_text() == FF.FLASH  # --diff alone writes nothing
    assert main(["fix", *base, "--finding", fid, "--apply"]) == 0
    assert (ws.root / FLASH).read_text() == FF.FIELDS_AFTER
    capsys.readouterr()
    assert main(["fix", *base, "--finding", fid, "--diff"]) == 1  # fixed: that finding is gone
    assert f"no finding {fid} in the current analysis" in capsys.readouterr().err


def test_libcst_is_imported_only_to_compute_a_fix(state):
    ws, _old, _rep, _f, _o = state
    code = (
        "import sys\n"
        "from tests.upgrade import fix_fixtures as FF\n"
        "from pathlib import Path\nimport tempfile\n"
        "ws, old, new = FF.make(Path(tempfile.mkdtemp()))\n"
        "from attnlens.rules.engine import check_module\n"
        "from attnlens.upgrade import fixes as FX\n"
        "from attnlens.upgrade.drift import drift_report\n"
        "fs = check_module(ws, str(ws.root / 'fixplug/attention/flash.py'))\n"
        "rep = drift_report(ws, old)\n"
        "offers = FX.offers(ws, FX.collect_findings(ws, None, rep), rep)\n"
        "print('libcst' in sys.modules, len(offers))\n"
        "FX.apply(offers[0], open(offers[0].path).read())\n"
        "print('libcst' in sys.modules)\n")
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "10", "True"]


def test_inventory_names_the_fixes(state):
    ws, old, _rep, _f, _o = state
    from attnlens.upgrade.inventory import build_inventory

    inv = build_inventory(ws, globs=["fixplug/**"], old=old).to_json()
    files = {f["path"]: f for f in inv["files"]}
    assert [x["rule"] for x in files[OPS]["fixes"]] == ["AL120", "AL120"]
    assert sorted({x["kind"] for x in files[FLASH]["fixes"]}) == ["fields", "hook", "import"]
    from attnlens.upgrade.inventory import to_markdown

    md = to_markdown(build_inventory(ws, globs=["fixplug/**"], old=old))
    assert f"| `{OPS}` | 2 | sync (2 quick fixes) |" in md.splitlines()


def test_drift_ids_hash_the_analysed_text_of_an_unsaved_buffer(tmp_path):
    ws, old, _new = FF.make(tmp_path)
    path = str(ws.root / FLASH)
    ws.index.set_overlay(path, FF.FLASH.replace("\n\n@dataclass\n", "\n\n\n@dataclass\n"))  # every line below moves
    (f,) = [f for f in drift_report(ws, old).findings() if f["rule"] == "AL304"]
    ws.close()
    assert f["line"] == 23
    assert IDS.split(f["id"])[2] == IDS.make_id("AL304", "", "class FlashMetadata:")[-4:]
