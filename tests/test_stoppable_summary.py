"""Issue 16 item 9: an editor's background check of a buffer gives way to a request while the buffer is
still being summarised. ``pyindex.summarize(should_stop=...)`` stops with ``Stopped`` (nothing kept), the
index summarises open buffers with the callable the rules engine sets for the duration of a check, and the
engine turns it into ``Interrupted``; asked again, the answer is the one an uninterrupted check gives."""

from __future__ import annotations

import sys

import pytest

from attnlens import pyindex
from attnlens.rules import engine as E
from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE

FLASH = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"


def test_summarize_asks_and_stops():
    text = FLASH.read_text() * 4  # enough statements to be asked twice after the parse
    asked = []

    def stop():
        asked.append(1)
        return len(asked) >= 3

    with pytest.raises(pyindex.Stopped):
        pyindex.summarize(text, str(FLASH), "x", should_stop=stop)
    assert len(asked) == 3  # after the parse, then every 64 statements
    full = pyindex.summarize(text, str(FLASH), "x", should_stop=lambda: False)
    assert full.functions and full.functions.keys() == pyindex.summarize(text, str(FLASH), "x").functions.keys()


def test_the_buffer_summary_gives_way_and_the_check_ends_the_same(tmp_path):
    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "cache")
    text = FLASH.read_text() + "\n\ndef _typed_here():\n    return 1\n"
    ws.query.set_overlay(str(FLASH), text)
    eng = E.Engine(ws, use_cache=False)
    with pytest.raises(E.Interrupted):
        eng.check_module(str(FLASH), should_stop=lambda: True)
    assert ws.index.should_stop is None  # put back after the call
    assert not ws.index.is_loaded(ws.index.module_name_of(str(FLASH)) or "mini_metax.attention.backends.flash_attn")
    got = eng.check_module(str(FLASH))
    fresh_ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "cache2")
    fresh_ws.query.set_overlay(str(FLASH), text)
    want = E.Engine(fresh_ws, use_cache=False).check_module(str(FLASH))
    assert want and [f.to_json(ws.root) for f in got] == [f.to_json(fresh_ws.root) for f in want]
