"""The reverse call index (attnlens.callindex): answers equal a full scan, after edits of every kind.

A "full scan" is a fresh workspace with the same buffers, every call site traced from nothing. The
incremental index is one workspace edited step by step (overlays, as the editor sends them); after
each edit its records (every field: call, scope, final, waypoints, symbols, dependencies) must equal
the full scan's, and so must the incoming calls of every definition of the workspace.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from attnlens import callindex as C
from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, find, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="needs vllm installed in the test interpreter")

FA = "mini_metax/attention/backends/flash_attn.py"
MERGE = "mini_metax/attention/ops/merge_attn_states.py"
UNIFIED = "mini_metax/attention/ops/unified.py"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("callindex")
    root = base / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root, base / "cache"


def workspace(world, overlays: dict | None = None) -> Workspace:
    root, cache = world
    ws = Workspace(root, python=sys.executable, cache_dir=cache)
    for rel, text in (overlays or {}).items():
        ws.index.set_overlay(str(root / rel), text)
    return ws


def full_scan(world, overlays: dict) -> C.CallIndex:
    ws = workspace(world, overlays)
    ci = C.CallIndex(ws.index, ws.resolver, budget_s=None)
    while not ci.step(10.0):
        pass
    return ci


def run(ci: C.CallIndex, urgent_only: bool = False) -> None:
    while not ci.step(10.0, urgent_only=urgent_only):
        pass


def incoming_of_every_def(ws: Workspace, ci: C.CallIndex) -> dict:
    """For every function and class of every workspace module: the (path, line, col, func) of its callers."""
    out = {}
    for mod in ws.index.workspace_modules():
        s = mod.summary
        for q, d in list(s.functions.items()) + list(s.classes.items()):
            out[f"{mod.name}.{q}"] = [(r.path, r.fline, r.fcol, r.func) for r in ci.calls_into(mod.path, d.deco_line, d.end_line)]
    return out


def brute_force_calls_into(ci: C.CallIndex, path: str, lo: int, hi: int) -> list:
    """The matcher the server used before the index: a scan of every record."""
    def inside(p, ln):
        return p == path and ln is not None and lo <= ln <= hi

    return C._ordered(r for r in ci.records() if not inside(r.path, r.line) and (
        inside(r.final_path, r.final_line) or any(inside(p, ln) for p, ln in r.waypoints)))


def linked_records(ci: C.CallIndex) -> set:
    """Every record the reverse maps hold (they must hold exactly the records of ``by_path``)."""
    out = set()
    for table in (ci._points, ci._finals):
        for by_line in table.values():
            for recs in by_line.values():
                out |= recs
    for recs in list(ci._marks.values()) + list(ci._dependents.values()):
        out |= set(recs)
    return out


def lines_of(world, rel: str) -> list[str]:
    return (world[0] / rel).read_text().splitlines(True)


def insert_in_body(world, rel: str, anchor: str, stmt: str) -> str:
    """The file's text with ``stmt`` as a new statement before the first line containing ``anchor``
    (indented like that line)."""
    lines = lines_of(world, rel)
    i = next(k for k, ln in enumerate(lines) if anchor in ln)
    indent = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
    return "".join(lines[:i]) + indent + stmt + "\n" + "".join(lines[i:])


@pytest.fixture(scope="module")
def edited(world):
    """One incremental index, edited in sequence; each check compares it with a fresh full scan."""
    ws = workspace(world)
    ci = C.CallIndex(ws.index, ws.resolver, budget_s=None)
    run(ci)
    return ws, ci, {}


def apply_and_compare(world, edited, rel: str, text: str | None, *, expect_full: bool):
    ws, ci, overlays = edited
    if text is None:
        overlays.pop(rel, None)
    else:
        overlays[rel] = text
    builds = ci.full_builds
    ws.index.set_overlay(str(world[0] / rel), text)
    ci.sync()
    assert (ci.full_builds > builds) == expect_full
    want = full_scan(world, overlays)
    if not expect_full:
        assert not ci._background  # an edit inside a body: nothing beyond the stale records is queued
    run(ci, urgent_only=True)
    if not expect_full:  # the urgent part alone brings it to the full scan's answers
        assert set(ci.records()) == set(want.records())
    run(ci)
    assert ci.complete
    assert set(ci.records()) == set(want.records())
    assert linked_records(ci) == set(ci.records())  # nothing stale left in a reverse map
    assert incoming_of_every_def(ws, ci) == incoming_of_every_def(workspace(world, overlays), want)
    return ws, ci


def test_full_build_records_and_reverse_maps(world, edited):
    ws, ci, _ = edited
    assert ci.complete and len(ci) == len(ci.records()) > 100
    # the reverse maps give what a scan of every record gives, for every definition
    for mod in ws.index.workspace_modules():
        for d in list(mod.summary.functions.values()) + list(mod.summary.classes.values()):
            assert ci.calls_into(mod.path, d.deco_line, d.end_line) == brute_force_calls_into(
                ci, mod.path, d.deco_line, d.end_line)
    # exact answers: the wrapper merge_attn_states is called from _forward_cascade in flash_attn.py, and
    # forward reaches it through its call of self._forward_cascade
    merge = ws.index.module("mini_metax.attention.ops.merge_attn_states").summary.functions["merge_attn_states"]
    callers = ci.calls_into(str(world[0] / MERGE), merge.deco_line, merge.end_line)
    path, line, col = find(world[0] / FA, "merge_attn_states(")
    _p, line2, col2 = find(world[0] / FA, "self._forward_cascade(")
    assert [(r.path, r.fline, r.fcol, r.scope) for r in callers if r.path == path] == [
        (path, line2, col2, "MiniFlashAttentionImpl.forward"), (path, line, col, "MiniFlashAttentionImpl._forward_cascade")]
    # symbols met on the way: the torch op of the Triton kernel's launch is found by its name
    assert all(r.final_symbol in r.marks for r in ci.records())


def test_statement_typed_in_a_method_body_retraces_only_what_goes_through_it(world, edited):
    text = insert_in_body(world, FA, "merge_attn_states(", "_typed = k")
    ws, ci = apply_and_compare(world, edited, FA, text, expect_full=False)
    assert ci.full_builds == 1


def test_line_replaced_and_removed_in_a_body(world, edited):
    lines = (edited[2][FA]).splitlines(True)
    i = next(k for k, ln in enumerate(lines) if "_typed = k" in ln)
    replaced = "".join(lines[:i]) + lines[i].replace("_typed = k", "_typed = 2 * k") + "".join(lines[i + 1:])
    apply_and_compare(world, edited, FA, replaced, expect_full=False)
    removed = "".join(lines[:i]) + "".join(lines[i + 1:])
    apply_and_compare(world, edited, FA, removed, expect_full=False)


def test_a_kernel_call_typed_in_a_body_changes_the_trees_through_it(world, edited):
    """forward reaches _forward_cascade's kernels through its call of it: a call typed into _forward_cascade
    changes that record too (it has a waypoint in the edited lines), not only the new call's."""
    ws, ci, overlays = edited
    base = overlays.get(FA) or (world[0] / FA).read_text()
    lines = base.splitlines(True)
    i = next(k for k, ln in enumerate(lines) if "merge_attn_states(" in ln and "import" not in ln)
    added = "".join(lines[:i]) + "        self._forward_spec_decode(query, key_cache, value_cache, output, md)\n" + "".join(lines[i:])
    before = {r.key: r for r in ci.records() if r.scope == "MiniFlashAttentionImpl.forward"
              and r.func == "self._forward_cascade"}
    ws, ci = apply_and_compare(world, edited, FA, added, expect_full=False)
    after = [r for r in ci.records() if r.scope == "MiniFlashAttentionImpl.forward" and r.func == "self._forward_cascade"]
    assert len(before) == len(after) == 1
    old = next(iter(before.values()))
    decode = "mini_metax.attention.ops.decode._decode_kernel"  # what _forward_spec_decode launches
    assert decode not in old.marks and decode in after[0].marks
    apply_and_compare(world, edited, FA, base if FA in overlays else None, expect_full=False)


def test_a_new_caller_in_another_module_is_found(world, edited):
    """A call typed into a method of another file: a body edit, and the callee's incoming calls gain it."""
    ws, ci, overlays = edited
    text = insert_in_body(world, UNIFIED, "return", "merge_attn_states(o, lse, o, lse)")
    # the name must be bound in that module for the call to resolve: import it at the top
    text = "from mini_metax.attention.ops.merge_attn_states import merge_attn_states\n" + text
    ws, ci = apply_and_compare(world, edited, UNIFIED, text, expect_full=True)  # a new import: outside facts
    merge = ws.index.module("mini_metax.attention.ops.merge_attn_states").summary.functions["merge_attn_states"]
    callers = ci.calls_into(str(world[0] / MERGE), merge.deco_line, merge.end_line)
    new_line = next(k for k, ln in enumerate(text.splitlines(), 1) if "merge_attn_states(o, lse, o, lse)" in ln)
    assert [(r.fline, r.func) for r in callers if r.path == str(world[0] / UNIFIED)] == [(new_line, "merge_attn_states")]
    # a second call in the same body: no new import, a body edit
    text2 = insert_in_body(world, UNIFIED, "return", "merge_attn_states(o, lse, o, lse)\n    merge_attn_states(lse, o, lse, o)")
    text2 = "from mini_metax.attention.ops.merge_attn_states import merge_attn_states\n" + text2
    apply_and_compare(world, edited, UNIFIED, text2, expect_full=False)
    apply_and_compare(world, edited, UNIFIED, None, expect_full=True)  # undone: the import goes


def test_structural_edits_queue_the_workspace(world, edited):
    original = (world[0] / FA).read_text()
    apply_and_compare(world, edited, FA, original + "\n\ndef _new_helper():\n    return 1\n", expect_full=True)
    lines = original.splitlines(True)
    paste = "".join(lines[i % len(lines)] for i in range(5000))
    half = len(lines) // 2
    apply_and_compare(world, edited, FA, "".join(lines[:half]) + paste + "".join(lines[half:]), expect_full=True)
    apply_and_compare(world, edited, FA, "", expect_full=True)  # the whole file deleted
    apply_and_compare(world, edited, FA, None, expect_full=True)  # back to the disk's text


PLATFORM = "mini_metax/platform.py"


def test_a_deleted_paste_moves_later_calls_onto_the_stale_calls_lines(world, edited):
    """A paste of copies of a call, then its deletion: the calls after it move up onto the lines (and the
    call keys) of the pasted copies, which are stale until traced again. The moved records must not
    overwrite the stale ones in place (those would stay in the reverse maps: a caller at a line past
    the end of the file)."""
    original = (world[0] / PLATFORM).read_text()
    lines = original.splitlines(True)
    i = next(k for k, ln in enumerate(lines) if "register_backend(AttentionBackendEnum.FLASH_ATTN" in ln)
    call = lines[i]
    # a function of 40 copies pasted before a short function and a second function with the same call,
    # at the end (the edited region grows to the functions it touches: the short one keeps it from the last)
    gap = "\n\ndef _gap() -> int:\n    return 1\n"
    tail = "\n\ndef _more_backends() -> None:\n" + call * 3
    paste = "\n\ndef _pasted() -> None:\n" + call * 40
    apply_and_compare(world, edited, PLATFORM, original + paste + gap + tail, expect_full=True)
    apply_and_compare(world, edited, PLATFORM, original + gap + tail, expect_full=True)
    apply_and_compare(world, edited, PLATFORM, None, expect_full=True)


def test_outside_facts_and_the_edited_region():
    from attnlens.pyindex import summarize

    base = "import os\n\n\nclass A:\n    def f(self, x):\n        y = x\n        return y\n\n\ndef g():\n    return A\n"
    body = base.replace("        y = x\n", "        y = x\n        z = y + 1\n")
    sig = base.replace("def f(self, x)", "def f(self, x, w=1)")
    facts = [C.outside_facts(summarize(t, "/m.py", "")) for t in (base, body, sig)]
    assert facts[0] == facts[1] and facts[0] != facts[2]
    old, new = base.splitlines(True), body.splitlines(True)
    assert C.edited_region(old, new) == (7, 6, 1)  # a pure insertion before old line 7
    assert C.edited_region(old, old) is None
    s_old, s_new = C.snapshot(base, summarize(base, "/m.py", "")), C.snapshot(body, summarize(body, "/m.py", ""))
    # grown to the method's span (lines 5-7 before, 5-8 after): old lines 5..7
    assert C.stale_lines(s_old, s_new, 7, 6, 1) == (5, 7)
    # an edit at module level outside any definition stays where it is
    top = base.replace("import os\n", "import os  # comment\n")
    assert C.edited_region(old, top.splitlines(True)) == (1, 1, 0)
    assert C.grow(1, 1, s_old.spans) == (1, 1)


def test_a_request_can_tell_which_edited_buffers_nobody_has_summarised(world):
    ws = workspace(world)
    ci = C.CallIndex(ws.index, ws.resolver, budget_s=None)
    run(ci)
    path = str(world[0] / FA)
    ws.index.set_overlay(path, (world[0] / FA).read_text() + "\n# edited\n")
    assert ci.unsummarised_changes() == ["mini_metax.attention.backends.flash_attn"]
    ws.index.module_for_path(path)  # a hover read it
    assert ci.unsummarised_changes() == []
    ci.sync()
    assert ci.urgent_left == 0 and ci.complete  # a comment at the end: nothing to trace again


def test_traces_cut_by_the_time_budget_are_done_again_without_one(world):
    """A complete index does not depend on the load: with a budget no trace can meet, every record is
    first partial, then traced again unbudgeted, and the result equals the unbudgeted full scan."""
    ws = workspace(world)
    ci = C.CallIndex(ws.index, ws.resolver, budget_s=1e-9)
    while not ci.step(10.0, urgent_only=True):
        pass
    assert ci.urgent_left == 0 and not ci.complete and sum(map(len, ci._partial.values())) > 50
    run(ci)
    assert ci.complete and ci._partial == {}
    assert set(ci.records()) == set(full_scan(world, {}).records())


def test_a_summary_inside_a_step_gives_way_to_a_request(world):
    """A module summarised inside a trace of the call index stops when a request waits (the index's
    ``should_stop`` for the step): the step returns early, nothing half-made is kept, and the finished index
    equals the full scan. (A 2,000-line module's summary held a waiting hover 60-150 ms.)"""
    root, _cache = world
    ws = Workspace(root, python=sys.executable, use_cache=False)  # nothing cached: traces summarise modules
    ci = C.CallIndex(ws.index, ws.resolver, budget_s=None)
    gave_way = []

    def cancel():  # "a request waits", asked by the summary builder (after its parse, between statements)
        where = sys._getframe(2).f_code.co_name
        if where in ("summarize", "body") and len(gave_way) < 3:
            gave_way.append((where, ws.index.loaded_count()))
            return True
        return False

    while not ci.step(10.0, cancel):
        pass
    assert len(gave_way) == 3 and ws.index.build_should_stop is None
    assert len(ws.index._stopped_builds) == 3  # each gave way once: built whole the next time (the job gets on)
    assert set(ci.records()) == set(full_scan(world, {}).records())
