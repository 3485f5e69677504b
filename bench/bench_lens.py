#!/usr/bin/env python3
"""Cost of code lens and inlay hints on real files (not a test).

In-process, as the server's worker runs them (``features.lens``): the kernel call sites of the file
(``kernels.file_sites``, the chains of the resolver's site memo, i.e. the same machinery as ``attnlens
sites``), then the lenses and the hints. For each file, after the server's indexing (registry warm):

  first     the first code lens + inlay hint request for the file (its call sites traced once)
  warm      the same requests again (the per-file sites memoised for the index generation)
  edit      after a one-line edit of the file (a new generation, the file's own chains traced again),
            as the server runs it: jobs of at most ``STEP_S`` each; ``longest job`` is the most a
            hover can wait behind it

  .venv/bin/python bench/bench_lens.py --root /work/metax --python .venv/bin/python \\
      vllm_metax/third_party/pymxsml.py vllm_metax/model_executor/layers/attention/mla_attention.py -n 5
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "server"))
sys.path.insert(0, str(HERE))


def main() -> int:
    from bench_hover_shape import workspace_args

    ap = workspace_args(__doc__)
    ap.add_argument("files", nargs="+")
    ap.add_argument("-n", type=int, default=5, help="edits per file (medians over them)")
    args = ap.parse_args()

    from attnlens.lsp.analysis import Analysis
    from attnlens.lsp.features import lens as L
    from attnlens.lsp.kernels import file_sites
    from attnlens.lsp.request import View
    from attnlens.workspace import Workspace

    root = Path(args.root).resolve()
    ws = Workspace(root, args.python)
    a = Analysis(ws)
    for _ in a.indexing_steps():  # what the server does before the first request
        pass
    view = View()  # what the handlers hand the worker functions (request.py)

    def requests(path: str) -> tuple[float, float, int, int]:
        """(total s, longest job s, lenses, hints) of one code lens + inlay hint request pair, as the server
        answers it (features.lens: short jobs until the sites are complete, or the provisional ones after an edit)."""
        t0 = time.perf_counter()
        longest = 0.0
        while True:
            t = time.perf_counter()
            state = L._step(a, path)
            longest = max(longest, time.perf_counter() - t)
            if state != "pending":
                break
        t = time.perf_counter()
        lenses = [x.to_lsp() for x in L.lenses(a, view, path).lenses]
        hints = [x.to_lsp() for x in L.hints(a, view, path, 1, 10**9)]
        longest = max(longest, time.perf_counter() - t)
        return time.perf_counter() - t0, longest, len(lenses), len(hints)

    def background(path: str) -> tuple[float, float]:
        """(total s, longest job s) of tracing the file again after an edit (the server's idle-time jobs)."""
        t0 = time.perf_counter()
        longest = 0.0
        while True:
            t = time.perf_counter()
            done = file_sites(a, path, L.STEP_S) is not None
            longest = max(longest, time.perf_counter() - t)
            if done:
                return time.perf_counter() - t0, longest

    print(f"| file | lines | kernel call sites | lenses | hints | first request | warm | request after an edit "
          f"(median of {args.n}) | re-trace in the background: total / longest job |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rel in args.files:
        path = str(root / rel)
        text = Path(path).read_text(encoding="utf-8")
        first, _l, nl, nh = requests(path)
        warm = statistics.median(requests(path)[0] for _ in range(5))
        edits, bg_total, bg_job = [], [], []
        for i in range(args.n):
            ws.index.set_overlay(path, text + f"\n_attnlens_bench = {i}\n")
            t = time.perf_counter()
            a.module(path)  # the edited file summarised again: every request after the edit pays it, a hover too
            summary = time.perf_counter() - t
            total, _job, _a, _b = requests(path)
            edits.append((summary, total))
            bt, bj = background(path)
            bg_total.append(bt)
            bg_job.append(bj)
        ws.index.set_overlay(path, None)
        n_sites = len(file_sites(a, path) or [])
        summ = statistics.median(x[0] for x in edits) * 1000
        req = statistics.median(x[1] for x in edits) * 1000
        print(f"| `{rel}` | {len(text.splitlines())} | {n_sites} | {nl} | {nh} | {first * 1000:.0f} ms | {warm * 1000:.1f} ms "
              f"| {req:.1f} ms (+ {summ:.0f} ms to summarise the edited file) "
              f"| {statistics.median(bg_total) * 1000:.0f} ms / {max(bg_job) * 1000:.0f} ms |")
    import os

    print(f"\nload average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
