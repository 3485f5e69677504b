"""Two processes over one list of work items: this one the first half, a forked helper the second.

For one-shot CLI commands over a whole workspace on a machine with two or more cores (`attnlens sites` over
upstream vLLM: 2,234 modules, 128,000 traced calls). The helper is a fork, so it starts with everything this
process computed before (the index, the platform profile, the never-selected set); each process keeps its
own memos from there. The halves are fixed by the items' weights (not claimed as the two go), so the results
are the same on every run. The results come in order as they are made (:func:`iter_split`): this process's
half first, then the helper's, which it writes (pickled: give it plain values, e.g. rendered strings) to a
spool file in a folder the caller names (its cache folder) as it goes, so neither process holds its half
(`attnlens sites --json` on upstream vLLM: 100 MB of output). A half the helper did not finish (it died or was
killed) is done here after it.

Only where forking is safe (a single-threaded process: the CLI's ``allow_fork``). Anything else, or fewer
than two cores, runs every item here.
"""

from __future__ import annotations

import os
import pickle
import signal
import tempfile
from collections.abc import Callable, Iterator


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


def iter_split(n: int, work: Callable[[int], object], spool_dir, in_helper: Callable[[], None] | None = None,
               allowed: bool = True, weights: list[float] | None = None,
               helper_done: Callable[[], None] | None = None) -> Iterator:
    """``work(i)`` for ``i`` in ``range(n)``, in order: this process the first half (by ``weights``, default 1
    each), a forked helper the second, each in order, when ``allowed`` and there are two cores. The halves are
    fixed, not claimed as the two go: ``work`` may depend on what its process computed before (memos), and the
    results must not depend on timing. The helper writes its results to an unnamed spool file in ``spool_dir``
    (made when missing) as it makes them; they are read back one at a time once this process's half is done and the helper has
    ended. ``in_helper`` runs first in the helper (drop what belongs to this process's other children);
    ``helper_done`` after its last item (put what it cached on disk). A ``work`` that raises in the helper
    leaves its items to this process, which then raises as it would alone."""
    spool = None
    if allowed and n >= 2 and cores() >= 2 and hasattr(os, "fork"):
        try:
            os.makedirs(spool_dir, exist_ok=True)
            spool = tempfile.TemporaryFile(dir=spool_dir)
        except OSError:
            spool = None  # (no spool file: every item here)
    if spool is None:
        for i in range(n):
            yield work(i)
        return
    k = split_point(weights if weights is not None else [1.0] * n)
    try:
        pid = os.fork()
    except OSError:
        spool.close()
        for i in range(n):
            yield work(i)
        return
    if pid == 0:  # pragma: no cover - the helper (coverage does not follow forks)
        code = 0
        try:
            _helper(k, n, work, in_helper, helper_done, spool)
        except BaseException:  # noqa: BLE001 - this process does what the helper did not write
            code = 1
        os._exit(code)
    reaped = False
    try:
        for i in range(k):
            yield work(i)
        _reap(pid)
        reaped = True
        got = 0
        for item in _spooled(spool):
            yield item
            got += 1
        for j in range(k + got, n):  # (a helper that died: the rest of its half, here)
            yield work(j)
    finally:
        if not reaped:  # the caller stopped early (or a work item raised here): the helper is not needed
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
            _reap(pid)
        spool.close()


def _helper(k: int, n: int, work, in_helper, helper_done, spool) -> None:  # pragma: no cover - runs in the fork
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if in_helper is not None:
        in_helper()
    for j in range(k, n):
        pickle.dump(work(j), spool, protocol=pickle.HIGHEST_PROTOCOL)
    spool.flush()
    if helper_done is not None:
        helper_done()


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _spooled(spool) -> Iterator:
    """The results a helper (now ended) wrote to ``spool``, in order, up to the first incomplete one."""
    spool.seek(0)
    while True:
        try:
            yield pickle.load(spool)
        except Exception:  # noqa: BLE001 - the end, or a helper that died mid-write: this process does the rest
            return


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
    _reap(pid)
    return b"".join(chunks)
