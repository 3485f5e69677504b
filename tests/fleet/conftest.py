"""A local multi-node Ray cluster for the fleet tests (Ray's own ray.cluster_utils.Cluster).

Every process the cluster starts (GCS, raylets, workers, and the probe agents the workers start)
inherits ``ATTNLENS_FLEET_TEST_MARK``; teardown stops the cluster and then kills, by pid, every
process that still carries the mark, so nothing survives a failing test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.probe_fixtures.runtime_support import FIXTURES, require_target

HERE = Path(__file__).resolve().parent
FLEET_FIXTURES = HERE / "fixtures"
MARK = "ATTNLENS_FLEET_TEST_MARK"
OBJECT_STORE = 80 * 2**20


def pytest_configure(config):
    config.addinivalue_line("markers", "fleet: starts a local multi-node Ray cluster (skips without Ray)")


def marked_pids(mark: str) -> list[int]:
    out = []
    needle = f"{MARK}={mark}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    out.append(int(d))
        except OSError:
            continue
    return out


def kill_marked(mark: str, wait_s: float = 5.0) -> list[int]:
    pids = marked_pids(mark)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    end = time.monotonic() + wait_s
    while time.monotonic() < end and marked_pids(mark):
        time.sleep(0.1)
    return pids


def second_interpreter(base: Path, target_python: str) -> str:
    """A second target interpreter: a venv without pip whose site-packages links the target's (torch, triton)."""
    venv = base / "venv-bad"
    subprocess.run([target_python, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    code = "import site, sys; print([p for p in site.getsitepackages() if p.endswith('site-packages')][0])"
    sp_target = subprocess.run([target_python, "-c", code], capture_output=True, text=True, check=True,
                               timeout=60).stdout.strip()
    sp_new = subprocess.run([str(venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=True,
                            timeout=60).stdout.strip()
    Path(sp_new, "_attnlens_target.pth").write_text(sp_target + "\n")
    return str(venv / "bin" / "python")


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'attnlens[fleet]'): fleet tests skip")
    from ray.cluster_utils import Cluster

    py = require_target(triton=True)
    base = tmp_path_factory.mktemp("fleet")
    mark = uuid.uuid4().hex
    saved = {k: os.environ.get(k) for k in (MARK, "RAY_ADDRESS")}
    os.environ[MARK] = mark
    os.environ.pop("RAY_ADDRESS", None)
    cluster = None
    try:
        bad_python = second_interpreter(base, py)
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "object_store_memory": OBJECT_STORE, "include_dashboard": False,
            "_system_config": {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                               "health_check_failure_threshold": 4, "health_check_timeout_ms": 500}})
        good = cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, resources={"fleet_good": 1})
        bad = cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE, resources={"fleet_bad": 1})
        cluster.wait_for_nodes(timeout=120)
        yield {"cluster": cluster, "address": cluster.address, "good": good, "bad": bad, "target_python": py,
               "bad_python": bad_python, "base": base, "mark": mark}
    finally:
        try:
            if ray.is_initialized():
                ray.shutdown()
            if cluster is not None:
                cluster.shutdown()
        finally:
            kill_marked(mark)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def host_env(kind: str, **extra: str) -> dict:
    env = {"PYTHONPATH": os.pathsep.join([str(FLEET_FIXTURES / kind), str(FLEET_FIXTURES / "common"), str(FIXTURES)])}
    env.update(extra)
    return env


def toml_str(s: str) -> str:
    return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'


__all__ = ["host_env", "toml_str", "kill_marked", "marked_pids", "second_interpreter", "sys"]
