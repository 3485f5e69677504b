"""Two processes over one list of work items: this one the first half, a forked helper the second.

For one-shot CLI commands over a whole workspace on a machine with two or more cores (`attnlens sites` over
upstream vLLM: 2,234 modules, 128,000 traced calls). The helper is a fork, so it starts with everything this
process computed before (the index, the platform profile, the never-selected set); each process keeps its
own memos from there. The halves are fixed by the items' weights (not claimed as the two go), so the results
are the same on every run; the helper sends its results back through a pipe (pickled: give it plain values,
e.g. rendered strings), and a half the helper did not send (it died or was killed) is done here after it.

Only where forking is safe: a single-threaded process (the CLI's ``allow_fork``). Anything else, or fewer
than two cores, runs every item here.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def split_point(weights: list[float]) -> int:
    """The first index of the second half: the items before it weigh half of the whole (at least one item on
    each side when there are two)."""
    total = sum(weights)
    acc = 0.0
    for i, w in enumerate(weights):
        if acc + w / 2 >= total / 2:
            return min(max(i, 1), len(weights) - 1)
        acc += w
    return max(len(weights) - 1, 1)


def run_split(n: int, work: Callable[[int], object], in_helper: Callable[[], None] | None = None,
              allowed: bool = True, weights: list[float] | None = None,
              helper_done: Callable[[], None] | None = None) -> list:
    """``[work(i) for i in range(n)]``: this process the first half (by ``weights``, default 1 each), a forked
    helper the second, each in order, when ``allowed`` and there are two cores. The halves are fixed, not
    claimed as the two go: ``work`` may depend on what its process computed before (memos), and the results
    must not depend on timing. ``in_helper`` runs first in the helper (drop what belongs to this process's
    other children); ``helper_done`` after its last item (put what it cached on disk). A ``work`` that raises
    in the helper leaves its items to this process, which then raises as it would alone."""
    if not allowed or n < 2 or cores() < 2 or not hasattr(os, "fork"):
        return [work(i) for i in range(n)]
    k = split_point(weights if weights is not None else [1.0] * n)
    try:
        rfd, wfd = os.pipe()
        pid = os.fork()
    except OSError:
        return [work(i) for i in range(n)]
    if pid == 0:  # pragma: no cover - the helper (coverage does not follow forks)
        code = 0
        try:
            os.close(rfd)
            _helper(k, n, work, in_helper, helper_done, wfd)
        except BaseException:  # noqa: BLE001 - this process does what the helper did not send
            code = 1
        os._exit(code)
    os.close(wfd)
    out = [work(i) for i in range(k)]
    got = _join(pid, rfd)
    if len(got) != n - k:
        got = [work(i) for i in range(k, n)]  # (a helper that died: its half, here)
    return out + list(got)


def _helper(k: int, n: int, work, in_helper, helper_done, wfd: int) -> None:  # pragma: no cover - runs in the fork
    import signal

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if in_helper is not None:
        in_helper()
    done = [work(j) for j in range(k, n)]
    if helper_done is not None:
        helper_done()
    write_all(wfd, pickle.dumps(done, protocol=pickle.HIGHEST_PROTOCOL))


def write_all(wfd: int, data: bytes) -> None:
    """Write ``data`` to the pipe ``wfd`` (a helper's results) and close it."""
    view = memoryview(data)
    while view:
        wrote = os.write(wfd, view)
        view = view[wrote:]
    os.close(wfd)


def read_all_and_reap(pid: int, rfd: int) -> bytes:
    """Everything a forked helper wrote to the pipe ``rfd`` (closed after), once the helper ``pid`` has ended."""
    chunks = []
    try:
        while True:
            b = os.read(rfd, 1 << 20)
            if not b:
                break
            chunks.append(b)
    except OSError:
        pass
    finally:
        try:
            os.close(rfd)
        except OSError:
            pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    return b"".join(chunks)


def _join(pid: int, rfd: int) -> list:
    data = read_all_and_reap(pid, rfd)
    try:
        got = pickle.loads(data) if data else []
    except Exception:  # noqa: BLE001 - a helper that died mid-write: this process does its items
        got = []
    return got if isinstance(got, list) else []
