"""Error-tolerant parsing: a syntax error blanks the broken statement, not the whole file.

``ast.parse`` stops at the first syntax error, so one stray ``)`` used to leave a buffer with no
summary at all: no symbols, no hovers, no findings anywhere in the file. :func:`parse_tolerant`
parses as before and, only when that fails, recovers from the *text alone* (the same text always
gives the same tree, whatever edits led to it):

1. CPython names the error and its position (``SyntaxError.lineno``/``offset``; for an unclosed
   bracket or string, the position of its opener).
2. The statement holding that position starts where its *logical line* starts. CPython has read
   everything before the error, so a scan of that prefix for strings, comments, brackets,
   line breaks and ``;`` finds it exactly (a line inside an open bracket continues the logical
   line). The statement ends before the next code line that is not indented deeper than its first
   line (a line that starts with a closing bracket still belongs to it): its block, or its
   continuation lines. Indentation is what says where the user's statement ends when a bracket
   or a string was left open.
3. That region is blanked: every character becomes a space (line breaks are kept, so every other
   node keeps its line and column), and ``pass`` takes the statement's place. A broken
   compound-statement header whose block follows (``def f(self x):``, ``if a ==:``) is replaced by
   a header of the same kind that fits on the line (``def f():``, ``if 1:``), so the block below it
   is still analysed where it is; a def or class that goes takes its decorators with it.
4. ``ast.parse`` again; repeat for the next error, at most ``MAX_ROUNDS`` times (a round only
   blanks more, so this ends).

The errors CPython reported (the first one, and later ones that are neither inside nor right after
a blanked region, so that no error the blanking itself caused is reported) come back as
:class:`SyntaxIssue` records for the editor. It costs nothing unless ``ast.parse`` fails, and uses
only the stdlib (no second parser to keep in step with the Python grammar: CPython itself decides
what is an error, and where).
"""

from __future__ import annotations

import ast
import bisect
import functools
import itertools
import operator
import re
from dataclasses import dataclass

MAX_ROUNDS = 16  # more broken statements than this: the file is reported as unparsable (a Python 2 file)

_SPLIT = re.compile(r"(\r\n|\r|\n)")  # the line breaks CPython and LSP count
_CLOSERS = ")]}"
# what decides where a logical line ends: strings (with their prefixes), comments, a backslash
# continuation, brackets, line breaks and `;` (the scanned text has "\n" line breaks only)
_TOKEN = re.compile(r"""
    (?=[rRbBuUfF'"\#\\()\[\]{}\n;])  # (only where a token can start: the engine skips other characters fast)
    (?:
      [rRbBuUfF]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*")
    | \#[^\n]*
    | \\\n
    | [()\[\]{}\n;]
    )
""", re.X | re.S)
_SKIP = re.compile(r"(?:[ \t\f]*(?:\#[^\n]*)?\n)*[ \t\f]*")  # blank and comment lines, then indentation
_HEADER = re.compile(
    r"(?P<async>async\s+)?(?P<kw>def|class|if|elif|else|for|while|with|try|except|finally)\b"
    r"(?:\s+(?P<name>[^\W\d]\w*))?")
_DEF = re.compile(r"(?:async\s+)?(?:def|class)\b")
_LINE_REF = re.compile(r"\bon line (\d+)")


@dataclass(frozen=True, slots=True)
class SyntaxIssue:
    """A syntax error as CPython reports it: 1-based lines, 0-based code point columns."""

    line: int
    col: int
    end_line: int
    end_col: int
    message: str


@dataclass(frozen=True, slots=True)
class Parsed:
    tree: ast.Module
    text: str  # the text ``tree`` was parsed from: the source with the broken statements blanked
    errors: tuple = ()  # SyntaxIssue, in order of position
    blanked: tuple = ()  # (first line, last line) of each blanked region, 1-based


def parse_tolerant(text: str) -> Parsed:
    """Parse ``text``; on a syntax error, blank the broken statements (see the module doc).

    Recovery works one top-level statement at a time (:func:`top_level_chunks`): each chunk that
    does not parse on its own is recovered on its own text, so a broken statement costs parses of
    its chunk, not of the file, and the incremental summary of an editor buffer
    (``pyincremental``) recovers exactly the same way.

    Raises ``SyntaxError`` (the first one) only when recovery fails, and what ``ast.parse`` raises
    for input that is not text (``ValueError`` for NUL bytes, ``RecursionError``, ``MemoryError``).
    """
    try:
        return Parsed(ast.parse(text, type_comments=False), text)
    except SyntaxError as first:
        chunks = top_level_chunks(text)
        if len(chunks) < 2:
            return parse_chunk(text, 0)
        parts = [parse_chunk(text[a:b], line0) for a, b, line0 in chunks]
        if not any(p.errors for p in parts):
            # every statement parses on its own, the file does not (a misplaced `from __future__`,
            # a statement split where the scan could not see it): recover the whole text
            return _Recovery(text).run(first)
        errors = tuple(e for p in parts for e in p.errors)
        if len(errors) > MAX_ROUNDS:
            raise issue_error(errors[0])
        body = [st for p in parts for st in p.tree.body]
        return Parsed(ast.Module(body=body, type_ignores=[]), "".join(p.text for p in parts), errors,
                      tuple(r for p in parts for r in p.blanked))


_MESSAGE_LINE = re.compile(r"\b(line )(\d+)")


def shift_issue(i: SyntaxIssue, d: int) -> SyntaxIssue:
    """``i`` of a chunk parsed on its own, moved ``d`` lines down, the lines its message names too
    ("detected at line 3", "on line 2")."""
    if not d:
        return i
    msg = _MESSAGE_LINE.sub(lambda m: f"{m.group(1)}{int(m.group(2)) + d}", i.message) if "line " in i.message \
        else i.message
    return SyntaxIssue(i.line + d, i.col, i.end_line + d, i.end_col, msg)


def moved_error(e: SyntaxError, d: int) -> SyntaxError:
    """A copy of ``e`` (raised for a chunk's own text) as the whole text's parse raises it, ``d`` lines down:
    :func:`parse_chunk` moves the line numbers of its error, not its message."""
    out = type(e)(e.msg)
    out.filename, out.text, out.offset, out.end_offset = e.filename, e.text, e.offset, getattr(e, "end_offset", None)
    out.lineno = e.lineno + d if d and e.lineno else e.lineno
    el = getattr(e, "end_lineno", None)
    out.end_lineno = el + d if d and el else el
    return out


def issue_error(i: SyntaxIssue) -> SyntaxError:
    """The ``SyntaxError`` a file with too many broken statements is reported with: its first one."""
    e = SyntaxError(i.message)
    e.lineno, e.offset, e.end_lineno, e.end_offset = i.line, i.col + 1, i.end_line, i.end_col + 1
    return e


def parse_chunk(chunk: str, line0: int) -> Parsed:
    """The error-tolerant parse of one top-level chunk whose first line is line ``line0 + 1`` of its
    file: positions in the tree, the errors and the blanked regions are those of the file. The
    recovery runs on the chunk's own text (its lines renumbered afterwards), so it does not depend on
    where the chunk sits. Raises ``SyntaxError`` (with the file's line) when recovery fails.

    A chunk at line 1 (``line0 == 0``: how an editor buffer's incremental summary and its rule facts
    parse each chunk) is memoised for the latest few texts, failures too: the two parsed the chunk a
    keystroke changed one after the other, and a broken chunk's recovery (up to 0.3 s for a long class)
    ran twice, the second time in a background job that could not yield meanwhile. Callers must not
    mutate the tree."""
    if not line0:
        parsed, error = _chunk_memo(chunk)
        if error is not None:
            raise error.with_traceback(None)
        return parsed
    return _parse_chunk(chunk, line0)


@functools.lru_cache(maxsize=4)
def _chunk_memo(chunk: str) -> tuple:
    try:
        return _parse_chunk(chunk, 0), None
    except SyntaxError as e:
        e.__context__ = e.__cause__ = None
        return None, e.with_traceback(None)


parse_chunk.cache_clear = _chunk_memo.cache_clear  # type: ignore[attr-defined]  # (tests and benchmarks)


def _parse_chunk(chunk: str, line0: int) -> Parsed:
    try:
        return Parsed(ast.parse("\n" * line0 + chunk if line0 else chunk, type_comments=False), chunk)
    except SyntaxError as e:
        first = e
    if line0:
        try:  # the error as the chunk's own text gives it (its lines, and an "on line N" in its message)
            ast.parse(chunk, type_comments=False)
        except SyntaxError as e:
            first = e
    try:
        p = _Recovery(chunk).run(first)
    except SyntaxError as e:
        if line0:
            raise moved_error(e, line0) from None
        raise
    p = _at_next_statement(chunk, p)
    if line0:
        ast.increment_lineno(p.tree, line0)
        return Parsed(p.tree, p.text, tuple(shift_issue(i, line0) for i in p.errors),
                      tuple((a + line0, b + line0) for a, b in p.blanked))
    return p


def _at_next_statement(chunk: str, p: Parsed) -> Parsed:
    """An error CPython reports after the chunk's last code line (a header without its block: the
    chunk ended first) is where the file's parse reports it: at the next statement, the first line
    after the chunk."""
    if not p.errors or not chunk.endswith(("\n", "\r")):
        return p
    lines = _SPLIT.split(chunk)[0::2]
    last = max((i for i, s in enumerate(lines) if _code(s)), default=-1) + 1  # 1-based
    nxt = len(lines)  # the line after the chunk's final line break
    if all(i.line <= last for i in p.errors):
        return p
    moved = tuple(i if i.line <= last else SyntaxIssue(nxt, 0, nxt, 0, i.message) for i in p.errors)
    return Parsed(p.tree, p.text, moved, p.blanked)


# -- top-level chunks -------------------------------------------------------------------------
#
# A chunk is one top-level statement with what belongs to it: its block, its continuation lines, the
# comment and blank lines after it, and for a def or class its decorators. A chunk starts on a line
# whose first character is code at column 0, outside any bracket, string or backslash continuation,
# that is not `else`/`elif`/`except`/`finally` or a closing bracket and does not follow a decorator
# line; a `def`, `class`, `import`, `from` or decorator at column 0 also starts one inside a bracket
# left open (valid code has none there). The scan is lexical (the _TOKEN scan of the recovery); it is context-free at a chunk start, so
# an edit rescans only from the chunk it touches to the first old chunk start it meets again
# (:class:`ChunkSplitter`).

_CONTINUES = re.compile(r"(?:else|elif|except|finally)\b")
_ENDS_OPEN = re.compile(r"(?:(?:async[ \t]+)?def|class|import|from)[ \t]|@[^\W\d]")
# _TOKEN with these changes: a triple-quoted string that is never closed runs to the end of the text (as
# CPython reads it), so what the scan sees at an offset depends on the text before it only; a line break is a
# token only where code starts at column 0 on the next line (no other line can start a chunk); a bracket pair
# on one line with no string, comment, backslash or other bracket inside is one token that changes nothing
# (its depth nets to zero), and `;` is no token: the scan visits a third of the tokens it did
_CHUNK_TOKEN = re.compile(r"""
    (?=[rRbBuUfF'"\#\\()\[\]{}\n])  # (only where a token can start: 9.5 -> 3.2 ms over a 5,000-line paste)
    (?:
      [rRbBuUfF]{0,2}(?:'''(?:\\.|[^\\])*?(?:'''|\Z)|\"\"\"(?:\\.|[^\\])*?(?:\"\"\"|\Z)|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*")
    | \#[^\n]*
    | \\\n
    | \([^()\[\]{}'"\#\n\\]*\) | \[[^()\[\]{}'"\#\n\\]*\] | \{[^()\[\]{}'"\#\n\\]*\}
    | [()\[\]{}]
    | \n(?=[^ \t\f\n\r\#])
    )
""", re.X | re.S)


def _scan_chunks(text: str, pos: int, stop_at=None) -> tuple[list[int], int]:
    """Chunk starts (offsets) from ``pos`` (itself a chunk start) on. ``stop_at(offset)`` is asked at
    each new start after the first: when true, that start is returned as the resume point and the scan
    stops. Returns (starts, resume offset or -1)."""
    starts = [pos]
    deco = text.startswith("@", pos)
    depth = 0
    for m in _CHUNK_TOKEN.finditer(text, pos):
        ch = m.group()
        if ch == "\n":
            o = m.end()
            c = text[o]  # (a line break is a token only before code at column 0)
            if depth:
                # a bracket left open: a def, class, import or decorator at column 0 cannot be inside one
                # (in valid code), so the statement ended without closing it (the recovery's view too)
                if c in "dcifa@" and _ENDS_OPEN.match(text, o):
                    depth = 0
                else:
                    continue
            if c in _CLOSERS:
                continue
            if deco:
                deco = c == "@"
                continue
            if (c == "e" or c == "f") and _CONTINUES.match(text, o):
                continue
            if stop_at is not None and stop_at(o):
                return starts, o
            starts.append(o)
            deco = c == "@"
        elif ch in "([{":
            depth += 1
        elif ch in _CLOSERS:
            if depth:
                depth -= 1
    return starts, -1


def _chunk_lines(text: str, starts: list[int]) -> list[tuple[int, int, int]]:
    out = []
    line = 0
    prev = 0
    for i, a in enumerate(starts):
        line += text.count("\n", prev, a)
        prev = a
        b = starts[i + 1] if i + 1 < len(starts) else len(text)
        out.append((a, b, line))
    return out


def _splittable(text: str) -> bool:
    # the scan counts "\n" line breaks; a lone "\r" (old Mac line ends) is one chunk
    return "\r" not in text or text.count("\r") == text.count("\r\n")


def top_level_chunks(text: str) -> list[tuple[int, int, int]]:
    """(start offset, end offset, first line, 0-based) of each top-level chunk of ``text``, in order;
    they tile the text. One chunk when the text cannot be split."""
    if not text:
        return []
    if not _splittable(text):
        return [(0, len(text), 0)]
    return _chunk_lines(text, _scan_chunks(text, 0)[0])


class ChunkSplitter:
    """:func:`top_level_chunks` of successive texts of one buffer, rescanning only what an edit changed:
    the old chunk starts before the first changed character are kept, the scan starts at the last of
    them and stops at the first old chunk start past the changed region that it finds again (the text
    after it is the old one, so are its chunk starts). Same answers as :func:`top_level_chunks`."""

    def __init__(self):
        self.text = ""
        self.starts: list[int] = []

    def split(self, text: str) -> list[tuple[int, int, int]]:
        old, starts = self.text, self.starts
        if not text:
            self.text, self.starts = text, []
            return []
        if not _splittable(text):
            self.text, self.starts = "", []
            return [(0, len(text), 0)]
        if not starts:
            new = _scan_chunks(text, 0)[0]
        else:
            p = _common_prefix(old, text)
            s = _common_suffix(old, text, min(len(old), len(text)) - p)
            delta = len(text) - len(old)
            changed_end = len(text) - s  # the unchanged suffix starts here in the new text
            ls = text.rfind("\n", 0, p) + 1  # start of the line holding the first change
            i = bisect.bisect_left(starts, ls) - 1  # the last old start before that line
            keep = starts[:i + 1] if i >= 0 else []
            pos = keep.pop() if keep else 0
            old_set = set(starts)

            def resume(o: int) -> bool:
                return o >= changed_end and (o - delta) in old_set

            found, at = _scan_chunks(text, pos, resume)
            new = keep + found
            if at >= 0:
                j = bisect.bisect_left(starts, at - delta)
                new.extend(o + delta for o in starts[j:])
        self.text, self.starts = text, new
        return _chunk_lines(text, new)


def _common_prefix(a: str, b: str) -> int:
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while lo < hi:  # a[:lo] == b[:lo], a[:hi] != b[:hi]
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _common_suffix(a: str, b: str, limit: int) -> int:
    """Length of the common suffix of ``a`` and ``b``, at most ``limit``."""
    if limit <= 0:
        return 0
    la, lb = len(a), len(b)
    lo, hi = 0, limit
    if a[la - hi:] == b[lb - hi:]:
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[la - mid:] == b[lb - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def syntax_issue(text: str, e: SyntaxError) -> SyntaxIssue:
    """``e`` (raised for ``text``) as a :class:`SyntaxIssue`."""
    return _issue(_SPLIT.split(text)[0::2], e)


class _Recovery:
    def __init__(self, text: str):
        parts = _SPLIT.split(text)
        self.lines = parts[0::2]  # contents, without line breaks
        self.breaks = parts[1::2] + [""]
        self.regions: list[tuple[int, int]] = []  # 0-based, inclusive
        self.errors: list[SyntaxIssue] = []
        # the statement-start scan's states after newline tokens, (offset, bracket depth, statement start), of
        # the lines as they were (``_scanned``); blanking keeps every line's length, so offsets stay put
        self._states: list[tuple[int, int, int]] = [(0, 0, 0)]
        self._scanned = list(self.lines)
        self._offsets = list(itertools.accumulate((len(c) + 1 for c in self.lines), initial=0))

    def text(self) -> str:
        return "".join(map(operator.add, self.lines, self.breaks))  # C-level: a round on a 5,000-line chunk

    def run(self, first: SyntaxError) -> Parsed:
        err = first
        self.errors.append(_issue(self.lines, err))
        for _ in range(MAX_ROUNDS):
            if not self._blank_at(err):
                raise first
            text = self.text()
            try:
                tree = ast.parse(text, type_comments=False)
            except SyntaxError as e:
                err = e
                if not self._caused_by_blanking(e):
                    self.errors.append(_issue(self.lines, e))
                continue
            errors = tuple(sorted(set(self.errors), key=lambda i: (i.line, i.col)))
            return Parsed(tree, text, errors, tuple((a + 1, b + 1) for a, b in sorted(self.regions)))
        raise first

    def _caused_by_blanking(self, e: SyntaxError) -> bool:
        """Is the error inside a blanked region, or on the first code line after one?"""
        i = (e.lineno or 1) - 1
        for a, b in self.regions:
            if a <= i <= b:
                return True
            j = b + 1
            while j < len(self.lines) and not _code(self.lines[j]):
                j += 1
            if i == j:
                return True
        return False

    # -- where ---------------------------------------------------------------------------
    def _blank_at(self, e: SyntaxError) -> bool:
        """Blank the statement holding ``e``'s position; False when nothing is left to blank."""
        n = len(self.lines)
        line = min(max(e.lineno or 1, 1), n) - 1
        col = min(max((e.offset or 1) - 1, 0), len(self.lines[line]))
        msg = e.msg or ""
        if msg.startswith("expected an indented block"):
            # reported on the line after the header that has no block: that header is what is broken
            m = _LINE_REF.search(msg)
            line = int(m.group(1)) - 1 if m and 0 < int(m.group(1)) <= n else self._code_line_before(line)
            col = _indent(self.lines[line])
        elif msg.startswith("expected 'except' or 'finally' block"):
            line = self._try_header_before(line)
            col = _indent(self.lines[line])
        if not _code(self.lines[line]):
            line = self._code_line_before(line)
            col = _indent(self.lines[line])
        start, start_col = self._statement_start(line, col)
        end = max(self._block_end(start), line)
        before = list(self.lines)  # the line breaks never change: comparing the lines compares the texts
        if msg.startswith("unexpected indent"):
            # lines left over from a statement that ended early (a stray `)`): they go, with no
            # `pass` at an indentation that has no block
            for i in range(start, end + 1):
                self.lines[i] = " " * len(self.lines[i])
            self.regions.append((start, end))
            return self.lines != before
        kept = self._write_region(start, start_col, end)
        if self.lines == before and end > start:
            kept = self._write_region(start, start_col, end, keep_block=False)  # its header was replaced already
        if self.lines == before:
            return self._blank_top_level(line)
        self.regions.append((start, start if kept else end))
        return True

    def _scan_state(self, text: str, stop: int) -> tuple[int, int]:
        """(bracket depth, offset where the last logical line starts) after the tokens of ``text[:stop]``.

        Resumed from the last state kept before ``stop`` (every round of a recovery asked for a later
        line and scanned the chunk from its start again: 16 rounds on a 3,000-line chunk, most of a
        failed recovery's time). A token that ends before ``stop`` is the same whether the scan is cut at
        ``stop`` or not, so the kept states are those of the uncut text, and the tokens from the first one
        that crosses ``stop`` are scanned cut there, as the scan of the prefix did."""
        lines, states = self.lines, self._states
        if self._scanned != lines:
            first = next(i for i, (a, b) in enumerate(zip(self._scanned, lines)) if a is not b)
            del states[bisect.bisect_right(states, (self._offsets[first], 1 << 62, 0)):]
            self._scanned = list(lines)
        pos, depth, start = states[bisect.bisect_right(states, (stop, 1 << 62, 0)) - 1]
        last = pos
        record = pos >= states[-1][0]
        for m in _TOKEN.finditer(text, pos):
            end = m.end()
            if end > stop:
                break
            ch = m.group()
            if ch in "([{":
                depth += 1
            elif ch in _CLOSERS:
                depth = max(depth - 1, 0)
            elif ch in "\n;":
                if depth == 0:
                    start = end
                if record and ch == "\n":
                    states.append((end, depth, start))
            last = end
        for m in _TOKEN.finditer(text, last, stop):
            ch = m.group()
            if ch in "([{":
                depth += 1
            elif ch in _CLOSERS:
                depth = max(depth - 1, 0)
            elif ch in "\n;" and depth == 0:
                start = m.end()
        return depth, start

    def _statement_start(self, line: int, col: int) -> tuple[int, int]:
        """(line, column) where the logical line holding (line, col) starts (0-based)."""
        text = "\n".join(self.lines)  # the lines up to ``line`` have the offsets of their prefix's join
        stop = self._offsets[line] + col
        _depth, start = self._scan_state(text, stop)
        start = _SKIP.match(text, start, self._offsets[line + 1] - 1).end()  # the first code character from there
        row = text.count("\n", 0, start)
        c = start - (text.rfind("\n", 0, start) + 1)
        if row > line:
            return line, _indent(self.lines[line])
        content = self.lines[row]
        if c == _indent(content) and content[c:c + 1] and content[c] in _CLOSERS:
            # a logical line that starts with `)`: a stray bracket closed the statement early
            row = self._opener_line(row)
            c = _indent(self.lines[row])
        return row, c

    def _block_end(self, line: int) -> int:
        """Last line of the statement starting on ``line``: the lines after it indented deeper
        (its block, or the continuation lines of a multi-line statement) and lines that start with
        a closing bracket."""
        ind = _indent(self.lines[line])
        end = line
        for i in range(line + 1, len(self.lines)):
            s = self.lines[i]
            if not _code(s):
                continue
            if _indent(s) <= ind and s.lstrip()[0] not in _CLOSERS:
                break
            end = i  # deeper, or the closing bracket of a multi-line statement (black's style)
        return end

    def _code_line_before(self, line: int) -> int:
        i = line - 1
        while i > 0 and not _code(self.lines[i]):
            i -= 1
        return max(i, 0)

    def _try_header_before(self, line: int) -> int:
        """The ``try:`` whose block ends before ``line`` (the nearest one above, not deeper)."""
        ind = _indent(self.lines[line])
        for i in range(line - 1, -1, -1):
            s = self.lines[i]
            if _code(s) and _indent(s) <= ind and s.strip().startswith("try"):
                return i
        return self._code_line_before(line)

    def _opener_line(self, row: int) -> int:
        """The line a closing-bracket line at the start of ``row`` closes: the nearest code line
        above that is not indented deeper and does not start with a closing bracket."""
        ind = _indent(self.lines[row])
        for i in range(row - 1, -1, -1):
            s = self.lines[i]
            if _code(s) and _indent(s) <= ind and s.lstrip()[0] not in _CLOSERS:
                return i
        return row

    def _decorators_above(self, row: int) -> int:
        """The first line of the decorators of the def/class on ``row`` (``row`` without any)."""
        ind = _indent(self.lines[row])
        start = row
        i = row - 1
        while i >= 0:
            s = self.lines[i]
            if not _code(s):
                i -= 1
                continue
            if _indent(s) != ind:
                break
            j = self._opener_line(i) if s.lstrip()[0] in _CLOSERS else i
            if not self.lines[j].lstrip().startswith("@"):
                break
            start = j
            i = j - 1
        return start

    # -- blanking -----------------------------------------------------------------------
    def _write_region(self, line: int, col: int, end: int, keep_block: bool = True) -> bool:
        """Blank lines ``line`` (from ``col``) to ``end``; True when a header replacement kept the
        block below the header."""
        content = self.lines[line]
        head = content[col:]
        at_line_start = col == _indent(content)
        if keep_block and end > line and at_line_start:
            hm = _HEADER.match(head)
            header = _replacement_header(hm) if hm is not None else None
            if header is not None and len(header) <= len(head):
                self.lines[line] = content[:col] + header.ljust(len(head))
                return True
        if at_line_start and _DEF.match(head):
            # the def/class goes: its decorators would decorate nothing
            for i in range(self._decorators_above(line), line):
                self.lines[i] = " " * len(self.lines[i])
        self.lines[line] = content[:col] + ("pass" if len(head) >= 4 else "0").ljust(len(head))
        for i in range(line + 1, end + 1):
            self.lines[i] = " " * len(self.lines[i])
        return False

    def _blank_top_level(self, line: int) -> bool:
        """Last resort: blank the whole top-level statement around ``line``."""
        start = line
        while start > 0 and not (_code(self.lines[start]) and _indent(self.lines[start]) == 0):
            start -= 1
        end = self._block_end(start)
        before = self.text()
        self._write_region(start, _indent(self.lines[start]), end, keep_block=False)
        if self.text() == before:
            return False
        self.regions.append((start, end))
        return True


def _issue(lines: list[str], e: SyntaxError) -> SyntaxIssue:
    n = len(lines)
    line = min(max(e.lineno or 1, 1), n)
    content = lines[line - 1]
    col = min(max((e.offset or 1) - 1, 0), len(content))
    end_line, end_col = line, min(col + _token_len(content, col), len(content))
    el, eo = getattr(e, "end_lineno", None), getattr(e, "end_offset", None)
    if isinstance(el, int) and isinstance(eo, int) and line <= el <= n and (el, eo - 1) > (line, col):
        end_line, end_col = el, min(max(eo - 1, 0), len(lines[el - 1]))
    return SyntaxIssue(line, col, end_line, end_col, e.msg or "invalid syntax")


def _replacement_header(m: re.Match) -> str | None:
    kw = m.group("kw")
    name = m.group("name")
    if kw in ("def", "class"):
        if not name:
            return None
        return f"{m.group('async') or ''}def {name}():" if kw == "def" else f"class {name}:"
    return {"if": "if 1:", "for": "if 1:", "while": "if 1:", "with": "if 1:", "elif": "elif 1:", "else": "else:",
            "try": "try:", "except": "except:", "finally": "finally:"}[kw]


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" \t\f"))


def _code(s: str) -> bool:
    """Does the line hold code (not only blanks or a comment)?"""
    t = s.strip()
    return bool(t) and not t.startswith("#")


def _token_len(s: str, col: int) -> int:
    m = re.match(r"\w+|\S", s[col:])
    return len(m.group(0)) if m else 0
