"""Shared set-up for the runtime tests (tests/test_runtime_*.py).

* the target interpreter: ``$ATTNLENS_TEST_TARGET_PYTHON`` or ``<repo>/.venv-target/bin/python``;
  tests skip with a clear reason when it lacks torch (or triton, for Triton fixtures)
* one agent pool for the whole session, closed when pytest finishes (``config.add_cleanup``)
* the fixture package ``probefix`` on the agent's PYTHONPATH, and ``PROBEFIX_DIR`` (a scratch
  folder where hanging fixtures record the pids of the children they start)
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from attnlens.runtime.agent import AgentPool
from tests.helpers import group_members, pid_alive  # noqa: F401 - re-exported

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "probe_fixtures"

_STATE: dict = {"pool": None, "dir": None}


def target_python() -> str:
    return os.environ.get("ATTNLENS_TEST_TARGET_PYTHON") or str(REPO / ".venv-target" / "bin" / "python")


@functools.lru_cache(maxsize=None)
def _has(python: str, module: str) -> bool:
    if not os.path.exists(python):
        return False
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    try:
        return subprocess.run([python, "-c", code], timeout=60, capture_output=True).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require_target(triton: bool = False) -> str:
    py = target_python()
    if not os.path.exists(py):
        pytest.skip(f"target interpreter {py} not found (set ATTNLENS_TEST_TARGET_PYTHON or run "
                    f"scripts/setup.sh --target)")
    if not _has(py, "torch"):
        pytest.skip(f"target interpreter {py} has no torch")
    if triton and not _has(py, "triton"):
        pytest.skip(f"target interpreter {py} has no triton (needed for TRITON_INTERPRET=1 fixtures)")
    return py


def scratch_dir() -> str:
    if _STATE["dir"] is None:
        _STATE["dir"] = tempfile.mkdtemp(prefix="attnlens-probefix-")
    return _STATE["dir"]


def fixture_pythonpath() -> str:
    """The fixtures first, then whatever PYTHONPATH the test run has (e.g. a vLLM source tree on a GPU box)."""
    inherited = os.environ.get("PYTHONPATH")
    return str(FIXTURES) + (os.pathsep + inherited if inherited else "")


def fixture_env(**extra: str | None) -> dict:
    env: dict = {"PYTHONPATH": fixture_pythonpath(), "PROBEFIX_DIR": scratch_dir()}
    env.update(extra)
    return env


def shared_pool(config) -> AgentPool:
    if _STATE["pool"] is None or _STATE["pool"].closed:
        pool = AgentPool()
        _STATE["pool"] = pool

        def cleanup():
            pool.close()
            d = _STATE.get("dir")
            if d:
                shutil.rmtree(d, ignore_errors=True)
                _STATE["dir"] = None

        config.add_cleanup(cleanup)
    return _STATE["pool"]


def group_alive(pgid: int | None) -> bool:
    return bool(group_members(pgid))


def line_of(path: Path, text: str) -> int:
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if text in line:
            return i
    raise AssertionError(f"{text!r} not in {path}")
