"""Issue 16 item 9: a buffer's rules check gives way to a waiting request. The engine stops between two
checks when the worker says a more urgent job is queued (``Analysis.cancel``), and the diagnostics handler
asks again until it is done (``diagnostics.call_check``): the request runs in between, and the diagnostics
equal an uninterrupted check's."""

from __future__ import annotations

import asyncio
import sys

from lsprotocol import types as T

from attnlens.lsp import features as F
from attnlens.lsp.analysis import Analysis
from attnlens.lsp.server import AttnLensServer
from attnlens.rules import engine as E
from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE

FLASH = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"


def _diagnostics(tmp_path, always_yield: bool, monkeypatch=None):
    server = AttnLensServer()
    for name in F.ALL:
        F.module(name).register(server)
    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "cache")
    server.analysis = Analysis(ws)
    if always_yield:
        server.worker.should_yield = lambda: True  # as if a hover were queued behind every check
        monkeypatch.setattr(E.Engine, "STOP_EVERY_S", 0.0)  # and asked at every yield inside a check
    fm = server.protocol.fm

    async def main():
        server.ready.set()
        try:
            return await fm.features[T.TEXT_DOCUMENT_DIAGNOSTIC](T.DocumentDiagnosticParams(
                text_document=T.TextDocumentIdentifier(FLASH.resolve().as_uri())))
        finally:
            server.debouncer.cancel_all()
            for t in list(server.background):
                t.cancel()

    try:
        rep = asyncio.run(main())
    finally:
        server.worker.stop()
    return [(d.code, d.range.start.line, d.message) for d in rep.items], E.engine_for(ws).stats


def test_the_check_stops_for_requests_and_ends_with_the_same_diagnostics(tmp_path, monkeypatch):
    want, quiet = _diagnostics(tmp_path / "quiet", always_yield=False)
    got, stats = _diagnostics(tmp_path / "busy", always_yield=True, monkeypatch=monkeypatch)
    assert any(code and code.startswith("AL") for code, _l, _m in want)
    assert got == want
    assert quiet.get("interrupted", 0) == 0
    # every attempt went on from the last: once between each two checks, and at every yield inside a check
    # (a check that yields between its items stops there, and the next attempt resumes the same generator)
    inside = stats.get("interrupted_inside", 0)
    assert inside > 0
    assert stats["interrupted"] == len(E.CHECKS) - 1 + inside
