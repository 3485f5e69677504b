"""``attnlens serve``: run the language server (stdio by default, or TCP on loopback)."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import socket
import sys


def add_subparsers(sub) -> None:
    p = sub.add_parser("serve", help="run the language server (stdio by default)")
    add_arguments(p)
    p.set_defaults(func=cmd_serve, long_lived=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    p.add_argument("--tcp", metavar="HOST:PORT", default=None,
                   help="listen on HOST:PORT instead (loopback only unless --allow-remote)")
    p.add_argument("--allow-remote", action="store_true",
                   help="allow --tcp on a non-loopback address (no authentication!)")
    p.add_argument("--root", default=None,
                   help="folder to analyse when the client names none (attnlens.root or a workspace folder win)")
    p.add_argument("--python", default=None, help="default target interpreter (the client's attnlens.targetPython wins)")
    p.add_argument("--cache-dir", default=None, help="default cache folder root (the client's attnlens.cacheDir wins)")
    p.add_argument("--log-file", default=None, help="also write the server log to this file")
    p.add_argument("--log-level", default="info", choices=("error", "warning", "info", "debug"))


def parse_tcp(spec: str, allow_remote: bool) -> tuple[str, int]:
    host, sep, port = spec.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise SystemExit(f"attnlens serve: --tcp wants HOST:PORT, got {spec!r}")
    host = host.strip("[]")
    if not allow_remote and not is_loopback(host):
        raise SystemExit(f"attnlens serve: {host} is not a loopback address; pass --allow-remote to listen on it "
                         "(anyone who can reach the port controls the server)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def _setup_logging(level: str, log_file: str | None) -> None:
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]  # never stdout: it carries LSP
    if log_file:
        handlers.append(logging.FileHandler(log_file, encoding="utf-8"))
    logging.basicConfig(level=logging.WARNING, handlers=handlers, force=True,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("attnlens").setLevel(getattr(logging, level.upper()))
    if level == "debug":
        logging.getLogger("pygls").setLevel(logging.DEBUG)


class ClientLogHandler(logging.Handler):
    """Forward AttnLens warnings and errors to the editor (window/logMessage), from any thread."""

    def __init__(self, server):
        super().__init__(logging.WARNING)
        self.server = server

    def emit(self, record: logging.LogRecord) -> None:
        from lsprotocol import types as T

        loop = self.server.loop
        if loop is None or loop.is_closed():
            return
        kind = T.MessageType.Error if record.levelno >= logging.ERROR else T.MessageType.Warning
        params = T.LogMessageParams(kind, self.format(record))
        try:
            loop.call_soon_threadsafe(self.server.window_log_message, params)
        except RuntimeError:
            pass  # loop closed while exiting


def cmd_serve(args) -> int:
    _setup_logging(args.log_level, args.log_file)
    # the loop thread (I/O, cached answers) must not wait 5 ms for the GIL
    # while the analysis thread works in the background
    sys.setswitchinterval(0.0002)
    tcp = parse_tcp(args.tcp, args.allow_remote) if args.tcp else None
    from .server import create_server

    server = create_server()
    server.cli_root = args.root
    server.cli_defaults = {k: v for k, v in (("targetPython", args.python),
                                              ("cacheDir", args.cache_dir), ("logLevel", args.log_level)) if v}
    logging.getLogger("attnlens").addHandler(ClientLogHandler(server))
    if tcp is not None:
        server.start_tcp(*tcp)
    else:
        stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
        sys.stdout = sys.stderr  # a stray print() must never corrupt the LSP stream
        server.start_io(stdin, stdout)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="attnlens serve", description="AttnLens language server")
    add_arguments(p)
    return cmd_serve(p.parse_args(argv))
