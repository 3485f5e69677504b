"""Engine API, caching with dependency tracking, suppression."""

from __future__ import annotations

import shutil

from attnlens.rules.engine import Engine, Finding, check_module, check_paths, suppressed

from .conftest import FIXTURES, make_workspace


def test_check_module_and_paths_api(cache_root):
    ws = make_workspace(FIXTURES / "platform", cache_root)
    path = str(FIXTURES / "platform" / "fxplat" / "shapes.py")
    one = check_module(ws, path)
    assert {f.rule for f in one} == {"AL114"}
    every = check_paths(ws)
    assert {f.rule for f in every} == {"AL105", "AL114", "AL115"}  # AL115: the undeclared vendor library
    assert check_paths(ws, [str(FIXTURES / "platform" / "fxplat")]) == every
    assert check_module(ws, "/nonexistent/file.py") == []


def test_finding_json_is_one_based():
    f = Finding("AL114", "warning", "/r/a.py", 3, 0, 3, 5, "m", {})
    j = f.to_json("/r")
    assert (j["path"], j["line"], j["col"], j["end_col"]) == ("a.py", 3, 1, 6)


def test_suppression_comments():
    lines = ["x = q.view(n, -1)  # attnlens: ignore[AL114, AL101]", "y = 1  # attnlens: ignore", "z = 2"]
    assert suppressed(lines, Finding("AL114", "warning", "p", 1, 0, 1, 5, "m"))
    assert not suppressed(lines, Finding("AL105", "warning", "p", 1, 0, 1, 5, "m"))
    assert suppressed(lines, Finding("AL105", "warning", "p", 2, 0, 2, 5, "m"))
    assert not suppressed(lines, Finding("AL105", "warning", "p", 3, 0, 3, 5, "m"))
    # a multi-line finding can be suppressed on its last line
    assert suppressed(lines, Finding("AL105", "warning", "p", 1, 0, 2, 1, "m"))


def test_cache_hits_and_dependency_invalidation(tmp_path):
    root = tmp_path / "calls"
    shutil.copytree(FIXTURES / "calls", root)
    cache = tmp_path / "cache"

    def run():
        ws = make_workspace(root, cache)
        eng = Engine(ws)
        fs = eng.check_paths(None)
        ws.close()
        return eng, fs

    e1, f1 = run()
    assert e1.stats["checked"] > 0 and e1.stats["cached"] == 0
    assert any(f.rule == "AL102" for f in f1)
    e2, f2 = run()
    assert e2.stats["checked"] == 0 and e2.stats["cached"] == e1.stats["checked"]
    assert [f.to_json() for f in f2] == [f.to_json() for f in f1]
    # calls.py's AL102 depends on ops.py: make _impl read the keyword
    ops = root / "fxcalls" / "ops.py"
    ops.write_text(ops.read_text().replace("    return q + k\n", "    return q + k * kwargs.get(\"softcap\", 1.0)\n", 1))
    e3, f3 = run()
    assert not any(f.rule == "AL102" for f in f3)
    assert 0 < e3.stats["checked"] < e1.stats["checked"], e3.stats  # only the dependents were re-checked


def test_overlay_is_checked_without_cache(tmp_path):
    root = tmp_path / "platform"
    shutil.copytree(FIXTURES / "platform", root)
    ws = make_workspace(root, tmp_path / "cache")
    path = str(root / "fxplat" / "shapes.py")
    assert check_module(ws, path)
    ws.index.set_overlay(path, "def f(query, num_reqs):\n    return query.reshape(-1, 8)\n")
    assert check_module(ws, path) == []


def test_prepared_buffer_checks_the_same(tmp_path):
    """prepare_module (run by the server while the debounce runs) changes no finding: each edited
    version gives what a fresh workspace over the same text gives, and the check asked for afterwards
    returns the prepared findings without running the rules again."""
    from attnlens.rules import engine as E

    root = tmp_path / "platform"
    shutil.copytree(FIXTURES / "platform", root)
    path = str(root / "fxplat" / "shapes.py")
    original = (root / "fxplat" / "shapes.py").read_text()
    ws = make_workspace(root, tmp_path / "cache")
    seen: list = []
    versions = [original, original + "\n\ndef g(q, n):\n    return q.view(n, -1, 8)\n",
                "def f(query, num_reqs):\n    return query.reshape(-1, 8)\n", "def broken(:\n"]
    for k, text in enumerate(versions):
        ws.index.set_overlay(path, text)
        E.prepare_module(ws, path)
        sha = ws.index.module_for_path(path).summary.sha
        checked = E.engine_for(ws).stats["checked"]
        got = [(f.rule, f.line, f.message) for f in check_module(ws, path)]
        assert E.engine_for(ws).stats["checked"] == checked  # the prepared findings: no second run
        ws.cache.flush()
        assert ws.cache.load_pickle("rulesfacts", E._facts_key(sha)) is None  # an unsaved buffer: never on disk
        fresh_root = tmp_path / f"fresh{k}"
        shutil.copytree(root, fresh_root)
        (fresh_root / "fxplat" / "shapes.py").write_text(text)
        fresh = make_workspace(fresh_root, None)
        want = [(f.rule, f.line, f.message) for f in check_module(fresh, str(fresh_root / "fxplat" / "shapes.py"))]
        assert got == want, k
        ws.index.set_overlay(path, text + "\n")  # a new generation: the buffer is checked again
        assert [(f.rule, f.line, f.message) for f in check_module(ws, path)] == want
        assert E.engine_for(ws).stats["checked"] == 1
        seen.append(got)
    assert any(r == "AL114" for r, _l, _m in seen[1]) and seen[3] == []  # real findings compared; broken: none
    E.prepare_module(ws, str(tmp_path / "not-in-workspace.py"))  # outside: nothing to prepare, no error


def test_broken_and_unusual_inputs(tmp_path):
    """A syntax error, NUL bytes, a workspace without a platform entry point: no crash."""
    pkg = tmp_path / "plain" / "plainpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("def f(:\n    return query.view(num_reqs, -1)\n")
    (pkg / "nul.py").write_bytes(b"x = 1\x00\n")
    (pkg / "ok.py").write_text(
        "from vllm.platforms import current_platform\n"
        "def g(query, num_reqs):\n"
        "    if current_platform.is_device_capability_family(90):\n"
        "        return query.view(num_reqs, -1, 8)\n"
        "    return super().missing()\n"
    )
    ws = make_workspace(tmp_path / "plain", tmp_path / "cache")
    eng = Engine(ws)
    found = eng.check_paths(None)
    assert not eng.errors, eng.errors
    # no platform profile: capability checks are not judged; the reshape still is
    assert {f.rule for f in found} == {"AL114"}


def test_modules_that_need_the_cpp_index_early_are_checked_again(tmp_path):
    """In the CLI a worker builds the C++ index; a module whose checks need it first is deferred
    (CppNotReady), nothing of the attempt is kept, and the final findings equal a normal run."""
    from attnlens.rules.engine import Engine

    for name in ("a", "b"):
        shutil.copytree(FIXTURES / "calls", tmp_path / name)
    want = Engine(make_workspace(tmp_path / "a", tmp_path / "cache-a")).check_paths()
    assert any(f.rule == "AL113" for f in want)  # a torch-op schema finding needs the C++ index

    ws = make_workspace(tmp_path / "b", tmp_path / "cache-b")
    eng = Engine(ws)
    asked = []
    ws.resolver.ops.cpp_pending = lambda: asked.append(1) or True  # the worker is still building

    def worker_done():
        ws.resolver.ops.cpp_pending = None

    eng.join_prefetch = worker_done
    got = eng.check_paths()
    assert asked and eng.stats.get("deferred", 0) >= 1
    import json

    def norm(findings, root):
        return json.dumps([f.to_json(root) for f in findings], sort_keys=True).replace(str(root), "ROOT")

    assert norm(got, tmp_path / "b") == norm(want, tmp_path / "a")


def test_second_checker_gives_the_same_findings(tmp_path, monkeypatch):
    """The forked second checker of a cold CLI check (``Engine._start_checker``) splits the modules
    with the parent; the findings, their order and the warnings equal a single-process check, and the
    helper really checked some modules (its findings come back through a pipe)."""
    import os

    import pytest

    if not hasattr(os, "fork"):
        pytest.skip("no fork")
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "examples" / "mini-metax"
    want_ws = make_workspace(root, tmp_path / "one")
    want = [(f.rule, f.path, f.line, f.message) for f in Engine(want_ws).check_paths()]
    monkeypatch.setattr(Engine, "PARALLEL_MIN_MODULES", 2)
    ws = make_workspace(root, tmp_path / "two")
    ws.allow_fork = ws.index.allow_fork = True
    e = Engine(ws)
    got = [(f.rule, f.path, f.line, f.message) for f in e.check_paths()]
    assert got == want and want
    assert e.stats.get("helper", 0) > 0 and e.stats["checked"] + e.stats["helper"] >= len(e.files_for(None))


def test_a_whole_workspace_check_parses_each_module_once(tmp_path, monkeypatch):
    """A cold check of every module collects a module's rule facts when its summary is built
    (``Index.after_parse``), from the same parse: the shared state summarises the modules long before
    their checks run, and the facts used to parse each of them again. Findings are unchanged."""
    from collections import Counter
    from pathlib import Path

    from attnlens import pyindex

    root = Path(__file__).resolve().parents[2] / "examples" / "mini-metax"
    want = [f.to_json(root) for f in Engine(make_workspace(root, tmp_path / "one"), use_cache=False).check_paths()]
    parsed = Counter()
    real = pyindex.parse_tolerant

    def counting(text):
        parsed[text] += 1
        return real(text)

    monkeypatch.setattr(pyindex, "parse_tolerant", counting)
    pyindex.parse_source.cache_clear()
    ws = make_workspace(root, tmp_path / "two")
    e = Engine(ws)
    got = [f.to_json(root) for f in e.check_paths()]
    pyindex.parse_source.cache_clear()
    assert got == want and want
    texts = {Path(p).read_text(encoding="utf-8") for p in ws.index.ws_files.values()}
    assert {t for t in texts if parsed[t]} and not {t for t in texts if parsed[t] > 1}
    assert ws.index.after_parse is None  # only for the duration of the check


def test_a_check_stopped_between_checks_goes_on_where_it_stopped(tmp_path):
    """An editor's check of a buffer stops between two checks when a request waits (``should_stop``) and the
    next call for the same text resumes with the next check: after as many calls as there are checks, the
    findings and dependencies equal an uninterrupted check's."""
    from attnlens.rules import engine as E
    from tests.helpers import EXAMPLE, example_ws

    path = str(EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py")
    whole_ws = example_ws(tmp_path / "a")
    whole = E.Engine(whole_ws, use_cache=False)
    want = whole.check_module(path)
    assert want  # the example's flash_attn backend has findings
    ws = example_ws(tmp_path / "b")
    eng = E.Engine(ws, use_cache=False)
    calls, got = 0, None
    while got is None:
        calls += 1
        try:
            got = eng.check_module(path, should_stop=lambda: True)
        except E.Interrupted:
            pass
        assert calls <= 10_000
    # one stop between each two checks, and one at each yield of a check that ran past Engine.STOP_EVERY_S
    inside = eng.stats.get("interrupted_inside", 0)
    assert calls == len(E.CHECKS) + inside and eng.stats["interrupted"] == len(E.CHECKS) - 1 + inside
    assert [f.to_json(ws.root) for f in got] == [f.to_json(whole_ws.root) for f in want]
    assert eng.check_module(path, should_stop=lambda: False) == got
