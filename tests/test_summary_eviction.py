"""Summaries read from the cache folder are dropped past ``Index.SUMMARY_KEEP_MAX`` and read back when asked again.

Memos hold ``Module`` objects; the summary behind one can go and come back from the cache folder (same sha, same
content). Answers do not change with the bound: the traces of every call site of a small plugin whose chains
cross four modules are equal with every summary kept and with at most two kept at a time.
"""

from __future__ import annotations

import json
import os

import pytest

from attnlens import gcpolicy
from tests.helpers import fixture_ws


@pytest.fixture(autouse=True)
def _no_freeze(monkeypatch):
    monkeypatch.setattr(gcpolicy, "FREEZE_AFTER_LOADS", False)  # (an in-process server earlier sets it)

PLUGIN = {
    "fx/__init__.py": "",
    "fx/k.py": '''
        import triton

        @triton.jit
        def _scale(x):
            pass

        @triton.jit
        def _copy(x):
            pass
    ''',
    "fx/low.py": '''
        from fx.k import _scale, _copy

        def launch(x, fast):
            if fast:
                _scale[(1,)](x)
            else:
                _copy[(1,)](x)
    ''',
    "fx/mid.py": '''
        from fx.low import launch

        class Op:
            def forward(self, x):
                return launch(x, self.fast)
    ''',
    "fx/top.py": '''
        from fx import mid
        from fx.low import launch

        def run(x):
            op = mid.Op()
            op.forward(x)
            launch(x, True)
    ''',
    "fx/other.py": '''
        from fx.top import run
        from fx.mid import Op

        def main(x):
            run(x)
            Op().forward(x)
    ''',
}
SITE = {"triton/__init__.py": "def jit(fn=None, **kw):\n    return fn\n"}
NAMES = ("fx", "fx.k", "fx.low", "fx.mid", "fx.top", "fx.other")


def _answers(ws) -> dict:
    out = {}
    base = str(ws.root.parent)
    for name in NAMES:
        mod = ws.index.module(name)
        for cs in mod.summary.calls:
            tr = ws.resolver.trace_call(mod, cs)
            out[(name, cs.line, cs.col)] = json.dumps(tr.to_json(), sort_keys=True).replace(base, "")
    return out


def test_answers_are_the_same_with_two_summaries_kept(tmp_path, monkeypatch):
    want = _answers(fixture_ws(tmp_path / "all", PLUGIN, SITE, cache=True))
    assert len(want) == 8
    ws = fixture_ws(tmp_path / "two", PLUGIN, SITE, cache=True)
    monkeypatch.setattr(type(ws.index), "SUMMARY_KEEP_MAX", 2)
    got = _answers(ws)
    assert got == want
    idx = ws.index
    assert idx.summary_sweeps > 0 and idx.summaries_read_back > 0
    stats = ws.query.summary_stats()
    assert sorted(n for n, m in idx._modules.items() if m is not None) == sorted(NAMES)
    assert (stats["modules"], stats["keepMax"]) == (len(NAMES), 2)
    assert stats["inMemory"] <= 2 + 1  # (the bound, and the one read when it was passed)
    assert stats["sweeps"] == idx.summary_sweeps > 0 and stats["readBack"] == idx.summaries_read_back > 0


def test_a_dropped_summary_comes_back_equal_and_the_module_object_stays(tmp_path, monkeypatch):
    ws = fixture_ws(tmp_path, PLUGIN, SITE, cache=True)
    idx = ws.index
    monkeypatch.setattr(type(idx), "SUMMARY_KEEP_MAX", 1)
    low = idx.module("fx.low")
    before = low.summary
    calls = [(cs.line, cs.func, cs.guards) for cs in before.calls]
    low._hot = False  # (not asked since: the next sweep drops it)
    for name in ("fx.k", "fx.mid", "fx.top"):
        idx.module(name)
    assert low._summary is None  # dropped: the module object stays in the index
    assert idx.module("fx.low") is low
    back = low.summary
    assert back is not before and back == before and back.path == low.path
    assert [(cs.line, cs.func, cs.guards) for cs in back.calls] == calls == [
        (5, "_scale", (("if", "fast", 4),)), (7, "_copy", (("else", "fast", 4),))]


def test_a_summary_whose_cache_file_is_gone_is_read_again_and_kept(tmp_path, monkeypatch):
    ws = fixture_ws(tmp_path, PLUGIN, SITE, cache=True)
    idx = ws.index
    low = idx.module("fx.low")
    idx.cache.flush()
    os.remove(idx.cache.folder / "py" / f"{low.sha}.pickle")
    low._summary = None  # (as a sweep leaves it)
    assert [cs.func for cs in low.summary.calls] == ["_scale", "_copy"]
    assert low._owner is None  # never dropped again: nothing to read it back from


def test_open_buffers_and_a_disabled_cache_are_never_dropped(tmp_path):
    ws = fixture_ws(tmp_path / "nocache", PLUGIN, SITE, cache=False)
    assert ws.index.module("fx.low")._owner is None
    ws = fixture_ws(tmp_path / "buffer", PLUGIN, SITE, cache=True)
    path = str(ws.root / "fx" / "low.py")
    ws.index.set_overlay(path, open(path).read() + "\n# edited\n")
    assert ws.index.module("fx.low")._owner is None
    assert ws.index.module("fx.mid")._owner is ws.index


def test_a_server_keeps_fewer_summaries_unless_the_environment_says(tmp_path, monkeypatch):
    from attnlens.lsp.analysis import SERVER_SUMMARIES, Analysis

    monkeypatch.delenv("ATTNLENS_SUMMARY_KEEP_MAX", raising=False)
    ws = fixture_ws(tmp_path / "a", PLUGIN, SITE, cache=True)
    batch = ws.query.summary_stats()["keepMax"]
    Analysis(ws)
    assert ws.query.summary_stats()["keepMax"] == SERVER_SUMMARIES < batch
    assert type(ws.index).SUMMARY_KEEP_MAX == batch  # (this index's bound, not every index's)
    monkeypatch.setenv("ATTNLENS_SUMMARY_KEEP_MAX", "3")
    ws2 = fixture_ws(tmp_path / "b", PLUGIN, SITE, cache=True)
    ws2.query.serve_long(2)
    assert ws2.query.summary_stats()["keepMax"] == batch  # (the class read the variable at import: unchanged here)


def test_a_servers_file_sites_trim_the_work_memos_after_the_file(tmp_path, monkeypatch):
    from attnlens.lsp import kernels
    from attnlens.lsp.analysis import Analysis

    ws = fixture_ws(tmp_path, PLUGIN, SITE, cache=True)
    r = ws.resolver
    monkeypatch.setattr(type(r), "TRIM_VALUES", 0)
    a = Analysis(ws)
    sites = kernels.file_sites(a, str(ws.root / "fx" / "top.py"))
    assert [(s.line, s.call) for s in sites] == [(6, "op.forward"), (7, "launch")]
    assert not r._val_memo and r.site_memo  # the file's work emptied, its answers kept
