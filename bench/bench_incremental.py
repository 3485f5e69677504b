"""Summary of an open buffer after each keystroke: incremental (pyincremental) against the whole-file summary.

    .venv/bin/python bench/bench_incremental.py [--lines 5000] [--words 20]

The fuzz session's workload (tests/reliability/fuzzmachine.py): the six fuzzed files of the example
repeated into a 5,000-line block pasted at line 60 of flash_attn.py, then words typed into indented
lines one keystroke at a time. Prints ms: the first summary, keystrokes that add no line and keystrokes
that end a line (every chunk below moves), p50 and max, and the whole-file summary of the last text.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "server"))
sys.path.insert(0, str(ROOT))

from attnlens import pyindex  # noqa: E402
from attnlens.pyincremental import IncrementalSummary  # noqa: E402
from tests.reliability.fuzzmachine import FUZZ_FILES  # noqa: E402

EXAMPLE = ROOT / "examples" / "mini-metax"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lines", type=int, default=5000)
    p.add_argument("--words", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    import random

    lines: list[str] = []
    for rel in FUZZ_FILES:
        lines += (EXAMPLE / rel).read_text(encoding="utf-8").splitlines(True)
    block = "".join(lines[i % len(lines)] for i in range(args.lines))
    base = (EXAMPLE / FUZZ_FILES[0]).read_text(encoding="utf-8").splitlines(True)
    text = "".join(base[:60]) + block + "".join(base[60:])
    inc = IncrementalSummary()
    t = time.perf_counter()
    inc.summarize(text, "m.py", "sha")
    first = (time.perf_counter() - t) * 1000
    pyindex.parse_source.cache_clear()
    t = time.perf_counter()
    pyindex.summarize(text, "m.py", "sha", refs=True)
    whole_first = (time.perf_counter() - t) * 1000
    rng = random.Random(args.seed)
    same, ends = [], []
    for k in range(args.words):
        starts = [m.start() for m in re.finditer(r"(?m)^[ \t]+(?=\S)", text)]
        at = rng.choice(starts)
        word = re.match(r"[ \t]*", text[at:]).group(0) + f"_edit_{k} = k\n"
        for i, ch in enumerate(word):
            text = text[:at + i] + ch + text[at + i:]
            t = time.perf_counter()
            inc.summarize(text, "m.py", "sha")
            (ends if ch == "\n" else same).append((time.perf_counter() - t) * 1000)
    pyindex.parse_source.cache_clear()
    t = time.perf_counter()
    pyindex.summarize(text, "m.py", "sha", refs=True)
    whole_last = (time.perf_counter() - t) * 1000
    print(f"{len(text.splitlines())} lines; first summary: incremental {first:.1f} ms, whole {whole_first:.1f} ms")
    print(f"keystrokes adding no line ({len(same)}): p50 {statistics.median(same):.1f} ms, max {max(same):.1f} ms")
    print(f"keystrokes ending a line ({len(ends)}): p50 {statistics.median(ends):.1f} ms, max {max(ends):.1f} ms")
    print(f"whole-file summary of the last text: {whole_last:.1f} ms")


if __name__ == "__main__":
    main()
