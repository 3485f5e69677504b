"""Campaign model, TOML loading, workspace campaigns, the matrix report (md/json/html, headless
Chromium), the local runner with --resume, and the boundaries: the language server never imports
Ray, and nothing changes when Ray is absent."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnlens.cache import Cache
from attnlens.fleet import campaign as C
from attnlens.fleet import report as R
from attnlens.fleet import runner as F
from attnlens.lsp.features import runtime_actions as RA
from tests.fleet.conftest import host_env, toml_str
from tests.probe_fixtures.runtime_support import require_target, shared_pool

REPO = Path(__file__).resolve().parents[2]


def test_campaign_toml_is_data_and_checked():
    camp = C.parse_toml("""
name = "x"
timeout = 30
[[probe]]
family = "varlen_attention"
target = "flash_attn:flash_attn_varlen_func"
options = { dtype = "float16", extra_kwargs = { fa_version = 2 } }
[[probe]]
family = "varlen"
target = "flash_attn:flash_attn_varlen_func"
options = { dtype = "float16", extra_kwargs = { fa_version = 2 } }
[[host]]
name = "c500"
resource = "c500"
labels = { accelerator = "c500" }
python = "/opt/conda/bin/python"
env = { MACA_PATH = "/opt/maca", CUDA_VISIBLE_DEVICES = "" }
""")
    assert len(camp.cells) == 1 and camp.cells[0].family == "varlen" and camp.cells[0].timeout == 30
    assert camp.id == "x"
    h = camp.hosts[0]
    assert h.env["CUDA_VISIBLE_DEVICES"] == "" and h.selectors() == {"resource": "c500", "labels": {"accelerator": "c500"}}
    node = {"NodeID": "abc", "Resources": {"c500": 1.0}, "Labels": {"accelerator": "c500"}}
    assert h.matches(node) and not h.matches({"NodeID": "abc", "Resources": {}, "Labels": {}})
    bad = [
        ("[[probe]]\nfamily='nope'\ntarget='a:b'", "unknown probe family"),
        ("[[probe]]\nfamily='varlen'\ntarget='a:b'\ncode='import os'", "unknown key(s) code"),
        ("exec = 'x'", "unknown key(s) exec"),
        ("[[probe]]\nfamily='varlen'\ntarget='a:b'\noptions={d=1979-05-27}", "not plain data"),
        ("[[probe]]\nfamily='varlen'\ntarget='a:b'\n[[host]]\nname='a b'", "name must be"),
        ("[[probe]]\nfamily='varlen'\ntarget='a:b'\n[[host]]\nname='a'\nenv={'A-B'='1'}", "bad environment variable"),
        ("[[probe]]\nfamily='varlen'\ntarget='a:b'\ndevice='tpu'", "device must be"),
        ("this is not toml", "not valid TOML"),
    ]
    for text, msg in bad:
        with pytest.raises(C.CampaignError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            C.parse_toml(text)
    assert C.parse_host_arg("name=h1,resource=good,python=/x/py,label.acc=c500,env.A=1").labels == {"acc": "c500"}


def test_campaign_from_check_findings_dedups_by_family_and_target():
    root = str(REPO / "examples" / "mini-metax")
    findings = C.check_findings(root, ["mini_metax"], python=sys.executable)
    cells = C.from_findings(findings, root)
    keys = [(c.family, c.target) for c in cells]
    assert len(keys) == len(set(keys))
    assert ("varlen", "miniflash:flash_attn_varlen_func") in keys  # AL107 chain and AL104 contract, merged
    assert ("decode", "_mini_C::paged_attention_v2") in keys
    merged = next(c for c in cells if c.target == "miniflash:flash_attn_varlen_func")
    assert len(merged.origin) >= 2
    # the same rule on a synthetic finding: the chain's final torch op, the contract's alias name
    f = {"rule": "AL103", "path": "a.py", "line": 3, "data": {"probe": "kv_cache_write", "chain": {
        "hops": [], "final": {"kind": "torch_op", "symbol": "_C_cache_ops::reshape_and_cache_flash"}}}}
    assert [(c.family, c.target) for c in C.from_findings([f, f])] == [("kv_cache_write",
                                                                       "_C_cache_ops::reshape_and_cache_flash")]
    inv = {"files": [{"path": "x.py", "items": [{"action": "probe", "line": 4, "validation":
           "on the MetaX host: `attnlens probe run decode --target vllm.v1.attention.ops.triton_decode_attention."
           "decode_attention_fwd` passes"}]}]}
    assert [(c.family, c.target) for c in C.from_inventory(inv)] == [
        ("decode", "vllm.v1.attention.ops.triton_decode_attention:decode_attention_fwd")]


def _state() -> F.CampaignState:
    cells = [C.Cell(family="varlen", target="flash_attn:flash_attn_varlen_func"),
             C.Cell(family="kv_cache_write", target="_C_cache_ops::reshape_and_cache_flash")]
    st = F.CampaignState(campaign=C.Campaign(cells=cells, name="t"))
    pk = {"h1": "2.6.3", "h2": "2.6.3", "h3": "2.7.4"}
    for i, (n, v) in enumerate(pk.items()):
        st.hosts[n] = {"name": n, "gpu": "MetaX C500", "runtime": "MACA 3.1", "torch": "2.6.0+metax",
                       "packages": {"flash_attn": v}, "env_hash": f"{i:016x}"}
        bad = v.startswith("2.6")
        st.results[n] = {cells[0].key: {"status": "fail" if bad else "pass", "message": "sinks ignored" if bad else "",
                                        "cases": {"causal_gqa": {"status": "pass"},
                                                  "sinks_must_differ": {"status": "fail" if bad else "pass",
                                                                        "note": "output moved by 0 <b>"}}}}
    st.results["h2"][cells[1].key] = {"status": "crashed", "message": "probe crashed: signal 11 after 0.2 s"}
    st.results["h1"][cells[1].key] = {"status": "pass", "cases": {"nhd_bf16": {"status": "pass"}}}
    return st


def test_matrix_report_headline_and_formats():
    m = R.build(_state())
    assert m["headline"][0] == ("`varlen` on `flash_attn:flash_attn_varlen_func` · sinks_must_differ: fails on hosts "
                                "with flash_attn 2.6.3 (h1, h2); passes on hosts with flash_attn 2.7.4 (h3)")
    assert any("crashes on h2" in h for h in m["headline"])
    rows = {(r["family"], r["case"]): r["hosts"] for r in m["rows"]}
    assert rows[("kv_cache_write", "nhd_bf16")]["h2"]["status"] == "crashed"
    assert rows[("kv_cache_write", R.VERDICT_ROW)]["h3"]["status"] == "missing"
    md = R.to_markdown(m)
    assert "| h1 | MetaX C500 | MACA 3.1 | 2.6.0+metax |" in md and "**crashed**: probe crashed: signal 11" in md
    assert json.loads(R.to_json(m))["campaign"] == "t"
    html = R.to_html(m)
    assert "<b>" not in html.split("<tbody>")[1].split("</tbody>")[0].replace("<b>h", "")  # notes are escaped
    assert "output moved by 0 &lt;b&gt;" in html


def _chromium() -> str | None:
    for c in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
              shutil.which("chromium-browser"), shutil.which("google-chrome")):
        if c and os.path.exists(c):
            return c
    return None


def test_html_matrix_in_headless_chromium(tmp_path):
    chromium = _chromium()
    if not chromium:
        pytest.skip("no Chromium (set CHROMIUM or apt-get install chromium)")
    page = tmp_path / "matrix.html"
    page.write_text(R.to_html(R.build(_state())))
    p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    dom = p.stdout
    assert "<table id=\"matrix\">" in dom, p.stderr[-2000:]
    # the page's script ran in the browser and counted the table's entries
    assert 'id="summary">entries: crashed 2, fail 4, missing 2, pass 7' in dom, dom[-1500:]
    assert dom.count('data-host="h1"') >= 6 and "fails on hosts with flash_attn 2.6.3 (h1, h2)" in dom


def test_local_runner_two_hosts_and_resume(request, tmp_path):
    py = require_target()
    camp = C.Campaign(name="local", cells=[
        C.Cell(family="lse_merge", target="probefix.lse_merge:merge_attn_states_torch"),
        C.Cell(family="topk", target="probefix.topk:top_k_per_row_prefill_ignores_padding"),
    ], hosts=[C.HostSpec(name="a", python=py, env=host_env("good")),
              C.HostSpec(name="b", python=py, env=host_env("bad"))])
    cache = Cache(tmp_path / "cache")
    pool = shared_pool(request.config)
    st = F.run_local(camp, cache, pool=pool)
    st_by = {h: {k: r["status"] for k, r in st.results[h].items()} for h in ("a", "b")}
    assert st_by["a"] == st_by["b"] == {camp.cells[0].key: "pass", camp.cells[1].key: "fail"}
    assert st.hosts["a"]["packages"]["flash_attn"] == "2.7.4" and st.hosts["b"]["packages"]["flash_attn"] == "2.6.3"
    # a cell recorded as lost is run again by --resume; measured cells (pass, fail) are kept
    doc = json.loads((cache.folder / "fleet" / "local.json").read_text())
    doc["results"]["b"][camp.cells[0].key]["status"] = "lost"
    (cache.folder / "fleet" / "local.json").write_text(json.dumps(doc))
    st2 = F.run_local(camp, cache, pool=pool, resume=True)
    assert st2.runs[-1]["cells_run"] == 1 and st2.results["b"][camp.cells[0].key]["status"] == "pass"
    assert st2.results["b"][camp.cells[0].key]["attempts"] == 2
    st3 = F.run_local(camp, cache, pool=pool, resume=True, retry_verdicts=True)
    assert st3.runs[-1]["cells_run"] == 2  # the two fail cells
    with pytest.raises(C.CampaignError, match="need the Ray runner"):
        F.run_local(C.Campaign(cells=camp.cells, hosts=[C.HostSpec(name="x", resource="gpu")]), cache)


def test_language_server_never_imports_ray():
    code = ("import sys; import attnlens.lsp.server, attnlens.lsp.features.runtime_actions, attnlens.runtime.cli_cmds, "
            "attnlens.fleet.campaign, attnlens.fleet.report, attnlens.fleet.runner, attnlens.fleet.task; "
            "bad = sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')); print(bad); "
            "sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_without_ray_the_matrix_says_how_to_get_it(monkeypatch, tmp_path, capsys):
    import argparse

    from attnlens.runtime import cli_cmds

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    parser = argparse.ArgumentParser()
    cli_cmds.add_subparsers(parser.add_subparsers())
    args = parser.parse_args(["probe", "matrix", "--probe", "lse_merge=a:b", "--no-cache"])
    assert args.func(args) == 2
    assert "pip install 'attnlens[fleet]'" in capsys.readouterr().err
    args = parser.parse_args(["probe", "matrix", "--probe", "lse_merge=a:b", "--no-cache", "--dry-run"])
    assert args.func(args) == 0


def test_editor_matrix_command_line_is_argv_only():
    argv = RA.matrix_argv({"campaign": "c.toml", "fromCheck": ["a.py"], "hosts": ["name=h,resource=r"],
                           "rayAddress": "auto", "resume": True},
                          {"root": "/w", "python": "/t/python", "cache_root": "/c"})
    assert argv[1:5] == ["-m", "attnlens.cli", "probe", "matrix"] and "--resume" in argv
    assert argv[argv.index("--ray-address") + 1] == "auto" and argv[argv.index("--cache-dir") + 1] == "/c"
    for bad in ({"campaign": "a\nb"}, {"runner": "ssh"}, {"probes": ["x"]}, {"fromCheck": "a.py"}):
        with pytest.raises(ValueError):
            RA.matrix_argv(bad, {"root": "/w"})


__all__ = ["toml_str"]
