"""The one analysis thread, and per-key debouncing on the event loop.

Analysis objects (index, resolver, caches) are not thread-safe, so every
touch of them runs on a single worker thread, in submission order within a
priority. Two priorities exist: ``NOW`` for document updates and requests (in
arrival order, so a hover sees the edits sent before it) and ``IDLE`` for
background indexing, which is split into small steps so a request never waits
behind more than one step.

Cancellation: a job that has not started is dropped when its asyncio waiter
is cancelled (pygls cancels the handler task on ``$/cancelRequest``); a job
that already runs finishes and its result is discarded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import itertools
import logging
import queue
import threading
from typing import Any, Awaitable, Callable

log = logging.getLogger(__name__)

NOW = 0
IDLE = 1


class Worker:
    def __init__(self, name: str = "attnlens-analysis"):
        self._q: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, priority: int = NOW) -> cf.Future:
        fut: cf.Future = cf.Future()
        self._q.put((priority, next(self._seq), fut, fn, args))
        return fut

    async def run(self, fn: Callable[..., Any], *args: Any, priority: int = NOW) -> Any:
        """Run ``fn(*args)`` on the worker and await it; cancellable."""
        check_cancelled()
        fut = self.submit(fn, *args, priority=priority)
        try:
            result = await asyncio.wrap_future(fut)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        check_cancelled()
        return result

    def is_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def stop(self, timeout: float = 2.0) -> None:
        self._q.put((-1, -1, None, None, ()))
        self._thread.join(timeout)

    def _loop(self) -> None:
        while True:
            _prio, _seq, fut, fn, args = self._q.get()
            if fut is None:
                return
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the waiter
                fut.set_exception(e)


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
