"""An unsaved buffer's rule facts are collected per top-level chunk (facts.IncrementalFacts) and equal the
whole-text facts (facts.collect) field for field: on every example file, in place and moved, on a sample of
the installed vLLM, and over seeded random edit sequences (broken code included). A keystroke collects only
the chunk it changed; the parse-based items of a buffer (AL115's try handlers, AL116's raise sites) are read
per chunk too, and the findings of a buffer equal those of the same text on disk."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from attnlens import pyindex
from attnlens.rules import engine as E
from attnlens.rules import facts as F
from tests.test_incremental_summary import EXAMPLES, _edit, _installed_sample

from .conftest import MINI, make_workspace


def _claims():
    E.load_checks()
    return E._prefilter()


def _whole(text: str, claim_re):
    pyindex.parse_source.cache_clear()
    return F.collect(text, claim_re)


def _first_difference(a, b) -> str:
    for f in a.__dataclass_fields__:
        if getattr(a, f) != getattr(b, f):
            return f"{f}: {str(getattr(a, f))[:300]} != {str(getattr(b, f))[:300]}"
    return ""


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_file_equals_whole_facts_in_place_and_moved(path):
    cr = _claims()
    text = path.read_text(encoding="utf-8")
    inc = F.IncrementalFacts()
    got, want = inc.collect(text, cr), _whole(text, cr)
    assert got == want, _first_difference(want, got)
    moved = "\n\n# two lines and a comment above\n" + text  # every chunk placed again, three lines down
    got, want = inc.collect(moved, cr), _whole(moved, cr)
    assert got == want, _first_difference(want, got)
    assert inc.collect(text, None) == _whole(text, None)  # without a prefilter: every statement walked


def test_installed_vllm_sample_equals_whole_facts():
    files = _installed_sample(80)
    if not files:
        pytest.skip("vllm is not installed in this interpreter")
    cr = _claims()
    bad = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        got, want = F.IncrementalFacts().collect(text, cr), _whole(text, cr)
        if got != want:
            bad.append(f"{p.name}: {_first_difference(want, got)}")
    assert bad == []


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_edit_sequences_match_whole_facts(seed):
    rng = random.Random(seed)
    cr = _claims()
    for path in EXAMPLES[::2]:
        text = path.read_text(encoding="utf-8")
        inc = F.IncrementalFacts()
        for k in range(25):
            text = _edit(rng, text)
            got, want = inc.collect(text, cr), _whole(text, cr)
            assert got == want, (path.name, k, _first_difference(want, got))


def test_capability_variables_cross_chunks_and_the_module_docstring_is_the_first_statements():
    """The walker's state between statements (a capability read bound at module level, compared in a later
    statement) and the module docstring after a comment-only chunk come out as in the whole walk."""
    cr = _claims()
    text = ("# a comment chunk first\n"
            '"""The module docstring: supports sinks."""\n'
            "capability = current_platform.get_device_capability()\n"
            "IS_NEW = capability.major >= 9\n"
            "def f():\n"
            "    return capability[0] == 8\n")
    inc = F.IncrementalFacts()
    got = inc.collect(text, cr)
    assert got == _whole(text, cr)
    assert [(c.kind, c.line, c.text, c.scope) for c in got.caps] == [("compare", 4, "capability.major >= 9", "")]
    assert [(d.kind, d.line) for d in got.docs] == [("module", 2)]
    # the binding goes: the compare in the next statement is no capability use any more
    edited = text.replace("capability = current_platform.get_device_capability()", "capability = (8, 0)")
    got = inc.collect(edited, cr)
    assert got == _whole(edited, cr) and got.caps == []


def test_a_keystroke_collects_only_the_chunk_it_changed(monkeypatch):
    cr = _claims()
    text = "".join(p.read_text(encoding="utf-8") for p in EXAMPLES[:6])
    inc = F.IncrementalFacts()
    inc.collect(text, cr)
    built = []
    real = F._chunk_facts
    monkeypatch.setattr(F, "_chunk_facts", lambda piece, *a: built.append(piece) or real(piece, *a))
    at = text.index("\ndef ") + 1
    typed = text[:at] + "x = 1\n" + text[at:]  # a new statement: everything below moves one line
    got = inc.collect(typed, cr)
    assert built == ["x = 1\n"]
    assert got == _whole(typed, cr)


def test_buffer_findings_equal_the_same_text_on_disk(tmp_path):
    """The example's modules with findings, each as an unsaved buffer moved three lines down and with a
    broken statement pasted at the end, checked in an editor's workspace (chunked facts, chunked try handlers
    and raise sites) and, as files, in a fresh workspace (whole parses): the same findings."""
    root = tmp_path / "ws"
    shutil.copytree(MINI, root)
    ws = make_workspace(root, None)
    found = {f.path for f in E.check_paths(ws)}
    assert len(found) >= 3
    seen_rules = set()
    for k, rel in enumerate(sorted(found)):
        path = str(root / rel) if not Path(rel).is_absolute() else rel
        text = Path(path).read_text(encoding="utf-8")
        for n, buffer in enumerate(("# one\n# two\n\n" + text, text + "\ndef broken(:\n    pass\n")):
            ws.index.set_overlay(path, buffer)
            got = [(f.rule, f.line, f.col, f.message) for f in E.check_module(ws, path)]
            fresh_root = tmp_path / f"fresh{k}-{n}"
            shutil.copytree(root, fresh_root)
            fresh_path = fresh_root / Path(path).relative_to(root)
            fresh_path.write_text(buffer, encoding="utf-8")
            want = [(f.rule, f.line, f.col, f.message) for f in
                    E.check_module(make_workspace(fresh_root, None), str(fresh_path))]
            assert got == want, (rel, n)
            seen_rules.update(r for r, *_ in got)
        ws.index.set_overlay(path, None)
    assert {"AL115", "AL116"} & seen_rules  # a rule that reads the try handlers or the raise sites was compared


def test_a_big_buffer_gives_way_between_chunks_and_goes_on_where_it_stopped(monkeypatch):
    """``IncrementalFacts.collect(should_stop=...)`` stops every few new chunks when asked (a pasted buffer held the
    analysis thread 80-90 ms while a hover waited); the chunks done are kept, and the next call collects only the
    rest and equals the whole-text facts."""
    cr = _claims()
    text = "".join(f"def f{i}(x):\n    # claim: supports fp8\n    return g{i}(x, out=x)\n\n\n" for i in range(64))
    inc = F.IncrementalFacts()
    asks = []
    with pytest.raises(pyindex.Stopped):
        inc.collect(text, cr, should_stop=lambda: asks.append(1) or True)
    assert len(asks) == 1
    built = []
    real = F._chunk_facts
    monkeypatch.setattr(F, "_chunk_facts", lambda *a: built.append(1) or real(*a))
    got = inc.collect(text, cr, should_stop=lambda: False)
    assert got == _whole(text, cr), _first_difference(_whole(text, cr), got)
    assert 0 < len(built) < 64  # the chunks before the stop were kept


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_an_unrecoverable_chunk_gives_the_whole_facts_without_a_whole_parse(where, monkeypatch):
    """A chunk whose recovery fails makes the text unparsable: the facts are those of the whole-text
    collection (its error, field for field), and no parse of the whole text is made for them (a background
    job spent 60-150 ms there, not yielding, after a paste into a long class)."""
    from tests.test_incremental_summary import _unrecoverable_chunk

    head = "import os\n\n\ndef f(a):\n    capability = os.path.join(a)  # (a capability: the walk enters the text)\n    return capability\n\n\n"
    tail = "\n\nclass After:\n    def g(self, capability):\n        return f(1)\n"
    text = {"first": _unrecoverable_chunk() + tail, "middle": head + _unrecoverable_chunk() + tail,
            "last": head + _unrecoverable_chunk()}[where]
    cr = _claims()
    want = _whole(text, cr)
    assert want.error is not None and want.error.startswith("SyntaxError: invalid character")
    assert f"line {text.splitlines().index('class Broken:') + 2}" in want.error  # the whole text's line
    pyindex.parse_source.cache_clear()
    inc = F.IncrementalFacts()
    whole = []
    monkeypatch.setattr(F, "parse_source", lambda t: whole.append(t) or pyindex.parse_source(t))
    got = inc.collect(text, cr)
    assert whole == []
    assert got == want, _first_difference(want, got)
