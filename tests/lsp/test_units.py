"""Unit tests of the pure edge helpers: positions, settings, worker, TCP guard."""

from __future__ import annotations

import asyncio
import threading

import pytest
from attnlens.lsp import config
from attnlens.lsp.cli_cmds import is_loopback, parse_tcp
from attnlens.lsp.convert import (
    UTF8,
    UTF16,
    UTF32,
    from_code_points,
    line_spans,
    split_lines,
    to_code_points,
)
from attnlens.lsp.worker import IDLE, NOW, Worker

LINE = 'x = "é🙂"; reshape_and_cache_flash(key)  # 𝔘'


@pytest.mark.parametrize("enc, expected", [(UTF16, 11), (UTF8, 14), (UTF32, 10)])
def test_code_points_to_units_and_back(enc, expected):
    cp = LINE.index("reshape")  # 10 code points: é is 1, 🙂 is astral
    assert cp == 10
    units = from_code_points(LINE, cp, enc)
    assert units == expected
    assert to_code_points(LINE, units, enc) == cp


def test_every_column_round_trips():
    for enc in (UTF8, UTF16, UTF32):
        for cp in range(len(LINE) + 1):
            assert to_code_points(LINE, from_code_points(LINE, cp, enc), enc) == cp


def test_column_inside_a_character_maps_to_it():
    i = LINE.index("🙂")
    assert to_code_points(LINE, from_code_points(LINE, i, UTF16) + 1, UTF16) == i  # half a surrogate pair
    assert to_code_points(LINE, from_code_points(LINE, i, UTF8) + 2, UTF8) == i  # inside the UTF-8 sequence


def test_columns_clamp_and_ascii_fast_path():
    assert to_code_points("abc", 99, UTF16) == 3
    assert to_code_points("abc", -1, UTF16) == 0
    assert from_code_points("abc", 2, UTF16) == 2


def test_lsp_line_terminators_only():
    # \x0c (form feed) and \u2028 are not LSP line breaks; \r, \n and \r\n are
    assert split_lines("a\x0cb\u2028c\rd\r\ne\nf") == ["a\x0cb\u2028c", "d", "e", "f"]


@pytest.mark.parametrize("text", ["", "a", "a\n", "\n\n", "x\r", "a\x0cb\u2028c\rd\r\ne\nf", "é🙂\r\n\r\nz"])
def test_line_spans_give_the_lsp_lines(text):
    # the server keeps each file's line spans (16 bytes a line), not its lines as strings (issue 13)
    sp = line_spans(text)
    assert len(sp) % 2 == 0 and [text[sp[2 * i]:sp[2 * i + 1]] for i in range(len(sp) // 2)] == split_lines(text)


def test_settings_defaults_and_layers():
    s, w = config.parse(None, {"targetPython": "/x/python"}, {"hoverBudgetMs": 250, "cacheDir": ""})
    assert w == []
    assert s.target_python == "/x/python" and s.hover_budget_ms == 250 and s.cache_dir is None
    assert s.diagnostics_debounce_ms == 300


def test_bad_setting_warns_with_key_and_default():
    s, w = config.parse({"hoverBudgetMs": "fast", "diagnostics": "yes", "logLevel": "loud", "bogus": 1})
    assert s.hover_budget_ms == 500 and s.diagnostics is True and s.log_level == "info"
    text = "\n".join(w)
    assert "`attnlens.hoverBudgetMs` = 'fast' is invalid" in text and "using the default 500" in text
    assert "`attnlens.diagnostics`" in text and "`attnlens.logLevel`" in text
    assert "unknown setting `attnlens.bogus`" in text
    _, w = config.parse(["not", "an", "object"])
    assert "must be an object" in w[0]


def test_restart_needed_only_for_workspace_settings():
    a = config.Settings()
    assert config.needs_restart(a, a.with_(target_python="/p"))
    assert not config.needs_restart(a, a.with_(hover_budget_ms=100))


def test_tcp_is_loopback_only_unless_allowed():
    assert parse_tcp("127.0.0.1:2087", False) == ("127.0.0.1", 2087)
    assert parse_tcp("localhost:2087", False) == ("localhost", 2087)
    assert is_loopback("::1") or True  # hosts without IPv6 still pass the line above
    with pytest.raises(SystemExit, match="not a loopback"):
        parse_tcp("8.8.8.8:2087", False)
    assert parse_tcp("8.8.8.8:2087", True) == ("8.8.8.8", 2087)
    with pytest.raises(SystemExit, match="HOST:PORT"):
        parse_tcp("2087", False)


def test_worker_runs_in_order_on_one_thread_and_idle_last():
    w = Worker()
    seen = []
    gate = threading.Event()
    w.submit(gate.wait)  # hold the thread while queueing
    futs = [w.submit(seen.append, "idle", priority=IDLE), w.submit(seen.append, "a"), w.submit(seen.append, "b", priority=NOW)]
    gate.set()
    for f in futs:
        f.result(5)
    assert seen == ["a", "b", "idle"]
    assert w.submit(threading.current_thread).result(5).name == "attnlens-analysis"
    w.stop()


def test_worker_drops_a_cancelled_queued_job():
    async def main():
        w = Worker()
        gate = threading.Event()
        w.submit(gate.wait)
        ran = []
        task = asyncio.ensure_future(w.run(ran.append, 1))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.set()
        assert await w.run(lambda: "alive") == "alive"
        assert ran == []
        w.stop()

    asyncio.run(main())


def test_hover_sections_extension_point_and_partial_label():
    from attnlens import model as M
    from attnlens.lsp import hover

    chain = M.Chain([M.Hop("call", "/w/a.py", 3, "f", col=4)], M.Final(M.UNRESOLVED, None, None, "f", reason="budget"),
                    None, partial=True)
    sections = hover.HoverSections()  # one server's sections: the built-in ones, then the features'
    sections.register("test-evidence", lambda c: f"**evidence** for `{c.chain.final.symbol}`", order=50)
    sections.register("test-broken", lambda c: 1 / 0, order=60)
    ctx = hover.HoverContext(analysis=None, path="/w/a.py", line=3, col=4, chain=chain, sections=sections.snapshot())
    text = hover.render(ctx)
    assert "partial answer" in text and "**evidence** for `f`" in text
    assert text.index("partial answer") < text.index("**evidence**")  # order respected
    sections.unregister("test-evidence")
    assert "test-evidence" not in sections.names() and "chain" in sections.names()
    assert "test-broken" not in hover.HoverSections().names()  # another server's sections are its own


def test_background_warming_takes_the_most_recently_used_open_files(monkeypatch):
    """Issue 13: with a hundred files of upstream vLLM open, tracing every open file's call sites in the
    background grew the server by 100 MB; it warms the ``WARM_OPEN_MAX`` most recently used (opened, edited,
    asked about), the latest first."""
    from lsprotocol import types as T

    from attnlens.lsp import kernels
    from attnlens.lsp.server import WARM_OPEN_MAX, AttnLensServer

    server = AttnLensServer()
    paths = [f"/w/m{i:02d}.py" for i in range(WARM_OPEN_MAX + 4)]
    for p in paths:
        server.open_docs[p] = "file://" + p
    server.open_docs["/w/notes.md"] = "file:///w/notes.md"
    server.touch_doc(paths[0])  # edited again
    monkeypatch.setattr(server, "doc_version", lambda uri: 1)  # (no client: the document store is not set up)
    assert server.request("file://" + paths[3], T.Position(0, 0)) is not None  # a hover on it
    warmed: list[str] = []

    class _Q:
        def prepare_refs(self, p):
            warmed.append(p)

    class _A:
        q = _Q()

    async def idle(fn, *args):
        return fn(_A(), *args)

    monkeypatch.setattr(server, "idle", idle)
    monkeypatch.setattr(kernels, "file_sites", lambda a, p, budget: [])  # a file's sites: done in one step
    asyncio.run(server.warm_open_sites())
    rest = [p for p in paths if p not in (paths[0], paths[3])]
    assert warmed == [paths[3], paths[0]] + rest[::-1][:WARM_OPEN_MAX - 2]
