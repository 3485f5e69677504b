"""The analysis thread's priorities, preemption hook, cancellation and slow-job log (lsp/worker.py),
and the request priorities the server derives from the LSP method (server.default_priority)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from lsprotocol import types as T

from attnlens.lsp.server import CURRENT_METHOD, _in_method, default_priority
from attnlens.lsp.worker import IDLE, NOW, SOON, Worker


@pytest.fixture
def worker():
    w = Worker()
    yield w
    w.stop()


def test_now_runs_before_soon_before_idle_each_in_arrival_order(worker):
    seen = []
    gate = threading.Event()
    worker.submit(gate.wait)  # hold the thread while queueing
    futs = [worker.submit(seen.append, "idle1", priority=IDLE), worker.submit(seen.append, "soon1", priority=SOON),
            worker.submit(seen.append, "now1"), worker.submit(seen.append, "soon2", priority=SOON),
            worker.submit(seen.append, "now2", priority=NOW), worker.submit(seen.append, "idle2", priority=IDLE)]
    gate.set()
    for f in futs:
        f.result(5)
    assert seen == ["now1", "now2", "soon1", "soon2", "idle1", "idle2"]


def test_should_yield_when_a_more_urgent_job_is_queued(worker):
    started, release = threading.Event(), threading.Event()
    answers = []

    def background():
        started.set()
        answers.append(worker.should_yield())  # nothing queued yet
        release.wait(5)
        answers.append(worker.should_yield())  # a NOW job is queued now
        return "stopped" if answers[-1] else "ran on"

    fut = worker.submit(background, priority=IDLE)
    started.wait(5)
    now = worker.submit(lambda: worker.should_yield())  # a NOW job never yields to anything queued
    idle2 = worker.submit(lambda: worker.should_yield(), priority=IDLE)
    release.set()
    assert fut.result(5) == "stopped"
    assert answers == [False, True]
    assert now.result(5) is False
    assert idle2.result(5) is False  # a job of its own priority does not preempt it
    assert worker.should_yield() is False  # off the worker thread: always false


def test_a_cancelled_running_job_is_told_to_stop():
    async def main():
        w = Worker()
        started = threading.Event()
        polls = []

        def long_job():
            started.set()
            end = time.monotonic() + 5
            while time.monotonic() < end:
                if w.should_yield():
                    polls.append("yielded")
                    return "stopped early"
                time.sleep(0.001)
            return "ran to the end"

        task = asyncio.ensure_future(w.run(long_job))
        while not started.is_set():
            await asyncio.sleep(0.001)
        t0 = time.monotonic()
        task.cancel()  # what pygls does on $/cancelRequest
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await w.run(lambda: "next job") == "next job"
        assert polls == ["yielded"] and time.monotonic() - t0 < 1.0
        w.stop()

    asyncio.run(main())


def test_slow_jobs_are_logged_with_what_they_waited_behind(worker):
    started = threading.Event()
    worker.submit(lambda: (started.set(), time.sleep(0.12)), label="a long rules check", priority=SOON)
    started.wait(5)  # running: the hover queued now waits behind it (priorities only reorder the queue)
    fut = worker.submit(lambda: None, label="a hover")
    fut.result(5)
    slow = {entry[0]: entry for entry in worker.slow}
    label, prio, waited, ran, behind = slow["a hover"]
    assert prio == NOW and waited >= 0.1 and ran < 0.05
    assert [b[0] for b in behind] == ["a long rules check"] and behind[0][1] >= 0.1
    assert slow["a long rules check"][3] >= 0.1


@pytest.mark.parametrize("method, want", [
    (T.TEXT_DOCUMENT_HOVER, NOW), (T.TEXT_DOCUMENT_DEFINITION, NOW), (T.TEXT_DOCUMENT_IMPLEMENTATION, NOW),
    (T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, NOW), (T.TEXT_DOCUMENT_DIAGNOSTIC, SOON),
    (T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, SOON), (T.TEXT_DOCUMENT_CODE_ACTION, SOON), (T.WORKSPACE_SYMBOL, SOON),
    (T.CALL_HIERARCHY_INCOMING_CALLS, SOON), (T.TEXT_DOCUMENT_DID_CHANGE, SOON), (None, NOW)])
def test_request_priority_follows_the_method(method, want):
    async def main():
        if method is None:
            return default_priority()

        async def child():
            return default_priority()

        async def handler():
            inner = asyncio.ensure_future(child())  # a task it starts (a debounced job) inherits the method
            return default_priority(), await inner

        got, inherited = await _in_method(method, handler)()
        assert inherited == got and CURRENT_METHOD.get() is None
        return got

    assert asyncio.run(main()) == want
