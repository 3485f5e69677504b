"""Campaigns through a real local Ray cluster: two worker nodes, each with its own target interpreter
(.venv-target with a flash_attn 2.7.4 stand-in that implements sinks; a second venv with a 2.6.3
stand-in that ignores them), CPU probes under TRITON_INTERPRET=1; then a node killed mid-campaign
and --resume. Skips (with the reason) when Ray is not installed."""

from __future__ import annotations

import argparse
import json
import threading
import time

import pytest

from attnlens.cache import Cache
from attnlens.fleet import campaign as C
from attnlens.fleet import report as R
from attnlens.fleet import runner as F
from attnlens.runtime import cli_cmds
from attnlens.runtime import evidence as ev
from tests.fleet.conftest import OBJECT_STORE, host_env, toml_str

pytestmark = pytest.mark.fleet


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="attnlens")
    sub = parser.add_subparsers(dest="cmd")
    cli_cmds.add_subparsers(sub)
    args = parser.parse_args(argv)
    return args.func(args)


def test_matrix_shows_broken_node_and_good_node(ray_cluster, tmp_path, capsys):
    rc_ = ray_cluster
    camp = tmp_path / "campaign.toml"
    good_env = host_env("good")
    bad_env = host_env("bad")
    camp.write_text(f"""
name = "fa-upgrade"
timeout = 240
[[probe]]
family = "varlen_attention"          # the contracts' alias
target = "flash_attn:flash_attn_varlen_func"
[[probe]]
family = "lse_merge"                 # a @triton.jit fixture: TRITON_INTERPRET=1 on the CPU
target = "probefix.lse_merge:merge_attn_states"
[[host]]
name = "good"
resource = "fleet_good"
python = {toml_str(rc_['target_python'])}
env = {{ PYTHONPATH = {toml_str(good_env['PYTHONPATH'])} }}
[[host]]
name = "bad"
resource = "fleet_bad"
python = {toml_str(rc_['bad_python'])}
env = {{ PYTHONPATH = {toml_str(bad_env['PYTHONPATH'])} }}
""")
    root, cache_dir, out = tmp_path / "plugin", tmp_path / "cache", tmp_path / "report"
    root.mkdir()
    t0 = time.monotonic()
    rc = _cli(["probe", "matrix", str(camp), "--ray-address", rc_["address"], "--format", "json",
               "--root", str(root), "--cache-dir", str(cache_dir), "--report-dir", str(out)])
    elapsed = time.monotonic() - t0
    m = json.loads(capsys.readouterr().out)
    assert rc == 1, m  # a failed verdict on one host
    assert [h["name"] for h in m["hosts"]] == ["good", "bad"]
    hosts = {h["name"]: h for h in m["hosts"]}
    assert hosts["good"]["packages"]["flash_attn"] == "2.7.4" and hosts["bad"]["packages"]["flash_attn"] == "2.6.3"
    assert hosts["good"]["env_hash"] != hosts["bad"]["env_hash"]
    assert hosts["good"]["node_id"] == rc_["good"].node_id and hosts["bad"]["node_id"] == rc_["bad"].node_id
    rows = {(r["family"], r["case"]): r["hosts"] for r in m["rows"]}
    assert rows[("varlen", R.VERDICT_ROW)]["good"]["status"] == "pass"
    assert rows[("varlen", R.VERDICT_ROW)]["bad"]["status"] == "fail"
    assert rows[("varlen", "sinks_must_differ")]["good"]["status"] == "pass"
    assert rows[("varlen", "sinks_must_differ")]["bad"]["status"] == "fail"
    assert "sinks are ignored" in rows[("varlen", "sinks_must_differ")]["bad"]["message"]
    assert rows[("varlen", "causal_gqa")]["bad"]["status"] == "pass"
    assert rows[("lse_merge", R.VERDICT_ROW)]["good"]["status"] == "pass"
    assert rows[("lse_merge", R.VERDICT_ROW)]["bad"]["status"] == "pass"
    head = [h for h in m["headline"] if "sinks_must_differ" in h]
    assert head and "fails on hosts with flash_attn 2.6.3 (bad)" in head[0] and "2.7.4 (good)" in head[0], m["headline"]
    assert not any("lse_merge" in h for h in m["headline"])
    # evidence stored as for single probes, per host, with its environment hash
    cache = Cache.for_workspace(root, cache_dir)
    recs = ev.list_records(cache)
    assert len(recs) == 4
    by_host = {}
    for r in recs:
        by_host.setdefault(r.details["host"]["name"], []).append(r)
        assert r.interpret is True and r.device == "cpu"
    assert {r.environment["hash"] for r in by_host["good"]} == {hosts["good"]["env_hash"]}
    assert {r.environment["hash"] for r in by_host["bad"]} == {hosts["bad"]["env_hash"]}
    assert {p.name for p in out.iterdir()} == {"matrix.md", "matrix.json", "matrix.html"}
    md = (out / "matrix.md").read_text()
    assert "| sinks_must_differ | pass | **FAIL**" in md
    print(f"campaign of 2 cells x 2 nodes: {elapsed:.1f} s")


def test_node_killed_mid_campaign_is_lost_and_resume_completes(ray_cluster, tmp_path):
    rc_ = ray_cluster
    cluster = rc_["cluster"]
    signal_dir = tmp_path / "signals"
    signal_dir.mkdir()
    victim = cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, resources={"fleet_victim": 1})
    cluster.wait_for_nodes(timeout=120)
    py = rc_["target_python"]
    camp = C.Campaign(name="victim", cells=[
        C.Cell(family="lse_merge", target="fleetslow:merge_attn_states", timeout=240),
        C.Cell(family="lse_merge", target="probefix.lse_merge:merge_attn_states_torch", timeout=240),
    ], hosts=[
        C.HostSpec(name="victim", resource="fleet_victim", python=py,
                   env=host_env("good", FLEET_SIGNAL_DIR=str(signal_dir))),
        C.HostSpec(name="good", resource="fleet_good", python=py, env=host_env("good")),
    ])
    cache = Cache(tmp_path / "cache")
    box: dict = {}

    def run():
        try:
            box["state"] = F.run_ray(camp, cache, address=rc_["address"], poll_s=0.5)
        except BaseException as e:  # noqa: BLE001 - reported below
            box["error"] = e

    th = threading.Thread(target=run, daemon=True)
    th.start()
    end = time.monotonic() + 180
    while time.monotonic() < end and not any(p.name.startswith("started-") for p in signal_dir.iterdir()):
        assert th.is_alive() or "error" not in box, box.get("error")
        time.sleep(0.2)
    assert any(p.name.startswith("started-") for p in signal_dir.iterdir()), "the slow cell never started"
    cluster.remove_node(victim, allow_graceful=False)  # the node dies while its first cell runs
    th.join(timeout=240)
    (signal_dir / "released").touch()  # the orphaned agent finishes, sees its stdin closed and exits
    assert not th.is_alive(), "campaign did not finish after the node died"
    assert "error" not in box, box.get("error")
    st = box["state"]
    res = st.results
    assert {r["status"] for r in res["victim"].values()} == {"lost"}, res["victim"]
    assert any("died while the cell ran" in r["message"] or "Error" in r["message"] for r in res["victim"].values())
    assert {r["status"] for r in res["good"].values()} == {"pass"}
    m = R.build(st)
    assert any("was lost on victim" in h for h in m["headline"]), m["headline"]
    good_ids = {k: r["evidence_id"] for k, r in res["good"].items()}

    # a replacement node with the same resource; --resume runs only the lost cells
    cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, resources={"fleet_victim": 1})
    cluster.wait_for_nodes(timeout=120)
    st2 = F.run_ray(camp, cache, address=rc_["address"], resume=True, poll_s=0.5)
    assert {r["status"] for r in st2.results["victim"].values()} == {"pass"}, st2.results["victim"]
    assert all(r["attempts"] == 2 for r in st2.results["victim"].values())
    assert {k: r["evidence_id"] for k, r in st2.results["good"].items()} == good_ids  # not run again
    assert all(r["attempts"] == 1 for r in st2.results["good"].values())
    assert st2.runs[-1]["cells_run"] == 2
    stored = F.read_state(cache, camp.id)
    assert stored and stored["results"]["victim"] == st2.results["victim"]


def test_unlisted_host_runs_nothing(ray_cluster, tmp_path):
    camp = C.Campaign(cells=[C.Cell(family="lse_merge", target="probefix.lse_merge:merge_attn_states_torch")],
                      hosts=[C.HostSpec(name="ghost", resource="no_such_resource")])
    st = F.run_ray(camp, Cache(None), address=ray_cluster["address"])
    r = st.results["ghost"][camp.cells[0].key]
    assert r["status"] == "lost" and "no alive Ray node matches host ghost" in r["message"]
    assert st.runs[-1]["cells_run"] == 1
