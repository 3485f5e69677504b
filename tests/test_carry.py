"""Results reused across index generations: the registry (Workspace.backends without call sites) after
an edit the registry cannot see, recomputed after one it can; Index.outside_memo until installed code
changes."""

from __future__ import annotations

import shutil
import sys

import pytest

from attnlens.workspace import Workspace
from tests.helpers import EXAMPLE, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="needs vllm installed in the test interpreter")

FA = "mini_metax/attention/backends/flash_attn.py"
PLATFORM = "mini_metax/platform.py"


@pytest.fixture()
def ws(tmp_path):
    root = tmp_path / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    w = Workspace(root, python=sys.executable, cache_dir=tmp_path / "cache")
    yield w
    w.close()


def _names(entries):
    return sorted((e.name, e.kind, e.cls, e.impl.cls if e.impl else None) for e in entries)


def test_registry_is_reused_after_a_body_edit_and_recomputed_after_a_registration(ws):
    path = str(ws.root / FA)
    first = ws.backends(with_call_sites=False)
    text = (ws.root / FA).read_text()
    # a value typed in a method body (same lines): the registry cannot see it
    edited = text.replace("self.kv_sharing_target_layer_name is None", "self.kv_sharing_target_layer_name is None  ", 1)
    assert edited != text
    ws.index.set_overlay(path, edited)
    assert ws.backends(with_call_sites=False) is first
    # a registration removed from the platform module: recomputed, and the backend is gone
    ptext = (ws.root / PLATFORM).read_text()
    line = next(ln for ln in ptext.splitlines() if "register_backend(backend=AttentionBackendEnum.TRITON_MLA" in ln)
    ws.index.set_overlay(str(ws.root / PLATFORM), ptext.replace(line, "    pass"))
    second = ws.backends(with_call_sites=False)
    assert second is not first
    assert ("TRITON_MLA" in [e.name for e in first]) and _names(second) != _names(first)
    # back to the disk's text: the same entries as a fresh workspace's
    ws.index.set_overlay(str(ws.root / PLATFORM), None)
    ws.index.set_overlay(path, None)
    fresh = Workspace(ws.root, python=sys.executable, cache_dir=ws.cache.folder.parent / "fresh")
    try:
        assert _names(ws.backends(with_call_sites=False)) == _names(fresh.backends(with_call_sites=False))
    finally:
        fresh.close()


def test_outside_memo_lasts_until_something_outside_the_workspace_changes(ws):
    idx = ws.index
    calls = []
    assert idx.outside_memo("k", lambda: calls.append(1) or len(calls)) == 1
    idx.set_overlay(str(ws.root / FA), (ws.root / FA).read_text() + "\n# edited\n")  # a workspace module
    assert idx.outside_memo("k", lambda: calls.append(1) or len(calls)) == 1
    idx.invalidate(str(ws.root / "csrc" / "cache_kernels.cu"))  # a C++ file: outside the Python modules
    assert idx.outside_memo("k", lambda: calls.append(1) or len(calls)) == 2


def _fresh(ws, name):
    """A workspace over the same folder with the same open buffers, and nothing carried."""
    fresh = Workspace(ws.root, python=sys.executable, cache_dir=ws.cache.folder.parent / name)
    for real, text in ws.index._overlays.items():
        fresh.index.set_overlay(real, text)
    return fresh


def test_text_scans_are_carried_across_edits_and_follow_them(ws):
    """``Index.matching_names`` tests only the files changed since its last answer, and answers what a fresh
    index answers after each edit: a module that starts or stops matching, a new buffer, a file left alone."""
    idx = ws.index
    pattern = rb"\bregister_backend\b"
    first = idx.matching_names(pattern)
    assert PLATFORM.removesuffix(".py").replace("/", ".") in first
    fa, platform = str(ws.root / FA), str(ws.root / PLATFORM)
    edits = [
        (fa, (ws.root / FA).read_text() + "\n# register_backend\n"),  # starts matching
        (platform, (ws.root / PLATFORM).read_text().replace("register_backend", "register_other")),  # stops
        (str(ws.root / "mini_metax" / "new_mod.py"), "register_backend = 1\n"),  # a buffer not on disk
        (fa, None),  # back to the disk's text
    ]
    for i, (path, text) in enumerate(edits):
        tested = []
        orig = idx.text_matches
        idx.text_matches = lambda p, pat, orig=orig: tested.append(p) or orig(p, pat)
        idx.set_overlay(path, text)
        got = idx.matching_names(pattern)
        del idx.text_matches
        assert len(tested) == 1, tested  # only the changed file was read again
        fresh = _fresh(ws, f"fresh{i}")
        try:
            assert got == fresh.index.matching_names(pattern)
        finally:
            fresh.close()


def test_patch_table_is_reused_after_an_edit_it_cannot_see_and_recomputed_after_one_it_can(ws):
    r = ws.resolver
    first = r.patches()
    key = ("vllm.v1.attention.ops.triton_reshape_and_cache_flash", "triton_reshape_and_cache_flash")
    assert key in first
    # a body edit of a module that holds no patch and that collecting the table did not read: the same table
    fa = str(ws.root / FA)
    ws.index.set_overlay(fa, (ws.root / FA).read_text() + "\nX_EDIT = 1\n")
    assert r.patches() is first
    # a patch typed into that module: recomputed, with the new entry
    ws.index.set_overlay(fa, (ws.root / FA).read_text()
                         + "\nimport vllm.v1.attention.backends.utils as _u\n_u.get_kv_cache_layout = lambda: 'HND'\n")
    second = r.patches()
    assert second is not first
    assert ("vllm.v1.attention.backends.utils", "get_kv_cache_layout") in second
    # the patch module's decorator removed: recomputed, that entry gone
    pa = ws.root / "mini_metax/patch/attention.py"
    ws.index.set_overlay(str(pa), pa.read_text().replace('@patch("vllm.v1.attention.ops.triton_reshape_and_cache_flash"',
                                                         '@_not_a_patch("vllm.v1.attention.ops.triton_reshape_and_cache_flash"'))
    third = r.patches()
    assert key not in third and key in second
    fresh = _fresh(ws, "fresh-patches")
    try:
        assert sorted(third) == sorted(fresh.resolver.patches())
    finally:
        fresh.close()


def test_an_edit_of_one_patch_module_collects_only_that_modules_patches(ws, monkeypatch):
    """The patch table is collected again after an edit of a module that holds a patch, but the other modules'
    replacements are carried (``patches._module_items`` per module); the table equals a fresh workspace's."""
    from attnlens import patches as P

    r = ws.resolver
    first = r.patches()
    assert first
    seen = []
    real = P._module_items
    monkeypatch.setattr(P, "_module_items", lambda res, m: seen.append(m.name) or real(res, m))
    fa = str(ws.root / FA)
    ws.index.set_overlay(fa, (ws.root / FA).read_text()
                         + "\nimport vllm.v1.attention.backends.utils as _u\n_u.get_kv_cache_layout = lambda: 'HND'\n")
    second = r.patches()
    assert second is not first and ("vllm.v1.attention.backends.utils", "get_kv_cache_layout") in second
    edited = ws.index.module_for_path(fa).name
    assert seen == [edited]  # only the edited module's replacements collected again
    assert {k: v for k, v in second.items() if k[1] != "get_kv_cache_layout"}.keys() == first.keys()
    fresh = _fresh(ws, "fresh-patches-2")
    try:
        fresh.index.set_overlay(str(fresh.root / FA), ws.index.source_text(fa))
        want = fresh.resolver.patches()
        assert sorted(second) == sorted(want)
        assert [(v[1], v[2], v[3]) for _k, v in sorted(second.items()) if len(v) == 4] == \
            [(v[1], v[2], v[3]) for _k, v in sorted(want.items()) if len(v) == 4]
    finally:
        fresh.close()


def test_a_carried_value_stands_until_something_it_read_changes(ws):
    """``Index.carried``: reused across an edit of a module it did not read (and its reads replayed into a recorder
    observing now), computed again after an edit of a module it read or handed it (``reads``), and after a
    workspace module appears."""
    idx = ws.index
    calls = []

    def fn():
        calls.append(1)
        return idx.module("mini_metax.platform").summary.sha

    first = idx.carried(("t",), fn)
    idx.set_overlay(str(ws.root / FA), (ws.root / FA).read_text() + "\n# typed\n")
    assert idx.carried(("t",), fn) == first and len(calls) == 1
    with idx.observe() as obs:
        idx.carried(("t",), fn)
    assert "mini_metax.platform" in obs.names and len(calls) == 1
    idx.set_overlay(str(ws.root / PLATFORM), (ws.root / PLATFORM).read_text() + "\n# typed\n")
    assert idx.carried(("t",), fn) != first and len(calls) == 2
    idx.set_overlay(str(ws.root / "mini_metax" / "brand_new.py"), "x = 1\n")
    idx.carried(("t",), fn)
    assert len(calls) == 3
    # handed a module (not looked up): ``reads`` names it
    handed = []
    fa_mod = idx.module("mini_metax.attention.backends.flash_attn")
    idx.carried(("h",), lambda: handed.append(1) or len(fa_mod.summary.functions), reads=(fa_mod.name,))
    idx.set_overlay(str(ws.root / FA), (ws.root / FA).read_text() + "\ndef more():\n    pass\n")
    idx.carried(("h",), lambda: handed.append(1) or 0, reads=(fa_mod.name,))
    assert len(handed) == 2


def test_installed_text_scan_is_kept_in_the_cache_and_follows_file_changes(tmp_path, monkeypatch):
    """Index.installed_files_containing: the matching paths are stored with every file's stamp; a fresh
    index (another process) reads only the matching files while no stamp changed, and scans again when one
    did."""
    import os

    import attnlens.index as I
    from attnlens.cache import Cache

    pkg = tmp_path / "site" / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "tests").mkdir()
    (pkg / "a.py").write_bytes(b"import torch\nlib = torch.library.Library('x', 'DEF')\n")
    (pkg / "b.py").write_bytes(b"x = 1\n")
    (pkg / "sub" / "c.py").write_bytes(b"@custom_op('x::y')\ndef f(): pass\n")
    (pkg / "tests" / "t.py").write_bytes(b"custom_op\n")
    needles = (b"custom_op", b"torch.library")

    def index():
        return I.Index(tmp_path / "ws", None, Cache(tmp_path / "cache"))

    first = index().installed_files_containing(str(pkg), ("tests",), needles)
    assert sorted(os.path.relpath(p, pkg) for p, _ in first) == ["a.py", os.path.join("sub", "c.py")]
    from attnlens.cache import flush_all

    flush_all()

    def no_full_scan(*a, **k):
        raise AssertionError("scanned every file again")

    monkeypatch.setattr(I, "iter_py_bytes", no_full_scan)
    assert index().installed_files_containing(str(pkg), ("tests",), needles) == first
    monkeypatch.undo()
    (pkg / "b.py").write_bytes(b"from torch.library import custom_op\n")  # a new match (size changes)
    again = index().installed_files_containing(str(pkg), ("tests",), needles)
    assert sorted(os.path.relpath(p, pkg) for p, _ in again) == ["a.py", "b.py", os.path.join("sub", "c.py")]


def test_a_lookup_after_an_edit_reads_only_the_modules_that_spell_the_key(ws):
    """After an edit of a module that may hold a patch, and before that buffer is summarised, one key's entry comes
    from the replacements kept for the other modules plus those of the edited module only when its text names the
    key's last attribute (``patches.LazyPatches``): a lookup of another key does not summarise the edited buffer,
    and every entry equals the table of a fresh workspace with the same buffers."""
    from attnlens.patches import entry_facts

    r, idx = ws.resolver, ws.index
    first = r.patches()
    kept_key = ("vllm.v1.attention.ops.triton_reshape_and_cache_flash", "triton_reshape_and_cache_flash")
    assert kept_key in first
    fa = str(ws.root / FA)
    text = (ws.root / FA).read_text() + ("\nimport vllm.v1.attention.backends.utils as _u\n"
                                         "_u.get_kv_cache_layout = lambda: 'HND'\n")
    assert "triton_reshape_and_cache_flash" not in text
    idx.set_overlay(fa, text)
    assert not idx.summary_ready(fa)
    new_key = ("vllm.v1.attention.backends.utils", "get_kv_cache_layout")
    fresh = _fresh(ws, "fresh-lazy-patches")
    try:
        want = fresh.resolver.patches()
        assert new_key in want and kept_key in want
        got = r.patch_entry(kept_key)
        assert not idx.summary_ready(fa)  # the edited buffer does not name it: not summarised
        assert r._lazy_patches is not None and r._patch_gen != idx.generation  # (the whole table was not built)
        assert entry_facts(got) == entry_facts(want[kept_key])
        assert r.patch_entry(("vllm.v1.attention.backends.utils", "no_such_attr")) is None
        assert not idx.summary_ready(fa)
        got_new = r.patch_entry(new_key)
        assert idx.summary_ready(fa)  # it names this one: its replacements now
        assert entry_facts(got_new) == entry_facts(want[new_key])
        for key in want:
            assert entry_facts(r.patch_entry(key)) == entry_facts(want[key]), key
        # a patch taken out again, the edited module summarised: the whole table, equal to a fresh one
        idx.set_overlay(fa, text.replace("_u.get_kv_cache_layout = lambda: 'HND'\n", ""))
        assert r.patch_entry(new_key) is None
        with idx.observe():  # a recorder observing: the whole table (its reads recorded)
            assert entry_facts(r.patch_entry(kept_key)) == entry_facts(want[kept_key])
        assert r._patch_gen == idx.generation
    finally:
        fresh.close()


def test_may_replace_holds_for_every_replacement_a_summary_records():
    """``patches.may_replace`` is a superset: every attribute a summary records as replaced (assignment targets,
    ``setattr``), and every decorated def or class with its decorator's string arguments, is found in the text;
    names that only appear read or called are not."""
    from pathlib import Path

    from attnlens.patches import may_replace
    from attnlens.pyindex import summarize
    from tests.test_incremental_summary import EXAMPLES, _installed_sample

    checked = 0
    for p in EXAMPLES + _installed_sample(400) + [Path(__file__).resolve().parents[1] / "server/attnlens/pyindex.py"]:
        text = p.read_text(encoding="utf-8", errors="replace")
        s = summarize(text, str(p), "sha")
        for ap in s.attr_patches:
            last = ap.target.rpartition(".")[2]
            assert may_replace(text, last), (p, ap.target, ap.line)
            checked += 1
        for q, d in [(f.name, d) for f in s.functions.values() for d in f.decorators] + \
                    [(c.name, d) for c in s.classes.values() for d in c.decorators]:
            if d.is_call and d.str_args:
                names = [q] + [a.rpartition(".")[2] for a in d.str_args[1:2] if a]
                names += [v.strip("'\"").rpartition(".")[2] for k, v in d.kw_texts if k == "target_attribute_name"]
                for name in names:
                    assert may_replace(text, name), (p, q, d.func)
                    checked += 1
    assert checked > 100
    assert not may_replace("y = mod.forward\nmod.forward(x)\nforwarded = 1\n", "forward")
    assert may_replace("mod.Cls.forward = f\n", "forward") and may_replace("setattr(m, 'forward', f)\n", "forward")
