"""The workspace cache folder: the only place AttnLens ever writes.

Layout (all under one folder per workspace root)::

    <cache_root>/<workspace-key>/
        py/<sha256>.pickle      per-file Python summaries (content-addressed)
        cpp/<sha256>.json       per-file C++ registration summaries
        target/<key>.json       facts read from the target interpreter
        env/<key>.json          environment records
        evidence/<id>.json      probe evidence records

Every write goes through :func:`atomic_write_bytes` (or :class:`AtomicFile`): the data is written to a
temporary file in the same folder and renamed over the destination (evidence
records are also fsync'ed), so a kill at any moment leaves either the old or
the new file. Derived pickles are written by a background thread
(:class:`_WriteBehind`); until one is on disk, readers in the same process get
it from memory. Readers validate what they read (pickles carry a format tag,
JSON must parse); a torn or foreign file is treated as a miss and rebuilt.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import pickle
import queue
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

FORMAT_VERSION = 33  # bump when the pickled summary classes change (tests/test_cache_writes.py pins their fields)

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def default_cache_root() -> Path:
    env = os.environ.get("ATTNLENS_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "attnlens"


def workspace_key(root: Path) -> str:
    root = Path(os.path.realpath(root))
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", root.name)[:40] or "root"
    return f"{name}-{digest}"


def is_safe_id(value: str) -> bool:
    """An id that can be used as a file name inside the cache (no separators, no ..)."""
    return bool(_SAFE_ID.match(value)) and ".." not in value


def atomic_write_bytes(path: Path, data: bytes, durable: bool = False) -> None:
    """Write via a temporary file + rename: readers see the old or the new file, never a torn one.

    ``durable=True`` also fsyncs (evidence records); derived cache entries skip it,
    since a lost entry after a power cut is simply rebuilt.
    """
    out = AtomicFile(path)
    try:
        out.write(data)
    except BaseException:
        out.discard()
        raise
    out.commit(durable)


class AtomicFile:
    """A file written piece by piece to a temporary file in its folder and renamed over ``path`` by
    :meth:`commit` (:func:`atomic_write_bytes` in pieces: a long output written as it is made, never held
    whole); :meth:`discard` leaves nothing. ``text``: ``write`` takes str (UTF-8, newlines as given)."""

    def __init__(self, path: Path, text: bool = False):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        self.path = path
        self.f = os.fdopen(fd, "w", encoding="utf-8", newline="") if text else os.fdopen(fd, "wb")

    def write(self, data) -> None:
        self.f.write(data)

    def commit(self, durable: bool = False) -> None:
        try:
            if durable:
                self.f.flush()
                os.fsync(self.f.fileno())
            self.f.close()
            os.replace(self.tmp, self.path)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        try:
            self.f.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


class _WriteBehind:
    """Writes derived pickles on a background thread.

    A cold analysis stores a few hundred summaries; creating a file can stall for a
    millisecond or more on a busy disk (measured: 0.5 s of a 3 s check of the real
    vLLM-MetaX checkout, in bursts). The analysis thread only pickles; this thread does the
    file system work, with the GIL released. Until a pickle is on disk, readers in this
    process get it from ``pending``. Flushed by :meth:`Cache.flush`, at interpreter exit, and by
    forked workers before ``os._exit`` (which skips the interpreter's exit handlers).
    """

    def __init__(self) -> None:
        self.pending: dict[Path, bytes] = {}
        self._reinit()

    def _reinit(self) -> None:
        self.lock = threading.Lock()
        self.q: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None
        self.pid = os.getpid()

    def after_fork_in_child(self) -> None:
        """The writer thread does not exist in a forked child: start afresh (a child's own thread
        starts on its first store). What the parent had pending stays readable here and is
        written by the parent. A child that leaves with ``os._exit`` calls :meth:`flush` first."""
        self._reinit()

    def put(self, path: Path, data: bytes) -> None:
        if self.pid != os.getpid():  # forked without the at-fork hook: no thread of our own
            atomic_write_bytes(path, data)
            return
        with self.lock:
            self.pending[path] = data
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._run, name="attnlens-cache-writer", daemon=True)
                self.thread.start()
        self.q.put(path)

    def get(self, path: Path) -> bytes | None:
        if not self.pending:
            return None
        with self.lock:
            return self.pending.get(path)

    def _run(self) -> None:
        while True:
            path = self.q.get()
            try:
                with self.lock:
                    data = self.pending.get(path)
                if data is not None:
                    try:
                        atomic_write_bytes(path, data)
                    except OSError:
                        pass  # a read-only or full disk must not break analysis
                    with self.lock:
                        if self.pending.get(path) is data:
                            del self.pending[path]
            finally:
                self.q.task_done()

    def flush(self) -> None:
        if self.pid == os.getpid() and self.thread is not None and self.thread.is_alive():
            self.q.join()


_WRITER = _WriteBehind()
atexit.register(_WRITER.flush)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_WRITER.after_fork_in_child)


def flush_all() -> None:
    """Put every pending derived pickle on disk (before a process leaves with ``os._exit``)."""
    _WRITER.flush()


class Cache:
    """A cache folder for one workspace. ``Cache(None)`` is a disabled cache."""

    def __init__(self, folder: Path | None):
        self.folder = Path(folder) if folder is not None else None

    @classmethod
    def for_workspace(cls, root: Path, cache_root: Path | None = None) -> "Cache":
        base = Path(cache_root) if cache_root else default_cache_root()
        return cls(base / workspace_key(root))

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    def path(self, kind: str, name: str) -> Path:
        if self.folder is None:
            raise RuntimeError("cache disabled")
        if not is_safe_id(kind) or not is_safe_id(name):
            raise ValueError(f"unsafe cache name: {kind}/{name}")
        return self.folder / kind / name

    # -- pickles -----------------------------------------------------------
    def load_pickle(self, kind: str, key: str) -> Any | None:
        if self.folder is None:
            return None
        p = self.folder / kind / f"{key}.pickle"
        try:
            data = _WRITER.get(p)
            if data is not None:
                tag, payload = pickle.loads(data)
            else:
                with open(p, "rb") as f:
                    tag, payload = pickle.load(f)
        except FileNotFoundError:
            return None
        except Exception:
            # torn write, foreign file, or an old format: rebuild
            return None
        if tag != FORMAT_VERSION:
            return None
        return payload

    def has_pickle(self, kind: str, key: str) -> bool:
        """Is there an entry (on disk or pending in this process)? Its content is not checked."""
        if self.folder is None:
            return False
        p = self.folder / kind / f"{key}.pickle"
        return _WRITER.get(p) is not None or p.exists()

    def store_pickle(self, kind: str, key: str, value: Any) -> None:
        if self.folder is None:
            return
        try:
            data = pickle.dumps((FORMAT_VERSION, value), protocol=pickle.HIGHEST_PROTOCOL)
            _WRITER.put(self.path(kind, f"{key}.pickle"), data)
        except OSError:
            pass  # a read-only or full disk must not break analysis

    def flush(self) -> None:
        """Wait until every pickle stored so far is on disk."""
        flush_all()

    # -- json --------------------------------------------------------------
    def load_json(self, kind: str, name: str) -> Any | None:
        if self.folder is None:
            return None
        try:
            with open(self.path(kind, name), "rb") as f:
                return json.loads(f.read())
        except (OSError, ValueError):
            return None

    def store_json(self, kind: str, name: str, value: Any) -> Path | None:
        if self.folder is None:
            return None
        p = self.path(kind, name)
        try:
            atomic_write_bytes(p, json.dumps(value, indent=1, sort_keys=True, default=str).encode())
        except OSError:
            return None
        return p


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
