#!/usr/bin/env python3
"""Benchmark of the resolver on a plugin checkout (not a test: it prints numbers).

    .venv/bin/python bench/bench_resolver.py --root /path/to/vLLM-metax --python .venv/bin/python

Measures, on this machine:
  * cold ``attnlens backends`` (fresh cache folder: index + C++ index + registry), whole process;
  * warm ``attnlens backends`` (cache filled), whole process, best and median of N;
  * one ``attnlens trace`` from a warm cache, whole process, best and median of N;
  * in-process resolution alone: after the workspace is loaded, trace every kernel call
    site of the registered backends again and report p50/p95/max per trace.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd, env) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{out.stderr}")
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--python", default=sys.executable, help="target interpreter (with vllm installed)")
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--position", default=None, help="FILE:LINE:COL for the trace (default: first kernel call site)")
    args = ap.parse_args()
    exe = os.path.join(os.path.dirname(sys.executable), "attnlens")
    cache = tempfile.mkdtemp(prefix="attnlens-bench-")
    env = dict(os.environ, ATTNLENS_CACHE_DIR=cache)
    base = [exe, "backends", "--root", args.root, "--python", args.python]
    try:
        cold = run(base, env)
        warm = [run(base, env) for _ in range(args.n)]

        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
        from attnlens.workspace import Workspace

        t0 = time.perf_counter()
        ws = Workspace(args.root, python=args.python, cache_dir=cache)
        entries = ws.backends()
        load = time.perf_counter() - t0
        sites = [(c.path, c.line, c.col) for e in entries for c in e.call_sites]
        pos = args.position or (f"{sites[0][0]}:{sites[0][1]}:{sites[0][2] + 1}" if sites else None)
        traces = [run([exe, "trace", "--root", args.root, "--python", args.python, pos], env) for _ in range(args.n)] if pos else []

        # in-process: a fresh workspace from the warm cache, first trace (loads what it needs), then all sites
        ws2 = Workspace(args.root, python=args.python, cache_dir=cache)
        p, line, col = pos.rsplit(":", 2) if pos else (None, 0, 0)
        t0 = time.perf_counter()
        if p:
            ws2.trace_at(p, int(line), int(col) - 1)
        first = time.perf_counter() - t0
        per = []
        for path, line_, col_ in sites:
            t0 = time.perf_counter()
            ws2.trace_at(path, line_, col_)
            per.append((time.perf_counter() - t0) * 1000)
        # resolution alone: repeat the same positions with every module already loaded
        again = []
        for path, line_, col_ in sites:
            t0 = time.perf_counter()
            ws2.trace_at(path, line_, col_)
            again.append((time.perf_counter() - t0) * 1000)
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))] if xs else float("nan")

    print(f"root: {args.root}")
    print(f"backends: {len(entries)}, kernel call sites: {len(sites)}; in-process load+backends (warm): {load:.3f} s")
    print()
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| cold `attnlens backends` (process) | {cold:.2f} s | <= 3 s |")
    print(f"| warm `attnlens backends` (process, best / median of {args.n}) | {min(warm):.3f} s / {statistics.median(warm):.3f} s | <= 0.5 s |")
    if traces:
        print(f"| one `attnlens trace`, warm cache (process, best / median of {args.n}) | {min(traces) * 1000:.0f} ms / {statistics.median(traces) * 1000:.0f} ms | <= 150 ms |")
    print(f"| first trace in a fresh process (loads its modules) | {first * 1000:.1f} ms | - |")
    print(f"| trace per call site, first pass (p50 / p95 / max) | {pct(per, .5):.2f} / {pct(per, .95):.2f} / {max(per or [0]):.2f} ms | - |")
    print(f"| resolution alone, modules loaded (p50 / p95 / max) | {pct(again, .5):.2f} / {pct(again, .95):.2f} / {max(again or [0]):.2f} ms | <= 5 ms |")


if __name__ == "__main__":
    main()
