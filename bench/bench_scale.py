#!/usr/bin/env python3
"""How AttnLens grows from a small workspace to a huge one (a benchmark, not a test: it prints numbers).

    .venv/bin/python bench/bench_scale.py --out /tmp/scale.json
    .venv/bin/python bench/bench_scale.py --only upstream --hovers 100

For each workspace (``--workspace NAME=PATH``, repeatable; default: ``example`` = examples/mini-metax,
``metax`` = /work/metax when it exists, ``upstream`` = a copy of the installed vllm package):

  * ``attnlens sites --root PATH --json`` over the whole workspace, as a child process: cold (fresh
    cache folder) and warm (second run, same cache); wall time, peak RSS of the child (``os.wait4``:
    the child's own high-water mark, or that of a reaped descendant when it was higher; the forked
    prefetch worker runs at the same time, so the two processes together can hold more), and the
    number of sites printed. A crash (non-zero exit) is recorded with the last line of its stderr
    (and the last 15 lines in the JSON), it does not stop the benchmark.
  * the language server (``attnlens serve``, stdio, fresh cache folder unless ``--server-cache warm``):
    ready = spawn -> initialize -> initialized -> didOpen of one file -> the first hover on a kernel
    call site answers without error; then one hover on each of N positions (``--hovers``, default
    200; files are opened as the hovers reach them, as an editor would), p50/p95 of those first
    hovers, then the same positions again (mostly hover-cache hits); then it waits (at most
    ``--settle-timeout`` s) for the background call-site index (or its "on demand" status), reads the
    server's VmHWM, and hovers on the same positions once more (the settled p50/p95: the background work
    done), then reads VmHWM again.

Positions: the kernel call sites that the cold ``sites`` run printed (on the callee's last name
segment), spread evenly; when there are fewer than N (or ``sites`` failed), other call sites taken
from the workspace's Python files, spread evenly over the files.

``upstream`` is made with shutil.copytree of the installed vllm package (found with
importlib.util.find_spec in the target interpreter, never imported) into TMP/vllm-ws/vllm, Python
files only; the workspace root is TMP/vllm-ws.

Everything written goes to temporary folders (removed at the end unless ``--keep``) and to ``--out``.
``--pythonpath DIR`` puts DIR first on the children's PYTHONPATH, e.g. ``server/`` of an exported
commit (``git archive HEAD server | tar -x -C /tmp/x``) to measure that commit A/B.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_lsp import BUILTIN_NAMES, Client, pct, uri  # noqa: E402

SKIP_DIRS = {"__pycache__", "node_modules", "build", "dist"}


# ---------------------------------------------------------------------------
# workspaces
# ---------------------------------------------------------------------------


def py_files(root: Path) -> list[Path]:
    out = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS)
        out.extend(Path(d) / f for f in sorted(files) if f.endswith(".py"))
    return out


def installed_vllm_dir(python: str) -> str:
    code = ("import importlib.util as u; s = u.find_spec('vllm'); "
            "print(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    if not out:
        raise SystemExit(f"vllm is not installed for {python}")
    return out


def make_upstream(python: str, tmp: Path) -> Path:
    src = installed_vllm_dir(python)
    root = tmp / "vllm-ws"

    def ignore(d, names):
        return [n for n in names if (os.path.isdir(os.path.join(d, n)) and n in ("__pycache__",))
                or (not os.path.isdir(os.path.join(d, n)) and not n.endswith(".py"))]

    shutil.copytree(src, root / "vllm", ignore=ignore, symlinks=False)
    return root


# ---------------------------------------------------------------------------
# `attnlens sites`
# ---------------------------------------------------------------------------


def run_sites(exe: str, root: Path, python: str, cache: Path, env: dict, timeout: float, tmp: Path,
              tag: str, paths: list[str] | None = None) -> dict:
    """One `attnlens sites --json` child: wall time, its peak RSS (wait4), count or error."""
    out_p, err_p = tmp / f"sites-{tag}.json", tmp / f"sites-{tag}.stderr"
    cmd = [exe, "sites", "--root", str(root), "--python", python, "--cache-dir", str(cache), "--json", *(paths or [])]
    res = {"cmd": cmd, "wall_s": None, "rss_mb": None, "rc": None, "count": None, "kinds": None, "error": None,
           "stderr_tail": None, "sites": None}
    with open(out_p, "wb") as fo, open(err_p, "wb") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, cwd=str(root), start_new_session=True)
        timed_out = threading.Event()

        def kill():
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        _, status, ru = os.wait4(proc.pid, 0)
        res["wall_s"] = time.perf_counter() - t0
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    res["rc"] = proc.returncode
    res["rss_mb"] = ru.ru_maxrss / 1024  # KiB on Linux
    err = err_p.read_text(encoding="utf-8", errors="replace").splitlines()
    res["stderr_tail"] = err[-15:] or None
    frames = [ln.strip() for ln in err if ln.strip().startswith('File "')]
    if frames:  # a traceback: where it entered (outermost frames) and what repeats (a recursion's cycle)
        res["traceback_frames"] = len(frames)
        res["traceback_head"] = frames[:12]
        counts: dict[str, int] = {}
        for fr in frames:
            counts[fr] = counts.get(fr, 0) + 1
        res["traceback_most_repeated"] = sorted(counts.items(), key=lambda x: -x[1])[:10]
    if timed_out.is_set():
        res["error"] = f"timeout after {timeout:.0f} s"
    elif proc.returncode != 0:
        last = next((ln.strip() for ln in reversed(err) if ln.strip()), f"exit {proc.returncode}")
        res["error"] = f"exit {proc.returncode}: {last}"
    else:
        try:
            sites = json.loads(out_p.read_text(encoding="utf-8"))
            res["count"] = len(sites)
            kinds: dict[str, int] = {}
            for s in sites:
                k = (s.get("final") or {}).get("kind", "?")
                kinds[k] = kinds.get(k, 0) + 1
            res["kinds"] = kinds
            res["sites"] = [(s["path"], s["line"], s["col"], s.get("call") or "") for s in sites]
        except (ValueError, KeyError, TypeError) as e:
            res["error"] = f"bad JSON output: {type(e).__name__}: {e}"
    return res


# ---------------------------------------------------------------------------
# hover positions
# ---------------------------------------------------------------------------


def attention_dirs(root: Path) -> list[str]:
    """Folders named *attention* (outermost only), relative to root."""
    out: list[str] = []
    for d, dirs, _ in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and x not in SKIP_DIRS)
        rel = os.path.relpath(d, root)
        if "attention" in os.path.basename(d) and not any(rel.startswith(o + os.sep) for o in out):
            out.append(rel)
            dirs[:] = []
    return out


def utf16_col(line_text: str, char_col: int) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in line_text[:char_col])


def kernel_positions(sites: list[tuple[str, int, int, str]], lines_of) -> list[tuple[str, int, int, str]]:
    """(path, line0, utf16 col, callee) on the callee's last name segment of each kernel call site."""
    out = []
    for path, line, col, call in sites:
        lines = lines_of(path)
        if not lines or not (1 <= line <= len(lines)):
            continue
        text = lines[line - 1]
        seg = call.rsplit(".", 1)[-1] if call else ""
        start = max(0, col - 1)
        i = text.find(seg, start) if seg else -1
        if i < 0:
            i = text.find(seg) if seg else -1
        c = i if i >= 0 else min(col, max(0, len(text) - 1))
        out.append((path, line - 1, utf16_col(text, c), call))
    return out


def call_positions(path: Path, text: str) -> list[tuple[str, int, int, str]]:
    """Every call in a file, on the callee's last name segment (as bench_lsp.pick_positions)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines()
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.end_lineno == f.lineno:
            line, byte_col, name = f.end_lineno, f.end_col_offset - len(f.attr), f.attr
        elif isinstance(f, ast.Name):
            line, byte_col, name = f.lineno, f.col_offset, f.id
        else:
            continue
        if name in BUILTIN_NAMES or line > len(lines):
            continue
        src = lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="replace")
        out.append((str(path), line - 1, utf16_col(src, len(src)), name))
    return sorted(out)


def spread(xs: list, n: int) -> list:
    if len(xs) <= n:
        return list(xs)
    step = len(xs) / n
    return [xs[int(i * step)] for i in range(n)]


def pick_positions(files: list[Path], kernel_sites, n: int) -> tuple[list, int]:
    """n positions: kernel call sites first (spread), then other call sites spread over the files."""
    cache: dict[str, list[str]] = {}

    def lines_of(p):
        if p not in cache:
            try:
                cache[p] = Path(p).read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError):
                cache[p] = []
        return cache[p]

    kern = spread(sorted(kernel_positions(kernel_sites or [], lines_of)), n)
    taken = {(p, l, c) for p, l, c, _ in kern}
    rest: list = []
    need = n - len(kern)
    if need > 0 and files:
        per = -(-need // min(len(files), need))  # calls taken from each picked file (1 unless files are few)
        for f in spread(files, -(-need // per)):
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            calls = [c for c in call_positions(f, text) if (c[0], c[1], c[2]) not in taken]
            rest.extend(spread(calls[per // 2:] if len(calls) > per else calls, per))
            if len(rest) >= need:
                break
        rest = rest[:need]
    return kern + rest, len(kern)


# ---------------------------------------------------------------------------
# the language server
# ---------------------------------------------------------------------------


def _text_of(r: dict) -> str:
    c = (r.get("result") or {}).get("contents")
    if isinstance(c, dict):
        return c.get("value") or ""
    if isinstance(c, str):
        return c
    if isinstance(c, list):
        return "\n".join(x if isinstance(x, str) else (x or {}).get("value", "") for x in c)
    return ""


async def run_server(exe: str, root: Path, python: str, cache: Path, env: dict, positions: list, n_kernel: int,
                     tmp: Path, ready_timeout: float, hover_timeout: float, settle_timeout: float) -> dict:
    res = {"ready_s": None, "init_s": None, "first_hover_ms": None, "first_hover": None, "hovers": [],
           "repeat": [], "settled": [], "with_content": 0, "partial": 0, "first_hover_partial": None, "errors_in_hover": 0, "rpc_errors": 0, "positions": len(positions),
           "kernel_positions": n_kernel, "first_pass_done_s": None, "indexed_s": None, "call_sites_indexed": None, "rss_mb": None,
           "rss_mb_after_hovers": None, "error": None, "stderr_tail": None}
    if not positions:
        res["error"] = "no call site to hover"
        return res
    err_p = tmp / "server.stderr"
    log_p = tmp / "server.log"
    cmd = [exe, "serve", "--stdio", "--root", str(root), "--python", python, "--cache-dir", str(cache),
           "--log-file", str(log_p)]
    t0 = time.perf_counter()
    fe = open(err_p, "wb")
    proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                stderr=fe, env=env, cwd=str(root))
    client = Client(proc)

    async def req(method, params, timeout):
        try:
            return await asyncio.wait_for(client.request(method, params), timeout)
        except asyncio.TimeoutError:
            if proc.returncode is not None:
                raise RuntimeError(f"server exited with {proc.returncode}") from None
            raise RuntimeError(f"{method}: no answer in {timeout:.0f} s") from None

    try:
        caps = {"textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]}, "synchronization": {}},
                "workspace": {"configuration": True}, "window": {"workDoneProgress": False},
                "general": {"positionEncodings": ["utf-16"]}}
        init = await req("initialize", {
            "processId": os.getpid(), "rootUri": uri(str(root)), "capabilities": caps,
            "workspaceFolders": [{"uri": uri(str(root)), "name": root.name}],
            "initializationOptions": {"targetPython": python, "cacheDir": str(cache)}}, ready_timeout)
        if "error" in init:
            res["error"] = f"initialize: {init['error']}"
            return res
        res["init_s"] = time.perf_counter() - t0
        client.notify("initialized", {})
        opened: set[str] = set()

        def open_file(path):
            if path not in opened:
                opened.add(path)
                client.notify("textDocument/didOpen", {"textDocument": {
                    "uri": uri(path), "languageId": "python", "version": 1,
                    "text": Path(path).read_text(encoding="utf-8")}})

        def params(p):
            return {"textDocument": {"uri": uri(p[0])}, "position": {"line": p[1], "character": p[2]}}

        first = positions[0]
        open_file(first[0])
        deadline = t0 + ready_timeout
        while True:
            t1 = time.perf_counter()
            r = await req("textDocument/hover", params(first), max(1.0, deadline - t1))
            t2 = time.perf_counter()
            if "error" not in r:
                res["ready_s"], res["first_hover_ms"] = t2 - t0, (t2 - t1) * 1000
                txt = [ln for ln in _text_of(r).splitlines() if ln.strip() and not ln.startswith("#")]
                res["first_hover"] = txt[0][:160] if txt else None
                res["first_hover_partial"] = "partial answer" in _text_of(r)
                break
            if t2 > deadline:
                res["error"] = f"hover never succeeded: {r['error']}"
                return res
            await asyncio.sleep(0.05)

        for rnd in ("hovers", "repeat"):
            for p in positions:
                open_file(p[0])
                t1 = time.perf_counter()
                r = await req("textDocument/hover", params(p), hover_timeout)
                res[rnd].append((time.perf_counter() - t1) * 1000)
                if rnd == "hovers":
                    if "error" in r:
                        res["rpc_errors"] += 1
                    else:
                        txt = _text_of(r)
                        if "Could not resolve this position" in txt:
                            res["errors_in_hover"] += 1
                        elif txt:
                            res["with_content"] += 1
                            res["partial"] += "partial answer" in txt
            if rnd == "hovers":
                res["first_pass_done_s"] = time.perf_counter() - t0
        res["rss_mb_after_hovers"] = client.peak_rss_mb()

        settle_deadline = time.perf_counter() + settle_timeout
        while time.perf_counter() < settle_deadline:
            r = await req("workspace/executeCommand", {"command": "attnlens.status", "arguments": []}, hover_timeout)
            n = (r.get("result") or {}).get("callSitesIndexed")
            res["summaries"] = (r.get("result") or {}).get("summaries")  # (modules loaded, summaries in memory)
            if (r.get("result") or {}).get("callSitesIndex") == "on demand":
                res["indexed_s"], res["call_sites_indexed"] = time.perf_counter() - t0, "on demand"
                break
            if n is not None:
                res["indexed_s"], res["call_sites_indexed"] = time.perf_counter() - t0, n
                break
            # (a status request is a request: polled more often than the server's SETTLE_QUIET_S, the server
            # would never be quiet enough to settle its memory and start the call-site index)
            await asyncio.sleep(4.0)
        res["rss_mb"] = client.peak_rss_mb()
        # the same positions once more after the wait: what a user sees once the background work is done
        for p in positions:
            t1 = time.perf_counter()
            await req("textDocument/hover", params(p), hover_timeout)
            res["settled"].append((time.perf_counter() - t1) * 1000)
        res["rss_mb_end"] = client.peak_rss_mb()
    except Exception as e:  # noqa: BLE001
        res["error"] = f"{type(e).__name__}: {e}"
    finally:
        if res["rss_mb"] is None:
            res["rss_mb"] = client.peak_rss_mb()
        await client.close()
        fe.close()
        err = err_p.read_text(encoding="utf-8", errors="replace").splitlines()
        res["stderr_tail"] = err[-15:] or None
        res["stderr_tracebacks"] = sum("Traceback (most recent call last)" in ln for ln in err)
        try:
            log = log_p.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            log = []
        res["log_lines"], res["log_tail"] = len(log), log[-40:]
        res["log_tracebacks"] = sum("Traceback (most recent call last)" in ln for ln in log)
        res["log_warnings"] = [ln[:300] for ln in log if " WARNING " in ln or " ERROR " in ln][:20]
    return res


# ---------------------------------------------------------------------------
# table
# ---------------------------------------------------------------------------


def f1(v, nd=2):
    return "—" if v is None else f"{v:.{nd}f}"


def row(r: dict) -> str:
    sc, sw, sv = r["sites_cold"], r["sites_warm"], r["server"]
    count = str(sc["count"]) if sc["error"] is None else f"**{sc['error'][:120]}**"
    if sw and sw["error"] and sc["error"] is None:
        count += f" (warm: {sw['error'][:80]})"
    rss = max((x["rss_mb"] for x in (sc, sw) if x and x["rss_mb"] is not None), default=None)
    if sv.get("ready_s") is None:
        srv = [f"**{(sv.get('error') or 'failed')[:120]}**", "—", "—", f1(sv.get("rss_mb"), 0)]
    else:
        h, rep = sv["hovers"], sv["repeat"]
        srv = [f1(sv["ready_s"]), f"{f1(pct(h, 50))} / {f1(pct(h, 95))}",
               f"{f1(pct(rep, 50))} / {f1(pct(rep, 95))}", f1(sv["rss_mb"], 0)]
        if sv.get("error"):
            srv[1] += f" (then: {sv['error'][:80]})"
    cells = [r["name"], str(r["py_files"]), f1(sc["wall_s"]), f1(sw["wall_s"] if sw else None), f1(rss, 0), count,
             *srv]
    return "| " + " | ".join(cells) + " |"


HEAD = ("| workspace | py files | sites cold s | sites warm s | sites RSS MB | sites count or error | server ready s "
        "| hover p50 / p95 ms | hover again p50 / p95 ms | server RSS MB |")


def table(results: list[dict]) -> str:
    return "\n".join([HEAD, "|" + "---|" * 10] + [row(r) for r in results])


def details(r: dict) -> list[str]:
    sv, sc, sw = r["server"], r["sites_cold"], r["sites_warm"]
    out = [f"{r['name']}: root {r['root']}; {r['py_files']} .py files"]
    if sc["kinds"]:
        out.append("  sites cold: " + ", ".join(f"{k} {v}" for k, v in sorted(sc["kinds"].items(), key=lambda x: -x[1])))
    for tag, s in (("cold", sc), ("warm", sw)):
        if s and s["error"]:
            out.append(f"  sites {tag} failed after {f1(s['wall_s'])} s: {s['error']}")
            for ln in s["stderr_tail"] or []:
                out.append("    | " + ln)
            if s.get("traceback_frames"):
                out.append(f"    {s['traceback_frames']} frames; outermost: " + " <- ".join(
                    x.split(", in ")[-1] for x in s["traceback_head"][:8]))
                out.append("    most repeated frames:")
                for fr, k in s["traceback_most_repeated"][:6]:
                    out.append(f"      {k:5d}x {fr}")
    fb = r.get("sites_for_positions")
    if fb:
        out.append(f"  hover positions from `sites` over the attention folders: {f1(fb['wall_s'])} s, "
                   + (f"{fb['count']} sites" if fb["error"] is None else fb["error"]))
    if sv.get("init_s") is not None:
        out.append(f"  server: initialize answered after {f1(sv['init_s'])} s, ready {f1(sv['ready_s'])} s, first hover "
                   f"{f1(sv['first_hover_ms'], 0)} ms{' (partial)' if sv['first_hover_partial'] else ''} ({sv['first_hover']!r}); "
                   f"{len(sv['hovers'])} hovers "
                   f"({sv['kernel_positions']} on kernel call sites): {sv['with_content']} with content "
                   f"({sv['partial']} partial), "
                   f"{sv['errors_in_hover']} 'Could not resolve', {sv['rpc_errors']} JSON-RPC errors; max "
                   f"{f1(max(sv['hovers'] or [0]), 0)} ms, all answered {f1(sv['first_pass_done_s'])} s after spawn; "
                   f"RSS after hovers {f1(sv['rss_mb_after_hovers'], 0)} MB")
        if sv.get("settled"):
            st = sv["settled"]
            out.append(f"  hovers after the settle wait: p50 / p95 / max {f1(pct(st, 50))} / {f1(pct(st, 95))} / "
                       f"{f1(max(st))} ms; peak RSS at the end {f1(sv.get('rss_mb_end'), 0)} MB")
        out.append("  background call-site index: " + (f"complete after {f1(sv['indexed_s'])} s "
                   f"({sv['call_sites_indexed']} sites)" if sv["indexed_s"] is not None
                   else "not complete within the settle timeout (RSS read then)"))
        sm = sv.get("summaries")
        if sm:
            out.append(f"  summaries then: {sm.get('modules')} modules loaded, {sm.get('inMemory')} in memory (bound "
                       f"{sm.get('keepMax')}), {sm.get('readBack')} read back from the cache folder")
    if sv.get("error"):
        out.append(f"  server error: {sv['error']}")
    if sv.get("hovers"):
        h = sv["hovers"]
        worst = sorted(range(len(h)), key=lambda i: -h[i])[:3]
        out.append("  slowest first hovers: " + "; ".join(
            f"{h[i]:.0f} ms at {os.path.relpath(r['positions'][i][0], r['root'])}:{r['positions'][i][1] + 1} "
            f"({r['positions'][i][3]})" for i in worst))
    if sv.get("log_tracebacks") or sv.get("log_warnings"):
        out.append(f"  server log: {sv['log_lines']} lines, {sv['log_tracebacks']} traceback(s); first warnings/errors:")
        for ln in sv["log_warnings"][:8]:
            out.append("    | " + ln)
    if sv.get("stderr_tracebacks"):
        out.append(f"  server stderr holds {sv['stderr_tracebacks']} traceback(s); its last lines:")
        for ln in sv["stderr_tail"] or []:
            out.append("    | " + ln)
    return out


# ---------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", action="append", default=[], metavar="NAME=PATH",
                    help="a workspace to measure (repeatable; NAME=upstream with no path: the vllm copy)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="measure only these names")
    ap.add_argument("--python", default=str(REPO / ".venv/bin/python"), help="target interpreter (vllm installed)")
    ap.add_argument("--attnlens", default=None, help="the attnlens executable (default: next to this interpreter)")
    ap.add_argument("--pythonpath", default=None, help="prepend to the children's PYTHONPATH (e.g. an exported server/)")
    ap.add_argument("--hovers", type=int, default=200, help="hover positions per workspace")
    ap.add_argument("--server-cache", choices=("fresh", "warm"), default="fresh",
                    help="server on a fresh cache folder (default) or on the one the sites runs filled")
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--sites-json", default=None, metavar="FILE",
                    help="skip the `sites` runs; take the hover positions from this `attnlens sites --json` output")
    ap.add_argument("--sites-timeout", type=float, default=600)
    ap.add_argument("--ready-timeout", type=float, default=300)
    ap.add_argument("--hover-timeout", type=float, default=60)
    ap.add_argument("--settle-timeout", type=float, default=120)
    ap.add_argument("--out", default=None, help="also write the results as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folders")
    args = ap.parse_args()

    python = os.path.abspath(args.python)
    exe = args.attnlens or os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "attnlens")
    if not os.path.exists(exe):
        exe = str(REPO / ".venv/bin/attnlens")
    spaces: list[tuple[str, str | None]] = []
    for w in args.workspace:
        name, _, path = w.partition("=")
        spaces.append((name, path or None))
    if not spaces:
        spaces = [("example", str(REPO / "examples/mini-metax"))]
        if os.path.isdir("/work/metax"):
            spaces.append(("metax", "/work/metax"))
        spaces.append(("upstream", None))
    if args.only:
        spaces = [s for s in spaces if s[0] in args.only]
        if not spaces:
            print(f"--only {args.only}: no such workspace", file=sys.stderr)
            return 2

    env = {**os.environ, "VIRTUAL_ENV": str(Path(python).parent.parent)}
    env.pop("ATTNLENS_CACHE_DIR", None)
    if args.pythonpath:
        env["PYTHONPATH"] = os.path.abspath(args.pythonpath) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    which = subprocess.run([python, "-c", "import attnlens, os; print(os.path.dirname(attnlens.__file__))"], env=env,
                           capture_output=True, text=True).stdout.strip()
    git = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()

    results = []
    tmps = []
    try:
        for name, path in spaces:
            tmp = Path(tempfile.mkdtemp(prefix=f"attnlens-scale-{name}-"))
            tmps.append(tmp)
            t_copy = None
            if path is None:
                if name != "upstream":
                    print(f"{name}: no path", file=sys.stderr)
                    continue
                t0 = time.perf_counter()
                root = make_upstream(python, tmp)
                t_copy = time.perf_counter() - t0
            else:
                root = Path(path).resolve()
            files = py_files(root)
            print(f"[{name}] {root}: {len(files)} .py files" + (f" (copied in {t_copy:.1f} s)" if t_copy else ""),
                  file=sys.stderr, flush=True)
            cache = tmp / "cache-sites"
            cache.mkdir()
            if args.sites_json:
                listed = json.loads(Path(args.sites_json).read_text(encoding="utf-8"))
                cold = {"wall_s": None, "rss_mb": None, "rc": None, "count": len(listed), "kinds": None,
                        "error": None, "stderr_tail": None,
                        "sites": [(x["path"], x["line"], x["col"], x.get("call") or "") for x in listed]}
                warm = None
            else:
                cold = run_sites(exe, root, python, cache, env, args.sites_timeout, tmp, "cold")
                print(f"[{name}] sites cold: {f1(cold['wall_s'])} s, "
                      f"{cold['count'] if cold['error'] is None else cold['error']}", file=sys.stderr, flush=True)
                warm = run_sites(exe, root, python, cache, env, args.sites_timeout, tmp, "warm")
                print(f"[{name}] sites warm: {f1(warm['wall_s'])} s, "
                      f"{warm['count'] if warm['error'] is None else warm['error']}", file=sys.stderr, flush=True)
            kernel_sites = cold["sites"] or (warm or {}).get("sites")
            fallback = None
            if not kernel_sites:
                # positions only: the census of the attention folders, when the whole-workspace one failed
                sub = attention_dirs(root)
                if sub:
                    fallback = run_sites(exe, root, python, cache, env, args.sites_timeout, tmp, "attention", sub)
                    kernel_sites = fallback.pop("sites", None)
                    print(f"[{name}] sites over {len(sub)} attention folder(s), for hover positions only: "
                          f"{f1(fallback['wall_s'])} s, "
                          f"{fallback['count'] if fallback['error'] is None else fallback['error']}",
                          file=sys.stderr, flush=True)
            positions, n_kernel = pick_positions(files, kernel_sites, args.hovers)
            server: dict = {"error": "not run (--no-server)"}
            if not args.no_server:
                scache = cache if args.server_cache == "warm" else tmp / "cache-server"
                scache.mkdir(exist_ok=True)
                server = asyncio.run(run_server(exe, root, python, scache, env, positions, n_kernel, tmp,
                                                args.ready_timeout, args.hover_timeout, args.settle_timeout))
                print(f"[{name}] server ready: {f1(server.get('ready_s'))} s" +
                      (f"; {server['error']}" if server.get("error") else ""), file=sys.stderr, flush=True)
            for s in (cold, warm):
                if s:
                    s.pop("sites", None)
            results.append({"name": name, "root": str(root), "py_files": len(files), "copy_s": t_copy,
                            "sites_cold": cold, "sites_warm": warm, "sites_for_positions": fallback, "server": server,
                            "server_cache": args.server_cache, "positions": [list(p) for p in positions]})
    finally:
        if not args.keep:
            for t in tmps:
                shutil.rmtree(t, ignore_errors=True)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nattnlens from {which} (repo {git}); target {python}; {os.cpu_count()} CPUs, load {load:.2f}; "
          f"server cache: {args.server_cache}; {args.hovers} hover positions\n")
    print(table(results))
    print()
    for r in results:
        print("\n".join(details(r)))
    if args.out:
        meta = {"attnlens": which, "repo": git, "python": python, "cpus": os.cpu_count(), "load": load,
                "time": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv}
        Path(args.out).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
