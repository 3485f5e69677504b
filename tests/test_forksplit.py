"""Two processes over one list (``attnlens.forksplit``): the results of one process, in order, on every run; each
process claims from its end when free; a helper that dies leaves its items to this process; `attnlens sites` split over two processes gives what one
process gives (the example plugin, the split forced by a low module threshold)."""

from __future__ import annotations

import os
import time

import pytest

from attnlens import forksplit
from tests.helpers import have_vllm

needs_two = pytest.mark.skipif(forksplit.cores() < 2 or not hasattr(os, "fork"), reason="needs two cores and fork")


@needs_two
def test_results_are_in_order_and_each_process_takes_its_end(tmp_path):
    """This process claims from the front and the helper from the back until they meet: every item once, the
    results in order, the items before the meeting point made here and those after it by the helper."""
    import time

    parent = os.getpid()

    def work(i):
        time.sleep(0.02)  # (each item takes a while: both processes get some)
        return i * i, os.getpid() == parent

    got = list(forksplit.iter_split(40, work, tmp_path))
    assert [v for v, _ in got] == [i * i for i in range(40)]
    here = [h for _, h in got]
    k = here.index(False)
    assert 0 < k < 40 and here == [True] * k + [False] * (40 - k)
    assert list(forksplit.iter_split(9, lambda i: i, tmp_path, allowed=False)) == list(range(9))
    assert list(tmp_path.iterdir()) == []  # (the spool file had no name)


@needs_two
def test_a_helper_slower_than_this_process_leaves_it_more_items(tmp_path):
    """The claims follow who is free: a helper whose items take ten times as long gets far fewer of them (fixed
    halves would give it half)."""
    import time

    parent = os.getpid()

    def work(i):
        mine = os.getpid() == parent
        time.sleep(0.005 if mine else 0.05)
        return mine

    got = list(forksplit.iter_split(60, work, tmp_path))
    assert 1 <= got.count(False) <= 15


@needs_two
def test_results_come_as_they_are_made_and_a_caller_that_stops_ends_the_helper(tmp_path, monkeypatch):
    """The split is streamed: this process's results are handed out as they are made (nothing is
    collected first), and a caller that stops early ends the helper (no process is left behind)."""
    parent = os.getpid()
    seen = []
    forked = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(forksplit.os, "fork", fork)

    def work(i):
        if os.getpid() == parent:
            seen.append(i)
        else:
            time.sleep(0.2)  # (a helper that ran out of its half would take this process's items from the end)
        return i

    it = forksplit.iter_split(8, work, tmp_path)
    assert next(it) == 0 and seen == [0]  # the first result before the rest is made
    it.close()  # stopped: the helper is killed and reaped
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)


@needs_two
def test_a_helper_that_dies_leaves_its_items_here(tmp_path):
    parent = os.getpid()

    def work(i):
        if os.getpid() != parent:
            os._exit(3)  # the helper dies at its first item
        return i

    assert list(forksplit.iter_split(6, work, tmp_path)) == list(range(6))


@pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")
@needs_two
def test_sites_split_over_two_processes_gives_what_one_gives(tmp_path, monkeypatch):
    """The example plugin's sites with the split forced (a threshold of 1 module): the helper renders the
    modules' end, and the records equal one process's (which `attnlens sites` prints: the CLI's equality is the same
    function of these records)."""
    import json

    from attnlens.workspace import Workspace
    from tests.helpers import example_ws

    def records(ws):
        return list(ws.kernel_site_records(None, lambda s: (json.dumps(s.to_json()), os.getpid())))

    one = records(example_ws(tmp_path / "one"))
    ws = example_ws(tmp_path / "two")
    ws.allow_fork = ws.index.allow_fork = True
    monkeypatch.setattr(Workspace, "SITES_SPLIT_MIN_MODULES", 1)
    assert ws.sites_split(None)
    two = records(ws)
    assert len(one) > 20 and [r[0] for r in two] == [r[0] for r in one]
    assert {pid for _j, pid in one} == {os.getpid()}
    assert len({pid for _j, pid in two}) == 2  # (the last modules came from the helper)


@needs_two
def test_a_spool_folder_that_cannot_be_written_runs_every_item_here(tmp_path):
    """No file can be made in the spool folder (read-only, or a path under a file, which cannot be made): no
    helper, every result made here, in order."""
    parent = os.getpid()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    got = list(forksplit.iter_split(6, lambda i: (i, os.getpid() == parent), blocker / "spool"))
    assert got == [(i, True) for i in range(6)]
