"""Two processes over one list of work items: this one the first half, a forked helper the second, and the one
that finishes first takes what is left of the other's half, from its end.

For one-shot CLI commands over a whole workspace on a machine with two or more cores (`attnlens sites` over
upstream vLLM: 2,234 modules, 128,000 traced calls). The helper is a fork, so it starts with everything this
process computed before (the index, the platform profile, the never-selected set); each process keeps its
own memos from there. Each claims its next item from two ranges in shared memory (under a lock): its own half
in order, then the other's from the end. So the two finish together (fixed halves by source bytes finished
4-6 s apart on upstream vLLM) and each still works through neighbouring modules in order, which share most
of what they trace (claiming items alternately cost 22 % more CPU in all on upstream vLLM: each process then
traced most of the workspace). This needs results that do not depend on which process made them or on what
it made before: true of `attnlens sites` (docs/resolver.md, "context read past a memo's key": the same output
forward, in reverse and split). The results come in order as they are ready (:func:`iter_split`): the helper
writes each of its results (pickled: give it plain values, e.g. rendered strings) to a spool file in a folder
the caller names (its cache folder) and tells this process where, so neither process holds what is already
handed out (`attnlens sites --json` on upstream vLLM: 100 MB of output). Items the helper claimed and did not
finish (it died or was killed) are done here after it.

Only where forking is safe (a single-threaded process: the CLI's ``allow_fork``). Anything else, or fewer
than two cores, runs every item here.
"""

from __future__ import annotations

import mmap
import os
import pickle
import select
import signal
import struct
import tempfile
from collections.abc import Callable, Iterator

# what the helper tells this process: item i is done, its pickle at (offset, length) in the spool
_NOTE = struct.Struct("<qqq")
_RANGES = struct.Struct("<qqqq")  # what is left of this process's range of items and of the helper's: [a, b) [c, d)


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
    each), a forked helper the second, the first to finish taking the other's last items, when ``allowed`` and
    there are two cores. ``work`` must give the same result in either process whatever it did before (who
    makes an item depends on timing). The helper writes its
    results to an unnamed spool file in ``spool_dir`` (made when missing); this process reads each back when
    its turn comes. ``in_helper`` runs first in the helper (drop what belongs to this process's other
    children); ``helper_done`` after its last item (put what it cached on disk). A ``work`` that raises in the
    helper leaves its items to this process, which then raises as it would alone."""
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
    ranges = _Ranges(n, split_point(weights if weights is not None else [1.0] * n))
    notes_r, notes_w = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        for fd in (notes_r, notes_w):
            os.close(fd)
        ranges.close()
        spool.close()
        for i in range(n):
            yield work(i)
        return
    if pid == 0:  # pragma: no cover - the helper (coverage does not follow forks)
        code = 0
        try:
            os.close(notes_r)
            _helper(ranges, work, in_helper, helper_done, spool.fileno(), notes_w)
        except BaseException:  # noqa: BLE001 - this process does what the helper did not write
            code = 1
        os._exit(code)
    os.close(notes_w)
    reaped = False
    try:
        yield from _here(n, ranges, notes_r, work, spool.fileno())
        _reap(pid)
        reaped = True
    finally:
        if not reaped:  # the caller stopped early (or a work item raised here): the helper is not needed
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
            _reap(pid)
        os.close(notes_r)
        ranges.close()
        spool.close()


class _Ranges:
    """What is left of each process's range of items, shared by this process and its forked helper: an anonymous
    shared mapping of the two ranges, and a one-byte pipe as the lock (taking the byte is taking the lock)."""

    def __init__(self, n: int, k: int):
        self.mem = mmap.mmap(-1, _RANGES.size)  # (MAP_SHARED: the fork sees the same counters)
        _RANGES.pack_into(self.mem, 0, 0, k, k, n)
        self.lock_r, self.lock_w = os.pipe()
        os.write(self.lock_w, b"x")

    def claim(self, mine: int) -> int | None:
        """The next item of range ``mine`` (0: this process's, 1: the helper's), else the last one left of the
        other range; None when none is left."""
        os.read(self.lock_r, 1)
        try:
            r = list(_RANGES.unpack_from(self.mem, 0))
            a, b = 2 * mine, 2 * (1 - mine)
            if r[a] < r[a + 1]:
                r[a] += 1
                got = r[a] - 1
            elif r[b] < r[b + 1]:
                r[b + 1] -= 1
                got = r[b + 1]
            else:
                return None
            _RANGES.pack_into(self.mem, 0, *r)
            return got
        finally:
            os.write(self.lock_w, b"x")

    def close(self) -> None:
        for fd in (self.lock_r, self.lock_w):
            os.close(fd)
        self.mem.close()


def _here(n: int, ranges: _Ranges, notes_r: int, work, spool_fd: int) -> Iterator:
    """This process's side: claim and make items, read the helper's notes, hand out every result in order."""
    ready: dict = {}  # item -> (True, result) made here, or (False, offset, length) in the spool
    state = {"buf": b"", "open": True}
    os.set_blocking(notes_r, False)

    def notes(wait: bool) -> None:
        while state["open"]:
            if wait:
                select.select([notes_r], [], [])
            try:
                b = os.read(notes_r, 1 << 16)
            except BlockingIOError:
                return
            if not b:
                state["open"] = False  # the helper ended (done or dead)
                return
            buf = state["buf"] + b
            k = len(buf) - len(buf) % _NOTE.size
            for i, off, ln in _NOTE.iter_unpack(buf[:k]):
                ready[i] = (False, off, ln)
            state["buf"] = buf[k:]
            wait = False

    nxt = 0
    i = ranges.claim(0)
    while i is not None:
        ready[i] = (True, work(i))
        notes(False)
        while nxt in ready:
            yield _take(ready.pop(nxt), spool_fd)
            nxt += 1
        i = ranges.claim(0)
    while nxt < n:
        if nxt not in ready:
            if state["open"]:
                notes(True)
                continue
            ready[nxt] = (True, work(nxt))  # (claimed by a helper that died before it was done)
        yield _take(ready.pop(nxt), spool_fd)
        nxt += 1


def _take(entry: tuple, spool_fd: int):
    if entry[0]:
        return entry[1]
    return pickle.loads(os.pread(spool_fd, entry[2], entry[1]))


def _helper(ranges: _Ranges, work, in_helper, helper_done, spool_fd: int,
            notes_w: int) -> None:  # pragma: no cover - runs in the fork
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    if in_helper is not None:
        in_helper()
    off = 0
    i = ranges.claim(1)
    while i is not None:
        data = pickle.dumps(work(i), protocol=pickle.HIGHEST_PROTOCOL)
        _write_all(spool_fd, data)
        os.write(notes_w, _NOTE.pack(i, off, len(data)))
        off += len(data)
        i = ranges.claim(1)
    if helper_done is not None:
        helper_done()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def write_all(wfd: int, data: bytes) -> None:
    """Write ``data`` to the pipe ``wfd`` (a helper's results) and close it."""
    _write_all(wfd, data)
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
