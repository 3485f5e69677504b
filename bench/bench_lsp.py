#!/usr/bin/env python3
"""Benchmark AttnLens' language server against jedi-language-server and ty on the same positions.

Not a test. It drives each server over stdio with a minimal JSON-RPC client
(so the client adds almost nothing to the timings) and prints a Markdown table:

  ready        process start -> first successful hover response (after initialize)
  first hover  latency of that first hover request
  warm hover   p50/p95 over repeated hovers on the ~30 positions, after one pass
  impl         p50/p95 of textDocument/implementation on the same positions
  peak RSS     VmHWM of the server process at the end

Positions: call sites picked evenly from ``<root>/vllm_metax/v1/attention/backends/*.py``
(or ``--glob``), on the callee's last name segment.

  python bench/bench_lsp.py --root /work/metax --python .venv/bin/python
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


# ---------------------------------------------------------------------------
# a minimal LSP client
# ---------------------------------------------------------------------------


class Client:
    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self._id = 0
        self._pending: dict[int, asyncio.Future] = {}
        self._reader = asyncio.ensure_future(self._read())
        self.notifications: list[dict] = []

    @classmethod
    async def spawn(cls, cmd: list[str], env: dict, cwd: str) -> "Client":
        proc = await asyncio.create_subprocess_exec(*cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.DEVNULL, env=env, cwd=cwd)
        return cls(proc)

    def _send(self, msg: dict) -> None:
        body = json.dumps(msg).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)

    async def request(self, method: str, params) -> dict:
        self._id += 1
        fut = asyncio.get_running_loop().create_future()
        self._pending[self._id] = fut
        self._send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        await self.proc.stdin.drain()
        return await fut

    def notify(self, method: str, params) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def _read(self) -> None:
        r = self.proc.stdout
        while True:
            length = None
            while True:
                line = await r.readline()
                if not line:
                    return
                line = line.strip()
                if not line:
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            msg = json.loads(await r.readexactly(length))
            if "id" in msg and "method" in msg:  # a request from the server: answer it
                result = None
                if msg["method"] == "workspace/configuration":
                    result = [None for _ in msg["params"]["items"]]
                self._send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            elif "id" in msg:
                fut = self._pending.pop(msg["id"], None)
                if fut is not None and not fut.done():
                    fut.set_result(msg)
            else:
                self.notifications.append(msg)

    def peak_rss_mb(self) -> float | None:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            return None
        return None

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self.request("shutdown", None), 5)
            self.notify("exit", None)
            await asyncio.wait_for(self.proc.wait(), 5)
        except Exception:  # noqa: BLE001
            self.proc.kill()
            await self.proc.wait()
        self._reader.cancel()


# ---------------------------------------------------------------------------
# positions
# ---------------------------------------------------------------------------


BUILTIN_NAMES = {"super", "len", "print", "isinstance", "getattr", "range", "int", "float", "str", "tuple", "list", "dict"}


def pick_positions(root: Path, pattern: str, n: int) -> list[tuple[str, int, int, str]]:
    """(path, line0, utf16 col, callee) of ~n call sites spread over the files."""
    sites = []
    for path in sorted(glob.glob(str(root / pattern))):
        text = Path(path).read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.end_lineno == f.lineno:
                line = f.end_lineno
                byte_col = f.end_col_offset - len(f.attr)
                name = f.attr
            elif isinstance(f, ast.Name):
                line, byte_col, name = f.lineno, f.col_offset, f.id
            else:
                continue
            if name in BUILTIN_NAMES:
                continue
            src = lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8")
            col16 = sum(2 if ord(c) > 0xFFFF else 1 for c in src)
            sites.append((path, line - 1, col16, name))
    sites.sort()
    if len(sites) <= n:
        return sites
    step = len(sites) / n
    return [sites[int(i * step)] for i in range(n)]


# ---------------------------------------------------------------------------
# one server run
# ---------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    ready_ms: float | None = None
    init_ms: float | None = None  # spawn -> initialize response (imports, handshake)
    first_hover_ms: float | None = None
    warm: list[float] = field(default_factory=list)
    impl: list[float] = field(default_factory=list)
    rss_mb: float | None = None
    hovers_with_content: int = 0
    impl_with_result: int = 0
    positions: int = 0
    error: str | None = None


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100 * (len(v) - 1)))))
    return v[k]


def uri(path: str) -> str:
    return Path(path).resolve().as_uri()


async def run_server(name: str, cmd: list[str], env: dict, root: Path, init_options, positions, rounds: int,
                     ready_timeout: float = 120, settle=None) -> Result:
    res = Result(name, positions=len(positions))
    t0 = time.perf_counter()
    client = await Client.spawn(cmd, env, str(root))
    try:
        caps = {"textDocument": {"hover": {"contentFormat": ["markdown", "plaintext"]},
                                 "implementation": {"linkSupport": False}, "synchronization": {}},
                "workspace": {"configuration": True}, "window": {"workDoneProgress": False},
                "general": {"positionEncodings": ["utf-16"]}}
        init = await asyncio.wait_for(client.request("initialize", {
            "processId": os.getpid(), "rootUri": uri(str(root)), "capabilities": caps,
            "workspaceFolders": [{"uri": uri(str(root)), "name": root.name}],
            "initializationOptions": init_options}), ready_timeout)
        if "error" in init:
            res.error = f"initialize: {init['error']}"
            return res
        res.init_ms = (time.perf_counter() - t0) * 1000
        client.notify("initialized", {})
        opened = set()

        def open_file(path):
            if path in opened:
                return
            opened.add(path)
            client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri(path), "languageId": "python", "version": 1,
                "text": Path(path).read_text(encoding="utf-8")}})

        def params(p):
            return {"textDocument": {"uri": uri(p[0])}, "position": {"line": p[1], "character": p[2]}}

        # ready + first hover
        first = positions[0]
        open_file(first[0])
        deadline = time.perf_counter() + ready_timeout
        while True:
            t1 = time.perf_counter()
            r = await asyncio.wait_for(client.request("textDocument/hover", params(first)), ready_timeout)
            t2 = time.perf_counter()
            if "error" not in r:
                res.ready_ms = (t2 - t0) * 1000
                res.first_hover_ms = (t2 - t1) * 1000
                break
            if t2 > deadline:
                res.error = f"hover never succeeded: {r['error']}"
                return res
            await asyncio.sleep(0.05)
        for p in positions:
            open_file(p[0])
        # one pass to warm every position (first time for each), then timed rounds
        for p in positions:
            r = await client.request("textDocument/hover", params(p))
            if r.get("result"):
                res.hovers_with_content += 1
        for _ in range(rounds):
            for p in positions:
                t1 = time.perf_counter()
                await client.request("textDocument/hover", params(p))
                res.warm.append((time.perf_counter() - t1) * 1000)
        for i in range(max(1, rounds // 2)):
            for p in positions:
                t1 = time.perf_counter()
                r = await client.request("textDocument/implementation", params(p))
                res.impl.append((time.perf_counter() - t1) * 1000)
                if i == 0 and r.get("result"):
                    res.impl_with_result += 1
        res.rss_mb = client.peak_rss_mb()
        if settle is not None:
            await settle(client)
            res.rss_mb = client.peak_rss_mb()
    except Exception as e:  # noqa: BLE001
        res.error = f"{type(e).__name__}: {e}"
    finally:
        if res.rss_mb is None:
            res.rss_mb = client.peak_rss_mb()
        await client.close()
    return res


async def attnlens_settled(client: Client, timeout: float = 120) -> None:
    """Wait until AttnLens finished its background indexing (call-site index included)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        r = await client.request("workspace/executeCommand", {"command": "attnlens.status", "arguments": []})
        if (r.get("result") or {}).get("callSitesIndexed") is not None:
            return
        await asyncio.sleep(0.5)


def merge(runs: list[Result]) -> Result:
    """Median of per-run start-up numbers, pooled latency samples, worst RSS."""
    ok = [r for r in runs if r.ready_ms is not None]
    if not ok:
        return runs[-1]
    m = Result(ok[0].name, positions=ok[0].positions)

    def med(attr):
        vals = [getattr(r, attr) for r in ok if getattr(r, attr) is not None]
        return statistics.median(vals) if vals else None

    m.ready_ms, m.first_hover_ms, m.init_ms = med("ready_ms"), med("first_hover_ms"), med("init_ms")
    m.warm = [x for r in ok for x in r.warm]
    m.impl = [x for r in ok for x in r.impl]
    m.rss_mb = max((r.rss_mb for r in ok if r.rss_mb is not None), default=None)
    m.hovers_with_content = min(r.hovers_with_content for r in ok)
    m.impl_with_result = min(r.impl_with_result for r in ok)
    m.error = "; ".join(r.error for r in runs if r.error) or None
    return m


def fmt(v, unit="ms") -> str:
    if v is None:
        return "—"
    return f"{v:.1f} {unit}" if v >= 10 else f"{v:.2f} {unit}"


def table(results: list[Result]) -> str:
    head = ("| server | ready | first hover | warm hover p50 | warm hover p95 | impl p50 | impl p95 | peak RSS "
            "| hovers with content | impl with result |")
    out = [head, "|" + "---|" * 10]
    for r in results:
        if r.error and r.ready_ms is None:
            out.append(f"| {r.name} | failed: {r.error} |" + " |" * 8)
            continue
        out.append(f"| {r.name} | {fmt(r.ready_ms)} | {fmt(r.first_hover_ms)} | {fmt(pct(r.warm, 50))} | "
                   f"{fmt(pct(r.warm, 95))} | {fmt(pct(r.impl, 50))} | {fmt(pct(r.impl, 95))} | "
                   f"{fmt(r.rss_mb, 'MB')} | {r.hovers_with_content}/{r.positions} | {r.impl_with_result}/{r.positions} |")
    return "\n".join(out)


TARGETS = {"ready_ms": 1000, "first_hover_ms": 300, "warm_p50": 2, "warm_p95": 10, "rss_mb": 200}


def check_targets(r: Result) -> list[str]:
    got = {"ready_ms": r.ready_ms, "first_hover_ms": r.first_hover_ms, "warm_p50": pct(r.warm, 50),
           "warm_p95": pct(r.warm, 95), "rss_mb": r.rss_mb}
    return [f"{k}: {got[k]:.2f} > {v}" for k, v in TARGETS.items() if got[k] is not None and got[k] > v]


async def repeated(k: int, *a, **kw) -> Result:
    return merge([await run_server(*a, **kw) for _ in range(k)])


async def main_async(args) -> int:
    root = Path(args.root).resolve()
    python = os.path.abspath(args.python)
    positions = pick_positions(root, args.glob, args.n)
    if not positions:
        print(f"no call sites under {root / args.glob}", file=sys.stderr)
        return 2
    venv = str(Path(python).parent.parent)
    base_env = {**os.environ, "VIRTUAL_ENV": venv, "PYTHONDONTWRITEBYTECODE": "1"}
    results = []
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    cache = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="attnlens-bench-"))
    me = sys.executable
    if "attnlens" in servers:
        env = {**base_env, "ATTNLENS_CACHE_DIR": str(cache)}
        cmd = [me, "-m", "attnlens.lsp"]
        opts = {"targetPython": python}
        if not args.cache_dir:
            results.append(await run_server("AttnLens (empty cache)", cmd, env, root, opts, positions, args.rounds,
                                            settle=attnlens_settled))
        results.append(await repeated(args.repeat, "AttnLens (warm cache)", cmd, env, root, opts, positions,
                                      args.rounds, settle=attnlens_settled))
    if "jedi" in servers:
        exe = shutil.which("jedi-language-server", path=os.path.dirname(me)) or shutil.which("jedi-language-server")
        if exe:
            results.append(await repeated(args.repeat, "jedi-language-server", [exe], base_env, root,
                                          {"workspace": {"environmentPath": python}}, positions, args.rounds))
        else:
            results.append(Result("jedi-language-server", error="not installed (pip install jedi-language-server)"))
    if "ty" in servers:
        exe = shutil.which("ty", path=os.path.dirname(me)) or shutil.which("ty")
        if exe:
            results.append(await repeated(args.repeat, "ty server", [exe, "server"], base_env, root, {}, positions,
                                          args.rounds))
        else:
            results.append(Result("ty server", error="not installed (pip install ty)"))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{len(positions)} call sites from {root / args.glob}; {args.rounds} warm rounds; {args.repeat} runs per "
          f"server (empty-cache AttnLens: 1 run); target interpreter {python}; {os.cpu_count()} CPUs, load {load:.2f}\n")
    print(table(results))
    misses = [f"{r.name}: {m}" for r in results if r.name.startswith("AttnLens (warm") for m in check_targets(r)]
    print("\nAttnLens targets (warm cache): " + ("all met" if not misses else "; ".join(misses)))
    for r in results:
        if r.init_ms is not None and r.ready_ms is not None:
            print(f"\n{r.name}: initialize answered after {r.init_ms:.0f} ms; ready {r.ready_ms:.0f} ms")
        if r.error:
            print(f"\n{r.name}: {r.error}")
    print("\npeak RSS for AttnLens is read after its background indexing finished (call-site index included)")
    if args.json:
        Path(args.json).write_text(json.dumps([r.__dict__ for r in results], indent=1))
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="plugin checkout (e.g. /work/metax)")
    p.add_argument("--python", required=True, help="target interpreter (vLLM installed)")
    p.add_argument("--glob", default="vllm_metax/v1/attention/backends/*.py")
    p.add_argument("-n", type=int, default=30, help="number of call sites")
    p.add_argument("--rounds", type=int, default=10, help="warm hover rounds over all positions")
    p.add_argument("--servers", default="attnlens,jedi,ty")
    p.add_argument("--repeat", type=int, default=3, help="runs per server (start-up numbers: median; latencies: pooled)")
    p.add_argument("--cache-dir", default=None, help="AttnLens cache (default: a fresh one, measured empty then warm)")
    p.add_argument("--json", default=None, help="also write raw results here")
    return asyncio.run(main_async(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
