"""The architecture contract (`.importlinter`, import-linter) holds, and it catches a wrong import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

LINT = Path(sys.executable).with_name("lint-imports")
pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install import-linter)")


def _lint(server_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(server_dir))
    return subprocess.run([str(LINT), str(REPO / ".importlinter"), "--no-cache"], cwd=server_dir, env=env,
                          capture_output=True, text=True, timeout=300)


def test_contracts_are_kept():
    r = _lint(REPO / "server")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "5 kept, 0 broken" in r.stdout


def test_a_core_module_importing_the_lsp_breaks_the_contract(tmp_path):
    shutil.copytree(REPO / "server" / "attnlens", tmp_path / "attnlens", ignore=shutil.ignore_patterns("__pycache__"))
    res = tmp_path / "attnlens" / "resolver.py"
    res.write_text(res.read_text() + "\n\ndef _wrong():\n    from .lsp import server  # noqa: F401\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert "Core analysis does not import the features above it BROKEN" in r.stdout
    assert "attnlens.resolver -> attnlens.lsp.server" in r.stdout


def test_a_check_importing_the_engine_breaks_the_contract(tmp_path):
    """Checks are written against the rule API (`rules/api.py`); the engine finds and runs them. A check
    that reaches into the engine (a hidden circle: the engine imports the checks) fails the contract."""
    shutil.copytree(REPO / "server" / "attnlens", tmp_path / "attnlens", ignore=shutil.ignore_patterns("__pycache__"))
    chk = tmp_path / "attnlens" / "rules" / "checks_shapes.py"
    chk.write_text(chk.read_text() + "\n\ndef _wrong():\n    from .engine import Engine  # noqa: F401\n")
    r = _lint(tmp_path)
    assert r.returncode != 0
    assert "Check modules use the rule API, never the engine that runs them BROKEN" in r.stdout
    assert "attnlens.rules.checks_shapes -> attnlens.rules.engine" in r.stdout


def test_every_check_module_is_found_and_under_the_contract():
    """One mechanism finds the checks (every `checks_*` module of the package), and the contract above
    covers each of them: a new check module that is not listed there fails here."""
    import configparser

    from attnlens.rules.engine import check_modules

    found = {f"attnlens.rules.{m}" for m in check_modules()}
    on_disk = {f"attnlens.rules.{p.stem}" for p in (REPO / "server" / "attnlens" / "rules").glob("checks_*.py")}
    assert found == on_disk and len(found) >= 8
    cfg = configparser.ConfigParser()
    cfg.read(REPO / ".importlinter")
    listed = set(cfg["importlinter:contract:checks-use-the-rule-api"]["source_modules"].split())
    assert found <= listed, sorted(found - listed)


# private state of the core that other modules reached into (issue 12); each has a public accessor now
_PRIVATE = {"_overlays": "Index.overlay_text", "_sha_memo": "Index.known_sha / has_known_sha",
            "_path_to_name": "Index.module_name_of", "_cpp_files": "OpRegistry.cpp_files", "_part": "Registry.part",
            "_gen": "Engine.generation"}


def test_no_module_reaches_into_the_cores_private_state():
    """`obj._overlays`, `getattr(obj, "_sha_memo", ...)` and the like outside `self`/`cls` (an AST scan of the
    package): the reach-ins issue 12 lists go through public methods now, and new ones fail here."""
    import ast

    found = []
    for py in sorted((REPO / "server" / "attnlens").rglob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"), str(py))
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in _PRIVATE:
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    name = node.attr
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in _PRIVATE):
                name = node.args[1].value
            if name:
                found.append(f"{py.relative_to(REPO)}:{node.lineno} {name} (use {_PRIVATE[name]})")
    assert found == []
