"""Shared helpers for tests: inline fixture workspaces and position lookup by text."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

from attnlens.target import TargetInfo
from attnlens.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "mini-metax"


def write_tree(base: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = base / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(textwrap.dedent(text).lstrip("\n"))


def fixture_ws(tmp_path: Path, plugin: dict[str, str], site: dict[str, str] | None = None, cache: bool = False) -> Workspace:
    """A plugin root + a fake site-packages, analysed without running any interpreter."""
    root = tmp_path / "plugin"
    sp = tmp_path / "site"
    write_tree(root, plugin)
    write_tree(sp, site or {})
    target = TargetInfo(python=sys.executable, sys_path=[str(sp)], stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    return Workspace(root, target=target, cache_dir=tmp_path / "cache", use_cache=cache)


def find(path: Path | str, text: str, nth: int = 0, offset: int = 0) -> tuple[str, int, int]:
    """(path, 1-based line, 0-based column) of the nth occurrence of ``text`` (+offset chars)."""
    path = str(path)
    lines = Path(path).read_text().splitlines()
    seen = 0
    for i, line in enumerate(lines):
        start = 0
        while True:
            c = line.find(text, start)
            if c < 0:
                break
            if seen == nth:
                return path, i + 1, c + offset
            seen += 1
            start = c + 1
    raise AssertionError(f"{text!r} not found in {path}")


def example_ws(tmp_path: Path) -> Workspace:
    """The bundled example against the real vllm installed in the test interpreter."""
    return Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "cache")


def kinds(chain) -> list[str]:
    return [h.kind for h in chain.hops]


def have_vllm() -> bool:
    for p in sys.path:
        if os.path.isfile(os.path.join(p, "vllm", "v1", "attention", "backends", "registry.py")):
            return True
    return False


# -- LSP payloads ---------------------------------------------------------------------------
def plain(obj):
    """pygls hands unknown JSON objects over as namedtuples: back to dicts/lists."""
    if hasattr(obj, "_asdict"):
        return {k: plain(v) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    return obj


def utf16_len(s: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in s)


# -- processes (from /proc) -----------------------------------------------------------------
def pid_alive(pid: int | None) -> bool:
    """Is ``pid`` running? A zombie still answers kill(0): it counts as dead."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, pgid, state) of every process, from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()  # after the command: state ppid pgrp ...
        except OSError:
            continue
        out[int(d)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def group_members(pgid: int | None) -> list[int]:
    """Live (non-zombie) processes whose process group is ``pgid``."""
    if not pgid:
        return []
    return [p for p, (_pp, g, s) in proc_table().items() if g == pgid and s != "Z"]


def file_reads(monkeypatch) -> list:
    """The list that every file text the index decodes from now on is appended to (its bytes): what a scan read."""
    from attnlens import index as IX

    reads: list = []
    dec = IX.decode_source
    monkeypatch.setattr(IX, "decode_source", lambda data: reads.append(data) or dec(data))
    return reads
