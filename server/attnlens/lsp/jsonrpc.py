"""A tolerant JSON-RPC reader for the server: bad frames are answered and skipped, never fatal.

pygls' reader (``pygls.io_.run_async``) has three failure modes that
tests/reliability/test_bad_input.py found:

* a header it does not recognise (``Content-Length: abc``, or a length that
  does not match the body) leaves it reading JSON bodies as header lines, and
  since a body never ends with a line break, every later ``Content-Length``
  is glued to the previous body: the server never answers again;
* a request whose params do not fit the method's types, and a message
  with an ``id`` but no ``method``, get no response at all, so the client
  waits forever on that id;
* the other errors are only shown as ``Error in server: 'list' object has
  no attribute 'jsonrpc'``.

This reader looks for ``Content-Length`` anywhere in a header line (so it
resynchronises on the next frame), bounds the body size, and answers what
it cannot hand over with a JSON-RPC error: *Parse error* (-32700, id null)
for bytes that are not JSON, *Invalid Request* (-32600) for JSON that is
not a message, *Invalid params* (-32602, with the request's id) for params
of the wrong shape. Each problem is also logged to the client
(``window/logMessage``) with a plain sentence. Valid messages go to pygls
unchanged.
"""

from __future__ import annotations

import asyncio
import os
import json
import logging
import re
import sys
import threading
from typing import Any

from pygls.exceptions import JsonRpcException
from pygls.io_ import StdoutWriter

log = logging.getLogger("attnlens.lsp")

MAX_BODY = 256 * 1024 * 1024  # a 50,000-line didOpen is a few MB
_LENGTH = re.compile(rb"content-length[ \t]*:[ \t]*([^\r\n]*)", re.I)
_HEADER = re.compile(rb"^[A-Za-z][A-Za-z0-9-]*[ \t]*:")

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


class Reporter:
    """Sends the error answers and client log lines for bad input."""

    def __init__(self, server):
        self.server = server

    def _send(self, payload: dict) -> None:
        try:
            self.server.protocol._send_data(payload)
        except Exception:  # noqa: BLE001 - the client is gone; nothing to tell
            log.debug("cannot send error answer", exc_info=True)

    def error(self, msg_id: Any, code: int, message: str) -> None:
        log.info("bad JSON-RPC input: %s", message)  # (a warning would be forwarded to the client twice)
        self._send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}})
        self.log(message)

    def log(self, message: str) -> None:
        self._send({"jsonrpc": "2.0", "method": "window/logMessage",
                    "params": {"type": 1, "message": f"AttnLens: {message}"}})


def _short(value: Any, n: int = 80) -> str:
    s = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return s if len(s) <= n else s[:n] + "..."


def check_message(data: Any) -> tuple[Any, int, str] | None:
    """(id, code, message) when ``data`` is not a JSON-RPC 2.0 message pygls can take, else None."""
    if not isinstance(data, dict):
        kind = "an array (batches are not supported by LSP)" if isinstance(data, list) else type(data).__name__
        return None, INVALID_REQUEST, f"Invalid Request: a JSON-RPC message must be an object, got {kind}"
    msg_id = data.get("id")
    if msg_id is not None and not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
        return None, INVALID_REQUEST, f"Invalid Request: id must be a number or a string, got {_short(json.dumps(msg_id))}"
    if data.get("jsonrpc") != "2.0":
        return msg_id, INVALID_REQUEST, "Invalid Request: \"jsonrpc\": \"2.0\" is missing"
    has_method = "method" in data
    if has_method and not isinstance(data["method"], str):
        return msg_id, INVALID_REQUEST, "Invalid Request: method must be a string"
    if not has_method and not ("result" in data or "error" in data):
        what = f"message with id {msg_id!r}" if "id" in data else "message"
        return msg_id, INVALID_REQUEST, f"Invalid Request: {what} has no method (and is not a response)"
    if "params" in data and not isinstance(data["params"], (dict, list)) and data["params"] is not None:
        return msg_id, INVALID_PARAMS, f"Invalid params for {data.get('method')}: params must be an object or an array"
    return None


def handle_body(body: bytes, protocol, reporter: Reporter) -> None:
    """Parse one frame's body and hand it to pygls, or answer why not."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        reporter.error(None, PARSE_ERROR, f"Parse error: the message body is not JSON ({e}); message skipped")
        return
    problem = check_message(data)
    if problem is not None:
        msg_id, code, text = problem
        is_request = isinstance(data, dict) and "method" in data and msg_id is not None
        if is_request or code != INVALID_PARAMS:
            reporter.error(msg_id, code, text)
        else:  # a notification: no answer allowed
            reporter.log(text + "; notification ignored")
        return
    try:
        message = json.loads(body, object_hook=protocol.structure_message)
    except JsonRpcException as e:
        method, msg_id = data.get("method"), data.get("id")
        detail = _cause(e)
        text = f"Invalid params for {method}: {detail}"
        if "method" in data and msg_id is not None:
            reporter.error(msg_id, INVALID_PARAMS, text)
        else:
            reporter.log(text + ("; notification ignored" if "method" in data else "; response ignored"))
        return
    protocol.handle_message(message)


def _cause(e: BaseException) -> str:
    """The useful part of a cattrs structuring failure: which field, what was wrong."""
    cause = e.__cause__ or e.__context__
    parts = []
    seen = 0
    stack = [cause] if cause is not None else []
    while stack and seen < 20:
        c = stack.pop()
        seen += 1
        notes = getattr(c, "__notes__", None) or []
        subs = getattr(c, "exceptions", None)
        if subs:
            for sub in subs:
                stack.append(sub)
            continue
        parts.append(f"{'; '.join(notes)} ({type(c).__name__}: {_short(c, 120)})" if notes else f"{type(c).__name__}: {_short(c, 120)}")
    return "; ".join(parts[:3]) or str(e) or type(e).__name__


async def run_async(stop_event: threading.Event, reader, protocol, server) -> None:
    """The read loop: headers up to an empty line, then exactly Content-Length bytes of body."""
    reporter = Reporter(server)
    length: int | None = None
    garbage = 0
    while not stop_event.is_set():
        line = await reader.readline()
        if not line:
            break
        m = _LENGTH.search(line)
        if m is not None:
            if m.start() > 0 or garbage:
                reporter.log(f"skipped {garbage + m.start()} bytes that were not part of a message")
                garbage = 0
            value = m.group(1).strip()
            if value.isdigit() and 0 < int(value) <= MAX_BODY:
                length = int(value)
            else:
                length = None
                reporter.error(None, PARSE_ERROR,
                               f"Parse error: bad Content-Length header {_short(value)!r} "
                               f"(a number of bytes from 1 to {MAX_BODY} is needed); frame skipped")
            continue
        if line.strip():
            if length is None and not _HEADER.match(line):
                garbage += len(line)
            continue  # another header (Content-Type) or noise
        # an empty line: the end of the headers
        if length is None:
            continue
        body = await reader.readexactly(length)
        n, length = length, None
        if not body:
            break
        if len(body) < n:
            reporter.error(None, PARSE_ERROR, f"Parse error: the stream ended {n - len(body)} bytes into a message")
            break
        try:
            handle_body(body, protocol, reporter)
        except Exception as e:  # noqa: BLE001 - never let one message end the loop
            log.exception("unable to handle a message")
            reporter.log(f"internal error while handling a message: {type(e).__name__}: {_short(e, 200)}")


def serve_io(server, stdin=None, stdout=None) -> None:
    """``LanguageServer._start_io_async`` with the tolerant reader. The client's stream is read on a
    thread of its own (:func:`_feed`) into an ``asyncio.StreamReader``: pygls' reader asked its thread
    pool for every header line and body, three thread hand-offs per message, each waiting for the GIL
    while the analysis thread works; a burst of keystrokes then kept a hover queued behind their
    hand-offs for 100-250 ms. Now one hand-off brings whatever the client has written."""
    from pygls.server import logger as pygls_logger

    server._stop_event = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))

    async def main():
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader()
        threading.Thread(target=_feed, args=(stdin or sys.stdin.buffer, loop, stream), name="attnlens-stdin",
                         daemon=True).start()
        await run_async(server._stop_event, _StreamReader(stream), server.protocol, server)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        pygls_logger.error("Connection to the client is lost! Shutting down the server.")
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()


def _feed(stdin, loop: asyncio.AbstractEventLoop, stream: asyncio.StreamReader) -> None:
    """Copy the client's stream into ``stream`` (a thread): each read returns what is available.
    A real file is read with ``os.read`` on its descriptor: a daemon thread blocked inside a buffered
    reader holds that reader's lock, and the interpreter's shutdown then aborts the process ("could
    not acquire lock for <stdin> at interpreter shutdown") after a clean ``exit``."""
    read = _raw_read(stdin)
    try:
        while True:
            chunk = read(1 << 16)
            if not chunk:
                break
            loop.call_soon_threadsafe(stream.feed_data, chunk)
    except (OSError, ValueError):
        pass  # the stream was closed
    finally:
        try:
            loop.call_soon_threadsafe(stream.feed_eof)
        except RuntimeError:
            pass  # the loop has ended


def _raw_read(stdin):
    """A read function of ``stdin`` that returns what is available, without a Python-level lock
    where the stream has a descriptor (nothing is buffered yet: the server reads only here)."""
    try:
        fd = stdin.fileno()
    except (AttributeError, OSError, ValueError):
        return getattr(stdin, "read1", None) or stdin.read
    return lambda n: os.read(fd, n)


class _StreamReader:
    """asyncio.StreamReader with an unbounded readline (a long garbage line must not raise)."""

    def __init__(self, reader: asyncio.StreamReader):
        self.reader = reader

    async def readline(self) -> bytes:
        try:
            return await self.reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            return e.partial
        except asyncio.LimitOverrunError as e:
            return await self.reader.readexactly(e.consumed)

    async def readexactly(self, n: int) -> bytes:
        try:
            return await self.reader.readexactly(n)
        except asyncio.IncompleteReadError as e:
            return e.partial


def serve_tcp(server, host: str, port: int) -> None:
    """``LanguageServer.start_tcp`` with the tolerant reader (one client at a time, as pygls)."""
    server._stop_event = stop_event = threading.Event()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        server.protocol.set_writer(writer)
        await run_async(stop_event, _StreamReader(reader), server.protocol, server)
        server.shutdown()

    async def main():
        server._server = await asyncio.start_server(connection, host, port)
        log.info("serving on %s", ", ".join(str(s.getsockname()) for s in server._server.sockets))
        async with server._server:
            await server._server.serve_forever()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
