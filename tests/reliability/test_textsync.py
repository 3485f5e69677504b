"""Regressions found by the fuzzer: incremental sync must use LSP's line breaks (\\r\\n, \\r, \\n only).

Before attnlens.lsp.textsync, pygls split lines with str.splitlines: a form feed,
U+0085 or U+2028 above an edit moved the edit to another line, and a character past
the end of the last line landed one character early, so the server's buffer
silently diverged from the editor's.
"""

from __future__ import annotations

import pytest
from lsprotocol import types as T
from pygls.workspace import Workspace

from attnlens.lsp.textsync import LspTextDocument, install

from .lspdriver import ServerHandle, TextModel


def apply(text: str, start: tuple[int, int], end: tuple[int, int], new: str, encoding: str = "utf-16") -> str:
    ws = Workspace(None, T.TextDocumentSyncKind.Incremental, position_encoding=encoding)
    install(ws)
    ws.put_text_document(T.TextDocumentItem("file:///t.py", "python", 1, text))
    ws.update_text_document(T.VersionedTextDocumentIdentifier(version=2, uri="file:///t.py"),
                            T.TextDocumentContentChangePartial(range=T.Range(T.Position(*start), T.Position(*end)),
                                                               text=new))
    doc = ws.get_text_document("file:///t.py")
    assert isinstance(doc, LspTextDocument)
    return doc.source


@pytest.mark.parametrize("sep", ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_non_lsp_line_separators_do_not_shift_edits(sep):
    text = f"a = 1  # {sep} not a line break\nb = 2\nc = 3\n"
    assert apply(text, (1, 0), (1, 1), "B") == text.replace("b = 2", "B = 2")
    assert apply(text, (2, 4), (2, 5), "30") == text.replace("c = 3", "c = 30")


@pytest.mark.parametrize("text,start,end,new,want", [
    ("abc", (0, 10), (0, 10), "!", "abc!"),                 # past the end of the last line: its end
    ("abc\ndef\n", (0, 99), (0, 99), "!", "abc!\ndef\n"),   # past the end of a line: before its break
    ("abc\r\ndef", (0, 4), (0, 4), "!", "abc!\r\ndef"),     # never between \r and \n
    ("abc\rdef", (1, 1), (1, 2), "E", "abc\rdEf"),          # a lone \r is a line break
    ("abc\n", (7, 0), (9, 3), "!", "abc\n!"),               # a line past the end: the end of the file
    ("a🙂b\n", (0, 3), (0, 4), "B", "a🙂B\n"),               # UTF-16: the astral character is 2 units
    ("a🙂b\n", (0, 1), (0, 3), "", "ab\n"),
    ("x\ny", (1, 1), (0, 0), "", ""),                       # a reversed range is read as start..end
])
def test_positions_follow_the_lsp_specification(text, start, end, new, want):
    assert apply(text, start, end, new) == want


def test_utf8_and_utf32_encodings():
    assert apply("é🙂x", (0, 6), (0, 7), "X", "utf-8") == "é🙂X"
    assert apply("é🙂x", (0, 2), (0, 3), "X", "utf-32") == "é🙂X"


def test_server_buffer_follows_edits_below_a_form_feed(tmp_path):
    root = tmp_path / "ws"
    (root / "pk").mkdir(parents=True)
    src = "\x0c\n# page break above\ndef target():\n    return 1\n\n\ndef caller():\n    return other()\n\n\ndef other():\n    return 2\n"
    f = root / "pk" / "__init__.py"
    f.write_text(src)
    srv = ServerHandle(root, tmp_path / "cache")
    try:
        srv.start()
        srv.wait_indexed(60)
        uri = srv.open(f, src)
        model = TextModel(src)
        # rename the call: other() -> target(), an edit on a line below the form feed
        i = src.index("return other()") + len("return ")
        rng, _old = model.replace(i, i + len("other"), "target")
        srv.change(uri, 2, [T.TextDocumentContentChangePartial(range=rng, text="target")])
        p = model.position(model.text.index("return target()") + len("return "))
        # plain Python has no hover (verdict-first hover): Go to Definition shows the server read the edit
        d = srv.request("textDocument/definition", {"textDocument": {"uri": uri},
                                                     "position": {"line": p.line, "character": p.character + 1}})
        assert d.ok and d.result, d
        loc = d.result[0] if isinstance(d.result, list) else d.result
        start = (loc.get("targetSelectionRange") or loc.get("range"))["start"]
        assert (loc.get("targetUri") or loc.get("uri")) == uri and start["line"] == 2, d  # `def target():`
    finally:
        srv.close()


def test_line_starts_kept_across_keystrokes_equal_a_scan_of_the_new_text():
    """The document keeps its line starts from one change to the next (``moved_starts`` rescans only the lines
    around the edit): equal to a scan of the whole new text, also where a change joins or splits a ``\\r\\n``."""
    import random

    from attnlens.lsp.textsync import line_starts, moved_starts

    rng = random.Random(7)
    pieces = ["a", "b", "\n", "\r", "\r\n", " ", "xy\n", "\n\n"]
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 12)))
        a = rng.randrange(len(text) + 1)
        b = rng.randrange(a, len(text) + 1)
        new_text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 4)))
        new = text[:a] + new_text + text[b:]
        assert moved_starts(line_starts(text), a, b, new_text, new) == line_starts(new), (text, a, b, new_text)


def test_a_sequence_of_keystrokes_keeps_the_buffer_in_step():
    """Forty keystrokes and deletions through one document (the kept line starts are used from the second
    change on) give the text the same edits give applied one by one to a plain string."""
    import random

    from attnlens.lsp.textsync import line_starts

    ws = Workspace(None, T.TextDocumentSyncKind.Incremental)
    install(ws)
    text = "import os\r\n\ndef f(x):\n    return x\r\n" * 30
    ws.put_text_document(T.TextDocumentItem("file:///k.py", "python", 1, text))
    rng = random.Random(3)
    for v in range(2, 42):
        starts = line_starts(text)
        line = rng.randrange(len(starts))
        end = starts[line + 1] if line + 1 < len(starts) else len(text)
        content = text[starts[line]:end].rstrip("\r\n")
        c0 = rng.randrange(len(content) + 1)
        c1 = min(len(content), c0 + rng.randrange(3))
        new = rng.choice(["x", "\n", "\r\n", "", "(", "  "])
        ws.update_text_document(T.VersionedTextDocumentIdentifier(version=v, uri="file:///k.py"),
                                T.TextDocumentContentChangePartial(
                                    range=T.Range(T.Position(line, c0), T.Position(line, c1)), text=new))
        text = text[:starts[line] + c0] + new + text[starts[line] + c1:]
        assert ws.get_text_document("file:///k.py").source == text, v
