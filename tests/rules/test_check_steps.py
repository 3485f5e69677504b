"""Checks stop inside themselves (issue 16 item 9): a check written as a generator yields between its items,
and the engine, asked to stop at a yield, keeps the suspended generator and resumes it on the next call for
the same text. The findings must be those of a check that never stopped, on every example file and on a
buffer holding a 5,000-line paste (where one check of a keystroke ran 40-80 ms without a stop point)."""

from __future__ import annotations

import sys
from dataclasses import asdict

import pytest

from attnlens.rules import engine as E
from attnlens.rules.api import run_steps
from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE

FILES = sorted(str(p.relative_to(EXAMPLE)) for p in (EXAMPLE / "mini_metax").rglob("*.py"))
PASTE_INTO = "mini_metax/attention/ops/decode.py"


def _pasted() -> str:
    lines: list[str] = []
    for rel in FILES:
        lines += (EXAMPLE / rel).read_text(encoding="utf-8").splitlines(True)
    paste = "".join(lines[i % len(lines)] for i in range(5000))
    text = (EXAMPLE / PASTE_INTO).read_text(encoding="utf-8")
    at = text.index("\n\n") + 2
    return text[:at] + paste + text[at:]


def _findings(tmp_path, overlays: dict, stop_always: bool, monkeypatch) -> tuple[dict, dict]:
    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path)
    for rel, text in overlays.items():
        ws.index.set_overlay(str(EXAMPLE / rel), text)
        # summarised first: a buffer's own summary, asked to stop before its first statement, never ends
        # under a should_stop that always says so (the server's says so only while a request waits)
        assert ws.index.module_for_path(str(EXAMPLE / rel)) is not None
    if stop_always:
        monkeypatch.setattr(E.Engine, "STOP_EVERY_S", 0.0)
    out = {}
    for rel in FILES:
        path = str(EXAMPLE / rel)
        for _attempt in range(100_000):
            try:
                got = E.check_module(ws, path, should_stop=(lambda: True) if stop_always else None)
                break
            except E.Interrupted:
                continue
        out[rel] = [asdict(f) for f in got]
    return out, dict(E.engine_for(ws).stats)


@pytest.mark.parametrize("overlays", [{}, {PASTE_INTO: _pasted()}], ids=["files", "pasted-buffer"])
def test_a_check_stopped_at_every_yield_finds_what_an_unstopped_one_does(tmp_path, monkeypatch, overlays):
    want, quiet = _findings(tmp_path / "quiet", overlays, False, monkeypatch)
    got, stats = _findings(tmp_path / "busy", overlays, True, monkeypatch)
    assert sum(len(v) for v in want.values()) > 10
    assert got == want
    assert quiet.get("interrupted", 0) == 0
    assert stats.get("interrupted_inside", 0) > 50  # checks really stopped inside themselves, many times


def test_steps_run_to_their_value():
    def steps():
        total = 0
        for i in range(5):
            yield
            total += i
        return total

    assert run_steps(steps()) == 10
