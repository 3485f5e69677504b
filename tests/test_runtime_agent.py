"""The probe agent host: protocol, garbage on stdout, crashes, hangs, batches, asyncio, cleanup.

These tests use import-time misbehaviour of fixture modules (via ``introspect``), so
most of them never import torch in the agent and run in well under a second each.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time

import pytest

from attnlens.agent import AGENT_MAIN
from attnlens.runtime.agent import AgentPool, AgentProcess
from tests.probe_fixtures.runtime_support import (
    fixture_env,
    group_alive,
    group_members,
    pid_alive,
    require_target,
    scratch_dir,
)


@pytest.fixture
def agent():
    py = require_target()
    ag = AgentProcess(py, fixture_env())
    yield ag
    ag.close()
    for pid in ag.past_pids:
        assert not pid_alive(pid), f"agent {pid} left running"
        assert not group_alive(pid), f"process group {pid} left running: {group_members(pid)}"


def test_ping_and_stdout_protection(agent):
    rep = agent.request("ping", {"echo": "hi"}, timeout=30)
    assert rep.ok, rep
    r = rep.result
    assert r["pid"] == agent.pid and r["pgid"] == agent.pid  # own session: the agent leads its group
    assert r["echo"] == "hi"
    assert r["torch_imported"] is False  # torch only ever imported lazily
    assert r["agent_file"] == os.path.abspath(AGENT_MAIN)
    # the server side never imports torch or triton
    assert "torch" not in sys.modules and "triton" not in sys.modules


def test_unknown_method_is_an_error_reply_and_agent_survives(agent):
    rep = agent.request("no_such_method", {}, timeout=30)
    assert rep.status == "error" and rep.error["type"] == "MethodNotFound"
    pid = agent.pid
    assert agent.request("ping", timeout=30).ok
    assert agent.pid == pid  # same agent: an error is not a crash


def test_raw_protocol_bad_line_and_shutdown():
    """Speak the protocol directly: a bad line gets a ProtocolError reply, shutdown ends the agent."""
    py = require_target()
    p = subprocess.Popen([py, "-u", AGENT_MAIN], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = p.communicate('not json\n{"id": 7, "method": "ping", "params": {}}\n'
                               '{"id": 8, "method": "shutdown", "params": {}}\n', timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    lines = [json.loads(x) for x in out.splitlines() if x.strip()]
    assert lines[0]["id"] is None and lines[0]["error"]["type"] == "ProtocolError"
    assert lines[1]["id"] == 7 and lines[1]["result"]["pid"] == p.pid
    assert lines[2] == {"id": 8, "result": {"bye": True}}
    assert p.returncode == 0


def test_garbage_on_stdout_does_not_break_protocol(agent):
    # print(), sys.__stdout__, os.write(1, ...) and C puts() at import time, including a forged reply line
    rep = agent.request("introspect", {"symbol": "probefix.noisy_import:value"}, timeout=30)
    assert rep.ok, rep
    assert rep.result["status"] == "ok" and rep.result["qualname"] == "value"
    assert agent.garbage == []  # nothing but protocol lines reached the protocol stream
    time.sleep(0.2)
    tail = agent.stderr_tail(200)
    for junk in ("GARBAGE at import", "forged", "raw fd-1 garbage", "C stdio garbage"):
        assert junk in tail  # it all went to stderr
    assert agent.request("ping", timeout=30).ok


@pytest.mark.parametrize("module, sig", [("probefix.segv_import", 11), ("probefix.kill_import", 11)])
def test_segfault_is_reported_and_agent_restarts(agent, module, sig):
    first = agent.request("ping", timeout=30)
    pid = first.result["pid"]
    rep = agent.request("introspect", {"symbol": f"{module}:x"}, timeout=30)
    assert rep.status == "crashed", rep
    assert re.fullmatch(rf"probe crashed: signal {sig} after \d+\.\d s", rep.message), rep.message
    assert rep.signal == sig and rep.returncode == -sig
    assert "Segmentation fault" in rep.stderr_tail  # faulthandler's report from the agent
    assert not pid_alive(pid) and not group_alive(pid)
    again = agent.request("ping", timeout=30)  # restarted lazily
    assert again.ok and again.result["pid"] != pid
    assert agent.crashes == 1 and agent.starts == 2


def test_exit_code_is_reported(agent):
    rep = agent.request("introspect", {"symbol": "probefix.exit_import:x"}, timeout=30)
    assert rep.status == "crashed"
    assert re.fullmatch(r"probe crashed: exit code 3 after \d+\.\d s", rep.message), rep.message
    assert agent.request("ping", timeout=30).ok


def test_hang_times_out_kills_group_and_batch_goes_on(agent):
    t0 = time.monotonic()
    reps = agent.batch([("ping", {}), ("introspect", {"symbol": "probefix.hang_import:x"}), ("ping", {})],
                       timeout=5)
    elapsed = time.monotonic() - t0
    assert [r.status for r in reps] == ["ok", "timeout", "aborted"]
    assert reps[1].message == "probe timed out after 5 s"
    assert 5.0 <= reps[1].elapsed_s < 8.0 and elapsed < 9.0
    pid = reps[0].result["pid"]
    assert not pid_alive(pid) and not group_alive(pid)
    child_file = os.path.join(scratch_dir(), f"hang-child-{pid}.pid")
    with open(child_file) as f:
        child = int(f.read())
    os.unlink(child_file)
    deadline = time.monotonic() + 5
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child), "the hanging fixture's child survived the kill"
    assert agent.request("ping", timeout=30).ok
    assert agent.timeouts == 1


def test_batch_is_pipelined_in_order(agent):
    calls = [("ping", {"echo": i}) for i in range(5)]
    calls.insert(2, ("introspect", {"symbol": "probefix.noisy_import:value"}))
    reps = agent.batch(calls, timeout=30)
    assert all(r.ok for r in reps)
    echoes = [r.result.get("echo") for r in reps if r.method == "ping"]
    assert echoes == [0, 1, 2, 3, 4]


def test_asyncio_use():
    py = require_target()

    async def main():
        with AgentPool() as pool:
            a = pool.get(py, fixture_env())
            b = pool.get(py, fixture_env(EXTRA_FLAG="1"))
            assert a is not b and pool.get(py, fixture_env()) is a
            ra, rb = await asyncio.gather(a.arequest("ping", timeout=30), b.arequest("ping", timeout=30))
            batch = await a.abatch([("ping", {}), ("ping", {})], timeout=30)
            return ra, rb, batch, [a, b]

    ra, rb, batch, agents = asyncio.run(main())
    assert ra.ok and rb.ok and ra.result["pid"] != rb.result["pid"]
    assert [r.status for r in batch] == ["ok", "ok"]
    for ag in agents:
        for pid in ag.past_pids:
            assert not pid_alive(pid)


def test_pool_close_leaves_nothing_running():
    py = require_target()
    pool = AgentPool()
    agents = [pool.get(py, fixture_env(N=str(i))) for i in range(3)]
    for ag in agents:
        assert ag.request("ping", timeout=30).ok
    pids = [p for ag in agents for p in ag.past_pids]
    assert all(pid_alive(p) for p in pids)
    pool.close()
    assert not any(pid_alive(p) or group_alive(p) for p in pids)
    with pytest.raises(RuntimeError):
        pool.get(py)


def test_missing_interpreter_is_reported_not_raised(tmp_path):
    ag = AgentProcess(str(tmp_path / "no-python"), {})
    rep = ag.request("ping", timeout=5)
    assert rep.status == "error" and rep.error["type"] == "AgentStartError"
    assert "no-python" in rep.message
    ag.close()


def test_close_during_a_request_kills_at_once():
    import threading

    py = require_target()
    ag = AgentProcess(py, fixture_env())
    assert ag.request("ping", timeout=30).ok
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("rep", ag.request(
        "introspect", {"symbol": "probefix.hang_import:x"}, timeout=60)))
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    ag.close()
    t.join(timeout=10)
    assert time.monotonic() - t0 < 5 and not t.is_alive()
    assert out["rep"].status == "crashed" and out["rep"].signal == 9
    for pid in ag.past_pids:
        assert not pid_alive(pid) and not group_alive(pid)
    with pytest.raises(RuntimeError):
        ag.request("ping", timeout=5)


def test_target_reading_stdin_cannot_swallow_requests(agent):
    rep = agent.batch([("introspect", {"symbol": "probefix.stdin_reader:data"}), ("ping", {"echo": "after"})],
                      timeout=30)
    assert [r.status for r in rep] == ["ok", "ok"]
    assert rep[1].result["echo"] == "after"
