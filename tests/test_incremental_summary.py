"""An open buffer's summary is built from its top-level chunks (pyincremental) and equals the whole-file
summary (pyindex.summarize) field for field: on every example file, on a sample of the installed vLLM,
after the chunks moved, and over seeded random edit sequences (broken code included). The chunk
splitter that rescans only what an edit touched gives the same chunks as a scan of the whole text."""

from __future__ import annotations

import ast
import random
import re
from pathlib import Path

import pytest

from attnlens import pyindex, pyrecover
from attnlens.pyincremental import IncrementalSummary
from attnlens.pyindex import summarize
from attnlens.pyrecover import ChunkSplitter, top_level_chunks
from tests.helpers import EXAMPLE

EXAMPLES = sorted(Path(EXAMPLE).parent.rglob("*.py"))
SNIPPETS = ["x", "(", ")", "\n", "    ", "def ", ":", "'", '"""', "[", "if a:\n", "@d\n", "else:\n", "\\\n", "#",
            "lambda q: q", " = ", "import os\n", "return\n", "global g\n", "os.path = 3\n", "if c:\n    raise X\n"]


def _whole(text: str):
    pyindex.parse_source.cache_clear()
    return summarize(text, "m.py", "sha", refs=True)


def _first_difference(a, b) -> str:
    for f in a.__dataclass_fields__:
        if getattr(a, f) != getattr(b, f):
            return f"{f}: {str(getattr(a, f))[:300]} != {str(getattr(b, f))[:300]}"
    return ""


def _installed_sample(n: int) -> list[Path]:
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return []
    files = sorted(Path(next(iter(spec.submodule_search_locations))).rglob("*.py"))
    return files[:: max(1, len(files) // n)][:n]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_file_equals_whole_summary_in_place_and_moved(path):
    text = path.read_text(encoding="utf-8")
    inc = IncrementalSummary()
    assert inc.summarize(text, "m.py", "sha") == _whole(text)
    moved = "\n\n# two lines and a comment above\n" + text  # every chunk placed again, lines shifted
    got = inc.summarize(moved, "m.py", "sha")
    want = _whole(moved)
    assert got == want, _first_difference(want, got)


def test_installed_vllm_sample_equals_whole_summary():
    files = _installed_sample(80)
    if not files:
        pytest.skip("vllm is not installed in this interpreter")
    bad = []
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        got = IncrementalSummary().summarize(text, "m.py", "sha")
        want = _whole(text)
        if got != want:
            bad.append(f"{p.name}: {_first_difference(want, got)}")
    assert bad == []


def _edit(rng: random.Random, text: str) -> str:
    r = rng.random()
    if text and r < 0.5:
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(SNIPPETS) + text[at:]
    if text and r < 0.7:
        a = rng.randrange(len(text))
        return text[:a] + text[min(len(text), a + rng.randrange(1, 40)):]
    if r < 0.8:  # a pasted block of the file's own lines
        lines = text.splitlines(True)
        at = rng.randrange(len(lines) + 1)
        return "".join(lines[:at] + lines[rng.randrange(len(lines) or 1):][:50] + lines[at:])
    at = rng.randrange(len(text) + 1)
    return text[:at] + "\n" * rng.randrange(1, 4) + text[at:]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_edit_sequences_match_whole_summary_and_whole_scan(seed):
    rng = random.Random(seed)
    files = rng.sample(EXAMPLES, min(12, len(EXAMPLES)))
    checked = 0
    for p in files:
        text = p.read_text(encoding="utf-8")
        inc = IncrementalSummary()
        for step in range(25):
            text = _edit(rng, text)
            got = inc.summarize(text, "m.py", "sha")
            want = _whole(text)
            assert got == want, f"{p.name} step {step}: {_first_difference(want, got)}"
            assert inc.splitter.starts == [a for a, _b, _l in top_level_chunks(text)], f"{p.name} step {step}"
            checked += 1
    assert checked == 25 * len(files)


def test_chunks_tile_the_text_and_follow_statements():
    text = ("import os\n"
            "@deco\n@other(1)\n"
            "def f(a,\nb):\n    return [\n1,\n]\n"
            "if a:\n    pass\nelse:\n    pass\n"
            "x = '''\ndef not_a_chunk():\n'''\n"
            "y = (1 +\n2)\n"
            "# a comment\n"
            "class C:\n    pass\n")
    chunks = top_level_chunks(text)
    assert "".join(text[a:b] for a, b, _l in chunks) == text
    assert [text[a:b].split("\n", 1)[0] for a, b, _l in chunks] == ["import os", "@deco", "if a:", "x = '''",
                                                                     "y = (1 +", "class C:"]
    assert [line for _a, _b, line in chunks] == [0, 1, 8, 12, 15, 18]


def test_a_bracket_left_open_ends_at_the_next_def_and_a_paste_inside_it_is_cheap(monkeypatch):
    head = "class A:\n    def get_shape(\n        n: int,\n"
    block = "".join(f"import m{i}\n\n\ndef f{i}(x):\n    return g(x)\n" for i in range(300))
    text = head + block + "    ) -> tuple:\n        return (n,)\n"
    chunks = top_level_chunks(text)
    assert len(chunks) == 1 + 2 * 300  # the open class, then every import and def
    parses = []
    real = ast.parse
    monkeypatch.setattr(pyrecover.ast, "parse", lambda *a, **k: parses.append(1) or real(*a, **k))
    s = IncrementalSummary()
    summ = s.summarize(text, "m.py", "sha")
    assert [(e.line, e.message) for e in summ.syntax_errors][:1] == [(2, "'(' was never closed")]
    assert {f"f{i}" for i in range(300)} <= set(summ.functions)
    first = len(parses)
    parses.clear()
    s.summarize(text.replace("return g(x)", "return g(y)", 1), "m.py", "sha")  # one keystroke-sized edit
    assert len(parses) <= 3 < first  # the edited chunk only (and its recovery), not the file


def test_a_chunk_is_built_again_when_the_bindings_it_read_change():
    """`m.attr = v` inside a function patches another module only when `m` is an import of the module:
    the function's chunk read the bindings of `m` of an earlier chunk."""
    text = "import m\n\n\ndef patch():\n    m.attr = 3\n"
    inc = IncrementalSummary()
    assert [p.target for p in inc.summarize(text, "m.py", "sha").attr_patches] == ["m.attr"]
    other = text.replace("import m", "m = object()")
    assert inc.summarize(other, "m.py", "sha").attr_patches == [] == _whole(other).attr_patches


def test_a_module_level_raise_guards_the_rest_and_lambdas_keep_their_line():
    text = ("import os\n"
            "if not os.environ.get('X'):\n    raise ImportError('no X')\n"
            "from pkg import fast\n"
            "f = lambda q: fast(q)\n")
    inc = IncrementalSummary()
    inc.summarize(text, "m.py", "sha")
    moved = "\n" + text
    got = inc.summarize(moved, "m.py", "sha")
    assert got == _whole(moved)
    assert got.bindings["fast"][0].guards == (("else", "not os.environ.get('X')", 3),)
    assert list(got.lambdas) == ["<lambda:6:4>"]


def test_splitter_rescans_from_the_edit_and_resumes_at_old_chunks():
    text = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(200))
    sp = ChunkSplitter()
    sp.split(text)
    scanned = []
    real = pyrecover._scan_chunks

    def spy(t, pos, stop_at=None):
        starts, at = real(t, pos, stop_at)
        scanned.append(((at if at >= 0 else len(t)) - pos))
        return starts, at

    pyrecover._scan_chunks = spy
    try:
        edited = text.replace("return 100", "return 100 + 1")
        chunks = sp.split(edited)
    finally:
        pyrecover._scan_chunks = real
    assert chunks == top_level_chunks(edited)
    assert scanned and scanned[0] < 100  # one chunk rescanned, not the 6,000-character text


def test_a_block_pasted_from_another_buffer_is_placed_not_parsed_and_equals_the_whole_summary(monkeypatch):
    """Chunks are shared between buffers (``pyincremental._SHARED``): a paste of another open buffer's code
    parses only the chunks the paste cut, and the result is the whole summary's, also where a shared chunk
    reads bindings that differ in the new buffer (``m.attr = 3`` patches only where ``m`` is an import)."""
    donor = "".join(f"import m{i}\n\n\ndef f{i}(x):\n    m{i}.attr = x\n    return g(x)\n\n\n" for i in range(40))
    a = IncrementalSummary()
    a.summarize(donor, "m.py", "sha")
    host = "x = 1\n\n\nclass K:\n    def h(self):\n        return 2\n"
    b = IncrementalSummary()
    b.summarize(host, "m.py", "sha")
    parses = []
    real = ast.parse
    monkeypatch.setattr(pyrecover.ast, "parse", lambda *a, **k: parses.append(1) or real(*a, **k))
    pasted = host.replace("x = 1\n", "x = 1\n" + donor, 1)
    got = b.summarize(pasted, "m.py", "sha")
    monkeypatch.setattr(pyrecover.ast, "parse", real)
    want = _whole(pasted)
    assert got == want, _first_difference(want, got)
    assert len(parses) <= 2  # the chunk the paste cut (`x = 1` and the text after it), not the 80 pasted chunks
    # the same functions pasted where `m0` is not an import: that chunk is built again, not shared
    other = "m0 = object()\n" + donor.split("\n\n\n", 1)[1]
    c = IncrementalSummary()
    got = c.summarize(other, "m.py", "sha")
    want = _whole(other)
    assert got == want, _first_difference(want, got)
    assert "m0.attr" not in [p.target for p in got.attr_patches]


def _unrecoverable_chunk(n: int = pyrecover.MAX_ROUNDS + 4) -> str:
    """A class whose every line is broken (an invalid character each): more broken statements than the
    recovery's rounds, so the chunk cannot be recovered and the whole text is unparsable."""
    return "class Broken:\n" + "".join(f"    x{i} = {i} \u2014\n" for i in range(n))


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_an_unrecoverable_chunk_gives_the_whole_summary_and_is_not_recovered_again(where, monkeypatch):
    head = "import os\n\n\ndef f(a):\n    return os.path.join(a)\n\n\n"
    tail = "\n\nclass After:\n    def g(self):\n        return f(1)\n"
    text = {"first": _unrecoverable_chunk() + tail, "middle": head + _unrecoverable_chunk() + tail,
            "last": head + _unrecoverable_chunk()}[where]
    want = _whole(text)
    assert want.error.startswith("syntax error: invalid character") and want.functions == {}
    inc = IncrementalSummary()
    got = inc.summarize(text, "m.py", "sha")
    assert got == want, _first_difference(want, got)
    assert got.error_line == want.error_line > 0 and got.syntax_errors == want.syntax_errors

    runs = []
    real_run = pyrecover._Recovery.run
    monkeypatch.setattr(pyrecover._Recovery, "run", lambda self, first: runs.append(1) or real_run(self, first))
    edited = text.replace("return f(1)", "return f(12)") if where != "last" else text.replace("join(a)", "join(ab)")
    got = inc.summarize(edited, "m.py", "sha")  # a keystroke in another chunk: the broken one is known
    assert runs == []
    assert got == _whole(edited), _first_difference(_whole(edited), got)
    # the broken chunk mended: the buffer has a summary again, equal to the whole one
    mended = edited.replace(" \u2014\n", "\n")
    got = inc.summarize(mended, "m.py", "sha")
    assert got.error is None and "Broken" in got.classes
    assert got == _whole(mended), _first_difference(_whole(mended), got)


def test_a_failed_recovery_is_memoised_for_the_text():
    text = "import os\n" + _unrecoverable_chunk()
    pyindex.parse_source.cache_clear()
    with pytest.raises(SyntaxError) as first:
        pyindex.parse_source(text)
    runs = []
    real_run = pyrecover._Recovery.run
    pyrecover._Recovery.run = lambda self, e: runs.append(1) or real_run(self, e)
    try:
        with pytest.raises(SyntaxError) as again:
            pyindex.parse_source(text)
    finally:
        pyrecover._Recovery.run = real_run
    assert runs == [] and (again.value.msg, again.value.lineno) == (first.value.msg, first.value.lineno)


# the chunk scan of the eighth session, token by token (every line break, every bracket, `;`): the reference that the
# faster scan (line breaks only before column-0 code, a one-line bracket pair as one token) must equal
_REFERENCE_TOKEN = re.compile(r"""
      [rRbBuUfF]{0,2}(?:'''(?:\\.|[^\\])*?(?:'''|\Z)|\"\"\"(?:\\.|[^\\])*?(?:\"\"\"|\Z)|'(?:\\.|[^\\'\n])*'|"(?:\\.|[^\\"\n])*")
    | \#[^\n]*
    | \\\n
    | [()\[\]{}\n;]
""", re.X | re.S)


def _reference_starts(text: str) -> list[int]:
    starts, deco, depth, n = [0], text.startswith("@"), 0, len(text)
    for m in _REFERENCE_TOKEN.finditer(text):
        ch = m.group()
        if ch == "\n":
            o = m.end()
            if o >= n:
                break
            c = text[o]
            if depth:
                if c in "dcifa@" and pyrecover._ENDS_OPEN.match(text, o):
                    depth = 0
                else:
                    continue
            if c in " \t\f\n#\r" or c in ")]}":
                continue
            if deco:
                deco = c == "@"
                continue
            if (c == "e" or c == "f") and pyrecover._CONTINUES.match(text, o):
                continue
            starts.append(o)
            deco = c == "@"
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth:
                depth -= 1
    return starts


def test_the_chunk_scan_equals_the_token_by_token_reference_on_installed_and_mangled_code():
    """The scan skips line breaks not followed by column-0 code and one-line bracket pairs: the same chunk starts
    as visiting every token, on installed vLLM files, the examples, and copies cut, spliced and broken with the
    snippets that open brackets and strings."""
    rng = random.Random(5)
    files = EXAMPLES + _installed_sample(150)
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    assert len(texts) > 20
    checked = 0
    for text in texts:
        variants = [text, text.replace("\n", "\r\n")]
        for _ in range(3):
            a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2))
            variants.append(text[:a] + rng.choice(SNIPPETS) + text[b:])
            variants.append(text[:a] + rng.choice(SNIPPETS) * rng.randint(1, 3) + text[a:])
        variants.append(rng.choice(texts)[: rng.randrange(2000)] + text)
        for v in variants:
            if not pyrecover._splittable(v) or not v:
                continue
            assert pyrecover._scan_chunks(v, 0)[0] == _reference_starts(v), v[:200]
            checked += 1
    assert checked > 1000
