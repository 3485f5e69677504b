"""Shared fixtures for the contract-rules tests."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
FIXTURES = HERE / "fixtures"
MINI = REPO / "examples" / "mini-metax"
PYTHON = sys.executable  # the venv interpreter: real vllm 0.26.0 sources are importable from it

MARK = re.compile(r"#\s*(ruleid|ok)\s*:\s*([A-Za-z0-9_, ]+)")


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("attnlens-rules-cache")


def make_workspace(root, cache_root=None, use_cache=True):
    from attnlens.workspace import Workspace

    return Workspace(root, python=PYTHON, cache_dir=cache_root, use_cache=use_cache and cache_root is not None)


@pytest.fixture(scope="session")
def checked(cache_root):
    """``checked(root)`` -> (workspace, engine, findings) of a whole-workspace check of ``root``, run once
    per root and test session (the test modules that read the same example share one check)."""
    from attnlens.rules.engine import Engine

    done: dict = {}

    def run(root):
        key = Path(root).resolve()
        if key not in done:
            ws = make_workspace(root, cache_root)
            eng = Engine(ws)
            done[key] = (ws, eng, eng.check_paths(None))
        return done[key]

    return run


def markers(path: Path) -> list[tuple[str, str, int, int]]:
    """(kind, rule, target line, marker line) for Semgrep-style markers: the target is the
    next line that is neither blank nor a marker line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        for m in MARK.finditer(line):
            target = None
            for j in range(i + 1, len(lines) + 1):
                t = lines[j - 1]
                if t.strip() and not MARK.search(t):
                    target = j
                    break
            for rule in (x.strip().upper() for x in m.group(2).split(",")):
                if rule:
                    out.append((m.group(1), rule, target, i))
    return out


def fixture_roots() -> list[Path]:
    return sorted(p for p in FIXTURES.iterdir() if (p / "pyproject.toml").exists())
