"""Contract files: the shipped entries, the loader's error reporting, the generated schema."""

from __future__ import annotations

import json
import subprocess
import sys

from attnlens.rules.contracts import (
    CAPABILITY_NAMES,
    PROBE_FAMILIES,
    json_schema,
    load_contracts,
    parse_contract_text,
    schema_text,
)

from .conftest import REPO

CONTRACTS = REPO / "contracts"


def test_shipped_contracts_load_without_errors():
    cs = load_contracts([CONTRACTS])
    assert not cs.errors, [str(e) for e in cs.errors]
    assert len(cs.contracts) >= 15
    fams = {c.family for c in cs.contracts}
    assert fams >= {"varlen_attention", "kv_cache_write", "kv_cache_gather", "lse_merge", "mla_decode", "sparse_topk", "triton_attention"}
    for c in cs.contracts:
        assert c.probe is None or c.probe in PROBE_FAMILIES
        for o in c.observations:
            assert o.status in ("observed", "refuted", "needs_revalidation")


def test_matching_exact_and_patterns():
    cs = load_contracts([CONTRACTS])
    assert cs.match("_C_cache_ops::reshape_and_cache_flash").id == "vllm.reshape_and_cache_flash"
    assert cs.match("vllm.v1.attention.ops.triton_unified_attention.unified_attention").family == "triton_attention"
    assert cs.match("flash_attn.flash_attn_varlen_func").id == "metax.flash_attn.flash_attn_varlen_func"
    assert cs.match("flash_mla.flash_mla_interface.flash_mla_with_kvcache").family == "mla_decode"  # fnmatch
    assert cs.match("nothing.here") is None
    c = cs.match("vllm.v1.attention.ops.triton_unified_attention.unified_attention")
    assert c.capability("sinks").value == "yes" and c.observations_for("sinks")


def test_committed_schema_is_the_generated_one():
    assert (CONTRACTS / "schema.json").read_text(encoding="utf-8") == schema_text()


def test_schema_cli_prints_the_schema():
    out = subprocess.run([sys.executable, "-m", "attnlens.rules.contracts", "--schema"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == json_schema()
    assert "RuntimeWarning" not in out.stderr


def test_schema_lists_capabilities_and_statuses():
    s = json_schema()
    cap_keys = s["$defs"]["Contract"]["properties"]["capabilities"]["propertyNames"]["enum"]
    assert set(cap_keys) == set(CAPABILITY_NAMES)
    assert set(s["$defs"]["Observation"]["properties"]["status"]["enum"]) == {"observed", "refuted", "needs_revalidation"}


BAD = """schema_version = 1

[[contract]]
id = "ok.one"
family = "lse_merge"
covers = ["a::b"]

[[contract]]
id = "bad.two"
family = "no_such_family"
covers = ["c::d"]

[contract.capabilities]
sinks = { value = "maybe" }
warp_speed = { value = "yes" }

[[contract]]
id = "bad.three"
family = "lse_merge"
"""


def test_errors_have_line_numbers_and_good_entries_survive():
    cs, errs = parse_contract_text(BAD, "bad.toml")
    assert [c.id for c in cs] == ["ok.one"]
    msgs = {e.message: e.line for e in errs}
    fam = next(line for m, line in msgs.items() if "no_such_family" in m)
    assert fam == 10
    assert any("maybe" in m and line == 14 for m, line in msgs.items())
    assert any("warp_speed" in m and line == 15 for m, line in msgs.items())
    assert any("covers" in m and line == 17 for m, line in msgs.items())
    assert all(e.file == "bad.toml" for e in errs)


def test_one_bad_file_does_not_stop_the_others(tmp_path):
    (tmp_path / "a_bad.toml").write_text("schema_version = 1\n[[contract]\nid = 'x'\n", encoding="utf-8")
    (tmp_path / "b_good.toml").write_text('schema_version = 1\n[[contract]]\nid = "g"\nfamily = "sparse_topk"\ncovers = ["x::y"]\n', encoding="utf-8")
    (tmp_path / "c_dup.toml").write_text('schema_version = 1\n[[contract]]\nid = "g"\nfamily = "sparse_topk"\ncovers = ["z::y"]\n', encoding="utf-8")
    cs = load_contracts([tmp_path])
    assert [c.id for c in cs.contracts] == ["g"]
    errs = [str(e) for e in cs.errors]
    assert any("a_bad.toml:2" in e and "syntax" in e for e in errs), errs
    assert any("c_dup.toml:2" in e and "duplicate" in e for e in errs), errs


def test_observation_dates_and_versions():
    text = '''schema_version = 1
[[contract]]
id = "o"
family = "kv_cache_write"
covers = ["_C_cache_ops::x"]
[[contract.observations]]
text = "seen"
status = "observed"
date = 2026-11-30
evidence = "probe record"
environment = { gpu = "H200" }
packages = { vllm = "0.26.0", torch = "2.11.0" }
[[contract.observations]]
text = "stale"
status = "old"
date = "yesterday"
evidence = "?"
'''
    cs, errs = parse_contract_text(text, "o.toml")
    assert cs[0].observations[0].date == "2026-11-30"
    assert cs[0].observations[0].packages["torch"] == "2.11.0"
    assert any("old" in e.message and e.line == 15 for e in errs), [str(e) for e in errs]
