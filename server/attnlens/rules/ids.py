"""Stable finding ids: ``AL108-1a2b3c4d5e6f``.

An id names one finding of one analysis so that a person or a tool can refer to it
(``attnlens fix --finding ID``, the LSP code action of a diagnostic). It has two parts:

* the **key** (8 hex digits): the rule, the file (relative to the workspace root), the
  anchored source text (the flagged name), the finding's own scalar data (the
  imported name, the hook, the upstream class, ...; never the resolved chain) and an
  ordinal among findings with the same key. No line number goes in, so an edit above
  the finding keeps its key;
* the **text** (4 hex digits): the source lines the finding covers, as they were when
  it was computed.

A finding whose key still exists with another text part is *stale*: its target was
edited since. :func:`split` and :func:`same_key` let the fix command and the editor
refuse such a fix with a message instead of applying it to code nobody reviewed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_SKIP = frozenset({"chain", "diff", "old_link", "new_link", "old", "new", "installed", "id"})


def _scalar(v) -> bool:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return True
    return isinstance(v, (list, tuple)) and all(isinstance(x, (str, int, float, bool)) or x is None for x in v)


def relpath(path: str, root) -> str:
    if root is None or not path:
        return path or ""
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if rel.startswith("..") else Path(rel).as_posix()


def span_text(lines: list[str], line: int, end_line: int | None = None) -> str:
    """The source lines ``line..end_line`` (1-based), right-stripped, joined by newlines."""
    end = max(end_line or line, line)
    return "\n".join(x.rstrip() for x in lines[max(line - 1, 0):end])


def anchor_text(lines: list[str], line: int, col: int, end_line: int | None, end_col: int | None) -> str:
    if not (0 < line <= len(lines)):
        return ""
    if (end_line or line) == line and end_col is not None and end_col > col:
        return lines[line - 1][col:end_col]
    return lines[line - 1].strip()


def key_of(rule: str, rel: str, anchor: str, data: dict | None, root=None) -> str:
    items = sorted((k, repr(v)) for k, v in (data or {}).items() if k not in _SKIP and _scalar(v))
    text = f"{rule}|{rel}|{anchor}|{items!r}"
    return text.replace(str(root), "<root>") if root else text  # the same checkout elsewhere: the same ids


def make_id(rule: str, key: str, text: str, ordinal: int = 0) -> str:
    k = hashlib.sha1(f"{key}|{ordinal}".encode("utf-8", "surrogatepass")).hexdigest()[:8]
    t = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:4]
    return f"{rule}-{k}{t}"


def split(fid: str) -> tuple[str, str, str] | None:
    """(rule, key part, text part) of an id, or None when it is not one."""
    rule, sep, rest = (fid or "").strip().rpartition("-")
    if not sep or not rule or len(rest) != 12 or any(c not in "0123456789abcdef" for c in rest):
        return None
    return rule, rest[:8], rest[8:]


def same_key(a: str, b: str) -> bool:
    sa, sb = split(a), split(b)
    return sa is not None and sb is not None and sa[:2] == sb[:2]


def assign(findings, root, lines_of) -> None:
    """Set ``id`` (and ``data["id"]``) on finding-like objects or dicts (rule, path, line, col, end_line,
    end_col, data), in their order; ``lines_of(path)`` gives a file's lines (the analysed text: overlays included)."""
    seen: dict = {}
    for f in findings:
        get = f.get if isinstance(f, dict) else (lambda k, d=None, _f=f: getattr(_f, k, d))
        path = get("path") or ""
        lines = lines_of(path) or []
        line = int(get("line") or 1)
        end_line = int(get("end_line") or line)
        key = key_of(get("rule") or "", relpath(path, root), anchor_text(lines, line, int(get("col") or 0), end_line,
                                                                       get("end_col")), get("data"), root)
        n = seen.get(key, 0)
        seen[key] = n + 1
        fid = make_id(get("rule") or "", key, span_text(lines, line, end_line), n)
        if isinstance(f, dict):
            f["id"] = fid
        else:
            f.id = fid
        data = get("data")
        if isinstance(data, dict):
            data["id"] = fid  # diagnostics carry ``data``: the editor's code action finds its finding by it
