"""Environment records: collection in the target interpreter, hashing, reuse, change detection.

A "MetaX-like" shim is put in front of the agent: a ``vllm_metax`` package with a
version (dist-info), a ``$MACA_PATH/Version.txt`` and a fake ``mx-smi`` on PATH.
Changing the shim's version must change the record's hash and be reported.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from attnlens.cache import Cache, is_safe_id
from attnlens.runtime import environment as envmod
from tests.probe_fixtures.runtime_support import fixture_env, fixture_pythonpath, require_target, shared_pool


def _write_shim_version(shim: Path, version: str) -> None:
    for old in shim.glob("vllm_metax-*.dist-info"):
        shutil.rmtree(old)
    d = shim / f"vllm_metax-{version}.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm_metax\nVersion: {version}\n")
    # a vLLM platform plugin: the agent finds it by its entry point, not by its name
    (d / "entry_points.txt").write_text("[vllm.platform_plugins]\nshim = vllm_metax:register\n")


@pytest.fixture(scope="module")
def shim(tmp_path_factory):
    shim = tmp_path_factory.mktemp("shim")
    (shim / "vllm_metax").mkdir()
    (shim / "vllm_metax" / "__init__.py").write_text('"""shim"""\n')
    _write_shim_version(shim, "0.1.0")
    maca = shim / "maca"
    maca.mkdir()
    (maca / "Version.txt").write_text("Version:2.33.0.4\n")
    bin_ = shim / "bin"
    bin_.mkdir()
    smi = bin_ / "mx-smi"
    smi.write_text("#!/bin/sh\necho 'mx-smi  version: 2.1.9'\necho 'BIOS Version: 1.2.3'\n"
                   "echo 'Kernel Mode Driver Version: 2.9.0'\n")
    smi.chmod(0o755)
    return shim


@pytest.fixture(scope="module")
def ctx(request, shim, tmp_path_factory):
    py = require_target()
    env = fixture_env(PYTHONPATH=f"{shim}{os.pathsep}{fixture_pythonpath()}", MACA_PATH=str(shim / "maca"),
                      PATH=f"{shim / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    cache = Cache(tmp_path_factory.mktemp("envcache"))
    return {"python": py, "env": env, "pool": shared_pool(request.config), "cache": cache, "shim": shim}


def _load(ctx, **kw):
    return envmod.load_or_collect(ctx["python"], ctx["cache"], env=ctx["env"], pool=ctx["pool"], **kw)


def test_record_hash_reuse_and_change(ctx, monkeypatch):
    rec, changed, prev = _load(ctx)
    assert changed is False and prev is None
    h1 = rec["hash"]
    assert re.fullmatch(r"[0-9a-f]{16}", h1)
    # what the target offers, read in the target
    pk = rec["packages"]
    assert pk["vllm_metax"]["version"] == "0.1.0" and pk["vllm_metax"]["vllm_plugin"] is True  # by its entry point
    assert pk["vllm_metax"]["location"] == str(ctx["shim"] / "vllm_metax" / "__init__.py")
    assert pk["torch"]["version"].startswith("2.")
    assert rec["torch"]["version"] == pk["torch"]["version"] and rec["torch"]["git_version"]
    assert rec["torch"]["cxx11_abi"] in (True, False)
    assert rec["maca"]["version"] == "2.33.0.4" and rec["maca"]["version_txt"] == "Version:2.33.0.4"
    assert rec["maca"]["mx_smi"]["present"] is True and rec["maca"]["mx_smi"]["bios_version"] == "1.2.3"
    assert rec["python"]["executable"]
    assert "MACA 2.33.0.4" in envmod.summary(rec) and "vllm_metax 0.1.0" in envmod.summary(rec)
    stored = envmod.stored(ctx["python"], ctx["cache"], ctx["env"])
    assert stored["hash"] == h1 and stored["packages"]["vllm_metax"]["version"] == "0.1.0"
    assert envmod.summary(stored) == envmod.summary(rec)

    # unchanged environment: the stored record is reused without asking the agent
    def boom(*a, **k):
        raise AssertionError("collect() called although nothing changed")

    monkeypatch.setattr(envmod, "collect", boom)
    rec2, changed2, prev2 = _load(ctx)
    assert (rec2["hash"], changed2, prev2) == (h1, False, h1)
    monkeypatch.undo()

    # a forced refresh collects again: same identity, same hash (timestamps are excluded)
    rec3, changed3, _ = _load(ctx, refresh=True)
    assert rec3["hash"] == h1 and changed3 is False

    # the plugin is upgraded: the fingerprint notices, the hash changes, the change is reported
    _write_shim_version(ctx["shim"], "0.2.0")
    rec4, changed4, prev4 = _load(ctx)
    assert changed4 is True and prev4 == h1 and rec4["hash"] != h1
    assert rec4["packages"]["vllm_metax"]["version"] == "0.2.0"
    doc = envmod.stored_document(ctx["python"], ctx["cache"], ctx["env"])
    assert doc["previous_hash"] == h1 and doc["hash"] == rec4["hash"] and doc["changed_at"]
    assert [h["hash"] for h in doc["history"]] == [h1, rec4["hash"]]
    st = envmod.status(ctx["python"], ctx["cache"], ctx["env"])
    assert st["known"] and st["hash"] == rec4["hash"] and st["previous_hash"] == h1 and st["stale"] is False
    assert st["summary"].endswith(f"[env {rec4['hash'][:8]}]")
    assert envmod.status("/nonexistent/python", ctx["cache"])["known"] is False


def test_env_file_is_cache_safe_and_atomic(ctx):
    key = envmod.python_key(ctx["python"], ctx["env"])
    assert is_safe_id(key + ".json")
    folder = ctx["cache"].folder / "env"
    files = sorted(p.name for p in folder.iterdir())
    assert f"{key}.json" in files and not [f for f in files if f.endswith(".tmp")]


def test_identity_hash_ignores_volatile_fields():
    a = {"torch": {"version": "2.13.0"}, "collected_at": "2026-01-01T00:00:00Z", "collect_s": 3.1}
    b = {"torch": {"version": "2.13.0"}, "collected_at": "2026-02-02T00:00:00Z", "collect_s": 9.9, "hash": "x"}
    c = {"torch": {"version": "2.13.1"}, "collected_at": "2026-01-01T00:00:00Z"}
    assert envmod.identity_hash(a) == envmod.identity_hash(b) != envmod.identity_hash(c)


def test_identity_ignores_tool_screens_but_keeps_versions():
    base = {"maca": {"mx_smi": {"present": True, "bios_version": "1.2.3", "head": "GPU0 41C 63W 2%"}}}
    hot = {"maca": {"mx_smi": {"present": True, "bios_version": "1.2.3", "head": "GPU0 77C 350W 99%"}}}
    new = {"maca": {"mx_smi": {"present": True, "bios_version": "1.2.4", "head": "GPU0 41C 63W 2%"}}}
    assert envmod.identity_hash(base) == envmod.identity_hash(hot) != envmod.identity_hash(new)
    assert base["maca"]["mx_smi"]["head"] == "GPU0 41C 63W 2%"  # the record itself is untouched


def test_hash_does_not_depend_on_agent_history(request):
    """Records come from a pristine process, so probes run before do not change the hash."""
    py = require_target()
    pool = shared_pool(request.config)
    env = fixture_env()
    h1 = envmod.collect(py, env, pool=pool)["hash"]
    ag = pool.get(py, env)  # the agent probes would use: load an op library and Triton kernels there
    assert ag.request("introspect", {"symbol": "probefix_ops::scaled_add", "module": "probefix.ops"}, timeout=120).ok
    assert ag.request("introspect", {"symbol": "probefix.kernels:scale_kernel"}, timeout=120).ok
    h2 = envmod.collect(py, env, pool=pool)["hash"]
    assert h1 == h2


def test_unusable_interpreter_is_an_error(tmp_path):
    with pytest.raises(envmod.EnvironmentError_) as ei:
        envmod.load_or_collect(str(tmp_path / "nope" / "python"), Cache(tmp_path / "c"))
    assert "cannot start the agent" in str(ei.value)


def test_plain_record_without_vendor_tools(request):
    """No GPU tools on a CPU machine: the record says so instead of failing."""
    py = require_target()
    rec = envmod.collect(py, fixture_env(), pool=shared_pool(request.config))
    if shutil.which("nvidia-smi") is None:
        assert rec["nvidia"]["present"] is False
    if shutil.which("mx-smi") is None and not os.environ.get("MACA_PATH") and not os.path.isdir("/opt/maca"):
        assert rec["maca"]["maca_path"] is None and rec["maca"]["mx_smi"]["present"] is False
    assert rec["gpu"]["count"] == len(rec["torch"]["devices"])
    if rec["gpu"]["count"] == 0:
        assert "no GPU" in envmod.summary(rec)
    short = envmod.short(rec)
    assert short["hash"] == rec["hash"] and short["torch"] == rec["torch"]["version"]
