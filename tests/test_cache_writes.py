"""The cache's write-behind: readers see a stored pickle at once, flush puts it on disk,
a forked worker has its own writer and flushes, and the disk files are whole pickles."""

from __future__ import annotations

import os
import pickle
import sys

import pytest

from attnlens.cache import FORMAT_VERSION, Cache


def test_stored_pickles_are_readable_at_once_and_on_disk_after_flush(tmp_path):
    cache = Cache(tmp_path / "c")
    values = {f"k{i}": {"i": i, "blob": "x" * 1000} for i in range(200)}
    for k, v in values.items():
        cache.store_pickle("py", k, v)
    for k, v in values.items():
        assert cache.load_pickle("py", k) == v  # pending or written: the same value
    cache.flush()
    files = sorted(p.name for p in (tmp_path / "c" / "py").iterdir())
    assert files == sorted(f"{k}.pickle" for k in values)  # no temporary files left behind
    for k, v in values.items():
        with open(tmp_path / "c" / "py" / f"{k}.pickle", "rb") as f:
            assert pickle.load(f) == (FORMAT_VERSION, v)
    # a fresh reader (another process would be the same) sees what is on disk
    assert Cache(tmp_path / "c").load_pickle("py", "k7") == values["k7"]


def test_overwrite_keeps_the_newest_value(tmp_path):
    cache = Cache(tmp_path / "c")
    for i in range(50):
        cache.store_pickle("meta", "same", i)
    assert cache.load_pickle("meta", "same") == 49
    cache.flush()
    assert cache.load_pickle("meta", "same") == 49


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_forked_worker_flushes_before_leaving(tmp_path):
    cache = Cache(tmp_path / "c")
    cache.store_pickle("py", "parent", 1)
    pid = os.fork()
    if pid == 0:  # child: store, then leave without any cleanup (as the prefetch worker does)
        code = 0
        try:
            if cache.load_pickle("py", "parent") != 1:
                code = 3
            cache.store_pickle("py", "child", 2)  # the child's own writer thread
            cache.flush()  # os._exit skips exit handlers: forked workers flush first
        except BaseException:  # noqa: BLE001
            code = 4
        sys.stdout.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert (tmp_path / "c" / "py" / "child.pickle").exists()  # on disk although the child left with os._exit
    assert cache.load_pickle("py", "child") == 2
    cache.flush()
    assert cache.load_pickle("py", "parent") == 1


def test_unwritable_folder_does_not_break_storing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = Cache(blocker / "c")  # cannot be created
    cache.store_pickle("py", "k", 1)
    cache.flush()
    assert Cache(blocker / "c").load_pickle("py", "k") is None


def test_summaries_pickle_as_field_tuples_and_come_back_equal():
    """A module summary is pickled as each class and the tuple of its fields (no slot-name dicts): the
    copy equals the original, every object of every summary class is rebuilt, and it is smaller than the
    slot-dict form."""
    from pathlib import Path

    from attnlens import pyindex

    path = Path(__file__).resolve().parents[1] / "examples" / "mini-metax" / "mini_metax"
    texts = [p for p in sorted(path.rglob("*.py")) if p.stat().st_size > 2000]
    assert texts
    for p in texts:
        s = pyindex.summarize(p.read_text(), str(p), "sha")
        data = pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)
        back = pickle.loads(data)
        assert back == s
        for name in ("calls", "functions", "classes", "bindings"):
            assert getattr(back, name) == getattr(s, name)
        assert type(s).__reduce__(s)[0] is pyindex.ModuleSummary

    # the slot-dict form (what dataclass(slots=True) pickles by default) is larger
    s = pyindex.summarize(max(texts, key=lambda p: p.stat().st_size).read_text(), "x.py", "sha")
    kinds = [pyindex.Binding, pyindex.Param, pyindex.Decorator, pyindex.CallSite, pyindex.FunctionInfo,
             pyindex.ClassInfo, pyindex.Ref, pyindex.AttrPatch, pyindex.ModuleSummary]
    saved = {k: k.__dict__["__reduce__"] for k in kinds}
    try:
        for k in kinds:
            del k.__reduce__
        slot_form = pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)
        assert pickle.loads(slot_form) == s
    finally:
        for k, f in saved.items():
            k.__reduce__ = f
    assert len(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)) < 0.8 * len(slot_form)


def test_a_summary_holds_one_object_per_repeated_value():
    """Equal argument texts, guard tuples, dotted texts and line numbers above the small-int cache are one
    object each within a summary, and every empty frozenset is the shared one (upstream vLLM's summaries:
    266 -> 213 MB); the cache's pickles keep all but the ints shared."""
    from attnlens import pyindex

    pad = "\n" * 300  # lines above 256: ints the interpreter does not share by itself
    text = pad + (
        "import torch\n"
        "x = torch.empty(1)\n"
        "if torch.cuda.is_available():\n"
        "    torch.ops.vendor.op(x, 'a', None, k='v')\n"
        "    torch.ops.vendor.op(x, 'a', None, k='v')\n"
        "    y = torch.ops.vendor.op(x, 'a', None, k='v')\n"
        "    def g():\n"
        "        pass\n"
        "    def h():\n"
        "        pass\n"
    )
    for s in (pyindex.summarize(text, "m.py", "sha"),):
        back = pickle.loads(pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL))
        for summ in (s, back):
            a, b, c = [cs for cs in summ.calls if cs.func == "torch.ops.vendor.op"]
            assert (a.str_args, a.arg_texts, a.keywords, a.kw_texts) == ((None, "a", None), ("x", "'a'", "None"), ("k",), (("k", "'v'"),))
            for x in (b, c):
                assert x.str_args is a.str_args and x.arg_texts is a.arg_texts and x.kw_texts is a.kw_texts
                assert x.guards is a.guards and x.func is a.func
            assert a.guards and a.line > 256 and a.line == a.fline
            if summ is s:  # (pickles do not keep ints shared)
                assert a.line is a.fline and b.line is not None
            g, h = summ.functions["g"], summ.functions["h"]
            assert g.names_read == () and g.names_read is h.names_read


def _summary_fields_digest() -> str:
    import dataclasses
    import hashlib

    from attnlens import pyindex

    classes = sorted((n, c) for n, c in vars(pyindex).items()
                     if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == pyindex.__name__)
    text = ";".join(f"{n}:{','.join(f.name for f in dataclasses.fields(c))}" for n, c in classes)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def test_the_summary_format_version_changes_with_the_summary_classes():
    """A summary pickled by an older AttnLens loads field by field into the new classes (a field added since takes
    its default): unless FORMAT_VERSION changes with the fields, a cache folder kept across an upgrade serves the
    old summaries (`Param.default` came in at version 29: read from version 28's files, no call bound a default;
    `FunctionInfo.asserts` at 30; 31 kept the fields and changed what they hold: `super().NAME` callees, the items of
    `enumerate` / `islice` / slice loops, `self.a, self.b = f(...)` attributes); 32 the same: `FunctionInfo.attr_sets`
    also holds a function's `TABLE[key] = name` stores); 33 `ModuleSummary.global_ann` (a module global's declared
    type) and callees through calls (`get_group().send`).
    When this fails, bump FORMAT_VERSION and record the new digest here."""
    assert {33: "3e15690609c56038"}.get(FORMAT_VERSION) == _summary_fields_digest(), (FORMAT_VERSION, _summary_fields_digest())
