"""The AttnLens language server object: session state plus feature wiring.

State ownership (see ``__init__``): the event loop thread owns settings,
open documents, the exact-position hover cache, the edit *epoch* and the
session state of the features (hover sections, probe verdicts, the files
the workspace check published, the files being traced again); the
worker thread owns the :class:`~attnlens.lsp.analysis.Analysis` (the
workspace's query, chain/backend/symbol caches, kernel call sites in
progress). Every piece of state is on one of these two objects, none is a
module global of ``lsp/``: two servers in one process share nothing
(``tests/lsp/test_two_servers.py``). Handlers are async adapters: take a
frozen snapshot of what the worker function needs of the loop thread
(:class:`~attnlens.lsp.request.Request` at a position, :meth:`AttnLensServer.request`;
:class:`~attnlens.lsp.request.View` otherwise, :meth:`AttnLensServer.view`),
``await self.call(...)`` on the worker, and make the lsprotocol objects from
the plain data it returns. No worker function receives the server.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import time
from typing import Any, Callable, Iterable

from lsprotocol import types as T
from pygls.lsp.server import LanguageServer

from .. import __version__
from .. import gcpolicy
from ..gcpolicy import freeze_young
from .analysis import LRU, REFRESH_STEP_S, Analysis
from .capabilities import ClientCaps
from .config import Settings
from .convert import UTF16, uri_to_path
from .hover import HoverSections
from .request import Request, View
from .worker import IDLE, NOW, SOON, Debouncer, Worker

log = logging.getLogger("attnlens.lsp")

STATUS_NOTIFICATION = "attnlens/status"
# new tracked objects that make a collect+freeze worth it: after indexing the real vLLM-MetaX
# checkout the server tracks 149,000 objects and a full collection of them takes 88 ms
SETTLE_AFTER_OBJECTS = 50_000
SETTLE_QUIET_S = 3.0  # a full collection waits for this long without requests or edits
WARM_OPEN_MAX = 8  # open files whose call sites the background traces (the most recently used ones)
BACKOFF_S = 0.3  # background work waits this long after the last request (user activity)
CALLSITES_DELAY_S = 0.5  # quiet time after an edit before the call index catches up (stepped, preemptible)
CALLS_STEP_S = 0.02  # one background step of the call index
CALLS_SUMMARISE_AFTER_S = 2.0  # quiet time before the call index itself summarises an edited buffer
# above this many workspace modules the call-site index is built on demand only (the first
# incoming-calls request): upstream vLLM (2,234 modules) has 144,000 call sites, 17-90 s of
# tracing and 250 MB more memory for an index that only call hierarchy reads
CALLSITES_EAGER_MAX_MODULES = 1000


READY_TIMEOUT_S = 30.0  # a request before `initialized` waits this long, then gets ServerNotInitialized

# the worker priority of a request (worker.py): the requests at a position run NOW, in order with the
# edits; every other request (whole file, workspace, commands) and the work its notifications start
# (debounced diagnostics) runs SOON, after every queued NOW job
POSITION_METHODS = frozenset({T.TEXT_DOCUMENT_HOVER, T.TEXT_DOCUMENT_DEFINITION, T.TEXT_DOCUMENT_IMPLEMENTATION,
                              T.TEXT_DOCUMENT_DECLARATION, T.TEXT_DOCUMENT_TYPE_DEFINITION,
                              T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, T.TEXT_DOCUMENT_SIGNATURE_HELP})
CURRENT_METHOD: contextvars.ContextVar[str | None] = contextvars.ContextVar("attnlens_method", default=None)


def default_priority() -> int:
    """The priority of a job submitted by the handler of the current LSP method (NOW outside any)."""
    method = CURRENT_METHOD.get()
    return NOW if method is None or method in POSITION_METHODS else SOON


def _in_method(method: str, f: Callable) -> Callable:
    """``f`` run with ``CURRENT_METHOD`` set (tasks it starts inherit it)."""
    if asyncio.iscoroutinefunction(f):
        @functools.wraps(f)
        async def handler(*args, **kwargs):
            token = CURRENT_METHOD.set(method)
            try:
                return await f(*args, **kwargs)
            finally:
                CURRENT_METHOD.reset(token)
    else:
        @functools.wraps(f)
        def handler(*args, **kwargs):
            token = CURRENT_METHOD.set(method)
            try:
                return f(*args, **kwargs)
            finally:
                CURRENT_METHOD.reset(token)
    return handler


class AttnLensServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__("attnlens", __version__, text_document_sync_kind=T.TextDocumentSyncKind.Incremental)
        gcpolicy.FREEZE_AFTER_LOADS = True  # (this process settles its collector: settle_memory)
        self.settings = Settings()
        self.cli_defaults: dict = {}  # `attnlens serve --python/--cache-dir/...`: below client settings
        self.cli_root: str | None = None  # `attnlens serve --root`: used when the client names no folder
        self.init_options: dict = {}
        self.loop: asyncio.AbstractEventLoop | None = None  # set at initialize
        self.caps = ClientCaps()
        self.worker = Worker()
        self.debouncer = Debouncer()
        self.analysis: Analysis | None = None
        self.root_hint: str | None = None  # from rootUri / workspaceFolders
        self.ready = asyncio.Event()
        self.epoch = 0  # bumped by every submitted edit; keys the exact-position hover cache
        self.hover_cache: LRU = LRU(1024)
        self.open_docs: dict[str, str] = {}  # real path -> uri, the least recently used first (touch_doc)
        self.overlaid: set[str] = set()  # paths whose overlay is set in the index
        self.encoding = UTF16  # negotiated position encoding
        self.index_run = 0
        self.background: set[asyncio.Task] = set()
        self.warned: set[str] = set()
        self.last_request = 0.0  # monotonic time of the last request that reached the worker
        self.settings_listeners: list[Callable[[Settings, Settings], None]] = []  # (old, new) after a change
        # session state of the features (loop thread)
        self.hover_sections = HoverSections()  # features add theirs when they register (hover.py)
        self.probe_diagnostics: dict[str, list] = {}  # uri -> diagnostics of the probe runs started there
        self.workspace_checked_uris: set[str] = set()  # the URIs the workspace check published
        self.retracing: set[str] = set()  # paths whose kernel call sites are traced again in the background (lens)

    # -- transport: pygls' loops with a reader that survives malformed frames (jsonrpc.py) --
    def _start_io_async(self, stdin=None, stdout=None) -> None:
        from .jsonrpc import serve_io

        serve_io(self, stdin, stdout)

    def start_tcp(self, host: str, port: int) -> None:
        from .jsonrpc import serve_tcp

        serve_tcp(self, host, port)

    # -- handlers: every one records its method (see default_priority) ---------------
    def feature(self, feature_name: str, options: Any | None = None) -> Callable:
        register = super().feature(feature_name, options)

        def decorator(f):
            register(_in_method(feature_name, f))
            return f

        return decorator

    def command(self, command_name: str) -> Callable:
        register = super().command(command_name)

        def decorator(f):
            register(_in_method(T.WORKSPACE_EXECUTE_COMMAND, f))
            return f

        return decorator

    # -- documents -------------------------------------------------------------
    def doc_version(self, uri: str) -> int | None:
        path = uri_to_path(uri)
        if path is None or path not in self.open_docs:
            return None
        return self.workspace.get_text_document(uri).version

    def touch_doc(self, path: str) -> None:
        """``path`` was opened, edited or asked about: the most recently used open file (``open_docs``' order:
        :meth:`warm_open_sites` warms the last ``WARM_OPEN_MAX``)."""
        uri = self.open_docs.pop(path, None)
        if uri is not None:
            self.open_docs[path] = uri

    def request(self, uri: str, pos: T.Position) -> Request | None:
        """The frozen view of a request at ``pos`` that a worker function gets (None: not a file we analyse)."""
        path = uri_to_path(uri)
        if path is None:
            return None
        self.touch_doc(path)
        return Request(uri, path, self.doc_version(uri), pos.line, pos.character, self.encoding, self.settings,
                       self.caps.markdown_hover, self.hover_sections.snapshot(), self.caps)

    def view(self) -> View:
        """The frozen view a worker function over a file or the workspace gets: encoding, settings, capabilities."""
        return View(self.encoding, self.settings, self.caps)

    # -- the worker --------------------------------------------------------------
    async def call(self, fn: Callable[..., Any], *args: Any, priority: int | None = None, backoff: bool = True) -> Any:
        """Run ``fn(analysis, *args)`` on the worker; None when no workspace is analysed. Without
        ``priority``: NOW for a request at a position, SOON for any other (:func:`default_priority`).
        ``backoff=False``: an IDLE job that starts without waiting for ``BACKOFF_S`` of quiet (it still
        queues behind every request): work the user is waiting for, scheduled after its own pause.

        ``fn`` reads the analysis and the frozen snapshot it is given (:meth:`request`, :meth:`view`;
        ``request.py``), never this object, and returns plain data: positions are converted on the worker,
        against the same text the analysis reads, and the handler makes the lsprotocol objects.
        """
        if not self.ready.is_set():
            try:
                await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT_S)
            except asyncio.TimeoutError:
                from pygls.exceptions import JsonRpcException

                class _NotInitialized(JsonRpcException):
                    CODE = -32002  # ServerNotInitialized

                raise _NotInitialized("the server has not been initialized (no `initialized` notification yet)") from None
        if priority is None:
            priority = default_priority()
        if priority < IDLE:
            self.last_request = time.monotonic()
        elif backoff:
            # background work (indexing steps, a partial hover's completion) starts only when
            # requests have paused for BACKOFF_S: a job already running cannot be interrupted,
            # so one started in the middle of a burst of hovers made the next hover wait for it
            # (10 s on upstream vLLM)
            while (wait := self.last_request + BACKOFF_S - time.monotonic()) > 0:
                await asyncio.sleep(wait)

        def job():
            a = self.analysis
            if a is None:
                return None
            a.cancel = self.worker.should_yield  # a trace of a request that gave up stops early
            return fn(a, *args)

        try:
            return await self.worker.run(job, priority=priority, label=getattr(fn, "__qualname__", None))
        finally:
            if priority < IDLE:  # quiet time counts from the answer: a slow request is activity too
                self.last_request = time.monotonic()

    def mutate(self, fn: Callable[[Analysis], Any]) -> None:
        """Queue a change of the analysis state (in order with requests)."""
        self.epoch += 1
        self.hover_cache.clear()
        self.last_request = time.monotonic()  # typing: background work backs off too

        def job():
            a = self.analysis
            if a is not None:
                fn(a)

        fut = self.worker.submit(job, priority=NOW)
        fut.add_done_callback(_log_failure)
        self.schedule_refresh()

    def spawn(self, coro) -> asyncio.Task:
        """Keep a reference to a background task until it ends."""
        task = asyncio.ensure_future(coro)
        self.background.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self.background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    # -- client feedback ---------------------------------------------------------
    def warn(self, message: str, once: bool = False) -> None:
        if once and message in self.warned:
            return
        self.warned.add(message)
        log.warning("%s", message)
        self.window_show_message(T.ShowMessageParams(T.MessageType.Warning, message))

    async def send_status(self) -> dict | None:
        status = await self.call(Analysis.status, priority=IDLE)
        if status is None:
            status = {"root": None, "targetPython": self.settings.target_python, "targetError": None,
                      "indexedModules": 0, "generation": 0, "platform": None}
        status["serverVersion"] = __version__
        status["features"] = optional_features()
        self.protocol.notify(STATUS_NOTIFICATION, status)
        return status

    async def idle(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a background step when the user has been quiet for ``BACKOFF_S`` (:meth:`call` waits for it)."""
        return await self.call(fn, *args, priority=IDLE)

    # -- background refresh after edits -----------------------------------------
    def schedule_refresh(self, delay_s: float = 1.0) -> None:
        self.debouncer.schedule("refresh", delay_s, self._refresh)
        # the call index catches up on its own: a few stale records after a body edit, every module after a
        # structural one; in preemptible steps (they stop when a request is queued)
        self.debouncer.schedule("callsites", CALLSITES_DELAY_S, self.index_call_sites)

    async def _refresh(self) -> None:
        if self.analysis is None:
            return
        # the backends' call sites traced again a few at a time (an edited backend module's sites held the
        # analysis thread for 80+ ms in one piece while a hover waited), then assembled from the traced chains
        steps = await self.idle(lambda a: a.refresh_steps())
        while steps is not None and await self.idle(lambda a: next(steps, None) is not None):
            pass
        await self.idle(lambda a: a.backends())
        await self.idle(lambda a: a.symbols())
        await self.warm_open_sites()
        await self.settle_memory()

    async def warm_open_sites(self) -> None:
        """The references of the open files (positions outside a call) and their kernel call sites, traced in
        small background steps: a hover on a class name
        counts its kernels from them (``kernels.class_kernels``; the first one on a file traced all its sites
        inside the request, 0.2-0.5 s on the real checkout's backend modules). After an edit the sites of
        unchanged files come from the resolver's memo. Only the ``WARM_OPEN_MAX`` most recently used open files,
        the latest first: with a hundred files of upstream vLLM open, warming them all traced a few thousand
        sites and grew the server by 100 MB; a file left out is traced when a request needs it."""
        from .kernels import file_sites

        for path in [p for p in self.open_docs if p.endswith(".py")][-WARM_OPEN_MAX:][::-1]:
            await self.idle(lambda a, p=path: a.q.prepare_refs(p))
            while True:
                done = await self.idle(lambda a, p=path: file_sites(a, p, REFRESH_STEP_S) is not None)
                if done is None or done or path not in self.open_docs:
                    break

    async def settle_memory(self) -> None:
        """Collect once and freeze the survivors while the user is quiet (see ``gcpolicy``):
        later collections then skip the index, so none lands in the middle of a request. Only
        when indexing or a refresh left ``SETTLE_AFTER_OBJECTS`` new long-lived objects: after
        a small edit there is little to freeze and the collections stay cheap."""
        from ..gcpolicy import settle

        # a full collection holds the GIL for the whole heap (0.1-0.5 s with a pasted 5,000-line buffer open),
        # so the thread that reads the client's messages stops too: only after SETTLE_QUIET_S without a
        # request or an edit (a burst of hovers arrived in the middle of one in the editing session)
        while (wait := self.last_request + SETTLE_QUIET_S - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        took = await self.idle(lambda a: settle(SETTLE_AFTER_OBJECTS))
        if took is not None:
            log.debug("gc settle: %.1f ms", took * 1000)

    async def index_call_sites(self) -> None:
        if not self.settings.index_call_sites:
            return
        if await self.call(lambda a: a.callsites_deferred(CALLSITES_EAGER_MAX_MODULES) and not a.calls.by_path,
                           priority=IDLE):
            log.info("call-site index deferred (over %d workspace modules): built on the first incoming-calls "
                     "request", CALLSITES_EAGER_MAX_MODULES)
            return
        run = self.index_run
        should_yield = self.worker.should_yield
        while run == self.index_run:
            # an edited buffer nobody has read yet is summarised here only after a longer quiet time (its
            # summary is the part of a step that cannot stop: 0.3-2 s for a 5,000-line paste); a hover
            # or the diagnostics' preparation usually reads it first
            if time.monotonic() - self.last_request < CALLS_SUMMARISE_AFTER_S and await self.idle(
                    lambda a: bool(a.calls.unsummarised_changes())):
                await asyncio.sleep(CALLS_SUMMARISE_AFTER_S / 4)
                continue
            done = await self.idle(lambda a: a.calls_step(CALLS_STEP_S, should_yield))
            if done is None or done:
                # the new records into the permanent generation (cheap; a full collect+freeze walks the
                # whole heap: 0.5-2 s here, which the next hover waited behind)
                await self.idle(lambda a: freeze_young())
                return

    def shutdown_analysis(self) -> None:
        self.debouncer.cancel_all()
        for t in list(self.background):
            t.cancel()

        def close():
            if self.analysis is not None:
                self.analysis.q.close()

        try:
            self.worker.submit(close).result(timeout=5)
        except Exception:  # noqa: BLE001
            log.warning("closing the workspace failed", exc_info=True)


def _log_failure(fut) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("analysis update failed", exc_info=fut.exception())


def optional_features() -> dict:
    """Which optional parts of AttnLens are importable in this server."""
    out = {}
    for key, mod in (("rules", "attnlens.rules.engine"), ("runtime", "attnlens.runtime.probes"),
                     ("environment", "attnlens.runtime.environment"), ("cppindex", "attnlens.cppindex")):
        try:
            __import__(mod)
            out[key] = True
        except Exception:  # noqa: BLE001 - optional
            out[key] = False
    return out


def create_server(features: Iterable[str] | None = None) -> AttnLensServer:
    """Build a server with the named feature modules (default: all)."""
    from . import features as F

    server = AttnLensServer()
    for name in features or F.ALL:
        F.module(name).register(server)
    return server
