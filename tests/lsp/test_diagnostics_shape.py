"""Diagnostics as a maintainer reads them in the editor: one per cause with related locations, a rule
code linking to its docs/rules.md section, greyed dead code, and findings that stay in the Problems panel
after a workspace check when files close (issue: editor companion, item 5)."""

from __future__ import annotations

import asyncio

import pytest
from lsprotocol import types as T

from .conftest import EXAMPLE, start_session, stop_session, uri

FA = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"
PLAT = EXAMPLE.parents[1] / "tests" / "rules" / "fixtures" / "platform"


def _rules_available() -> bool:
    try:
        import attnlens.rules.engine  # noqa: F401
    except Exception:  # noqa: BLE001
        return False
    return True


pytestmark = pytest.mark.skipif(not _rules_available(), reason="attnlens.rules.engine is not installed")


def _line(path, text: str) -> int:
    return next(i for i, t in enumerate(path.read_text().splitlines()) if text in t)  # 0-based


async def test_one_diagnostic_per_missing_package_with_related_calls_and_doc_link(tmp_path):
    s = await start_session(tmp_path, caps="neovim@v0.11.0")
    try:
        await s.wait_indexed()
        s.open(FA)
        rep = await s.client.text_document_diagnostic_async(T.DocumentDiagnosticParams(T.TextDocumentIdentifier(uri(FA))))
        al107 = [d for d in rep.items if d.code == "AL107"]
        assert len(al107) == 1
        d = al107[0]
        assert d.range.start.line == _line(FA, "    from mini_metax.attention.backends.fa_utils import (")
        calls = [i for i, t in enumerate(FA.read_text().splitlines()) if "flash_attn_varlen_func(" in t and not t.lstrip().startswith("def ")]
        rel = [r.location.range.start.line for r in d.related_information if r.message.startswith("call of flash_attn_varlen_func")]
        assert rel == calls
        assert all(r.location.uri == uri(FA) for r in d.related_information)
        assert d.code_description is not None and d.code_description.href.endswith("#al107-not-installed-callee")
        assert all(len(x.message) <= 300 for x in rep.items)
    finally:
        await stop_session(s)


async def test_dead_branch_is_greyed_and_workspace_check_keeps_closed_files(tmp_path):
    s = await start_session(tmp_path, root=PLAT, caps="neovim@v0.7.0")  # push diagnostics
    got = s.client.diagnostics  # pytest-lsp keeps the last published list per URI

    try:
        await s.wait_indexed()
        res = await s.client.workspace_execute_command_async(T.ExecuteCommandParams("attnlens.checkWorkspace", []))
        assert res["files"] >= 3 and res["findings"] > 0
        tri = PLAT / "fxplat" / "checks.py"
        for _ in range(50):
            if uri(tri) in got:
                break
            await asyncio.sleep(0.1)
        items = got[uri(tri)]
        dead = [d for d in items if d.tags and T.DiagnosticTag.Unnecessary in d.tags]
        al105 = [d for d in items if d.code == "AL105" and not d.tags]
        assert al105, [d.message for d in items]
        body = _line(tri, "return 128  # never runs here")
        assert [(d.range.start.line, d.range.end.line, d.severity, d.code) for d in dead] == \
            [(body, body, T.DiagnosticSeverity.Hint, "AL105")]
        assert dead[0].message.startswith("Never runs on this platform")
        # open then close a checked file: its findings stay (re-published from disk), not cleared
        s.open(tri)
        await asyncio.sleep(0.5)
        got.pop(uri(tri), None)
        s.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri(tri))))
        for _ in range(100):
            if uri(tri) in got:
                break
            await asyncio.sleep(0.1)
        assert [d.code for d in got[uri(tri)] if d.code == "AL105"], "closed file lost its findings"
    finally:
        await stop_session(s)
