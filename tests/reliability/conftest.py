"""Shared fixtures of the reliability and security tests.

* ``leak_check`` (autouse): every process a test starts must be gone when it ends
  (descendants of the test process, read from /proc; no psutil).
* ``example_copy``: a fresh copy of examples/mini-metax.
* ``target_python``: the probe target interpreter (skips when it lacks torch).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from .lspdriver import EXAMPLE, cmdline, descendants

REPO = Path(__file__).resolve().parents[2]


def copy_example(dst: Path) -> Path:
    shutil.copytree(EXAMPLE, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.fixture
def example_copy(tmp_path) -> Path:
    return copy_example(tmp_path / "ws")


def orphans_of(nodeid: str) -> list[int]:
    """Processes started during test ``nodeid`` that are no longer our descendants (reparented to init):
    found by the PYTEST_CURRENT_TEST variable they inherited."""
    mine = set(descendants(os.getpid())) | {os.getpid()}
    needle = f"PYTEST_CURRENT_TEST={nodeid} (".encode()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in mine:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{d}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if needle in env and state != "Z":
            out.append(int(d))
    return out


@pytest.fixture(autouse=True)
def leak_check(request):
    """Fail a test that leaves a process behind, ours or orphaned (and kill what it left)."""
    before = set(descendants(os.getpid()))
    yield
    deadline = time.monotonic() + 10
    while True:
        left = [p for p in descendants(os.getpid()) if p not in before] + orphans_of(request.node.nodeid)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if left:
        names = {p: cmdline(p) for p in left}
        for p in left:
            try:
                os.kill(p, 9)
            except OSError:
                pass
        pytest.fail(f"processes left behind: {names}")


@pytest.fixture
def target_python() -> str:
    from tests.probe_fixtures.runtime_support import require_target

    return require_target()
