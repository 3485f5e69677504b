"""Server behaviour across client profiles, encodings, edits and configuration problems."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types as T

from .conftest import (
    EXAMPLE,
    PYTHON,
    SERVER,
    position_in,
    readme_text,
    start_session,
    stop_session,
    uri,
    utf16_len,
)

CALL = "reshape_and_cache_flash(key, value"
NON_ASCII = '_ = "é🙂 𝔘"; '


def copy_example(tmp: Path) -> Path:
    root = tmp / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def with_non_ascii_prefix(text: str) -> str:
    """Put non-ASCII (BMP and astral) text before the call on the call's own line."""
    i = text.index(CALL)
    return text[:i] + NON_ASCII + text[i:]


def has_rules() -> bool:
    """The rules engine is importable and complete (it is developed alongside)."""
    try:
        from attnlens.rules.engine import check_module, rules_table  # noqa: F401

        rules_table()  # imports every check module
    except Exception:  # noqa: BLE001
        return False
    return True


async def test_non_ascii_line_utf16_disk_and_edits(tmp_path):
    root = copy_example(tmp_path)
    fa = root / "mini_metax" / "attention" / "backends" / "flash_attn.py"
    fa.write_text(with_non_ascii_prefix(fa.read_text(encoding="utf-8")), encoding="utf-8")
    s = await start_session(tmp_path, root=root)
    try:
        await s.wait_indexed()
        text = fa.read_text(encoding="utf-8")
        pos = position_in(text, CALL)
        line = text.split("\n")[pos.line]
        assert pos.character == utf16_len(line[: line.index(CALL)]) and pos.character > line.index(CALL)
        h = await s.hover(fa, pos)
        assert h is not None and "_C_cache_ops::reshape_and_cache_flash" in h.contents.value
        assert h.range.start == pos and h.range.end.character == pos.character + len("reshape_and_cache_flash")
        # the middle of the name, in UTF-16 units, still lands on it
        mid = T.Position(pos.line, pos.character + 5)
        assert "_C_cache_ops::reshape_and_cache_flash" in (await s.hover(fa, mid)).contents.value

        # didOpen with other text, then an incremental edit that inserts an astral line above
        edited = text.replace("class MiniFlashAttentionImpl", "# 🙂🙂 note\nclass MiniFlashAttentionImpl", 1)
        s.open(fa, edited, version=1)
        s.client.text_document_did_change(T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(version=2, uri=uri(fa)),
            [T.TextDocumentContentChangePartial(range=T.Range(T.Position(0, 0), T.Position(0, 0)),
                                                text="# 𝔘 first line\n")]))
        final = "# 𝔘 first line\n" + edited
        pos2 = position_in(final, CALL)
        assert pos2.line == pos.line + 2
        h = await s.hover(fa, pos2)
        assert h is not None and "_C_cache_ops::reshape_and_cache_flash" in h.contents.value
        assert h.range.start == pos2
        # the old position now points elsewhere: the overlay, not the disk, is analysed
        old = await s.hover(fa, pos)
        assert old is None or "_C_cache_ops::reshape_and_cache_flash" not in old.contents.value
        s.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri(fa))))
        h = await s.hover(fa, pos)
        assert h is not None and "_C_cache_ops::reshape_and_cache_flash" in h.contents.value
    finally:
        await stop_session(s)


async def test_utf8_client_gets_utf8_columns(tmp_path):
    root = copy_example(tmp_path)
    fa = root / "mini_metax" / "attention" / "backends" / "flash_attn.py"
    text = with_non_ascii_prefix(fa.read_text(encoding="utf-8"))
    s = await start_session(tmp_path, root=root, caps="neovim@v0.11.0")
    try:
        s.open(fa, text)  # only in the buffer: the disk has no prefix
        line_no = position_in(text, CALL).line
        line = text.split("\n")[line_no]
        byte_col = len(line[: line.index(CALL)].encode("utf-8"))
        h = await s.hover(fa, T.Position(line_no, byte_col))
        assert h is not None and "_C_cache_ops::reshape_and_cache_flash" in h.contents.value
        assert h.range.start.character == byte_col
    finally:
        await stop_session(s)


async def test_bad_configuration_warns_and_keeps_serving(tmp_path):
    s = await start_session(tmp_path, init_options={"targetPython": PYTHON, "hoverBudgetMs": "fast"},
                            configuration={"attnlens": {"diagnosticsDebounceMs": -5, "typo": True}})
    try:
        await s.wait_indexed()
        msgs = [m.message for m in s.client.messages if m.type == T.MessageType.Warning]
        assert any("`attnlens.hoverBudgetMs`" in m and "default 500" in m for m in msgs), msgs
        assert any("`attnlens.diagnosticsDebounceMs`" in m and "default 300" in m for m in msgs), msgs
        assert any("unknown setting `attnlens.typo`" in m for m in msgs), msgs
        path, text = readme_text("dummy, call site")
        md = await s.hover_text(path, position_in(path.read_text(), text, text.index("get_scheduler")))
        assert md.startswith("Runs: `_DummyOps.get_scheduler_metadata` (dummy, ")
        # a configuration change is pulled again; a new bad value warns again
        n = len(s.client.messages)
        s.client.set_configuration({"attnlens": {"maxHoverKernels": "many"}})
        s.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=None))
        for _ in range(100):
            if len(s.client.messages) > n:
                break
            await asyncio.sleep(0.05)
        assert "`attnlens.maxHoverKernels`" in s.client.messages[-1].message
    finally:
        await stop_session(s)


async def test_broken_interpreter_still_serves_workspace(tmp_path):
    s = await start_session(tmp_path, init_options={"targetPython": str(tmp_path / "no" / "python")})
    try:
        st = await s.wait_indexed()
        assert st["targetError"]
        msgs = [m.message for m in s.client.messages]
        assert any("target interpreter unusable" in m and "attnlens.targetPython" in m for m in msgs), msgs
        path, text = readme_text("dummy, call site")
        md = await s.hover_text(path, position_in(path.read_text(), text, text.index("get_scheduler")))
        assert md.startswith("Runs: `_DummyOps.get_scheduler_metadata` (dummy, ")  # workspace-only chains still resolve
        path, text = readme_text("upstream op served by the plugin's extension (call)")
        pos = position_in(path.read_text(), text)
        assert "_C_cache_ops::reshape_and_cache_flash" not in await s.hover_text(path, pos)

        # fixing the setting rebuilds the workspace with the right interpreter
        s.status_event.clear()
        s.client.set_configuration({"attnlens": {"targetPython": PYTHON}})
        s.client.workspace_did_change_configuration(T.DidChangeConfigurationParams(settings=None))
        st = await s.wait_indexed()
        assert st["targetError"] is None and st["targetPython"] == PYTHON
        assert "_C_cache_ops::reshape_and_cache_flash" in await s.hover_text(path, pos)
    finally:
        await stop_session(s)


@pytest.mark.skipif(not has_rules(), reason="attnlens.rules.engine is not installed")
async def test_diagnostics_pushed_to_a_client_without_pull(tmp_path):
    s = await start_session(tmp_path, caps="neovim@v0.7.0")
    try:
        await s.wait_indexed()
        fa = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"
        s.open(fa)
        params = await asyncio.wait_for(s.client.wait_for_notification(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS), 30)
        assert params.uri == uri(fa)
        assert params.diagnostics, "the example has planted problems in flash_attn.py"
        d = params.diagnostics[0]
        assert d.source == "attnlens" and isinstance(d.code, str) and d.code
    finally:
        await stop_session(s)


@pytest.mark.skipif(not has_rules(), reason="attnlens.rules.engine is not installed")
async def test_pull_diagnostics(tmp_path):
    s = await start_session(tmp_path, caps="neovim@v0.11.0")
    try:
        await s.wait_indexed()
        fa = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"
        s.open(fa)
        rep = await s.client.text_document_diagnostic_async(T.DocumentDiagnosticParams(T.TextDocumentIdentifier(uri(fa))))
        assert rep.kind == "full" and rep.items and all(d.source == "attnlens" for d in rep.items)
        again = await s.client.text_document_diagnostic_async(
            T.DocumentDiagnosticParams(T.TextDocumentIdentifier(uri(fa)), previous_result_id=rep.result_id))
        assert again.kind == "unchanged"
    finally:
        await stop_session(s)


def _frame(msg: dict) -> bytes:
    body = json.dumps(msg).encode()
    return f"Content-Length: {len(body)}\r\n\r\n".encode() + body


def test_exits_when_the_parent_dies(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    env = {**os.environ, "ATTNLENS_CACHE_DIR": str(tmp_path / "cache")}
    server = subprocess.Popen(SERVER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        server.stdin.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "processId": parent.pid, "rootUri": None, "capabilities": {}}}))
        server.stdin.flush()
        time.sleep(1.0)
        assert server.poll() is None
        parent.kill()
        parent.wait()
        deadline = time.time() + 10
        while server.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert server.poll() is not None, "server outlived its parent"
    finally:
        parent.kill()
        server.kill()
        server.wait()


async def test_watched_file_changes_reach_the_index(tmp_path):
    root = copy_example(tmp_path)
    s = await start_session(tmp_path, root=root)
    try:
        await s.wait_indexed()
        # a new Python module appears on disk
        new = root / "mini_metax" / "attention" / "ops" / "brand_new.py"
        new.write_text("def brand_new_kernel_wrapper(x):\n    return x\n")
        # C++ registrations move down by three lines
        cpp = root / "csrc" / "torch_bindings.cpp"
        cpp.write_text("// one\n// two\n// three\n" + cpp.read_text())
        s.client.workspace_did_change_watched_files(T.DidChangeWatchedFilesParams(changes=[
            T.FileEvent(uri(new), T.FileChangeType.Created), T.FileEvent(uri(cpp), T.FileChangeType.Changed)]))
        res = await s.client.workspace_symbol_async(T.WorkspaceSymbolParams(query="brand_new_kernel"))
        assert [x.name for x in res] == ["brand_new_kernel_wrapper"]
        fa = root / "mini_metax" / "attention" / "backends" / "flash_attn.py"
        path, text = readme_text("torch op, C++ registration (call)")
        pos = position_in(fa.read_text(), text, text.index("paged_attention_v2"))
        locs = await s.client.text_document_implementation_async(
            T.ImplementationParams(T.TextDocumentIdentifier(uri(fa)), pos))
        assert locs and locs[0].uri.endswith("paged_attention.cu")
        md = await s.hover_text(fa, pos)
        def_line = next(i for i, ln in enumerate(cpp.read_text().splitlines(), 1) if 'ops.def("paged_attention_v2(' in ln)
        assert f"torch_bindings.cpp:{def_line}]" in md, md[:400]
    finally:
        await stop_session(s)


async def test_tcp_transport_on_loopback(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "ATTNLENS_CACHE_DIR": str(tmp_path / "cache")}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "attnlens", "serve", "--tcp", f"127.0.0.1:{port}",
                                                env=env, stderr=asyncio.subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        else:
            pytest.fail("the TCP server did not start")
        writer.write(_frame({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"processId": None, "rootUri": None, "capabilities": {}}}))
        await writer.drain()
        header = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 20)
        length = int(header.split(b"Content-Length:")[1].split(b"\r\n")[0])
        reply = json.loads(await reader.readexactly(length))
        assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "attnlens"
        assert reply["result"]["capabilities"]["hoverProvider"]
        writer.close()
    finally:
        proc.kill()
        await proc.wait()
