"""The collector policy: paused for one-shot commands, settled (frozen) for the server."""

from __future__ import annotations

import gc

from attnlens import cli
from attnlens.gcpolicy import batch, settle


def test_batch_pauses_and_restores():
    assert gc.isenabled()
    with batch():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with batch():
            pass
        assert not gc.isenabled()  # restores what it found
    finally:
        gc.enable()
    try:
        with batch(restore=False):  # a process about to exit: no heap-wide collection first
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_settle_freezes_survivors_and_reclaims_cycles():
    class Node:
        pass

    keep = [Node() for _ in range(1000)]
    try:
        settle()
        frozen = gc.get_freeze_count()
        assert frozen >= len(keep)
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle that only the cyclic collector can free
        settle()
        del a, b
        settle()  # unfreezes first, so a cycle frozen earlier is still reclaimed
        assert not any(type(o) is Node and hasattr(o, "other") for o in gc.get_objects())
    finally:
        gc.unfreeze()


def test_settle_skips_when_little_is_new():
    try:
        settle()
        assert settle(min_unfrozen=10**9) is None  # nothing much allocated since: skipped
        keep = [[i] for i in range(5000)]
        gc.collect()  # survivors reach the oldest generation
        assert isinstance(settle(min_unfrozen=1000), float)
        assert keep
    finally:
        gc.unfreeze()


def test_cli_pauses_collector_except_for_the_server(monkeypatch):
    serve = cli.build_parser("serve").parse_args(["serve"])
    assert getattr(serve, "long_lived", False) is True  # the server settles the collector itself
    seen = {}

    def fake_rules(args):
        seen["enabled"] = gc.isenabled()
        return 0

    parser = cli.build_parser("rules")
    args = parser.parse_args(["rules"])
    monkeypatch.setattr(args, "func", fake_rules)
    monkeypatch.setattr(cli, "build_parser", lambda _cmd: type("P", (), {"parse_args": lambda self, a: args})())
    assert cli.main(["rules"]) == 0
    assert seen["enabled"] is False and gc.isenabled()


def test_paused_freezes_what_it_made_and_restores():
    from attnlens.gcpolicy import paused

    gc.unfreeze()
    try:
        before = gc.get_freeze_count()
        with paused():
            assert not gc.isenabled()
            made = [[i] for i in range(3000)]
        assert gc.isenabled() and gc.get_freeze_count() >= before + len(made)
        gc.disable()
        try:
            with paused():
                pass
            assert not gc.isenabled()  # restores what it found
        finally:
            gc.enable()
    finally:
        gc.unfreeze()
