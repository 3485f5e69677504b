"""The registry's cheap "does this import load" test (``Index.top_level_names``): which names a line scan
finds, that a miss falls back to the full resolution (a real missing name is still reported), and that the
read is a recorded dependency like a summary read."""

from __future__ import annotations

import sys

from attnlens.index import _top_level_names
from attnlens.rules import engine as E
from attnlens.workspace import Workspace


TEXT = '''"""doc"""
import os, json as _json
import a.b.c
from x.y import (
    p,  # comment
    q as qq,
)
from z import r, s as ss  # trailing
CONST = 1
TYPED: int = 2
if TYPE_CHECKING:
    hidden = 3
def f():
    inner = 1
async def g(): pass
class K:
    attr = 1
x == 2
'''


def test_top_level_names_of_a_text():
    assert _top_level_names(TEXT) == {"os", "_json", "a", "p", "qq", "r", "ss", "CONST", "TYPED", "f", "g", "K"}
    assert _top_level_names(None) is None


def _plugin(tmp_path, line: str):
    pkg = tmp_path / "plug" / "plug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "lib.py").write_text("def there():\n    return 1\nif True:\n    guarded = 2\n")
    (pkg / "user.py").write_text(line + "\n")
    return Workspace(tmp_path / "plug", python=sys.executable, cache_dir=tmp_path / "cache")


def test_a_hit_needs_no_summary_and_is_recorded(tmp_path):
    from attnlens.registry import Registry

    ws = _plugin(tmp_path, "from plug.lib import there")
    user = ws.index.module("plug.user")
    ws.index._modules.pop("plug.lib", None)
    rec = E._Recorder(ws.index)
    with rec as (hard, _soft):
        assert Registry(ws.resolver).broken_imports(user) == []
    assert "plug.lib" in hard and hard["plug.lib"] == ws.index.known_sha(ws.index.locate("plug.lib").path)
    assert "plug.lib" not in ws.index._modules  # answered by the scan, not a summary


def test_a_miss_falls_back_to_the_resolution(tmp_path):
    from attnlens.registry import Registry

    ws = _plugin(tmp_path, "from plug.lib import guarded, missing_name")
    user = ws.index.module("plug.user")
    broken = Registry(ws.resolver).broken_imports(user)
    # `guarded` (bound under a top-level `if`) is missed by the scan and found by the summary; `missing_name` is not
    assert len(broken) == 1 and broken[0].startswith("`plug.lib.missing_name` at user.py:1: ")
