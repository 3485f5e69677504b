"""Shared fixtures for the language server tests: a real `attnlens serve` over stdio.

Positions come from the call texts of examples/mini-metax/README.md (the
"Hop kinds" table), never from hard-coded line numbers.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types as T
from pytest_lsp import ClientServerConfig, client_capabilities

from tests.helpers import plain, utf16_len  # noqa: F401 - re-exported

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mini-metax"
PYTHON = str(REPO / ".venv" / "bin" / "python")
if not os.path.exists(PYTHON):  # pragma: no cover - CI without the dev venv
    PYTHON = sys.executable
SERVER = [sys.executable, "-m", "attnlens.lsp"]
STATUS = "attnlens/status"


def readme_rows() -> list[tuple[str, str, str]]:
    """(hop kind, file, call text) rows of the example's README table."""
    rows = []
    for line in (EXAMPLE / "README.md").read_text().splitlines():
        m = re.match(r"^\| (.+?) \| `([^`]+)` \| `(.+)` \|$", line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


def readme_text(kind: str) -> tuple[Path, str]:
    """The file and exact call text of the README row whose hop kind is ``kind``."""
    for k, f, text in readme_rows():
        if k == kind:
            return EXAMPLE / f, text
    raise KeyError(f"no README row {kind!r}")


def position_in(text: str, needle: str, offset: int = 0, nth: int = 0) -> T.Position:
    """LSP (UTF-16) position of ``needle`` (+``offset`` code points) inside ``text``."""
    lines = text.split("\n")
    seen = 0
    for i, line in enumerate(lines):
        start = 0
        while (c := line.find(needle, start)) >= 0:
            if seen == nth:
                return T.Position(i, utf16_len(line[: c + offset]))
            seen += 1
            start = c + 1
    raise AssertionError(f"{needle!r} not found")


def position_of(path: Path, needle: str, offset: int = 0, nth: int = 0) -> T.Position:
    return position_in(path.read_text(encoding="utf-8"), needle, offset, nth)


def uri(path: Path | str) -> str:
    return Path(path).resolve().as_uri()


@dataclass
class Session:
    client: object
    root: Path
    statuses: list = field(default_factory=list)
    registrations: list = field(default_factory=list)
    status_event: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_indexed(self, timeout: float = 60) -> dict:
        await asyncio.wait_for(self.status_event.wait(), timeout)
        return self.statuses[-1]

    async def hover(self, path: Path, pos: T.Position) -> T.Hover | None:
        return await self.client.text_document_hover_async(
            T.HoverParams(T.TextDocumentIdentifier(uri(path)), pos))

    async def hover_text(self, path: Path, pos: T.Position) -> str:
        h = await self.hover(path, pos)
        assert h is not None, f"no hover at {path}:{pos}"
        return h.contents.value

    def open(self, path: Path, text: str | None = None, version: int = 1) -> None:
        self.client.text_document_did_open(T.DidOpenTextDocumentParams(T.TextDocumentItem(
            uri(path), "python", version, text if text is not None else path.read_text(encoding="utf-8"))))


async def start_session(tmp: Path, *, root: Path = EXAMPLE, caps: str = "visual-studio-code",
                        init_options: dict | None = None, configuration: dict | None = None,
                        env: dict | None = None) -> Session:
    """Start `attnlens serve`, initialize it on ``root`` and return the session (not yet indexed)."""
    server_env = {**os.environ, "ATTNLENS_CACHE_DIR": str(tmp / "cache"), **(env or {})}
    config = ClientServerConfig(server_command=SERVER, server_env=server_env)
    client = await config.start()
    session = Session(client, root)

    @client.feature(STATUS)
    def on_status(params):
        session.statuses.append(plain(params))
        session.status_event.set()

    @client.feature(T.CLIENT_REGISTER_CAPABILITY)
    def on_register(params: T.RegistrationParams):
        session.registrations.extend(params.registrations)

    if configuration is not None:
        client.set_configuration(configuration)
    opts = {"targetPython": PYTHON} if init_options is None else init_options
    await client.initialize_session(T.InitializeParams(
        capabilities=client_capabilities(caps),
        root_uri=uri(root),
        workspace_folders=[T.WorkspaceFolder(uri(root), root.name)],
        initialization_options=opts,
    ))
    return session


async def stop_session(session: Session) -> None:
    await session.client.shutdown_session()
    await session.client.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def vscode(tmp_path_factory):
    """One VS Code-profile server on mini-metax, indexed, shared by a module's tests."""
    session = await start_session(tmp_path_factory.mktemp("vscode"))
    await session.wait_indexed()
    yield session
    await stop_session(session)


@pytest.fixture
def flash_attn() -> Path:
    return EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"
