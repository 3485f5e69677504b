"""Whole-workspace scans that summarise only the modules whose text can matter (registrations, the
never-selected set, the registry's carry inputs), and the dependency a rules check records for the
modules such a scan left out. On upstream vLLM opened as the workspace (2,234 modules) the first hover
summarised every module for these (16-20 s); the answers must be the same as with every module loaded."""

from __future__ import annotations

import os
from pathlib import Path
import shutil
import sys
import time

from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, have_vllm

import pytest

pytestmark = pytest.mark.skipif(not have_vllm(), reason="needs vllm installed")

FILLER = "def helper_{i}(x):\n    return x + {i}\n\n\nclass Thing{i}:\n    def run(self, y):\n        return helper_{i}(y)\n"


def _workspace_with_filler(tmp_path, n=30):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root)
    filler = root / "mini_metax" / "filler"
    filler.mkdir()
    (filler / "__init__.py").write_text("")
    for i in range(n):
        (filler / f"mod{i}.py").write_text(FILLER.format(i=i))
    return root


def test_never_selected_reads_no_module_that_cannot_matter(tmp_path):
    root = _workspace_with_filler(tmp_path)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c1")
    never = ws.never_selected()
    backends = [(e.kind, e.name, e.cls) for e in ws.backends(with_call_sites=False)]
    loaded = {n for n in ws.index.ws_files if ws.index.is_loaded(n)}
    assert not {n for n in loaded if n.startswith("mini_metax.filler.")}
    assert backends
    # the same answers when every module is loaded first
    full = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c2")
    for n in sorted(full.index.ws_files):
        full.index.module(n)
    assert full.never_selected() == never
    assert [(e.kind, e.name, e.cls) for e in full.backends(with_call_sites=False)] == backends


def test_never_selected_memo_records_modules_loaded_later(tmp_path):
    """The never-selected memo keeps the selection facts of loaded modules; a module loaded after it was
    computed is recorded on the next call, so a body edit of that module keeps the memo."""
    root = _workspace_with_filler(tmp_path, n=3)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c")
    never = ws.never_selected()
    name = "mini_metax.filler.mod1"
    assert not ws.index.is_loaded(name)
    ws.index.module(name)
    assert ws.never_selected() == never
    memo = ws._never_memo
    path = str(root / "mini_metax" / "filler" / "mod1.py")
    assert os.path.realpath(path) in memo[2]
    ws.index.set_overlay(path, FILLER.format(i=1).replace("x + 1", "x + 2"))
    assert ws.never_selected() == never
    assert ws._never_memo[1] is memo[1]  # not recomputed


def test_a_text_matching_scan_records_the_modules_it_left_out(tmp_path):
    """A rules check that reads the registry depends on every module that could register a backend: the
    modules a text-matching scan leaves out are recorded as "still does not match", and writing a match
    into one of them makes the recorded dependencies stale."""
    from attnlens.registry import REGISTRAR_TEXT
    from attnlens.rules.engine import Engine, _merge_deps, _Recorder, global_signature

    root = _workspace_with_filler(tmp_path, n=3)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c")
    eng = Engine(ws)
    with _Recorder(ws.index) as (hard, soft):
        got = [m.name for m in ws.index.workspace_modules_matching(REGISTRAR_TEXT)]
    assert got and all("filler" not in n for n in got)
    deps = _merge_deps(hard, soft)
    assert deps["mini_metax.filler.mod2"][0] == "s"
    assert all(deps[n][0] == "s" and deps[n][2] == global_signature(ws.index.module(n).summary) for n in got)
    assert eng._deps_fresh(deps)
    p = root / "mini_metax" / "filler" / "mod2.py"
    time.sleep(0.01)
    p.write_text(FILLER.format(i=2) + "\n# register_x_backend(...) would register here\n")
    os.utime(p, ns=(time.time_ns(), time.time_ns() + 10_000_000))
    assert not Engine(ws)._deps_fresh(deps)


@pytest.mark.parametrize("example", ["mini-metax", "tiny-npu"])
def test_a_hover_skips_the_never_selected_set_only_where_it_names_nothing(tmp_path, example):
    """``Workspace._never_may_name`` (asked before the never-selected set exists) says False only for positions
    the set does not name: on every top-level class of every module of both examples (tiny-npu has
    never-selected backends), and the hover's chains are the same either way."""
    root = EXAMPLE.parent / example
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c")
    answers = {}
    for n in sorted(ws.index.ws_files):
        m = ws.index.module(n)
        if m is None:
            continue
        for top in [""] + [q for q in m.summary.classes if "." not in q]:
            answers[(n, top)] = ws._never_may_name(m, top)
    assert ws._never_memo is None
    never = ws.never_selected()
    skipped = [k for k, v in answers.items() if not v]
    assert skipped and not [k for k in skipped if k in never or (k[0], "") in never]
    if example == "tiny-npu":
        assert never and any(answers[k] for k in never if k in answers)


PATCH_TEXTS = {  # text -> can it hold a patch (patches.patch_candidate, a superset of what collect_patches finds)
    "import m\nif x: m.y = 1\n": True,
    "import m\nx: m.T = 3\n": False,  # an annotation, not an assignment to m.T
    "import m\na = m.b = f\n": True,  # chained
    "def f(config):\n    config.x = 1\n": False,  # a parameter's attribute: never a patch
    "from a import b\nb.c.d = 2\n": True,
    "x = 1;  m.y = 2\n": False,  # m is bound nowhere
    "import m as q\nq.z: int = 1\n": True,
    "def g(): pass\ng.cache = {}\n": True,  # the resolver decides (a workspace function: no patch)
    "f(a=m.b)\nimport m\n": False,
    "for a, b in x:\n    b.c = 1\n": True,  # module level: any bound root
    "if (m := f()):\n    m.x = 2\n": True,
    "from x import (\n   a,\n   bb)\nbb.q = 1\n": True,
    "def f():\n    for l in ls:\n        l.x = 1\n": False,  # inside a def only an imported root patches
    "def f(\n    a,\n) -> None:\n    for l in a:\n        l.x = 1\n": False,  # a multi-line def header
    "try:\n    m = g()\nexcept E:\n    pass\nif m:\n    m.y = 3\n": True,
    "class C:\n    def f(self):\n        import q\n        q.z = 1\n": True,
    "from m import *\nname.x = 1\n": True,  # a star import binds names no text shows
    "(a, qq) = g()\nqq.y = 1\n": True,
    "@patch('vllm.x.y')\ndef f(): pass\n": True,
    "@router.post('/v1/chat')\ndef f(): pass\n": False,  # not a module path
    "setattr(m, 'x', 1)\n": True,
}


def test_patch_candidate_texts():
    from attnlens.patches import patch_candidate

    assert {t: patch_candidate(t) for t in PATCH_TEXTS} == PATCH_TEXTS


def test_inside_def_of_every_line_equals_the_upward_walk():
    """``patches._DefLines`` (one pass over a text) answers as ``_inside_def`` (a walk up from one position) at
    every attribute assignment, on the example, the installed vLLM and mangled copies (blank, comment and
    closing-bracket lines, decorated and async defs, tabs, dedents inside brackets)."""
    import random

    from attnlens import patches as P
    from tests.test_incremental_summary import _installed_sample

    files = sorted(EXAMPLE.rglob("*.py")) + _installed_sample(150)
    extra = "def f():\n\tx.a = 1\n  )\n# c\n    y.b = 2\nclass C:\n    @d\n    async def g(s):\n        s.c = (1,\n)\n        z.d = 3\n"
    rng = random.Random(5)
    n = 0
    for text in [p.read_text(encoding="utf-8", errors="replace") for p in files] + [extra]:
        variants = [text]
        lines = text.split("\n")
        variants.append("\n".join(ln[rng.randint(0, 4):] if rng.random() < 0.15 else ln for ln in lines))
        for t in variants:
            d = P._DefLines(t)
            for m in P._ASSIGN_END.finditer(t):
                ls = t.rfind("\n", 0, m.start()) + 1
                first = ls + len(t[ls:m.start()]) - len(t[ls:m.start()].lstrip(" \t"))
                for pos in (m.start(), first):
                    assert d.at(pos) == P._inside_def(t, pos), (t.count("\n", 0, pos) + 1, t[ls:m.end()])
                    n += 1
    assert n > 5000


def test_patch_candidate_of_a_long_pasted_class_walks_the_text_once(monkeypatch):
    """Thousands of attribute assignments in methods: one pass over the text (``_DefLines``), not a walk up
    from each assignment (``_inside_def``: quadratic in a pasted 5,000-line class)."""
    from attnlens import patches as P

    passes = []
    real = P._DefLines.__init__
    monkeypatch.setattr(P._DefLines, "__init__", lambda self, text: passes.append(1) or real(self, text))
    monkeypatch.setattr(P, "_inside_def", lambda *a: (_ for _ in ()).throw(AssertionError("walked up")))
    body = "".join(f"        cfg.a{i} = {i}\n        cfg.b{i}.c = {i}\n" for i in range(3000))
    text = "import os\n\n\nclass Big:\n    def m(self, cfg):\n" + body
    assert P.patch_candidate(text) is True  # (a superset: `cfg` is no name a test can rule out here)
    assert P.patch_candidate(text.replace("cfg", "os")) is True  # through an import, inside a def
    assert passes == [1, 1]  # (the upward walks took 8.4 s for this text: 6,000 assignments in one method)


@pytest.mark.parametrize("example", ["mini-metax", "tiny-npu"])
def test_the_patch_table_equals_the_whole_scan(tmp_path, example):
    """``collect_patches`` over the candidate modules equals the scan of every module, and every module whose
    summary records an attribute patch is a candidate."""
    from attnlens.patches import collect_patches, patch_candidate

    ws = Workspace(EXAMPLE.parent / example, python=sys.executable, cache_dir=tmp_path / "c")
    idx = ws.index
    chosen = set(idx.matching_names(patch_candidate))
    assert chosen and len(chosen) < len(idx.ws_files)
    assert all(n in chosen for n in idx.ws_files if (m := idx.module(n)) is not None and m.summary.attr_patches)
    got = collect_patches(ws.resolver)
    idx.workspace_modules_matching = lambda _pattern: idx.workspace_modules()
    try:
        want = collect_patches(ws.resolver)
    finally:
        del idx.workspace_modules_matching
    assert got and {k: repr(v) for k, v in got.items()} == {k: repr(v) for k, v in want.items()}


def _hook_and_platform_workspace(tmp_path):
    """A plugin workspace with decoys for the import-hook and platform scans: modules that call
    ``__import__(name)`` or mention ``Platform`` without an import hook or a Platform subclass, and one
    of each real shape (``builtins.__import__ = hook``, ``sys.modules["x"] = m``, ``class P(Platform)`` with
    the base on its own line)."""
    root = tmp_path / "ws"
    pkg = root / "hookpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a_decoy.py").write_text("def load(n):\n    return __import__(n)\n\n# the Platform of the day\nPLATFORM = 'x'\n")
    (pkg / "b_decoy.py").write_text("import sys\nm = sys.modules['os']\nif sys.modules['os'] == m:\n    pass\n"
                                    "from vllm.platforms.interface import Platform\nP = Platform\n")
    (pkg / "hook.py").write_text("import builtins\nimport sys\nimport hookpkg.real as real\n\n"
                                 "_MAP = {'flash_attn': 'hookpkg.real'}\n_orig = builtins.__import__\n\n\n"
                                 "def _hook(name, *a, **k):\n    return _orig(_MAP.get(name, name), *a, **k)\n\n\n"
                                 "builtins.__import__ = _hook\nsys.modules['fa_alias'] = real\n")
    (pkg / "real.py").write_text("X = 1\n")
    (pkg / "zplatform.py").write_text("from vllm.platforms.interface import (\n    Platform,\n)\n\n\n"
                                      "class HookPlatform(\n    Platform,\n):\n    device_name = 'hook'\n")
    return root


def test_import_hook_and_platform_scans_summarise_only_modules_that_spell_them(tmp_path):
    root = _hook_and_platform_workspace(tmp_path)
    ws = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c1")
    hooks = ws.resolver.import_map()
    assert hooks == {"flash_attn": ("hookpkg.real", str(root / "hookpkg" / "hook.py"), 13),
                     "fa_alias": ("hookpkg.real", str(root / "hookpkg" / "hook.py"), 14)}
    info = ws.resolver.profile.info
    assert info.class_paths == ["hookpkg.zplatform.HookPlatform"]
    assert not ws.index.is_loaded("hookpkg.a_decoy") and not ws.index.is_loaded("hookpkg.b_decoy")
    # the same answers with every module loaded first
    full = Workspace(root, python=sys.executable, cache_dir=tmp_path / "c2")
    for n in sorted(full.index.ws_files):
        full.index.module(n)
    assert full.resolver.import_map() == hooks
    assert full.resolver.profile.info.class_paths == info.class_paths


def test_realpath_memo_equals_os_realpath(tmp_path):
    """Index.realpath resolves a file through its folder's memoised real path and one lstat of the file."""
    from attnlens.cache import Cache
    from attnlens.index import Index

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.py").write_text("")
    os.symlink(tmp_path / "a" / "b", tmp_path / "lnk")
    os.symlink(tmp_path / "a" / "b" / "f.py", tmp_path / "a" / "g.py")
    idx = Index(tmp_path, None, Cache(None))
    t = str(tmp_path)
    for p in (f"{t}/a/b/f.py", f"{t}/lnk/f.py", f"{t}/a/g.py", f"{t}/a/b/../b/f.py", f"{t}/a/missing.py",
              f"{t}/lnk/../x.py", "rel/x.py", f"{t}//a//b/f.py", "/", f"{t}/a/", f"{t}/lnk"):
        assert idx.realpath(p) == os.path.realpath(p), p


def _name_scan_and_search(idx, pat: bytes) -> tuple:
    """(the name scan's answer for ``pat``, or None; the module names whose text matches it), and
    ``matching_names`` equal to the latter."""
    slow = [n for n in sorted(idx.ws_files) if idx.text_matches(idx.ws_files[n], pat)]
    fast = idx._name_scan(pat)
    idx._match_memo.clear()
    assert idx.matching_names(pat) == slow
    return fast, slow


def test_def_pattern_scans_answer_from_the_def_names_as_the_text_search(tmp_path):
    """``rb"def\\s+NAME\\b"`` (the subclasses that override a method) is answered from each text's names after
    ``def``: the same module names as searching every text, for names that are, are not, or are prefixes of
    defined ones, through an edit (the next generation) and for a non-ASCII name (searched)."""
    import re

    from tests.helpers import fixture_ws

    ws = fixture_ws(tmp_path, {
        "fx/__init__.py": "",
        "fx/a.py": "class A:\n    def forward(self):\n        pass\n    async  def  run_x(self): pass\n",
        "fx/b.py": "def forwarding():\n    pass\nundef forward = 1\ndef def helper(): pass\n",
        "fx/c.py": "x = 'def\tforward'\ndef ñame(): pass\n",
    })
    idx = ws.index

    def both(name):
        fast, slow = _name_scan_and_search(idx, rb"def\s+" + re.escape(name).encode() + rb"\b")
        assert fast is None or fast == slow, name
        return fast, slow

    assert both("forward") == (["fx.a", "fx.b", "fx.c"], ["fx.a", "fx.b", "fx.c"])
    assert both("forwarding")[0] == ["fx.b"]
    assert both("forw")[0] == [] and both("run_x")[0] == ["fx.a"]
    assert both("def")[0] == ["fx.b"] and both("helper")[0] == ["fx.b"]
    assert both("ñame") == (None, ["fx.c"])
    assert idx._name_scan(rb"Attention") is None
    idx.set_overlay(str(ws.root / "fx/c.py"), "y = 1\n")
    assert both("forward")[0] == ["fx.a", "fx.b"]


def test_self_attribute_pattern_scans_answer_from_each_texts_names_as_the_text_search(tmp_path):
    """``rb"self\\.NAME\\s*(:[^=]*)?="`` (the subclasses that set an attribute: ``profile._fold_subclass_attr``)
    is answered from each text's names in that form: the same module names as searching every text, for every
    ``self.X`` of the fixture (assignments, annotated ones, comparisons, augmented ones, attributes of
    attributes, a colon with an ``=`` far later, a name that is a prefix of another), through an edit, and on
    every ``self.X`` of the installed vllm's attention files and the examples."""
    import re

    from attnlens.index import _self_set_names

    from tests.helpers import EXAMPLE, fixture_ws

    ws = fixture_ws(tmp_path, {
        "fx/__init__.py": "",
        "fx/a.py": "class A:\n    def __init__(self):\n        self.scale = 1\n        self.mode: str = 'x'\n"
                   "        self.scaled += 1\n        self.cfg.scale = 2\n",
        "fx/b.py": "def f(self, x):\n    return self.scale == x or {self.key: 1}\n",
        "fx/c.py": "def g(self):\n    y = {self.sc: 1}\n    return y\n\nz = 3\nmyself.mode = 1\n",
    })
    idx = ws.index

    def both(name):
        fast, slow = _name_scan_and_search(idx, rb"self\." + re.escape(name).encode() + rb"\s*(:[^=]*)?=")
        assert fast == slow, name
        return fast

    assert both("scale") == ["fx.a", "fx.b"]
    assert both("mode") == ["fx.a", "fx.c"] and both("sc") == ["fx.c"] and both("key") == []
    assert both("scaled") == [] and both("cfg") == [] and both("sca") == []
    idx.set_overlay(str(ws.root / "fx/b.py"), "x = 1\n")
    assert both("scale") == ["fx.a"]

    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("vllm")  # (not imported: it needs torch)
    files = sorted(EXAMPLE.rglob("*.py"))
    if spec is not None and spec.submodule_search_locations:
        files += sorted(Path(list(spec.submodule_search_locations)[0], "v1", "attention").rglob("*.py"))
    checked = 0
    for p in files:
        text = p.read_text(encoding="utf-8")
        fast = _self_set_names(text)
        for name in set(re.findall(r"self\.(\w+)", text, re.ASCII)):
            slow = re.search(rb"self\." + re.escape(name).encode() + rb"\s*(:[^=]*)?=", text.encode()) is not None
            assert slow == (name in fast), (p, name)
            checked += 1
    assert checked > (800 if have_vllm() else 50)


def test_per_text_facts_keep_no_text_and_follow_the_file_and_the_buffer(tmp_path):
    """Issue 13: ``Index.per_text`` kept every text it was asked about (it keyed on the text object): 43 MB of a
    server with upstream vLLM open. It keys on the file's stamp (or the buffer), keeps no text, computes again
    when the file or the buffer changes, and the text memo stays under its bound, dropping the texts read first."""
    from attnlens.cache import Cache
    from attnlens.index import Index

    (tmp_path / "pk").mkdir()
    files = []
    for i in range(6):
        p = tmp_path / "pk" / f"m{i}.py"
        p.write_text(f"x{i} = {i}\n" + "#" * 1000 + "\n")
        files.append(str(p))
    idx = Index(tmp_path, None, Cache(None))
    idx.TEXT_MEMO_CHARS = 2500  # two of the texts
    calls: list = []

    def fact(text):
        calls.append(text)
        return frozenset(w for w in text.split() if w.startswith("x")) if text else frozenset()

    got = [idx.per_text(f, "words", fact) for f in files]
    assert got == [frozenset({f"x{i}"}) for i in range(6)] and len(calls) == 6
    assert [idx.per_text(f, "words", fact) for f in files] == got and len(calls) == 6  # answered from the stamps
    assert all(type(v[0]) is tuple for v in idx._per_text.values())  # no text kept by the facts
    assert idx._text_memo_chars <= 2500 and sorted(idx._text_memo) == [os.path.realpath(f) for f in files[-2:]]
    os.utime(files[0], ns=(1, 1))  # the file changed (its stamp)
    Path(files[1]).write_text("x99 = 1\n")
    assert idx.per_text(files[0], "words", fact) == frozenset({"x0"}) and len(calls) == 7
    assert idx.per_text(files[1], "words", fact) == frozenset({"x99"}) and len(calls) == 8
    idx.set_overlay(files[2], "x7 = 1\n")  # a buffer: its own text object is the key
    assert idx.per_text(files[2], "words", fact) == frozenset({"x7"}) and len(calls) == 9
    assert idx.per_text(files[2], "words", fact) == frozenset({"x7"}) and len(calls) == 9
    idx.set_overlay(files[2], None)
    assert idx.per_text(files[2], "words", fact) == frozenset({"x2"}) and len(calls) == 10
    assert idx._text_memo_chars <= 2500


def test_per_text_keeps_every_key_of_a_file_while_its_text_stays(tmp_path):
    """Issue 13: keyed per (key, file) and bounded at 50,000 entries, the memo emptied itself in the middle of a
    server's checks on upstream vLLM (~45 `contains` keys of each of 2,234 files): every fact was computed again.
    The memo is per file, each file's keys kept while its text stays (bounded per file and in files)."""
    from attnlens.cache import Cache
    from attnlens.index import Index

    (tmp_path / "pk").mkdir()
    files = []
    for i in range(70):
        p = tmp_path / "pk" / f"m{i}.py"
        p.write_text(f"x{i} = {i}\n")
        files.append(str(p))
    idx = Index(tmp_path, None, Cache(None))
    calls = [0]

    def has(needle):
        def fn(text):
            calls[0] += 1
            return needle in (text or "")
        return fn

    keys = [("contains", f"x{k}") for k in range(800)]  # 56,000 (key, file) pairs
    first = [[idx.per_text(f, k, has(k[1])) for k in keys] for f in files]
    assert calls[0] == 70 * 800
    assert first == [[f"x{k}" in f"x{i} = {i}\n" for k in range(800)] for i in range(70)]
    again = [[idx.per_text(f, k, has(k[1])) for k in keys] for f in files]
    assert again == first and calls[0] == 70 * 800  # none computed again
    Path(files[3]).write_text("x5 = 1\n")
    assert idx.per_text(files[3], ("contains", "x3"), has("x3")) is False and calls[0] == 70 * 800 + 1
    assert idx.per_text(files[4], ("contains", "x4"), has("x4")) is True and calls[0] == 70 * 800 + 1


def test_name_scans_keep_sorted_tuples_of_shared_names():
    """Issue 13: the per-text name sets of the `def NAME` and `self.NAME =` scans were frozensets of each file's own
    strings (11.3 MB with the call keywords on upstream vLLM); they are sorted tuples, each name once and shared
    by every file that has it (the scans only iterate them)."""
    from attnlens.index import _def_names, _self_set_names

    a = _def_names("def run_kernel(x):\n    def helper(): pass\n    return x\ndef run_kernel(y): pass\n")
    b = _def_names("".join(["class K:\n    def run_", "kernel(self): pass\n"]))
    assert a == ("helper", "run_kernel") and b == ("run_kernel",) and a[1] is b[0]
    c = _self_set_names("self.scale = 1\nself.bias: int = 2\nself.scale = 3\nx = self.other\n")
    d = _self_set_names("".join(["self.sca", "le: float = 0.5\n"]))
    assert c == ("bias", "scale") and d == ("scale",) and c[1] is d[0]
    assert _def_names("x = 1\n") == () and _self_set_names(None) == ()


def test_word_literal_patterns_read_only_the_texts_whose_words_can_match(tmp_path, monkeypatch):
    """A pattern every match of which contains a literal made of word characters is first tested on each file's
    words (``Index.file_words``): the same answers as searching every text, and with no text kept, only the files
    whose words contain the literal are read again. ``has_word`` is the whole-word test of an identifier."""
    import re

    from tests.helpers import file_reads, fixture_ws

    ws = fixture_ws(tmp_path, {
        "fx/__init__.py": "# the package\n",
        "fx/a.py": "import aiter\nfrom aiter.ops import mla\n",
        "fx/b.py": "waiter = 1  # a word that contains it\n",
        "fx/c.py": "x = 'ai' + 'ter'\nñaiter_x = 2\n",
        "fx/d.py": "def run_aiter_kernel():\n    return run_aiter(1)\n",
    })
    idx = ws.index
    idx.TEXT_MEMO_CHARS = 0  # (no text kept: every text asked is a read of the file)
    pats = [rb"aiter", rb"\baiter\b", rb"import[ \t]+aiter|from[ \t]+aiter", rb"run_aiter\b", rb"a.ter"]
    files = sorted(idx.ws_files.items())
    want = {p: [n for n, path in files if re.search(p.decode(), (Path(path).read_text()), re.ASCII)] for p in pats}
    assert want[rb"aiter"] == ["fx.a", "fx.b", "fx.c", "fx.d"] and want[rb"\baiter\b"] == ["fx.a"]
    for n, path in files:
        idx.file_words(path)  # (the words first: what follows counts the texts the scans read)
    reads = file_reads(monkeypatch)
    for p in pats:
        reads.clear()
        assert [n for n, path in files if idx.text_matches(path, p)] == want[p], p
        if p == rb"\baiter\b":
            assert len(reads) == 4  # every file has a word that contains "aiter" (ñaiter_x, run_aiter_kernel)
        if p == rb"run_aiter\b":
            assert len(reads) == 1  # only fx/d.py's words contain "run_aiter"
        if p == rb"a.ter":
            assert len(reads) == 4  # (its literal "ter": every file but the package's comment)
    assert [n for n, path in files if idx.has_word(path, "aiter")] == ["fx.a"]
    assert [n for n, path in files if idx.has_word(path, "run_aiter")] == ["fx.d"]
    assert [n for n, path in files if idx.has_word(path, "ai")] == ["fx.c"]  # (in a string: a word of the text)
    assert not any(idx.has_word(path, "aite") for _n, path in files)
    assert idx.file_words(str(ws.root / "fx/c.py")) == "\n2\nai\nter\nx\nñaiter_x\n"
    # texts at hand (kept by source_text, or open buffers) are searched as they are: no words computed for them
    ws2 = fixture_ws(tmp_path / "kept", {"fx/__init__.py": "", "fx/a.py": "import aiter\n", "fx/b.py": "x = 1\n"})
    idx2 = ws2.index
    for _n, path in sorted(idx2.ws_files.items()):
        idx2.source_text(path)
    assert [n for n, path in sorted(idx2.ws_files.items()) if idx2.text_matches(path, rb"\baiter\b")] == ["fx.a"]
    assert not any(("words",) in vals for _tok, vals in idx2._per_text.values())


def test_a_text_past_ascii_is_kept_as_utf8_and_read_back_equal(tmp_path):
    """Issue 13: a file's text with one character past ASCII was kept at 2-4 bytes a character (upstream vLLM: 417
    files, 24 MB of the 43 MB of texts a `sites` run keeps). It is kept as UTF-8; what ``source_text`` returns is
    the same text, the same object while it is among the last ones asked, a pattern scan matches it, its size in
    the memo's bound is the bytes', and an edit of the file is read again."""
    from attnlens.cache import Cache
    from attnlens.index import Index

    (tmp_path / "pk").mkdir()
    uni = tmp_path / "pk" / "uni.py"
    uni.write_text("# ünïcode — 注意\nNAME = 'Attention'\n", encoding="utf-8")
    asc = tmp_path / "pk" / "asc.py"
    asc.write_text("x = 1\n")
    idx = Index(tmp_path, None, Cache(None))
    t1 = idx.source_text(str(uni))
    assert t1 == uni.read_text(encoding="utf-8")
    kept = idx._text_memo[os.path.realpath(uni)][1]
    assert type(kept) is bytes and kept == uni.read_bytes()
    assert idx.source_text(str(uni)) is t1  # (the line tables of the editor features are memoised per text object)
    assert type(idx._text_memo[os.path.realpath(asc)][1] if idx.source_text(str(asc)) else None) is str
    assert idx._text_memo_chars == len(uni.read_bytes()) + len("x = 1\n")
    for i in range(20):  # more texts past ASCII asked since: the decoded text is made again, equal
        p = tmp_path / "pk" / f"u{i}.py"
        p.write_text(f"# é{i}\n", encoding="utf-8")
        assert idx.source_text(str(p)) == f"# é{i}\n"
    t2 = idx.source_text(str(uni))
    assert t2 == t1 and t2 is not t1
    assert idx.text_matches(str(uni), rb"Attention") and not idx.text_matches(str(uni), rb"Backend")
    uni.write_text("# ü\nOTHER = 2\n", encoding="utf-8")
    os.utime(uni, ns=(10**9, 10**9))
    assert idx.source_text(str(uni)) == "# ü\nOTHER = 2\n"


def test_class_facts_follow_the_module_and_scans_read_summaries_only_for_matching_classes(tmp_path):
    """Issue 13: the subclass scans read ``Index.class_facts`` (names of each class, its methods and instance
    attributes) instead of every matching module's summary; the facts follow an edit of the module (its sha),
    and the scan's answers are those of the classes."""
    from tests.helpers import fixture_ws

    ws = fixture_ws(tmp_path, {
        "fx/__init__.py": "",
        "fx/a.py": "class Base:\n    def run(self):\n        ...\n\n"
                   "class A(Base):\n    def __init__(self):\n        self.mode = 1\n    def run(self):\n        return 1\n",
    })
    idx = ws.index
    m = idx.module("fx.a")
    assert idx.class_facts(m) == (("Base", 1, ("run",), ()), ("A", 5, ("__init__", "run"), ("mode",)))
    idx.set_overlay(str(ws.root / "fx/a.py"), "class Base:\n    def run(self):\n        ...\n\nclass B(Base):\n    pass\n")
    m2 = idx.module("fx.a")
    assert m2.sha != m.sha and idx.class_facts(m2) == (("Base", 1, ("run",), ()), ("B", 5, (), ()))


def test_a_sites_batch_keeps_no_chain_per_site(tmp_path):
    """Issue 13: the registry keeps each traced site's chain for an editor's next request; `attnlens sites` traces
    every site once and keeps none (upstream vLLM: 23 MB of its peak), with the same sites."""
    from attnlens.registry import Registry

    ws = Workspace(EXAMPLE, python=sys.executable, cache_dir=tmp_path / "c")
    r = ws.resolver
    mod = ws.index.module("mini_metax.attention.backends.flash_attn")
    batch, editor = Registry(r, keep_chains=False), Registry(r)
    r.clear_memos()
    a = [batch.kernel_call(mod, cs) for cs in mod.summary.calls]
    assert not r.site_memo
    b = [editor.kernel_call(mod, cs) for cs in mod.summary.calls]
    assert r.site_memo and any(x is not None for x in a)
    assert [x.chain.to_json() if x else None for x in a] == [x.chain.to_json() if x else None for x in b]
