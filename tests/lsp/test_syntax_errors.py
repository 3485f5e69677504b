"""Issue 16, item 2: a syntax error blanks only the broken statement (the rest of the file keeps
its findings, hovers and symbols, and the error is a diagnostic of its own); the answers are a
function of the buffer's text (the same text opened fresh gives the same answers); an unsaved
buffer whose file is not on disk (``untitled:``, a new file of the workspace) is analysed.

End to end over stdio on examples/mini-metax, VS Code client profile (pull diagnostics). Lines
and columns are found from the source text.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from lsprotocol import types as T
from lsprotocol.converters import get_converter
from pygls.uris import to_fs_path

from .conftest import EXAMPLE, position_in, start_session, stop_session, uri

CONVERTER = get_converter()

pytestmark = pytest.mark.asyncio(loop_scope="module")

FA = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"
TEXT = FA.read_text(encoding="utf-8")
# the statement a stray `)` is typed into (in _forward_cascade), and what is typed
BROKEN_LINE = "        n = md.num_actual_tokens\n        prefix_out"
RESHAPE_CALL = "reshape_and_cache_flash(key, value"
MERGE_CALL = "merge_attn_states(output[:n]"
SYNTAX = "syntax-error"

NEW_BUFFER = '''from mini_metax.attention.backends.fa_utils import reshape_and_cache_flash


def write_kv_demo(key, value, key_cache, value_cache, slot_mapping):
    reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "auto", 1.0, 1.0)
'''
NEW_CALL = "reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping"


def _stray_paren() -> tuple[str, T.Position]:
    """flash_attn.py with a `)` typed mid-line, and where it was typed."""
    assert TEXT.count(BROKEN_LINE) == 1
    at = TEXT.index(BROKEN_LINE) + len("        n = md.num_act")
    pos = T.Position(TEXT.count("\n", 0, at), at - TEXT.rfind("\n", 0, at) - 1)
    lines = TEXT.split("\n")
    lines[pos.line] = lines[pos.line][: pos.character] + ")" + lines[pos.line][pos.character:]
    return "\n".join(lines), pos


async def _diagnostics(s, path: Path | str) -> list[tuple]:
    rep = await s.client.text_document_diagnostic_async(T.DocumentDiagnosticParams(T.TextDocumentIdentifier(_uri(path))))
    assert rep.kind == "full"
    return sorted((d.source, d.code, d.range.start.line, d.range.start.character, d.range.end.line,
                   d.range.end.character, d.message) for d in rep.items)


def _uri(path: Path | str) -> str:
    return path if isinstance(path, str) and ":" in path.split("/")[0] else uri(path)


async def _hover(s, path, pos: T.Position) -> str | None:
    h = await s.client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(_uri(path)), pos))
    return None if h is None else h.contents.value


async def _symbols(s, path) -> list:
    got = await s.client.text_document_document_symbol_async(T.DocumentSymbolParams(T.TextDocumentIdentifier(_uri(path))))
    return [CONVERTER.unstructure(x) for x in got or []]


def _open(s, path, text: str, version: int = 1) -> None:
    s.client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(_uri(path), "python", version, text)))


def _close(s, path) -> None:
    s.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(_uri(path))))


def _insert(s, path, pos: T.Position, text: str, version: int) -> None:
    s.client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(version=version, uri=_uri(path)),
        [T.TextDocumentContentChangePartial(range=T.Range(pos, pos), text=text)]))


def _cpython_error(text: str) -> tuple[int, int, str]:
    try:
        ast.parse(text)
    except SyntaxError as e:
        return e.lineno - 1, e.offset - 1, e.msg
    raise AssertionError("no syntax error")


async def _answers(s, path, text: str) -> dict:
    """Everything the editor shows for the buffer: diagnostics, symbols, hovers on two calls."""
    return {
        "diagnostics": await _diagnostics(s, path),
        "symbols": await _symbols(s, path),
        "hover reshape": await _hover(s, path, position_in(text, RESHAPE_CALL)),
        "hover merge": await _hover(s, path, position_in(text, MERGE_CALL)),
    }


async def test_stray_paren_keeps_the_file_and_reports_the_error(vscode):
    _open(vscode, FA, TEXT)
    before = await _answers(vscode, FA, TEXT)
    assert before["hover reshape"] and before["hover merge"] and before["symbols"]
    assert len(before["diagnostics"]) >= 10 and not [d for d in before["diagnostics"] if d[1] == SYNTAX]
    broken, pos = _stray_paren()
    _insert(vscode, FA, pos, ")", version=2)
    after = await _answers(vscode, FA, broken)
    line, col, msg = _cpython_error(broken)
    assert (line, col, msg) == (pos.line, pos.character, "unmatched ')'")
    # every other finding of the file stays, at the same place, plus the syntax error
    assert after["diagnostics"] == sorted(
        [d for d in before["diagnostics"] if not d[2] <= pos.line <= d[4]]
        + [("attnlens", SYNTAX, line, col, line, col + 1, f"SyntaxError: {msg}")])
    assert [d for d in before["diagnostics"] if d[2] <= pos.line <= d[4]] == []  # none was on that line
    # hovers elsewhere in the file, and in the function holding the error, answer as before
    assert after["hover reshape"] == before["hover reshape"]
    assert after["hover merge"] == before["hover merge"]
    assert after["symbols"] == before["symbols"]
    # undone: back to the findings of the error-free text
    vscode.client.text_document_did_change(T.DidChangeTextDocumentParams(
        T.VersionedTextDocumentIdentifier(version=3, uri=uri(FA)),
        [T.TextDocumentContentChangePartial(range=T.Range(pos, T.Position(pos.line, pos.character + 1)), text="")]))
    assert await _answers(vscode, FA, TEXT) == before
    _close(vscode, FA)


async def test_typing_ops_dot_never_blinks_the_other_findings(vscode):
    """Typing `ops.` one character at a time on an empty line: after each keystroke the findings
    of the file are the error-free ones, plus a syntax error only while the text has one."""
    _open(vscode, FA, TEXT)
    baseline = await _diagnostics(vscode, FA)
    # the empty line after _flash_varlen's return (inside the class: nothing moves)
    lines = TEXT.split("\n")
    row = position_in(TEXT, "    def _forward_cascade").line - 1
    assert lines[row] == ""
    text = TEXT
    typed = ""
    for version, ch in enumerate("        ops.", start=2):
        _insert(vscode, FA, T.Position(row, len(typed)), ch, version)
        typed += ch
        text = "\n".join(lines[:row] + [typed] + lines[row + 1:])
        got = await _diagnostics(vscode, FA)
        try:
            ast.parse(text)
            want = []
        except SyntaxError as e:
            want = [(e.lineno - 1, e.offset - 1, f"SyntaxError: {e.msg}")]
        assert [d for d in got if d[1] != SYNTAX] == baseline, typed
        assert [(d[2], d[3], d[6]) for d in got if d[1] == SYNTAX] == want, typed
    assert typed == "        ops." and want == [(row, len(typed), "SyntaxError: invalid syntax")]  # the last state has it
    _close(vscode, FA)


async def test_the_same_text_opened_fresh_gives_the_same_answers(vscode, tmp_path):
    """Edit history (open, type the error) against the broken text opened in a new server."""
    broken, pos = _stray_paren()
    _open(vscode, FA, TEXT)
    await _diagnostics(vscode, FA)  # analysed once without the error
    _insert(vscode, FA, pos, ")", version=2)
    edited = await _answers(vscode, FA, broken)
    _close(vscode, FA)
    fresh = await start_session(tmp_path)
    try:
        await fresh.wait_indexed()
        _open(fresh, FA, broken)
        opened = await _answers(fresh, FA, broken)
    finally:
        await stop_session(fresh)
    assert [d for d in opened["diagnostics"] if d[1] == SYNTAX] == [
        ("attnlens", SYNTAX, pos.line, pos.character, pos.line, pos.character + 1, "SyntaxError: unmatched ')'")]
    assert opened == edited


def _impl_target(locs) -> tuple[str, int]:
    loc = locs[0] if isinstance(locs, list) else locs
    target = getattr(loc, "target_uri", None) or loc.uri
    rng = getattr(loc, "target_selection_range", None) or loc.range
    return Path(to_fs_path(target)).name, rng.start.line + 1


async def _check_new_buffer(s, doc) -> None:
    _open(s, doc, NEW_BUFFER)
    syms = await _symbols(s, doc)
    assert [(x["name"], x["kind"], x["range"]["start"]["line"], x["range"]["end"]["line"]) for x in syms] == [
        ("write_kv_demo", T.SymbolKind.Function.value, 3, 4)]
    pos = position_in(NEW_BUFFER, NEW_CALL)
    h = await s.client.text_document_hover_async(T.HoverParams(T.TextDocumentIdentifier(_uri(doc)), pos))
    assert h is not None and (h.range.start, h.range.end) == (pos, T.Position(pos.line, pos.character + len("reshape_and_cache_flash")))
    assert "_C_cache_ops::reshape_and_cache_flash" in h.contents.value
    impl = await s.client.text_document_implementation_async(T.ImplementationParams(T.TextDocumentIdentifier(_uri(doc)), pos))
    assert _impl_target(impl) == ("cache_kernels.cu", 31)  # the C++ function ops.impl binds
    # a syntax error in the unsaved buffer: reported, the rest still answers
    broken = NEW_BUFFER.replace("def write_kv_demo", "x = (\n\n\ndef write_kv_demo")
    _close(s, doc)
    _open(s, doc, broken)
    line, col, msg = _cpython_error(broken)
    assert [d for d in await _diagnostics(s, doc) if d[1] == SYNTAX] == [
        ("attnlens", SYNTAX, line, col, line, col + 1, f"SyntaxError: {msg}")]
    assert [x["name"] for x in await _symbols(s, doc)] == ["write_kv_demo"]
    assert "_C_cache_ops::reshape_and_cache_flash" in await _hover(s, doc, position_in(broken, NEW_CALL))
    _close(s, doc)
    assert await _symbols(s, doc) == []  # closed without saving: gone


async def test_untitled_buffer_gets_symbols_and_hovers(vscode):
    await _check_new_buffer(vscode, "untitled:Untitled-1")


async def test_new_file_not_on_disk_gets_symbols_hovers_and_workspace_symbols(vscode):
    new = FA.parent / "brand_new_demo.py"
    assert not new.exists()
    _open(vscode, new, NEW_BUFFER)
    found = await vscode.client.workspace_symbol_async(T.WorkspaceSymbolParams(query="write_kv_demo"))
    assert [(x.name, Path(to_fs_path(x.location.uri)).name, x.location.range.start.line) for x in found] == [
        ("write_kv_demo", "brand_new_demo.py", 3)]
    _close(vscode, new)
    await _check_new_buffer(vscode, new)
    assert not new.exists()  # nothing was written
