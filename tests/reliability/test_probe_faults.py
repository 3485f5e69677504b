"""Probe faults: segfault, hang, out-of-memory, an agent killed mid-request, garbage on stdout.

Each fault ends at its timeout or at once, is recorded as an evidence record
saying what happened, and leaves no process behind (the agent's process group
and the test process's descendants are read from /proc). The last test injects
the same faults through the language server (``attnlens.runProbe``) and checks
that the server keeps serving.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from .lspdriver import ServerHandle, descendants, group_members, pid_alive

probes = pytest.importorskip("attnlens.runtime.probes", reason="attnlens.runtime (probe agent) not installed")
from attnlens.cache import Cache  # noqa: E402
from attnlens.runtime.agent import AgentPool  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "probe_fixtures"
AS_LIMIT_KB = 3_000_000  # RLIMIT_AS of the OOM agent: torch imports in ~1.5 GB of address space

RELFIX = {
    "relfix/__init__.py": "",
    "relfix/oom.py": '''"""Allocate until the address-space limit says no (refuses to run without such a limit)."""
import resource


def _limited():
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY or soft > 8 * 1024 ** 3:
        raise RuntimeError("relfix.oom needs an RLIMIT_AS below 8 GiB (it would eat the machine's memory)")


def allocate(*args, **kwargs):
    _limited()
    blocks = [bytearray(64 * 1024 * 1024)]  # some memory really in use
    blocks.append(bytearray(16 * 1024 ** 3))  # then more than the limit allows, at once
    return blocks


def raise_memory_error(*args, **kwargs):
    raise MemoryError("simulated: CUDA out of memory. Tried to allocate 80.00 GiB")
''',
    "relfix/oom_import.py": '''"""Importing this module runs out of memory (under an RLIMIT_AS)."""
from relfix.oom import allocate

allocate()
''',
}


@pytest.fixture(scope="module")
def fault_env(tmp_path_factory):
    from tests.probe_fixtures.runtime_support import require_target

    py = require_target()
    tmp = tmp_path_factory.mktemp("faults")
    for rel, text in RELFIX.items():
        p = tmp / "fix" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    scratch = tmp / "scratch"
    scratch.mkdir()
    env = {"PYTHONPATH": f"{FIXTURES}{os.pathsep}{tmp / 'fix'}", "PROBEFIX_DIR": str(scratch)}
    # the same interpreter under an address-space limit (what `ulimit -v` in a job script does)
    limited = tmp / "limited" / "python"
    limited.parent.mkdir()
    limited.write_text(f"#!/bin/sh\nulimit -v {AS_LIMIT_KB}\nexec {py} \"$@\"\n")
    limited.chmod(0o755)
    cache = Cache(tmp / "cache")  # the environment records are collected once per interpreter, then reused
    return {"python": py, "limited": str(limited), "env": env, "cache": cache, "scratch": scratch}


@pytest.fixture
def fe(fault_env):
    """Per test: a fresh agent pool, closed at the end (the leak check then sees every agent gone)."""
    pool = AgentPool()
    yield {**fault_env, "pool": pool}
    pool.close()


def run(fe, family, target, timeout=120, python=None, **kw):
    return probes.run_probe(python or fe["python"], family, target, "cpu", fe["cache"], timeout, env=fe["env"],
                            pool=fe["pool"], **kw)


def stored(fe, rec) -> dict:
    path = fe["cache"].folder / "evidence" / f"{rec.id}.json"
    assert path.is_file(), f"no evidence file for {rec.id}"
    data = json.loads(path.read_text())
    assert data["verdict"] == rec.verdict and data["message"] == rec.message
    return data


def assert_agents_gone(fe) -> None:
    for ag in fe["pool"].agents():
        for pid in ag.past_pids:
            if ag.pid == pid and ag.alive():
                continue  # the agent kept for the next request
            deadline = time.monotonic() + 5
            while (pid_alive(pid) or group_members(pid)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not pid_alive(pid), f"agent {pid} left running"
            assert not group_members(pid), f"agent group {pid} left running: {group_members(pid)}"


def children_recorded(fe) -> list[int]:
    out = []
    for name in os.listdir(fe["scratch"]):
        if name.startswith("hang-child-"):
            out.append(int((fe["scratch"] / name).read_text()))
            (fe["scratch"] / name).unlink()
    return out


def test_segfault(fe):
    t0 = time.monotonic()
    rec = run(fe, "lse_merge", "probefix.crash:crash_now")
    assert rec.verdict == "crashed" and "signal 11" in rec.message, rec.message
    assert "Segmentation fault" in rec.details["stderr_tail"]  # faulthandler's stack is evidence
    stored(fe, rec)
    rec = run(fe, "varlen", "probefix.segv_import:value")  # at import time, by signal
    assert rec.verdict == "crashed" and "signal 11" in rec.message
    assert time.monotonic() - t0 < 90
    assert_agents_gone(fe)


def test_hang_ends_at_the_timeout_and_kills_the_process_group(fe):
    t0 = time.monotonic()
    rec = run(fe, "decode", "probefix.crash:hang_forever", timeout=4)
    took = time.monotonic() - t0
    assert rec.verdict == "timeout" and rec.message == "probe timed out after 4 s"
    assert took < 4 + 10
    stored(fe, rec)
    kids = children_recorded(fe)
    assert kids, "the hanging fixture did not record its child"
    for pid in kids:
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid), "the hanging target's child survived the timeout"
    assert_agents_gone(fe)


def test_out_of_memory_under_an_address_space_limit(fe):
    rec = run(fe, "varlen", "relfix.oom_import:allocate", python=fe["limited"])
    assert rec.verdict == "import_error", (rec.verdict, rec.message, rec.details)
    assert "MemoryError" in json.dumps(rec.details), rec.details
    stored(fe, rec)
    rec = run(fe, "lse_merge", "relfix.oom:allocate", python=fe["limited"])
    text = json.dumps(rec.to_dict())
    assert rec.verdict in ("fail", "error", "crashed"), rec.verdict
    assert "MemoryError" in text or "memory" in text.lower(), text[:2000]
    stored(fe, rec)
    rec = run(fe, "lse_merge", "relfix.oom:raise_memory_error")
    assert rec.verdict in ("fail", "error") and "out of memory" in json.dumps(rec.cases)
    stored(fe, rec)
    # the limited agent still answers afterwards
    ok = run(fe, "lse_merge", "probefix.lse_merge:merge_attn_states_torch", python=fe["limited"])
    assert ok.verdict == "pass", ok.cases
    assert_agents_gone(fe)


def test_agent_killed_mid_request(fe):
    box = {}

    def go():
        box["rec"] = run(fe, "decode", "probefix.crash:hang_forever", timeout=120)

    t = threading.Thread(target=go)
    t0 = time.monotonic()
    t.start()
    # wait until the agent is in the request (its hanging child exists), then SIGKILL the agent
    agent = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        kids = [n for n in os.listdir(fe["scratch"]) if n.startswith("hang-child-")]
        if kids:
            agent = int(kids[0].split("-")[-1].split(".")[0])
            break
        time.sleep(0.05)
    assert agent is not None, "the request never started"
    os.kill(agent, signal.SIGKILL)
    t.join(30)
    assert not t.is_alive(), "run_probe did not return after its agent was killed"
    rec = box["rec"]
    assert time.monotonic() - t0 < 60
    assert rec.verdict == "crashed" and "signal 9" in rec.message, rec.message
    stored(fe, rec)
    for pid in children_recorded(fe):
        # the agent's own child is in its process group; the host kills the group when it sees the crash
        deadline = time.monotonic() + 5
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(pid), "the killed agent's child survived"
    assert_agents_gone(fe)
    ok = run(fe, "lse_merge", "probefix.lse_merge:merge_attn_states_torch")
    assert ok.verdict == "pass"


def test_garbage_on_stdout_does_not_forge_a_result(fe):
    rec = run(fe, "lse_merge", "probefix.crash:noisy_merge")
    assert rec.verdict == "pass", rec.cases  # the forged '{"id": 999999, "result": "forged"}' line was ignored
    rec = run(fe, "varlen", "probefix.noisy_import:value")
    assert rec.verdict != "pass"
    assert "forged" not in json.dumps(rec.cases)
    stored(fe, rec)
    assert_agents_gone(fe)


@pytest.mark.slow
def test_probe_faults_through_the_language_server(tmp_path, example_copy, fe):
    """runProbe on a segfaulting, a hanging and a garbage-printing target: each answer is an evidence record,
    the server keeps answering hovers, and closing the server leaves no agent behind."""
    srv = ServerHandle(example_copy, tmp_path / "cache", python=fe["python"], env=fe["env"])
    try:
        srv.start()
        srv.wait_indexed(90)
        verdicts = {}
        for target, family, timeout in (("probefix.crash:crash_now", "lse_merge", 120),
                                        ("probefix.crash:hang_forever", "decode", 4),
                                        ("probefix.crash:noisy_merge", "lse_merge", 120)):
            t0 = time.monotonic()
            rep = srv.command("attnlens.runProbe", [{"family": family, "target": target, "device": "cpu",
                                                     "timeout": timeout}], timeout=180)
            assert rep.ok, rep
            verdicts[target] = rep.result["verdict"]
            assert rep.result["id"] and "/" not in rep.result["id"]
            assert time.monotonic() - t0 < timeout + 60
            st = srv.command("attnlens.status", timeout=10)
            assert st.ok, st
        assert verdicts == {"probefix.crash:crash_now": "crashed", "probefix.crash:hang_forever": "timeout",
                            "probefix.crash:noisy_merge": "pass"}, verdicts
        children_recorded(fe)
        pid = srv.pid
    finally:
        srv.close()
    deadline = time.monotonic() + 10
    while descendants(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not descendants(pid)
