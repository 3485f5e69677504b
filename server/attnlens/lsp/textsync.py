"""Incremental text sync with LSP's own line model.

pygls' ``TextDocument`` splits lines with ``str.splitlines``, which also breaks
at ``\\x0b``, ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, U+2028 and U+2029. LSP
counts only ``\\r\\n``, ``\\r`` and ``\\n``. After a form feed (common in
older Python sources) or a line separator in a string, every incremental edit
below it was applied to the wrong line, and the server's copy of the buffer
silently diverged from the editor's (found by tests/reliability/test_fuzz_lsp.py).
pygls also clamps a character past the end of a line to one character
*before* the end of the last line, and past the line break on other lines;
LSP says such a position means the end of the line.

:func:`install` makes the workspace create :class:`LspTextDocument` objects,
which apply ranges with the same line splitting and column conversion as the
rest of the server (``convert.split_lines`` / ``to_code_points``).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

from lsprotocol import types as T
from pygls.workspace.text_document import TextDocument

from .convert import UTF8, UTF16, UTF32, to_code_points

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")
_NEWLINE = re.compile(r"\r\n|\r|\n")


def line_starts(text: str) -> list[int]:
    """Code point offset of the start of every LSP line (at least one line)."""
    return [0] + [m.end() for m in _NEWLINE.finditer(text)]


def moved_starts(starts: list[int], a: int, b: int, inserted: str, new: str) -> list[int]:
    """:func:`line_starts` of ``new``, the text whose ``[a, b)`` (offsets of the old text, whose line starts
    are ``starts``) was replaced by ``inserted``: only the lines around the edit are scanned again. A line
    start stays valid while the two characters before it are unchanged (``\r`` then ``\n`` is one break)."""
    i = bisect.bisect_right(starts, a) - 1  # the line holding a (starts[0] is 0)
    if i > 0 and starts[i] == a:
        i -= 1  # a start at the edit itself may go (a "\n" typed after a "\r")
    j = bisect.bisect_right(starts, b + 1)  # old starts past b + 1: the two characters before them are unchanged
    out = starts[:i + 1]
    if j < len(starts):
        delta = len(inserted) - (b - a)
        end = starts[j] + delta
        out.extend(e for e in (m.end() for m in _NEWLINE.finditer(new, starts[i], end)) if e < end)
        out.extend([t + delta for t in starts[j:]])
    else:
        out.extend(m.end() for m in _NEWLINE.finditer(new, starts[i]))
    return out


def offset_at(text: str, starts: list[int], pos: T.Position, encoding: str) -> int:
    """LSP position -> code point offset; past the end of a line (or of the file) clamps to its end."""
    line = pos.line
    if line < 0:
        return 0
    if line >= len(starts):
        return len(text)
    begin = starts[line]
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    content = text[begin:end]
    if content.endswith("\r\n"):
        content = content[:-2]
    elif content.endswith(("\r", "\n")):
        content = content[:-1]
    return begin + to_code_points(content, max(pos.character, 0), encoding)


class LspTextDocument(TextDocument):
    """A pygls text document whose lines and ranges follow the LSP specification."""

    @property
    def lines(self) -> Sequence[str]:
        return tuple(_LINE.findall(self.source))

    def _encoding(self) -> str:
        enc = getattr(self._position_codec, "encoding", None)
        enc = getattr(enc, "value", enc)
        return {"utf-8": UTF8, "utf-32": UTF32}.get(enc, UTF16)

    def _apply_incremental_change(self, change: T.TextDocumentContentChangePartial) -> None:
        text = self.source
        kept = getattr(self, "_starts", None)
        starts = kept[1] if kept is not None and kept[0] is text else line_starts(text)
        enc = self._encoding()
        a = offset_at(text, starts, change.range.start, enc)
        b = offset_at(text, starts, change.range.end, enc)
        if b < a:
            a, b = b, a
        new = text[:a] + change.text + text[b:]
        self._source = new
        # the line starts of the new text, kept for the next keystroke: a scan of a 5,000-line buffer per
        # keystroke was milliseconds on the thread that reads the client's messages
        self._starts = (new, moved_starts(starts, a, b, change.text, new))


def install(workspace) -> None:
    """Make ``workspace`` (a pygls Workspace) create :class:`LspTextDocument` objects."""

    def create(doc_uri: str, source: str | None = None, version: int | None = None,
               language_id: str | None = None) -> TextDocument:
        return LspTextDocument(doc_uri, source=source, version=version, language_id=language_id,
                               sync_kind=workspace._sync_kind, position_codec=workspace._position_codec)

    workspace._create_text_document = create
