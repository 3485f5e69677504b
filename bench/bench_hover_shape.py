#!/usr/bin/env python3
"""The shape of AttnLens hovers on a real checkout: how long they are, how many need scrolling.

Not a test. For every kernel call site that ``attnlens sites`` finds under PATHS, the hover the
language server would answer at the start of the callee is rendered in-process (the same
``features.hover.compute`` the server runs, with the built-in hover sections) and measured:
lines (after Markdown rendering: hard breaks and list items), characters of the Markdown source,
and whether the first line is a verdict (``Runs:``).

  .venv/bin/python bench/bench_hover_shape.py --root /work/metax --python .venv/bin/python vllm_metax
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "server"))

SCROLL_LINES = 15  # a VS Code hover shows about this many lines before it scrolls
WRAP = 100  # characters per line of a VS Code hover at its default maximum width (about 500 px of text)


class _LS:
    """What ``features.hover.compute`` asks of the server object."""

    def __init__(self):
        from attnlens.lsp.capabilities import ClientCaps
        from attnlens.lsp.config import Settings

        self.settings = Settings()
        self.caps = ClientCaps()

    def positions(self, a):
        from attnlens.lsp.convert import UTF16, Positions

        return Positions(a.line_text, UTF16)


def visible_text(md: str) -> str:
    """What the hover shows as text: link targets and titles dropped, Markdown escapes and fences removed."""
    text = re.sub(r"\]\([^)]*\)", "]", md)
    text = re.sub(r"\\(.)", r"\1", text).replace("```python", "").replace("```", "")
    return text.replace("[", "").replace("]", "")


def wrapped_lines(md: str, width: int = WRAP) -> int:
    """Lines on screen when the hover wraps its text at ``width`` characters."""
    return sum(max(1, -(-len(ln) // width)) for ln in visible_text(md).splitlines() if ln.strip())


def rendered_lines(md: str) -> int:
    """Lines a Markdown hover shows: non-blank source lines (a rule ``---`` counts as one)."""
    return sum(1 for line in md.splitlines() if line.strip())


def workspace_args(doc: str) -> argparse.ArgumentParser:
    """``--root`` (the plugin checkout) and ``--python`` (the target interpreter), as every bench here takes them."""
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    ap.add_argument("--root", required=True, help="plugin checkout (e.g. /work/metax)")
    ap.add_argument("--python", required=True, help="target interpreter (vLLM installed)")
    return ap


def main() -> int:
    ap = workspace_args(__doc__)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--show", type=int, default=0, help="print the N longest hovers")
    ap.add_argument("--dump", help="write every hover into this file")
    args = ap.parse_args()

    from lsprotocol import types as T

    from attnlens.lsp.analysis import Analysis
    from attnlens.lsp.features import hover as H
    from attnlens.workspace import Workspace

    root = Path(args.root).resolve()
    ws = Workspace(root, args.python)
    a = Analysis(ws)
    a.backends()
    ws.never_selected()
    paths = [str(root / p) for p in args.paths] or None
    sites = ws.kernel_sites(paths)
    ls = _LS()
    rows = []
    times: list[float] = []
    for s in sites[:20]:  # warm the chain caches once (the server's hovers find them warm too)
        H.compute(a, ls, s.path, T.Position(s.line - 1, s.col), None)
    t0 = time.perf_counter()
    for s in sites:
        line = a.line_text(s.path, s.line)
        col = line.find(s.call.split("[")[0].split(".")[-1], s.col)  # the callee's last segment
        t1 = time.perf_counter()
        got = H.compute(a, ls, s.path, T.Position(s.line - 1, max(col, s.col)), None)
        times.append(time.perf_counter() - t1)
        md = got[0].contents.value if got else ""
        rows.append((s, md))
    took = time.perf_counter() - t0
    n = len(rows)
    lens = [rendered_lines(md) for _, md in rows]
    chars = [len(md) for _, md in rows]
    scroll = sum(1 for x in lens if x > SCROLL_LINES)
    verdict = sum(1 for _, md in rows if md.startswith(("Runs:", "Backend ", "Impl of", "Class ")))
    empty = sum(1 for _, md in rows if not md)
    print(f"sites: {n}  (rendered in {took:.2f} s)")
    ts = sorted(times)
    print(f"compute per hover: p50 {ts[n // 2] * 1000:.2f} ms, p95 {ts[int(0.95 * (n - 1))] * 1000:.2f} ms, "
          f"max {ts[-1] * 1000:.2f} ms")
    print(f"no hover: {empty}")
    print(f"first line is a verdict: {verdict}/{n}")
    print(f"lines: median {statistics.median(lens):g}, p90 {sorted(lens)[int(0.9 * (n - 1))]}, max {max(lens)}")
    print(f"characters: median {statistics.median(chars):g}, p90 {sorted(chars)[int(0.9 * (n - 1))]}, max {max(chars)}")
    print(f"need scrolling (> {SCROLL_LINES} lines): {scroll}/{n}")
    vis = sorted(len(visible_text(md)) for _, md in rows)
    wl = sorted(wrapped_lines(md) for _, md in rows)
    print(f"visible characters: median {vis[n // 2]}, p90 {vis[int(0.9 * (n - 1))]}, max {vis[-1]}")
    print(f"lines wrapped at {WRAP} characters: median {wl[n // 2]}, p90 {wl[int(0.9 * (n - 1))]}, max {wl[-1]}; "
          f"need scrolling: {sum(1 for x in wl if x > SCROLL_LINES)}/{n}")
    for s, md in sorted(rows, key=lambda r: -len(r[1]))[: args.show]:
        print(f"\n===== {s.path}:{s.line} {s.call}  ({len(md)} chars, {rendered_lines(md)} lines)\n{md}")
    if args.dump:
        with open(args.dump, "w", encoding="utf-8") as fh:
            for s, md in rows:
                fh.write(f"\n===== {s.path}:{s.line} {s.call}\n{md}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
