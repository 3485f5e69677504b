#!/usr/bin/env python3
"""Benchmark of the summary builder (not a test: it prints numbers).

    .venv/bin/python bench/bench_summary.py --root /path/to/vLLM-metax/vllm_metax --root SITE/vllm/v1 \
        [--old-server /tmp/old/server] [--rounds 6]

Summarises every ``.py`` file under the roots from trees parsed once beforehand, so only the builder is
timed (``pyindex.summarize`` after ``parse_source``; the collector off, as in a CLI command). With
``--old-server`` (an exported ``server/`` folder of another commit, e.g. ``git archive REV server | tar -x
-C /tmp/old``) the two builders run alternately in one process, round after round, and the ratio of each
adjacent pair is reported: on a shared machine whose speed drifts by tens of percent between minutes, the
ratio of neighbours is what can be compared. Also checks that both builders give equal summaries.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _load_tree(server: Path, alias: str):
    """Import the ``attnlens`` package of ``server`` under another name (its relative imports stay inside it)."""
    spec = importlib.util.spec_from_file_location(alias, server / "attnlens" / "__init__.py",
                                                  submodule_search_locations=[str(server / "attnlens")])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod
    spec.loader.exec_module(mod)
    return importlib.import_module(f"{alias}.pyindex")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", action="append", required=True, help="a folder of Python files (repeatable)")
    ap.add_argument("--old-server", default=None, help="another commit's server/ folder to compare with")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE / "server"))
    from attnlens import pyindex as new

    old = _load_tree(Path(args.old_server), "attnlens_old") if args.old_server else None
    paths = sorted(p for r in args.root for p in Path(r).rglob("*.py"))
    texts = {}
    for p in paths:
        try:
            texts[str(p)] = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            pass
    trees = {p: new.parse_tolerant(t) for p, t in texts.items()}
    gc.disable()

    def build(m, want=False):
        out = []
        real = m.parse_source
        try:
            t0 = time.perf_counter()
            for p, t in texts.items():
                m.parse_source = lambda _text, _tr=trees[p]: _tr
                s = m.summarize(t, p, "x")
                if want:
                    out.append(s)
            return time.perf_counter() - t0, out
        finally:
            m.parse_source = real

    chars = sum(map(len, texts.values()))
    print(f"{len(texts)} files, {chars / 1e6:.1f} M characters")
    if old is not None:
        _, a = build(old, True)
        _, b = build(new, True)
        # the two trees' dataclasses differ by module: compare their fields
        same = all(repr(x).replace("attnlens_old.", "attnlens.") == repr(y) for x, y in zip(a, b))
        print(f"summaries equal: {same}")
        del a, b
    t_new, t_old, ratios = [], [], []
    for i in range(args.rounds):
        if old is not None:
            first, second = (old, new) if i % 2 == 0 else (new, old)
            d1, _ = build(first)
            d2, _ = build(second)
            do, dn = (d1, d2) if first is old else (d2, d1)
            t_old.append(do)
            t_new.append(dn)
            ratios.append(dn / do)
        else:
            t_new.append(build(new)[0])
    print(f"builder (this tree): median {statistics.median(t_new):.3f} s, best {min(t_new):.3f} s")
    if old is not None:
        print(f"builder (old tree):  median {statistics.median(t_old):.3f} s, best {min(t_old):.3f} s")
        print(f"new/old per adjacent pair: median {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {len(ratios)} pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
