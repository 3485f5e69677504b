#!/usr/bin/env python3
"""Benchmark (not a test): diagnostics latency after an edit, and `attnlens check` cold/warm.

    .venv/bin/python bench/bench_diagnostics.py --root /path/to/vLLM-metax --python .venv/bin/python \
        --file vllm_metax/v1/attention/backends/flash_attn.py --edits 10

1. Starts `attnlens serve` as a push-diagnostics client (no pull capability), opens a large
   file (default: the largest backend, ~2,000 lines), waits for its first diagnostics, then applies
   N single-line edits (by default a statement typed into a method body, so the module's summary
   changes as it does while typing; ``--edit-kind comment`` edits a comment) and measures, for each edit, the time from
   `didChange` to the `publishDiagnostics` for that version, minus the server's debounce
   (300 ms by default): "after the debounce ending".
2. Runs `attnlens check <package>` with a fresh cache folder (cold) and twice again (warm), ``--cold-runs``
   times; prints medians and extremes (a shared machine's noise is ±20%).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_lsp import Client, uri  # noqa: E402


async def diag_latency(root: Path, python: str, rel: str, edits: int, debounce_ms: int, cache: str,
                       server_log: str | None = None, wait_index: bool = True, edit_kind: str = "code") -> list[float]:
    env = dict(os.environ, ATTNLENS_CACHE_DIR=cache)
    cmd = [sys.executable, "-m", "attnlens", "serve"]
    if server_log:  # the server's own timing of each run (debug level: waiting for the worker, computing)
        cmd += ["--log-level", "debug", "--log-file", server_log]
    client = await Client.spawn(cmd, env, str(root))
    try:
        init = await client.request("initialize", {
            "processId": os.getpid(), "rootUri": uri(str(root)), "capabilities": {"textDocument": {"publishDiagnostics": {}}},
            "initializationOptions": {"targetPython": python, "diagnosticsDebounceMs": debounce_ms},
        })
        assert "result" in init, init
        client.notify("initialized", {})
        path = root / rel
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n")
        u = uri(str(path))
        client.notify("textDocument/didOpen", {"textDocument": {"uri": u, "languageId": "python", "version": 1, "text": text}})

        async def wait_version(v: int, timeout: float = 120.0) -> float:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < timeout:
                for m in reversed(client.notifications):
                    if m.get("method") == "textDocument/publishDiagnostics" and m["params"].get("uri") == u \
                            and m["params"].get("version") == v:
                        return time.perf_counter()
                await asyncio.sleep(0.002)
            raise TimeoutError(f"no diagnostics for version {v}")

        await wait_version(1, 300)
        if wait_index:
            # steady state: the first indexing pass is over (the server then sends its status);
            # edits made while it runs may also wait for one background step
            t0 = time.perf_counter()
            while not any(m.get("method") == "attnlens/status" for m in client.notifications):
                if time.perf_counter() - t0 > 300:
                    raise TimeoutError("indexing did not finish")
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # the memory settle that follows indexing
        target, indent = edit_line(lines, edit_kind)
        out = []
        for k in range(edits):
            v = k + 2
            new = {"code": f"{indent}_attnlens_bench = {k}", "comment": f"# attnlens bench edit {k}",
                   "syntax": f"{indent}_attnlens_bench = ({k}))"}[edit_kind]  # syntax: a stray `)`
            old_len = len(lines[target])
            lines[target] = new
            t0 = time.perf_counter()
            client.notify("textDocument/didChange", {
                "textDocument": {"uri": u, "version": v},
                "contentChanges": [{"range": {"start": {"line": target, "character": 0},
                                              "end": {"line": target, "character": old_len}}, "text": new}],
            })
            t1 = await wait_version(v)
            out.append((t1 - t0) * 1000 - debounce_ms)
            await asyncio.sleep(0.05)
        n = sum(1 for m in client.notifications if m.get("method") == "textDocument/publishDiagnostics")
        print(f"diagnostics published: {n}; last count: "
              f"{len(next(m for m in reversed(client.notifications) if m.get('method') == 'textDocument/publishDiagnostics')['params']['diagnostics'])}")
        return out
    finally:
        await client.close()


def edit_line(lines: list[str], kind: str) -> tuple[int, str]:
    """A blank line near the middle of the file to overwrite, and the indentation to use.

    ``code``: a statement inside a function body (the module's summary changes, like typing);
    ``syntax``: the same line with a stray ``)`` (the file does not parse: pyrecover blanks it);
    ``comment``: a comment (only the text changes)."""
    import ast

    for i in range(len(lines) // 2, len(lines) - 1):
        if lines[i].strip():
            continue
        nxt = next((ln for ln in lines[i + 1:] if ln.strip()), "")
        indent = nxt[: len(nxt) - len(nxt.lstrip())]
        if kind == "comment":
            return i, ""
        if len(indent) < 8:
            continue  # not inside a method body
        trial = lines[:i] + [f"{indent}_attnlens_bench = 0"] + lines[i + 1:]
        try:
            ast.parse("\n".join(trial))
        except SyntaxError:
            continue
        return i, indent
    raise SystemExit("no blank line to edit in the second half of the file")


def timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--file", default="vllm_metax/v1/attention/backends/flash_attn.py")
    ap.add_argument("--package", default=None, help="path given to `attnlens check` (default: the file's top package)")
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--debounce-ms", type=int, default=300)
    ap.add_argument("--cold-runs", type=int, default=5, help="cold `attnlens check` runs, each with a fresh cache (0: none)")
    ap.add_argument("--edit-kind", choices=("code", "comment", "syntax"), default="code",
                    help="code: a statement typed into a method body (default); syntax: the same with a stray ); comment: a comment line")
    ap.add_argument("--during-indexing", action="store_true",
                    help="start editing as soon as the file's first diagnostics arrive (indexing still running)")
    ap.add_argument("--server-log", default=None, help="write the server's debug log (with per-run timings) here")
    args = ap.parse_args()
    root = Path(args.root).resolve()
    cache = tempfile.mkdtemp(prefix="attnlens-diag-")
    try:
        lat = asyncio.run(diag_latency(root, args.python, args.file, args.edits, args.debounce_ms, cache, args.server_log,
                                      not args.during_indexing, args.edit_kind))
        pkg = args.package or args.file.split("/")[0]
        exe = str(Path(sys.executable).parent / "attnlens")
        cmd = [exe, "check", pkg, "--root", str(root), "--python", args.python, "--format", "json"]
        cold: list[float] = []
        warm: list[float] = []
        for _ in range(args.cold_runs):  # each with a fresh cache folder; the machine's noise shows in min/max
            cold_cache = tempfile.mkdtemp(prefix="attnlens-check-")
            env = dict(os.environ, ATTNLENS_CACHE_DIR=cold_cache)
            cold.append(timed(cmd, env))
            warm += [timed(cmd, env) for _ in range(2)]
            shutil.rmtree(cold_cache, ignore_errors=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    n_lines = len((root / args.file).read_text().splitlines())
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; edit latencies (ms): {[round(x) for x in lat]}")
    print("| measure | value | target |\n|---|---|---|")
    print(f"| diagnostics after a {args.edit_kind} edit of {args.file} ({n_lines} lines){' during indexing' if args.during_indexing else ''}, beyond the {args.debounce_ms} ms debounce: "
          f"p50 / max of {len(lat)} | {statistics.median(lat):.0f} ms / {max(lat):.0f} ms | <= 100 ms |")
    if cold:
        print(f"| `attnlens check {pkg}` cold (fresh cache): median of {len(cold)} (min-max) | "
              f"{statistics.median(cold):.2f} s ({min(cold):.2f}-{max(cold):.2f} s) | <= 3 s |")
        print(f"| `attnlens check {pkg}` warm: median of {len(warm)} (max) | {statistics.median(warm):.2f} s "
              f"({max(warm):.2f} s) | <= 1 s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
