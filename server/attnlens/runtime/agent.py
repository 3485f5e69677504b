"""Host side of the probe agent: start, talk to, time out, kill and restart it.

An :class:`AgentProcess` is one agent in one target interpreter with one set of
environment overrides.  It is started with an argv list (never a shell string)
in a new session (``start_new_session=True``), so the agent and anything it
spawned form one process group that can be killed as a whole.

Requests are answered as :class:`AgentReply` values, never exceptions: a crash
of the agent (segfault, OOM kill, ``os._exit``) becomes ``status="crashed"``
with a message such as ``"probe crashed: signal 11 after 3.2 s"``; a request
that outlives its timeout kills the process group and becomes
``status="timeout"``.  Either way the next request starts a fresh agent.

Usable from sync code (``request``, ``batch``) and from asyncio (``arequest``,
``abatch`` run the blocking calls in a worker thread).  Reader threads drain
stdout (protocol) and stderr (a bounded tail kept for crash reports).
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import functools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any, Mapping

from ..agent import AGENT_MAIN

_EOF = object()


@dataclass
class AgentReply:
    status: str  # ok | error | timeout | crashed | aborted
    id: int | None = None
    result: Any = None
    error: dict | None = None
    message: str = ""
    elapsed_s: float = 0.0
    returncode: int | None = None
    signal: int | None = None
    stderr_tail: str = ""
    method: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        d = {"status": self.status, "message": self.message, "elapsed_s": round(self.elapsed_s, 3),
             "method": self.method}
        if self.result is not None:
            d["result"] = self.result
        if self.error is not None:
            d["error"] = self.error
        if self.returncode is not None:
            d["returncode"] = self.returncode
        if self.signal is not None:
            d["signal"] = self.signal
            try:
                d["signal_name"] = signal.Signals(self.signal).name
            except ValueError:
                pass
        if self.stderr_tail:
            d["stderr_tail"] = self.stderr_tail
        return d


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"SIG{sig}"


def merged_env(overrides: Mapping[str, str | None] | None) -> dict:
    """The environment an agent gets: a copy of ours plus overrides (None removes a variable)."""
    env = dict(os.environ)
    for k, v in (overrides or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[str(k)] = str(v)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # importing a target must never write __pycache__ into the user's tree
    return env


class AgentProcess:
    """One probe agent.  Thread-safe: one request at a time, others wait."""

    def __init__(self, python: str, env: Mapping[str, str | None] | None = None, *, agent_path: str | None = None,
                 cwd: str | None = None, stderr_lines: int = 400, kill_grace_s: float = 2.0):
        self.python = str(python)
        self.env_overrides = dict(env or {})
        self.agent_path = agent_path or AGENT_MAIN
        self.cwd = cwd
        self.kill_grace_s = kill_grace_s
        self._lock = threading.RLock()
        self._proc: subprocess.Popen | None = None
        self._pgid: int | None = None
        self._q: queue.Queue = queue.Queue()
        self._stderr: collections.deque = collections.deque(maxlen=stderr_lines)
        self._garbage: collections.deque = collections.deque(maxlen=50)
        self._threads: list[threading.Thread] = []
        self._next_id = 1
        self._started_at = 0.0
        self.starts = 0
        self.crashes = 0
        self.timeouts = 0
        self.closed = False
        self.past_pids: list[int] = []

    # -- lifecycle -----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def pgid(self) -> int | None:
        return self._pgid

    def _exited(self, timeout: float = 0.0) -> bool:
        """Has the agent exited?  Waits up to ``timeout`` without reaping it.

        The exited agent stays a zombie until ``_reap`` has signalled its process
        group, so its pid (= the group id) cannot be handed to another process
        in between: the group kill can never hit a stranger.
        """
        proc = self._proc
        if proc is None:
            return True
        if proc.returncode is not None:
            return True
        deadline = time.monotonic() + timeout
        while True:
            try:
                info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return True
            if info is not None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def alive(self) -> bool:
        return self._proc is not None and not self._exited()

    def argv(self) -> list[str]:
        return [self.python, "-u", self.agent_path]

    def start(self) -> None:
        with self._lock:
            if self.closed:
                raise RuntimeError("agent closed")
            if self.alive():
                return
            self._reap()
            self._q = queue.Queue()
            self._stderr.clear()
            proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=merged_env(self.env_overrides),
                cwd=self.cwd,
                start_new_session=True,
                close_fds=True,
            )
            self._proc = proc
            self._pgid = proc.pid  # session leader: its pid is the group id
            self.past_pids.append(proc.pid)
            self._started_at = time.monotonic()
            self.starts += 1
            t_out = threading.Thread(target=self._read_stdout, args=(proc, self._q), daemon=True,
                                     name=f"attnlens-agent-{proc.pid}-out")
            t_err = threading.Thread(target=self._read_stderr, args=(proc,), daemon=True,
                                     name=f"attnlens-agent-{proc.pid}-err")
            t_out.start()
            t_err.start()
            self._threads = [t_out, t_err]

    def _read_stdout(self, proc: subprocess.Popen, q: queue.Queue) -> None:
        stream = proc.stdout
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").strip()
                if not line:
                    continue
                try:
                    msg = json.loads(line)
                except ValueError:
                    self._garbage.append(line[:500])
                    self._stderr.append(f"[attnlens: non-protocol line on agent stdout] {line[:500]}")
                    continue
                if isinstance(msg, dict):
                    q.put(msg)
                else:
                    self._garbage.append(line[:500])
        except (OSError, ValueError):
            pass
        finally:
            q.put(_EOF)

    def _read_stderr(self, proc: subprocess.Popen) -> None:
        try:
            for raw in iter(proc.stderr.readline, b""):
                self._stderr.append(raw.decode("utf-8", "replace").rstrip("\n"))
        except (OSError, ValueError):
            pass

    def stderr_tail(self, lines: int = 60) -> str:
        return "\n".join(list(self._stderr)[-lines:])

    @property
    def garbage(self) -> list[str]:
        return list(self._garbage)

    def _kill_group(self) -> None:
        # only while the leader is alive or an unreaped zombie: then its pid, the group id, is still ours
        if self._pgid is not None and (self._proc is None or self._proc.returncode is None):
            try:
                os.killpg(self._pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap(self, wait_s: float = 5.0) -> int | None:
        """Kill the process group, wait for the agent, close pipes, join readers."""
        proc = self._proc
        if proc is None:
            return None
        self._kill_group()
        rc = None
        try:
            rc = proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            try:
                proc.kill()
                rc = proc.wait(timeout=wait_s)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for s in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if s is not None:
                    s.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(timeout=2.0)
        self._threads = []
        self._proc = None
        self._pgid = None  # never signal a group id that the system may hand out again
        return rc

    def close(self) -> None:
        """Ask the agent to stop, then kill its whole process group whatever it does.

        With a request in flight (another thread holds the agent), the group is
        killed at once; that request then returns a ``crashed`` reply.
        """
        self.closed = True
        if not self._lock.acquire(blocking=False):
            self._kill_group()
            self._lock.acquire()
        try:
            proc = self._proc
            if proc is None:
                return
            if not self._exited():
                try:
                    proc.stdin.close()  # EOF: the agent's loop ends
                except OSError:
                    pass
                self._exited(self.kill_grace_s)
            self._reap()
        finally:
            self._lock.release()

    def restart(self) -> None:
        with self._lock:
            self._reap()
            self.start()

    def __enter__(self) -> "AgentProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- requests ------------------------------------------------------------
    def _send(self, rid: int, method: str, params: dict) -> None:
        data = (json.dumps({"id": rid, "method": method, "params": params}, default=str) + "\n").encode()
        self._proc.stdin.write(data)
        self._proc.stdin.flush()

    def _dead_reply(self, rid: int, method: str, t0: float) -> AgentReply:
        """The agent's stdout closed: collect its exit status and describe the crash."""
        proc = self._proc
        self._exited(5.0)  # the agent is dying; wait for it without reaping (see _exited)
        for t in self._threads[1:]:
            t.join(timeout=1.0)  # let stderr drain: faulthandler's traceback is there
        elapsed = time.monotonic() - t0
        tail = self.stderr_tail()
        exited = self._exited()
        rc = self._reap()
        if proc is not None and not exited:
            rc = None  # it had not exited by itself: the -9 is ours
        self.crashes += 1
        if rc is not None and rc < 0:
            sig = -rc
            msg = f"probe crashed: signal {sig} after {elapsed:.1f} s"
            return AgentReply("crashed", rid, message=msg, elapsed_s=elapsed, returncode=rc, signal=sig,
                              stderr_tail=tail, method=method)
        if rc is None:
            msg = f"probe crashed: agent closed its output and did not exit after {elapsed:.1f} s"
        else:
            msg = f"probe crashed: exit code {rc} after {elapsed:.1f} s"
        return AgentReply("crashed", rid, message=msg, elapsed_s=elapsed, returncode=rc, stderr_tail=tail,
                          method=method)

    def _timeout_reply(self, rid: int, method: str, t0: float, timeout: float) -> AgentReply:
        self._kill_group()
        elapsed = time.monotonic() - t0
        tail = self.stderr_tail()
        self._reap()
        self.timeouts += 1
        return AgentReply("timeout", rid, message=f"probe timed out after {timeout:g} s", elapsed_s=elapsed,
                          stderr_tail=tail, method=method)

    def _await(self, rid: int, method: str, t0: float, timeout: float) -> AgentReply:
        deadline = t0 + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._timeout_reply(rid, method, t0, timeout)
            try:
                msg = self._q.get(timeout=remaining)
            except queue.Empty:
                return self._timeout_reply(rid, method, t0, timeout)
            if msg is _EOF:
                return self._dead_reply(rid, method, t0)
            if msg.get("id") != rid:
                self._garbage.append(json.dumps(msg)[:500])  # stale or forged: not ours
                continue
            elapsed = time.monotonic() - t0
            if "error" in msg and msg["error"] is not None:
                err = msg["error"] if isinstance(msg["error"], dict) else {"message": str(msg["error"])}
                return AgentReply("error", rid, error=err,
                                  message=f"{err.get('type', 'Error')}: {err.get('message', '')}",
                                  elapsed_s=elapsed, method=method)
            return AgentReply("ok", rid, result=msg.get("result"), elapsed_s=elapsed, method=method)

    def request(self, method: str, params: dict | None = None, timeout: float = 60.0) -> AgentReply:
        """Send one request and wait at most ``timeout`` seconds for its reply."""
        return self.batch([(method, params or {})], timeout=timeout)[0]

    def batch(self, calls: list[tuple[str, dict]], timeout: float = 60.0) -> list[AgentReply]:
        """Pipeline several requests in one write; each reply gets its own ``timeout``.

        After a timeout or a crash the agent is gone: the remaining requests are
        answered ``status="aborted"`` (the caller may resend them; a fresh agent
        starts on the next request).
        """
        with self._lock:
            if self.closed:
                raise RuntimeError("agent closed")
            try:
                self.start()
            except OSError as e:
                msg = f"cannot start the agent with {self.python}: {type(e).__name__}: {e}"
                return [AgentReply("error", None, error={"type": "AgentStartError", "message": msg}, message=msg,
                                   method=m) for m, _ in calls]
            ids = []
            t_send = time.monotonic()
            try:
                for method, params in calls:
                    rid = self._next_id
                    self._next_id += 1
                    ids.append(rid)
                    self._send(rid, method, params or {})
            except (BrokenPipeError, OSError, ValueError):
                # the agent died before or while we wrote; describe it through the first reply
                replies = [self._dead_reply(ids[0] if ids else 0, calls[0][0], t_send)]
                replies += [AgentReply("aborted", None, message="not run: the agent died", method=m)
                            for m, _ in calls[1:]]
                return replies
            replies: list[AgentReply] = []
            t0 = t_send
            for i, (rid, (method, _)) in enumerate(zip(ids, calls)):
                rep = self._await(rid, method, t0, timeout)
                replies.append(rep)
                t0 = time.monotonic()
                if rep.status in ("timeout", "crashed"):
                    for m, _p in calls[i + 1:]:
                        replies.append(AgentReply("aborted", None, method=m,
                                                  message=f"not run: agent restarted after {rep.status} of {method}"))
                    break
            return replies

    async def arequest(self, method: str, params: dict | None = None, timeout: float = 60.0) -> AgentReply:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.request, method, params, timeout))

    async def abatch(self, calls: list[tuple[str, dict]], timeout: float = 60.0) -> list[AgentReply]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.batch, calls, timeout))


def pool_key(python: str, env: Mapping[str, str | None] | None) -> tuple:
    return (os.path.abspath(os.path.expanduser(str(python))),
            tuple(sorted((str(k), None if v is None else str(v)) for k, v in (env or {}).items())))


class AgentPool:
    """Agents kept alive per (python, environment overrides)."""

    def __init__(self, *, agent_path: str | None = None, cwd: str | None = None):
        self.agent_path = agent_path
        self.cwd = cwd
        self._agents: dict[tuple, AgentProcess] = {}
        self._lock = threading.Lock()
        self.closed = False

    def get(self, python: str, env: Mapping[str, str | None] | None = None) -> AgentProcess:
        key = pool_key(python, env)
        with self._lock:
            if self.closed:
                raise RuntimeError("agent pool closed")
            ag = self._agents.get(key)
            if ag is None or ag.closed:
                ag = AgentProcess(key[0], dict(env or {}), agent_path=self.agent_path, cwd=self.cwd)
                self._agents[key] = ag
            return ag

    def agents(self) -> list[AgentProcess]:
        with self._lock:
            return list(self._agents.values())

    def close(self) -> None:
        with self._lock:
            agents = list(self._agents.values())
            self._agents.clear()
            self.closed = True
        for ag in agents:
            try:
                ag.close()
            except Exception:  # noqa: BLE001
                pass

    def __enter__(self) -> "AgentPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_default_pool: AgentPool | None = None
_default_lock = threading.Lock()


def default_pool() -> AgentPool:
    """A process-wide pool, closed at interpreter exit."""
    global _default_pool
    with _default_lock:
        if _default_pool is None or _default_pool.closed:
            _default_pool = AgentPool()
            atexit.register(_default_pool.close)
        return _default_pool


def set_default_pool(pool: AgentPool | None) -> None:
    global _default_pool
    with _default_lock:
        _default_pool = pool
