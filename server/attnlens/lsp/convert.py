"""Conversions at the LSP edge: URIs, positions, ranges, symbol kinds.

The analysis core speaks 1-based lines and 0-based *code point* columns.
LSP speaks 0-based lines and columns counted in the negotiated position
encoding (UTF-16 code units unless the client offered something else).
Everything here is pure and has no pygls state, so it is unit-tested alone.
"""

from __future__ import annotations

import os
import re
from array import array
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote, unquote

from lsprotocol import types as T
from pygls.uris import from_fs_path, to_fs_path

UTF8 = "utf-8"
UTF16 = "utf-16"
UTF32 = "utf-32"

# LSP line terminators are exactly \r\n, \r and \n (str.splitlines also splits
# on \x0b, \x0c, \u2028 ... which would shift every later line).
_NEWLINE = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """Lines of ``text`` as LSP counts them, without terminators."""
    return _NEWLINE.split(text)


def line_spans(text: str) -> array:
    """Where each line of ``text`` (as :func:`split_lines` gives them) starts and ends, as one flat array
    ``[start0, end0, start1, end1, ...]`` (offsets in code points, the end before the terminator):
    ``text[a[2 * i]:a[2 * i + 1]]`` is line ``i``. 16 bytes a line where the lines as strings took ~60 and a
    copy of the text."""
    out = array("q", [0])
    for m in _NEWLINE.finditer(text):
        out.append(m.start())
        out.append(m.end())
    out.append(len(text))
    return out


def _unit_len(ch: str, encoding: str) -> int:
    if encoding == UTF16:
        return 2 if ord(ch) > 0xFFFF else 1
    if encoding == UTF8:
        o = ord(ch)
        return 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4
    return 1


def to_code_points(line: str, units: int, encoding: str = UTF16) -> int:
    """LSP column (in ``encoding`` units) -> code point column on ``line``.

    A column that falls inside a character (half of a surrogate pair, the
    middle of a UTF-8 sequence) maps to that character; columns past the end
    clamp to the line length.
    """
    if units <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(units, len(line))
    acc = 0
    for i, ch in enumerate(line):
        acc += _unit_len(ch, encoding)
        if acc > units:
            return i
        if acc == units:
            return i + 1
    return len(line)


def from_code_points(line: str, cp: int, encoding: str = UTF16) -> int:
    """Code point column on ``line`` -> LSP column in ``encoding`` units."""
    if cp <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(cp, len(line)) if line or cp == 0 else cp
    return sum(_unit_len(ch, encoding) for ch in line[:cp])


# An unsaved ``untitled:`` buffer is analysed under a path of its own that no file has (the
# index makes an open buffer whose file is not on disk a module of its own); path_to_uri maps it back.
UNTITLED_DIR = os.path.join(os.sep, "attnlens-untitled")


def uri_to_path(uri: str) -> str | None:
    """A ``file:`` URI to a real absolute path, an ``untitled:`` one to its path under
    ``UNTITLED_DIR`` (None for other schemes)."""
    if uri.startswith("untitled:"):
        name = quote(uri[len("untitled:"):], safe="")
        return os.path.join(UNTITLED_DIR, name + ".py") if name else None
    if not uri.startswith("file:"):
        return None
    p = to_fs_path(uri)
    return os.path.realpath(p) if p else None


def path_to_uri(path: str) -> str:
    if path.startswith(UNTITLED_DIR + os.sep) and path.endswith(".py"):
        return "untitled:" + unquote(os.path.basename(path)[:-3])
    return from_fs_path(path) or ("file://" + path)


def link(path: str, line: int | None) -> str:
    """A clickable Markdown link target: ``file:///x.py#L12`` (VS Code, most clients)."""
    return f"{path_to_uri(path)}#L{line or 1}"


@dataclass(frozen=True)
class Span:
    """A range of one file in LSP units (0-based lines, columns in the negotiated encoding), as plain data:
    what a worker function returns; the handler makes the lsprotocol object (:meth:`range`, :meth:`location`)."""

    path: str
    line: int
    character: int
    end_line: int
    end_character: int

    def range(self) -> T.Range:
        return T.Range(T.Position(self.line, self.character), T.Position(self.end_line, self.end_character))

    def location(self) -> T.Location:
        return T.Location(path_to_uri(self.path), self.range())


class Positions:
    """Core positions (1-based line, code point col) <-> LSP positions.

    ``line_text(path, line1)`` supplies the text of a line as the analysis
    sees it (the open buffer's overlay, else the disk), so conversions and
    analysis always agree on the text.
    """

    def __init__(self, line_text: Callable[[str, int], str], encoding: str = UTF16):
        self.line_text = line_text
        self.encoding = encoding

    def to_core(self, path: str, pos: T.Position) -> tuple[int, int]:
        return self.to_core_at(path, pos.line, pos.character)

    def to_core_at(self, path: str, line0: int, character: int) -> tuple[int, int]:
        """An LSP position given as numbers (0-based line, column in the encoding) -> core (line, col)."""
        text = self.line_text(path, line0 + 1)
        return line0 + 1, to_code_points(text, character, self.encoding)

    def _units(self, path: str, line1: int, col: int) -> tuple[int, int]:
        line0 = max(line1 - 1, 0)
        if col <= 0:
            return line0, 0
        return line0, from_code_points(self.line_text(path, line1), col, self.encoding)

    def position(self, path: str, line1: int, col: int) -> T.Position:
        return T.Position(*self._units(path, line1, col))

    def point(self, path: str, line1: int, col: int) -> tuple[int, int]:
        """:meth:`position` as plain data: (0-based line, column in the encoding)."""
        return self._units(path, line1, col)

    def span(self, path: str, line1: int, col: int, end_line1: int | None = None, end_col: int | None = None) -> Span:
        """The core range as a :class:`Span` (plain data, LSP units)."""
        if end_line1 is None:
            end_line1 = line1
        if end_col is None:
            end_col = col
        return Span(path, *self._units(path, line1, col), *self._units(path, end_line1, end_col))

    def location_span(self, path: str, line1: int, col: int = 0, end_col: int | None = None) -> Span:
        """:meth:`location` as a :class:`Span`."""
        return self.span(path, line1, col, line1, end_col if end_col is not None else col)

    def range(self, path: str, line1: int, col: int, end_line1: int | None = None, end_col: int | None = None) -> T.Range:
        return self.span(path, line1, col, end_line1, end_col).range()

    def line_span(self, path: str, line1: int, end_line1: int | None = None) -> Span:
        """From the start of ``line1`` to the end of ``end_line1`` (a :class:`Span`)."""
        end_line1 = end_line1 or line1
        text = self.line_text(path, end_line1)
        end = from_code_points(text, len(text), self.encoding)
        return Span(path, max(line1 - 1, 0), 0, max(end_line1 - 1, 0), end)

    def line_range(self, path: str, line1: int, end_line1: int | None = None) -> T.Range:
        """From the start of ``line1`` to the end of ``end_line1``."""
        return self.line_span(path, line1, end_line1).range()

    def location(self, path: str, line1: int, col: int = 0, end_col: int | None = None) -> T.Location:
        return self.location_span(path, line1, col, end_col).location()


def name_span(line_text: str, name: str, start: int = 0) -> tuple[int, int]:
    """Code point span of identifier ``name`` on a def/class line (after ``start``)."""
    m = re.compile(r"\b" + re.escape(name) + r"\b").search(line_text, max(start, 0))
    if m is None:
        return start, start
    return m.start(), m.end()
