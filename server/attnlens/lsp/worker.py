"""The one analysis thread, and per-key debouncing on the event loop.

Analysis objects (index, resolver, caches) are not thread-safe, so every
touch of them runs on a single worker thread, in submission order within a
priority. Three priorities:

* ``NOW``: document updates and requests at a position (hover, definition,
  implementation, prepare call hierarchy), in arrival order, so a hover sees
  the edits sent before it;
* ``SOON``: requests over a whole file or the workspace (diagnostics, code
  actions, symbols, incoming/outgoing calls): they run after every queued
  ``NOW`` job, so a hover never queues behind them;
* ``IDLE``: background work (indexing, refreshes, the call index), split into
  small steps.

A job that is already running cannot be interrupted from outside; long jobs
stop by themselves at a safe point when :meth:`Worker.should_yield` says so:
their waiter gave up (``$/cancelRequest``), or a job of a more urgent priority
is queued. Stepped work (the call index) passes it to the resolver as its
``cancel`` callback and resumes in a later step; the result of a step cut
short that way is never kept.

Cancellation: a job that has not started is dropped when its asyncio waiter
is cancelled (pygls cancels the handler task on ``$/cancelRequest``); a job
that already runs is marked abandoned (``should_yield`` turns true) and its
result is discarded.

Every job's wait and run time is measured; ``Worker.slow`` keeps the last
jobs that waited or ran longer than ``SLOW_S`` (with their label), and they are
logged at debug level: what a slow hover waited behind. With the environment
variable ``ATTNLENS_WORKER_WATCHDOG`` set (to milliseconds, e.g. 80), a watchdog
thread logs, at warning level, the stack of a background job that has held the
thread that long without asking ``should_yield`` while a more urgent job waits:
where a stretch of work needs a safe point. With ``ATTNLENS_WORKER_PROFILE`` set (to milliseconds),
every job runs under ``cProfile`` and one that ran longer than that logs, at warning level, its 25
costliest functions by cumulative time: what a slow request spent its time on (cProfile slows every
job down about twofold, so the threshold is compared with the profiled run time).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures as cf
import itertools
import logging
import queue
import os
import sys
import threading
import time
import traceback
from typing import Any, Awaitable, Callable

log = logging.getLogger(__name__)

NOW = 0
SOON = 1
IDLE = 2
PRIORITIES = (NOW, SOON, IDLE)
SLOW_S = 0.05  # a job that waited or ran longer than this is remembered (and logged at debug level)


class Job:
    __slots__ = ("fut", "fn", "args", "priority", "label", "queued", "started", "abandoned")

    def __init__(self, fut: cf.Future, fn: Callable[..., Any], args: tuple, priority: int, label: str):
        self.fut, self.fn, self.args, self.priority, self.label = fut, fn, args, priority, label
        self.queued = time.perf_counter()
        self.started = 0.0
        self.abandoned = False


class Worker:
    def __init__(self, name: str = "attnlens-analysis"):
        self._q: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._waiting = [0] * len(PRIORITIES)  # queued jobs per priority (cancelled ones until dropped)
        self._count_lock = threading.Lock()
        self.current: Job | None = None  # the running job (worker thread)
        self.slow: collections.deque = collections.deque(maxlen=200)  # (label, priority, wait_s, run_s, behind)
        self._recent: collections.deque = collections.deque(maxlen=32)  # (ended, label, run_s) of the last jobs
        self._asked = 0.0  # when the running job last asked should_yield (the watchdog reads it)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()
        watch_ms = os.environ.get("ATTNLENS_WORKER_WATCHDOG", "")
        if watch_ms.isdigit() and int(watch_ms) > 0:
            threading.Thread(target=self._watchdog, args=(int(watch_ms) / 1000.0,), name=f"{name}-watchdog",
                             daemon=True).start()
        prof_ms = os.environ.get("ATTNLENS_WORKER_PROFILE", "")
        self._profile_s = int(prof_ms) / 1000.0 if prof_ms.isdigit() and int(prof_ms) > 0 else 0.0

    def submit(self, fn: Callable[..., Any], *args: Any, priority: int = NOW, label: str | None = None) -> cf.Future:
        fut: cf.Future = cf.Future()
        job = Job(fut, fn, args, priority, label or getattr(fn, "__qualname__", "job"))
        fut._attnlens_job = job  # type: ignore[attr-defined] - run() marks it abandoned on cancellation
        with self._count_lock:
            self._waiting[priority] += 1
        self._q.put((priority, next(self._seq), job))
        return fut

    async def run(self, fn: Callable[..., Any], *args: Any, priority: int = NOW, label: str | None = None) -> Any:
        """Run ``fn(*args)`` on the worker and await it; cancellable."""
        check_cancelled()
        fut = self.submit(fn, *args, priority=priority, label=label)
        try:
            result = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            if not fut.cancel():  # already running: ask it to stop at its next safe point
                fut._attnlens_job.abandoned = True  # type: ignore[attr-defined]
            raise
        check_cancelled()
        return result

    def is_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def waiting(self, priority: int) -> int:
        """Jobs queued (not started) at ``priority``."""
        return self._waiting[priority]

    def urgent_waiting(self, than: int) -> bool:
        """Is a job of a more urgent priority than ``than`` queued?"""
        return any(self._waiting[p] for p in range(than))

    def should_yield(self) -> bool:
        """Should the running job stop at its next safe point? (Worker thread; false elsewhere.)

        True when its waiter gave up, or when a job of a more urgent priority is queued. A
        plain callable, so core code can take it as a ``cancel`` callback."""
        job = self.current
        if job is None or not self.is_worker_thread():
            return False
        self._asked = time.perf_counter()
        return job.abandoned or self.urgent_waiting(job.priority)

    def _watchdog(self, limit_s: float) -> None:
        """Log the stack of a non-``NOW`` job that held the thread ``limit_s`` without a safe point while a more
        urgent job waits (once per stretch). A diagnostic (see the module doc)."""
        reported = None
        while True:
            time.sleep(min(0.01, limit_s / 4))
            job = self.current
            if job is None or job.priority == NOW:
                continue
            since = time.perf_counter() - max(self._asked, job.started)
            if since < limit_s or not self.urgent_waiting(job.priority) or reported == (job, self._asked):
                continue
            reported = (job, self._asked)
            frame = sys._current_frames().get(self._thread.ident)
            stack = "".join(traceback.format_stack(frame)[-24:]) if frame is not None else "(no stack)"
            log.warning("worker watchdog: %s (priority %d) held the thread %.0f ms without a safe point while a "
                        "request waits:\n%s", job.label, job.priority, since * 1000, stack)

    def stop(self, timeout: float = 2.0) -> None:
        self._q.put((-1, -1, None))
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            _prio, _seq, job = self._q.get()
            if job is None:
                return
            with self._count_lock:
                self._waiting[job.priority] -= 1
            if not job.fut.set_running_or_notify_cancel():
                continue
            job.started = time.perf_counter()
            self.current = job
            try:
                job.fut.set_result(self._profiled(job) if self._profile_s else job.fn(*job.args))
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                job.fut.set_exception(e)
            finally:
                self.current = None
                self._note(job, time.perf_counter())

    def _profiled(self, job: Job) -> Any:
        """``job`` run under cProfile; its costliest functions logged when it ran longer than the threshold
        (a diagnostic, see the module doc)."""
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        try:
            return prof.runcall(job.fn, *job.args)
        finally:
            ran = time.perf_counter() - job.started
            if ran > self._profile_s:
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(25)
                log.warning("worker profile: %s (priority %d) ran %.1f ms profiled, waited %.1f ms:\n%s", job.label,
                            job.priority, ran * 1000, (job.started - job.queued) * 1000, out.getvalue())

    def _note(self, job: Job, ended: float) -> None:
        wait, ran = job.started - job.queued, ended - job.started
        if wait > SLOW_S or ran > SLOW_S:
            # what it waited behind: the jobs that ran (longer than a millisecond) while it was queued
            behind = [(label, r) for end, label, r in self._recent if end > job.queued and r > 0.001] if wait > SLOW_S else []
            self.slow.append((job.label, job.priority, wait, ran, behind))
            if log.isEnabledFor(logging.DEBUG):
                log.debug("worker: %s (priority %d) waited %.1f ms, ran %.1f ms%s%s", job.label, job.priority,
                          wait * 1000, ran * 1000, " (abandoned)" if job.abandoned else "",
                          "; behind " + ", ".join(f"{lb} {r * 1000:.0f} ms" for lb, r in behind) if behind else "")
        self._recent.append((ended, job.label, ran))


def check_cancelled() -> None:
    """Raise CancelledError when the current request task was cancelled.

    pygls cancels the handler task; the cancellation normally surfaces at the
    next ``await``. Checking before and after the worker hop also catches a
    cancel that arrived while the loop was busy.
    """
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if task is not None and cancelling is not None and cancelling():
        raise asyncio.CancelledError()


class Debouncer:
    """Run the latest scheduled coroutine per key after a quiet period."""

    def __init__(self) -> None:
        self._tasks: dict[Any, asyncio.Task] = {}

    def schedule(self, key: Any, delay_s: float, make: Callable[[], Awaitable[Any]]) -> asyncio.Task:
        old = self._tasks.pop(key, None)
        if old is not None and not old.done():
            old.cancel()

        async def later():
            await asyncio.sleep(delay_s)
            await make()

        task = asyncio.ensure_future(later())
        self._tasks[key] = task
        task.add_done_callback(lambda t, k=key: self._done(k, t))
        return task

    def _done(self, key: Any, task: asyncio.Task) -> None:
        if self._tasks.get(key) is task:
            del self._tasks[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("debounced task %r failed", key, exc_info=task.exception())

    def cancel(self, key: Any) -> None:
        t = self._tasks.pop(key, None)
        if t is not None:
            t.cancel()

    def cancel_all(self) -> None:
        for t in self._tasks.values():
            t.cancel()
        self._tasks.clear()
