"""A synchronous driver for a real `attnlens serve` process, for fuzzing and fault tests.

pygls' ``LanguageClient`` talks to the server over stdio (``start_io`` on a
subprocess); it runs on a private asyncio loop in a daemon thread, so plain
synchronous code (Hypothesis state machines, the fuzz benchmark) can drive it
with per-request deadlines:

    srv = ServerHandle(root, cache_dir)
    srv.start()                                # initialize + initialized
    srv.wait_indexed()
    rep = srv.request("textDocument/hover", {...}, timeout=5)
    rep.outcome                                # "ok" | "error" | "cancelled" | "timeout" | "dead"
    srv.close()                                # shutdown + exit, then kill whatever is left

Every request's latency is recorded (``srv.latencies``), every reply that
missed its deadline is counted as a hang, and ``alive()`` tells whether the
process still runs. Results are plain JSON (lsprotocol objects unstructured),
so answers from two servers can be compared.

Positions: :class:`TextModel` keeps the client's copy of a document and
turns code point offsets into LSP positions (UTF-16 units, lines split on
``\\r\\n``, ``\\r`` and ``\\n`` only, as the LSP specification says).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import re
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lsprotocol import types as T
from pygls.exceptions import JsonRpcException
from pygls.lsp.client import LanguageClient

from tests.helpers import group_members, pid_alive, plain, proc_table, utf16_len  # noqa: F401 - re-exported

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mini-metax"
PYTHON = str(REPO / ".venv" / "bin" / "python")
if not os.path.exists(PYTHON):  # pragma: no cover - CI without the dev venv
    PYTHON = sys.executable
SERVER_ARGV = [sys.executable, "-m", "attnlens.lsp"]
REQUEST_CANCELLED = -32800
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
STATUS = "attnlens/status"


# -- the private event loop ----------------------------------------------------------
class _LoopThread:
    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def get(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None or cls._loop.is_closed():
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="lspdriver-loop", daemon=True)
                t.start()
                cls._loop = loop
            return cls._loop


def run_sync(coro, timeout: float | None = None):
    """Run ``coro`` on the driver loop and wait for it (raises TimeoutError past ``timeout``)."""
    fut = asyncio.run_coroutine_threadsafe(coro, _LoopThread.get())
    try:
        return fut.result(timeout)
    except TimeoutError:
        fut.cancel()
        raise


def call_soon(fn, *args) -> None:
    loop = _LoopThread.get()
    done = threading.Event()
    box: list = []

    def wrapped():
        try:
            box.append(fn(*args))
        except BaseException as e:  # noqa: BLE001
            box.append(e)
        finally:
            done.set()

    loop.call_soon_threadsafe(wrapped)
    done.wait(10)
    if box and isinstance(box[0], BaseException):
        raise box[0]


# -- replies and statistics -------------------------------------------------------------
@dataclass
class Reply:
    method: str
    outcome: str  # ok | error | cancelled | timeout | dead
    result: Any = None
    code: int | None = None
    message: str = ""
    latency_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"


@dataclass
class Stats:
    requests: int = 0
    notifications: int = 0
    cancels: int = 0
    replies: collections.Counter = field(default_factory=collections.Counter)
    latencies: list = field(default_factory=list)  # seconds, answered requests only
    hangs: list = field(default_factory=list)  # (method, params summary) of requests past their deadline
    crashes: list = field(default_factory=list)  # (returncode, stderr tail)
    errors: list = field(default_factory=list)  # (method, code, message) of unexpected error replies

    def merge(self, other: "Stats") -> None:
        self.requests += other.requests
        self.notifications += other.notifications
        self.cancels += other.cancels
        self.replies.update(other.replies)
        self.latencies += other.latencies
        self.hangs += other.hangs
        self.crashes += other.crashes
        self.errors += other.errors

    def percentile(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        xs = sorted(self.latencies)
        k = min(len(xs) - 1, max(0, int(round(q / 100.0 * (len(xs) - 1)))))
        return xs[k]


# -- the server handle ------------------------------------------------------------------
class ServerHandle:
    """One `attnlens serve` process and the pygls client talking to it."""

    def __init__(self, root: Path | None, cache_dir: Path, *, python: str | None = PYTHON,
                 init_options: dict | None = None, configuration: dict | None = None,
                 capabilities: T.ClientCapabilities | None = None, env: dict | None = None,
                 argv: list[str] | None = None, cwd: str | None = None, stats: Stats | None = None):
        self.root = Path(root) if root is not None else None
        self.cache_dir = Path(cache_dir)
        self.init_options = dict(init_options or {})
        if python is not None:
            self.init_options.setdefault("targetPython", python)
        self.configuration = configuration
        self.capabilities = capabilities if capabilities is not None else default_capabilities()
        self.env = {**os.environ, "ATTNLENS_CACHE_DIR": str(self.cache_dir), **(env or {})}
        self.argv = argv or SERVER_ARGV
        self.cwd = cwd
        self.stats = stats or Stats()
        self.client: LanguageClient | None = None
        self.server_capabilities: T.ServerCapabilities | None = None
        self.statuses: list = []
        self.messages: list[tuple[str, int, str]] = []  # (kind, type, text) of showMessage/logMessage
        self.diagnostics: dict[str, list] = {}
        self.stderr_tail: collections.deque = collections.deque(maxlen=400)
        self._status_event = threading.Event()
        self._ids = itertools.count(1)
        self._stderr_task = None

    # -- lifecycle ---------------------------------------------------------------
    @property
    def process(self):
        return self.client._server if self.client is not None else None

    @property
    def pid(self) -> int | None:
        p = self.process
        return p.pid if p is not None else None

    def alive(self) -> bool:
        p = self.process
        if p is None or p.returncode is not None:
            return False
        return pid_alive(p.pid)

    def start(self, initialize: bool = True, timeout: float = 60) -> "ServerHandle":
        run_sync(self._start(), timeout)
        if initialize:
            self.initialize(timeout=timeout)
        return self

    async def _start(self) -> None:
        client = LanguageClient("attnlens-reliability", "1")
        self.client = client

        @client.feature(STATUS)
        def on_status(params):
            self.statuses.append(plain(params))
            self._status_event.set()

        @client.feature(T.WORKSPACE_CONFIGURATION)
        def on_configuration(params: T.ConfigurationParams):
            cfg = self.configuration or {}
            return [cfg.get(item.section or "", None) for item in params.items]

        @client.feature(T.CLIENT_REGISTER_CAPABILITY)
        def on_register(params):
            return None

        @client.feature(T.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def on_progress_create(params):
            return None

        @client.feature(T.PROGRESS)
        def on_progress(params):
            return None

        @client.feature(T.WORKSPACE_DIAGNOSTIC_REFRESH)
        def on_refresh(params):
            return None

        @client.feature(T.WINDOW_SHOW_MESSAGE)
        def on_show(params: T.ShowMessageParams):
            self.messages.append(("show", int(params.type), params.message))

        @client.feature(T.WINDOW_LOG_MESSAGE)
        def on_log(params: T.LogMessageParams):
            self.messages.append(("log", int(params.type), params.message))

        @client.feature(T.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def on_diagnostics(params: T.PublishDiagnosticsParams):
            self.diagnostics[params.uri] = plain(client.protocol._converter.unstructure(params.diagnostics))

        # pygls reports protocol trouble here; keep the client running and remember it
        client.report_server_error = lambda error, source: self.messages.append(
            ("client-error", 0, f"{getattr(source, '__name__', source)}: {error}"))
        await client.start_io(self.argv[0], *self.argv[1:], env=self.env, cwd=self.cwd)
        self._stderr_task = asyncio.ensure_future(self._drain_stderr(client._server))

    async def _drain_stderr(self, proc) -> None:
        while True:
            line = await proc.stderr.readline()
            if not line:
                return
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip("\n"))

    def initialize(self, timeout: float = 60, root: Path | None = None) -> dict:
        root = root or self.root
        params = T.InitializeParams(
            capabilities=self.capabilities,
            process_id=os.getpid(),
            root_uri=root.resolve().as_uri() if root else None,
            workspace_folders=[T.WorkspaceFolder(root.resolve().as_uri(), root.name)] if root else None,
            initialization_options=self.init_options,
        )
        rep = self.request(T.INITIALIZE, params, timeout=timeout, record=False)
        assert rep.ok, f"initialize failed: {rep}"
        self.server_capabilities = rep.result
        self.notify(T.INITIALIZED, T.InitializedParams())
        return rep.result

    def wait_indexed(self, timeout: float = 120) -> dict:
        if not self._status_event.wait(timeout):
            raise TimeoutError(f"no {STATUS} within {timeout} s; stderr: {self.stderr()}")
        return self.statuses[-1]

    def stderr(self, n: int = 40) -> str:
        return "\n".join(list(self.stderr_tail)[-n:])

    def close(self, timeout: float = 10) -> int | None:
        """shutdown + exit; kill the process if it does not leave in time. Returns its exit code."""
        if self.client is None:
            return None
        proc = self.process
        if self.alive():
            try:
                self.request(T.SHUTDOWN, None, timeout=5, record=False)
                self.notify(T.EXIT, None)
            except Exception:  # noqa: BLE001
                pass
        try:
            run_sync(asyncio.wait_for(proc.wait(), timeout), timeout + 2)
        except Exception:  # noqa: BLE001
            self.kill()
        try:
            run_sync(self._stop_client(), 10)
        except Exception:  # noqa: BLE001
            pass
        return proc.returncode

    async def _stop_client(self) -> None:
        client = self.client
        client._stop_event.set()
        for t in client._async_tasks:
            t.cancel()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
        await asyncio.sleep(0)

    def kill(self) -> None:
        proc = self.process
        if proc is None or proc.returncode is not None:
            return
        try:
            os.kill(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            run_sync(asyncio.wait_for(proc.wait(), 10), 12)
        except Exception:  # noqa: BLE001
            pass

    # -- messages ------------------------------------------------------------------
    def notify(self, method: str, params: Any) -> None:
        self.stats.notifications += 1
        call_soon(self.client.protocol.notify, method, params)

    def write_raw(self, data: bytes) -> None:
        """Write bytes straight to the server's stdin (malformed frames)."""
        proc = self.process

        async def w():
            proc.stdin.write(data)
            await proc.stdin.drain()

        run_sync(w(), 10)

    def next_id(self) -> int:
        return next(self._ids) + 1_000_000

    def request(self, method: str, params: Any, timeout: float = 5.0, *, cancel_after: float | None = None,
                record: bool = True) -> Reply:
        """Send a request; with ``cancel_after`` send ``$/cancelRequest`` that many seconds later.

        The reply must arrive within ``timeout`` seconds (a result, an error, or
        *RequestCancelled*); otherwise it is a hang. ``dead``: the process exited.
        """
        if not self.alive():
            rep = Reply(method, "dead", message=f"server exited ({self._exit_text()})")
            if record:
                self.stats.crashes.append((self._exit_code(), self.stderr()))
            return rep
        msg_id = self.next_id()
        params = self._typed(method, params)
        t0 = time.monotonic()

        async def go():
            fut = self.client.protocol.send_request_async(method, params, msg_id=msg_id)
            if cancel_after is not None:
                await asyncio.sleep(cancel_after)
                if not fut.done():
                    self.client.protocol.notify(T.CANCEL_REQUEST, T.CancelParams(id=msg_id))
            return await fut

        if record:
            self.stats.requests += 1
            if cancel_after is not None:
                self.stats.cancels += 1
        try:
            result = run_sync(asyncio.wait_for(go(), timeout), timeout + 5)
            dt = time.monotonic() - t0
            rep = Reply(method, "ok", result=plain(self.client.protocol._converter.unstructure(result)), latency_s=dt)
        except JsonRpcException as e:
            dt = time.monotonic() - t0
            code = getattr(e, "code", None)
            outcome = "cancelled" if code == REQUEST_CANCELLED else "error"
            rep = Reply(method, outcome, code=code, message=str(e), latency_s=dt)
        except (TimeoutError, asyncio.TimeoutError):
            dt = time.monotonic() - t0
            if not self.alive():
                rep = Reply(method, "dead", message=f"server exited ({self._exit_text()})", latency_s=dt)
            else:
                rep = Reply(method, "timeout", message=f"no reply within {timeout} s", latency_s=dt)
            self.client.protocol._request_futures.pop(msg_id, None)
        except Exception as e:  # noqa: BLE001 - the connection broke (server died mid-request)
            dt = time.monotonic() - t0
            outcome = "dead" if not self.alive() else "error"
            rep = Reply(method, outcome, message=f"{type(e).__name__}: {e}", latency_s=dt)
        if record:
            self.stats.replies[rep.outcome] += 1
            if rep.outcome in ("ok", "error", "cancelled"):
                self.stats.latencies.append(rep.latency_s)
            if rep.outcome == "timeout":
                self.stats.hangs.append((method, summarize(params)))
            if rep.outcome == "dead":
                self.stats.crashes.append((self._exit_code(), self.stderr()))
        return rep

    def _typed(self, method: str, params: Any) -> Any:
        """Plain JSON params -> the lsprotocol params object pygls serialises for ``method``."""
        if isinstance(params, dict) and method in T.METHOD_TO_TYPES:
            ptype = T.METHOD_TO_TYPES[method][2]
            if ptype is not None:
                return self.client.protocol._converter.structure(params, ptype)
        return params

    def _exit_code(self) -> int | None:
        p = self.process
        return p.returncode if p is not None else None

    def _exit_text(self) -> str:
        rc = self._exit_code()
        return f"exit code {rc}" if rc is not None else "gone"

    # -- convenience ------------------------------------------------------------------
    def open(self, path: Path, text: str | None = None, version: int = 1, language: str = "python") -> str:
        uri = Path(path).resolve().as_uri()
        if text is None:
            text = Path(path).read_text(encoding="utf-8")
        self.notify(T.TEXT_DOCUMENT_DID_OPEN, T.DidOpenTextDocumentParams(T.TextDocumentItem(uri, language, version, text)))
        return uri

    def close_doc(self, uri: str) -> None:
        self.notify(T.TEXT_DOCUMENT_DID_CLOSE, T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri)))

    def change(self, uri: str, version: int, changes: list) -> None:
        self.notify(T.TEXT_DOCUMENT_DID_CHANGE, T.DidChangeTextDocumentParams(
            T.VersionedTextDocumentIdentifier(version=version, uri=uri), changes))

    def hover(self, uri: str, line: int, char: int, timeout: float = 5.0, **kw) -> Reply:
        return self.request(T.TEXT_DOCUMENT_HOVER, T.HoverParams(T.TextDocumentIdentifier(uri), T.Position(line, char)),
                            timeout, **kw)

    def command(self, name: str, args: list | None = None, timeout: float = 30.0) -> Reply:
        return self.request(T.WORKSPACE_EXECUTE_COMMAND, T.ExecuteCommandParams(command=name, arguments=args),
                            timeout)


def default_capabilities() -> T.ClientCapabilities:
    """A VS Code-like client: pull diagnostics, hierarchical symbols, markdown, configuration, progress."""
    return T.ClientCapabilities(
        workspace=T.WorkspaceClientCapabilities(
            configuration=True, workspace_folders=True,
            did_change_watched_files=T.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
            diagnostics=T.DiagnosticWorkspaceClientCapabilities(refresh_support=True)),
        text_document=T.TextDocumentClientCapabilities(
            synchronization=T.TextDocumentSyncClientCapabilities(did_save=True),
            hover=T.HoverClientCapabilities(content_format=[T.MarkupKind.Markdown, T.MarkupKind.PlainText]),
            document_symbol=T.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True),
            diagnostic=T.DiagnosticClientCapabilities(related_document_support=True),
            call_hierarchy=T.CallHierarchyClientCapabilities(),
            implementation=T.ImplementationClientCapabilities(),
            definition=T.DefinitionClientCapabilities(),
        ),
        window=T.WindowClientCapabilities(work_done_progress=True),
        general=T.GeneralClientCapabilities(position_encodings=[T.PositionEncodingKind.Utf16]),
    )


def summarize(params: Any) -> str:
    try:
        from pygls.protocol import default_converter

        s = json.dumps(default_converter().unstructure(params), default=str)
    except Exception:  # noqa: BLE001
        s = repr(params)
    return s[:300]


def frame(body: bytes | dict | list) -> bytes:
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


# -- the client's copy of a document ---------------------------------------------------
_NEWLINE = re.compile(r"\r\n|\r|\n")


class TextModel:
    """A document as the client sees it: code point offsets <-> LSP (UTF-16) positions."""

    def __init__(self, text: str):
        self.text = text

    def line_starts(self) -> list[int]:
        starts = [0]
        for m in _NEWLINE.finditer(self.text):
            starts.append(m.end())
        return starts

    def lines(self) -> list[str]:
        return _NEWLINE.split(self.text)

    def position(self, offset: int) -> T.Position:
        starts = self.line_starts()
        lo, hi = 0, len(starts) - 1
        while lo < hi:  # last start <= offset
            mid = (lo + hi + 1) // 2
            if starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        line = lo
        return T.Position(line, utf16_len(self.text[starts[line]:offset]))

    def valid_offset(self, offset: int) -> int:
        """Move an offset off the middle of a \\r\\n pair or a surrogate pair (positions there do not exist)."""
        offset = max(0, min(offset, len(self.text)))
        if 0 < offset < len(self.text) and self.text[offset - 1] == "\r" and self.text[offset] == "\n":
            offset -= 1
        return offset

    def replace(self, start: int, end: int, new: str) -> tuple[T.Range, str]:
        """Apply an edit; return the LSP range (in the text *before* the edit) and the replaced text."""
        rng = T.Range(self.position(start), self.position(end))
        old = self.text[start:end]
        self.text = self.text[:start] + new + self.text[end:]
        return rng, old


# -- processes ----------------------------------------------------------------------------
def descendants(pid: int) -> list[int]:
    """Live (non-zombie) descendants of ``pid``."""
    table = proc_table()
    children: dict[int, list[int]] = collections.defaultdict(list)
    for p, (pp, _g, _s) in table.items():
        children[pp].append(p)
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            if table[c][2] != "Z":
                out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"


# -- a byte-level client (malformed frames) ----------------------------------------------
class RawServer:
    """`attnlens serve` over stdio with a hand-written framing layer: send any bytes, read every message."""

    def __init__(self, root: Path | None, cache_dir: Path, *, python: str | None = PYTHON,
                 env: dict | None = None, argv: list[str] | None = None):
        import queue
        import subprocess

        self.root = root
        self.python = python
        env = {**os.environ, "ATTNLENS_CACHE_DIR": str(cache_dir), **(env or {})}
        self.proc = subprocess.Popen(argv or SERVER_ARGV, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env)
        self.q: "queue.Queue[dict]" = queue.Queue()
        self.seen: list[dict] = []
        self.stderr_tail: collections.deque = collections.deque(maxlen=400)
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _read(self) -> None:
        f = self.proc.stdout
        while True:
            length = None
            while True:
                line = f.readline()
                if not line:
                    return
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
                elif line in (b"\r\n", b"\n"):
                    break
            body = f.read(length or 0)
            try:
                self.q.put(json.loads(body))
            except ValueError:
                self.q.put({"unparsable": body.decode("utf-8", "replace")})

    def _drain(self) -> None:
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    def write(self, data: bytes) -> None:
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, obj) -> None:
        self.write(frame(obj))

    def collect(self, seconds: float) -> list[dict]:
        import queue

        out = []
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                msg = self.q.get(timeout=left)
            except queue.Empty:
                break
            out.append(msg)
            self.seen.append(msg)
        return out

    def wait_for(self, pred, timeout: float = 10.0) -> tuple[dict | None, list[dict]]:
        """Read messages until ``pred(msg)``; answer server requests with null. Returns (match, all read)."""
        import queue

        got = []
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            try:
                msg = self.q.get(timeout=left)
            except queue.Empty:
                break
            got.append(msg)
            self.seen.append(msg)
            if "method" in msg and "id" in msg:  # a server->client request
                self.send({"jsonrpc": "2.0", "id": msg["id"], "result": None})
            if pred(msg):
                return msg, got
        return None, got

    def request(self, method: str, params=None, timeout: float = 10.0) -> tuple[dict | None, list[dict]]:
        rid = next(self._ids) + 5_000_000
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return self.wait_for(lambda m: m.get("id") == rid and "method" not in m, timeout)

    def initialize(self, options: dict | None = None) -> dict:
        root = self.root
        opts = dict(options or {})
        if self.python:
            opts.setdefault("targetPython", self.python)
        rep, _ = self.request("initialize", {
            "processId": os.getpid(), "capabilities": {},
            "rootUri": Path(root).resolve().as_uri() if root else None,
            "initializationOptions": opts}, timeout=60)
        assert rep is not None and "result" in rep, rep
        self.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
        return rep["result"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.alive():
            try:
                self.request("shutdown", None, timeout=5)
                self.send({"jsonrpc": "2.0", "method": "exit"})
                self.proc.wait(5)
            except Exception:  # noqa: BLE001
                pass
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)
        for s in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                s.close()
            except OSError:
                pass
