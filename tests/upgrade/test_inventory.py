"""The inventory: every file in scope appears, with items, counterparts, reasons and actions."""

from __future__ import annotations

import json

from attnlens.upgrade.inventory import ACTIONS, build_inventory, to_markdown

from .fixtures import make


def test_every_file_and_actions(tmp_path):
    ws, old, _new = make(tmp_path)
    inv = build_inventory(ws, old=old)
    paths = [f.path for f in inv.files]
    assert paths == sorted(paths)
    for p in ("miniplug/attention/__init__.py", "miniplug/attention/ops/__init__.py",
              "miniplug/attention/backends/__init__.py", "miniplug/attention/backends/flash.py",
              "miniplug/attention/backends/unused.py"):
        assert p in paths, p
    empty = next(f for f in inv.files if f.path == "miniplug/attention/ops/__init__.py")
    assert not empty.items and empty.notes and empty.action == "keep"
    flash = next(f for f in inv.files if f.path.endswith("flash.py"))
    items = {it.name: it for it in flash.items}
    assert all(it.action in ACTIONS and it.validation for it in flash.items)
    be = items["MacaFlashBackend"]
    assert be.kind == "backend" and be.active and any("FLASH" in r for r in be.registration)
    assert be.upstream["symbol"] == "fakevllm.attention.backends.flash.FlashBackend"
    assert items["FlashBuilder"].kind == "builder" and items["FlashBuilder"].action == "sync"
    assert "fast_build" in json.dumps(items["FlashBuilder"].drift)
    # callers: helper is called by plugin_only and forward
    assert {c["by"] for c in items["helper"].callers} >= {"miniplug.attention.backends.flash.plugin_only"}
    # differences with the reason the code gives
    impl = items["FlashImpl"]
    d = next(x for x in impl.differences if x.what.startswith("forward() body"))
    assert "maca kernel needs a contiguous query" in d.reason
    # inactive adaptation
    unused = next(f for f in inv.files if f.path.endswith("unused.py"))
    assert unused.items[0].name == "never_called" and not unused.items[0].active
    assert unused.items[0].action == "keep" and "inactive" in unused.items[0].why
    # removed upstream import -> the file is to be synced
    assert flash.action in ("fix", "sync")
    md = to_markdown(inv)
    for p in paths:
        assert f"`{p}`" in md
    assert "**Drift from (old):** fakevllm 1.0.0" in md
    js = json.dumps(inv.to_json())
    assert '"actions"' in js and '"subject"' in js
    ws.close()


def test_without_old_version_and_scope(tmp_path):
    ws, _old, _new = make(tmp_path)
    inv = build_inventory(ws, globs=["miniplug/attention/backends/unused.py"])
    assert [f.path for f in inv.files] == ["miniplug/attention/backends/unused.py"]
    assert inv.old is None and inv.counts()["sync"] == 0
    assert "not given" in to_markdown(inv)
    ws.close()
