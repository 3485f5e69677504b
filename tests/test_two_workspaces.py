"""Two workspaces in one process share no state (issue 12): the rules engine and its findings, the drift
report, the platform defaults and the index's path memo belong to one workspace (``Query.state``, the
Index, the Query), never to a module-level memo that another workspace reads too; and a workspace that is
dropped is freed with all of it (``tests/test_architecture.py`` lists the module-level memos allowed)."""

from __future__ import annotations

import gc
import os
import shutil
import sys
import weakref

from attnlens.rules.engine import check_paths, engine_for
from attnlens.target import TargetInfo
from attnlens.upgrade.drift import drift_findings, hover_note, memoised_report
from attnlens.upgrade.upstream import UpstreamSource
from attnlens.workspace import Workspace

from .helpers import write_tree
from .rules.conftest import FIXTURES, make_workspace
from .upgrade.fixtures import PLUGIN, V1, V2


def _rules(ws) -> list[tuple]:
    return sorted((os.path.relpath(f.path, ws.root), f.line, f.rule) for f in check_paths(ws))


def test_findings_do_not_leak_between_workspaces(tmp_path):
    """The same package (``fxplat``) in two roots, one cache folder: B's copy of ``shapes.py`` reshapes
    nothing per request. Each workspace's findings are its own, asked in any order."""
    a_root, b_root = tmp_path / "a", tmp_path / "b"
    shutil.copytree(FIXTURES / "platform", a_root)
    shutil.copytree(FIXTURES / "platform", b_root)
    (b_root / "fxplat" / "shapes.py").write_text("def flat(query, num_heads):\n    return query.view(-1, num_heads)\n")
    lone_b = _rules(make_workspace(b_root, tmp_path / "lone"))
    a, b = make_workspace(a_root, tmp_path / "cache"), make_workspace(b_root, tmp_path / "cache")
    first_a = _rules(a)
    assert ("fxplat/shapes.py", 9, "AL114") in first_a
    assert _rules(b) == lone_b and not any(r == "AL114" for _p, _l, r in lone_b)
    assert _rules(a) == first_a
    assert engine_for(a) is not engine_for(b)
    assert a.query.state("attnlens.rules.engine")["engine"] is engine_for(a)
    assert engine_for(b).ws is b


def test_drift_does_not_leak_between_workspaces(tmp_path):
    """Two plugins against the same two upstream versions (one old source: the same memo key, the same
    index generation): B dropped ``plugin_only``, whose call breaks in A. Each workspace's drift findings,
    hovers and memoised report are its own."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    write_tree(v1, V1)
    write_tree(v2, V2)
    flash = "miniplug/attention/backends/flash.py"
    b_plugin = dict(PLUGIN, **{flash: PLUGIN[flash][:PLUGIN[flash].index("        def plugin_only(x):")]})
    target = TargetInfo(python=sys.executable, sys_path=[str(v2)], stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    old = UpstreamSource(str(v1), str(v1), "1.0.0", "path", "fakevllm")
    wss = []
    for name, plugin in (("a", PLUGIN), ("b", b_plugin)):
        write_tree(tmp_path / name, plugin)
        wss.append(Workspace(tmp_path / name, target=target, cache_dir=tmp_path / f"cache-{name}"))
    a, b = wss
    fa = drift_findings(a, old)
    assert memoised_report(b) is None  # A's report is A's
    fb = drift_findings(b, old)
    assert "AL307" in {f["rule"] for f in fa} and "AL307" not in {f["rule"] for f in fb}
    assert all(f["path"].startswith(str(a.root)) for f in fa) and all(f["path"].startswith(str(b.root)) for f in fb)
    assert memoised_report(a) is not memoised_report(b)
    assert hover_note(a, "miniplug.attention.backends.flash.plugin_only", old) is not None
    assert hover_note(b, "miniplug.attention.backends.flash.plugin_only", old) is None
    assert drift_findings(a, old) == fa


def test_a_workspace_sees_paths_as_they_are_not_as_another_memoised_them(tmp_path):
    """The index's ``realpath`` memo is per index: a link A resolved, then pointed elsewhere, is seen by B
    where it points now (a process-wide memo answered with A's module)."""
    write_tree(tmp_path / "a", {"apkg/__init__.py": "", "apkg/mod.py": "X = 1\n"})
    write_tree(tmp_path / "b", {"bpkg/__init__.py": "", "bpkg/mod.py": "X = 2\n"})
    link = tmp_path / "open.py"
    link.symlink_to(tmp_path / "a" / "apkg" / "mod.py")
    target = TargetInfo(python=sys.executable, sys_path=[], stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    a = Workspace(tmp_path / "a", target=target, use_cache=False)
    assert a.query.module_for_path(str(link)).name == "apkg.mod"
    link.unlink()
    link.symlink_to(tmp_path / "b" / "bpkg" / "mod.py")
    b = Workspace(tmp_path / "b", target=target, use_cache=False)
    m = b.query.module_for_path(str(link))
    assert m is not None and m.name == "bpkg.mod"
    assert a.query.module_for_path(str(tmp_path / "a" / "apkg" / "mod.py")).name == "apkg.mod"


def test_a_dropped_workspace_is_freed(tmp_path):
    """Checked, drift-reported and rendered with the platform defaults, a workspace that is dropped is
    freed: no module-level memo holds its engine, its report or its defaults (a weak-keyed memo whose value
    refers back to the workspace kept it, and its whole index, alive for the life of the process)."""
    write_tree(tmp_path / "v1", V1)
    write_tree(tmp_path / "v2", V2)
    write_tree(tmp_path / "plugin", PLUGIN)
    target = TargetInfo(python=sys.executable, sys_path=[str(tmp_path / "v2")],
                        stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    ws = Workspace(tmp_path / "plugin", target=target, cache_dir=tmp_path / "cache")
    old = UpstreamSource(str(tmp_path / "v1"), str(tmp_path / "v1"), "1.0.0", "path", "fakevllm")
    assert check_paths(ws) is not None
    assert drift_findings(ws, old)
    ws.query.platform_defaults().provider_for("_C")  # (memoised on the query)
    ws.close()
    ref = weakref.ref(ws)
    engine = weakref.ref(engine_for(ws))
    del ws
    gc.collect()
    assert ref() is None and engine() is None
