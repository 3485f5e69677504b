"""Issue 13: the forked summary worker of `attnlens sites`, the server's summary helper process
and the byte pre-filter for whole-workspace scans change who parses a file, never an answer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnlens import index as I
from attnlens.cache import Cache
from attnlens.index import Index
from tests.helpers import EXAMPLE, have_vllm

METAX = Path("/work/metax")


def _sites(root, cache, *extra, force_worker: bool):
    env = {**os.environ, "ATTNLENS_PREFETCH_MIN_MODULES": "0" if force_worker else "1000000000"}
    env.pop("ATTNLENS_CACHE_DIR", None)
    r = subprocess.run([sys.executable, "-c", "from attnlens.cli import run; run()", "sites", "--root", str(root),
                        "--python", sys.executable, "--cache-dir", str(cache), *extra],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")
@pytest.mark.parametrize("root", [EXAMPLE, METAX], ids=["example", "metax"])
@pytest.mark.parametrize("fmt", [(), ("--json",)], ids=["text", "json"])
def test_sites_with_the_summary_worker_equals_one_process(tmp_path, root, fmt):
    if not root.is_dir():
        pytest.skip(f"{root} is not here")
    one = _sites(root, tmp_path / "one", *fmt, force_worker=False)
    two = _sites(root, tmp_path / "two", *fmt, force_worker=True)
    assert one and two == one
    assert _sites(root, tmp_path / "two", *fmt, force_worker=True) == one  # warm (the whole-output cache)


def _tree(root: Path, n: int) -> None:
    pkg = root / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for i in range(n):
        hook = "import builtins\nbuiltins.__import__ = None\n" if i % 7 == 3 else ""
        (pkg / f"m{i:04d}.py").write_text(f"{hook}def f{i}(x):\n    return g(x) + {i}\n\nclass C{i}:\n    pass\n")


def test_forked_worker_summaries_are_what_the_parent_reads(tmp_path, monkeypatch):
    _tree(tmp_path / "ws", 40)
    idx = Index(tmp_path / "ws", None, Cache(tmp_path / "cache"))
    idx.allow_fork = True
    monkeypatch.setattr(Index, "PREFETCH_MIN_MODULES", 0)
    assert idx.prefetch_summaries()
    pid, _shared = idx._prefetch
    os.waitpid(pid, 0)  # the parent has not moved: the worker parses every module
    idx._prefetch = None

    def no_parse(*a, **k):
        raise AssertionError("the parent parsed a file the worker had summarised")

    monkeypatch.setattr(I, "summarize", no_parse)
    mods = list(idx.workspace_modules())
    assert [m.name for m in mods] == sorted(idx.ws_files)
    assert all(m.summary.functions or m.name == "pkg" for m in mods)


def test_worker_stops_where_the_parent_is(tmp_path, monkeypatch):
    _tree(tmp_path / "ws", 60)
    idx = Index(tmp_path / "ws", None, Cache(tmp_path / "cache"))
    idx.allow_fork = True
    monkeypatch.setattr(Index, "PREFETCH_MIN_MODULES", 0)
    assert idx.prefetch_summaries()
    names = [m.name for m in idx.workspace_modules()]  # publishes its position, then the end
    idx.flush()  # stops and reaps the worker
    assert idx._prefetch is None and names == sorted(idx.ws_files)
    assert not list((tmp_path / "cache" / "py").glob(".*.tmp")), "a torn temporary file was left"


def test_no_worker_without_fork_permission_or_cache(tmp_path, monkeypatch):
    _tree(tmp_path / "ws", 5)
    monkeypatch.setattr(Index, "PREFETCH_MIN_MODULES", 0)
    assert not Index(tmp_path / "ws", None, Cache(tmp_path / "c")).prefetch_summaries()  # allow_fork False
    idx = Index(tmp_path / "ws", None, Cache(None))
    idx.allow_fork = True
    assert not idx.prefetch_summaries()


def test_server_summary_helper_fills_the_cache(tmp_path, monkeypatch):
    _tree(tmp_path / "ws", 30)
    idx = Index(tmp_path / "ws", None, Cache(tmp_path / "cache"))
    monkeypatch.setattr(Index, "PREFETCH_MIN_MODULES", 0)
    assert idx.start_summary_helper()
    idx._helper.wait(timeout=300)  # it ends by itself at the end of its list (it runs niced: be patient)
    idx.stop_prefetch()
    assert idx._helper is None
    monkeypatch.setattr(I, "summarize", lambda *a, **k: (_ for _ in ()).throw(AssertionError("parsed twice")))
    assert len(list(idx.workspace_modules())) == 31


def test_workspace_modules_matching_is_exact_and_lazy(tmp_path):
    _tree(tmp_path / "ws", 30)
    idx = Index(tmp_path / "ws", None, Cache(None))
    got = [m.name for m in idx.workspace_modules_matching(rb"__import__")]
    want = [n for n in sorted(idx.ws_files) if b"__import__" in Path(idx.ws_files[n]).read_bytes()]
    assert got == want and len(want) == 4
    assert len(idx.loaded_modules()) == len(want)  # nothing else summarised
    # an open buffer's text wins over the disk, and a new generation re-reads
    first = idx.ws_files["pkg.m0000"]
    idx.set_overlay(first, "import builtins\nbuiltins.__import__ = None\n")
    assert "pkg.m0000" in [m.name for m in idx.workspace_modules_matching(rb"__import__")]


def test_sites_of_a_folder_summarise_only_what_they_reach(tmp_path):
    """`sites PATH`: the modules under PATH and what their traces lead to are summarised, not the whole
    workspace (upstream vLLM's `sites vllm/v1/attention` summarised all 2,234 modules for 120)."""
    from attnlens.workspace import Workspace

    root = tmp_path / "ws"
    _tree(root, 12)
    sub = root / "pkg" / "sub"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "k.py").write_text("import triton\n\n@triton.jit\ndef kern(x):\n    pass\n\n"
                              "def run(x):\n    kern[(1,)](x)\n")
    ws = Workspace(root, python=sys.executable, use_cache=False)
    got = ws.kernel_sites([str(sub)])
    assert [(os.path.basename(s.path), s.line, s.call, s.chain.final.kind.value) for s in got] == \
        [("k.py", 8, "kern[grid]", "triton_kernel")]
    loaded = {m.name for m in ws.index.loaded_modules() if m.workspace}
    assert loaded <= {"pkg", "pkg.sub", "pkg.sub.k"}, loaded
    assert ws.index.names_under([str(sub)]) == ["pkg.sub", "pkg.sub.k"]
    assert ws.index.names_under([str(sub / "k.py")]) == ["pkg.sub.k"]


def test_sites_json_is_an_array_with_one_site_per_line(tmp_path):
    import json

    out = _sites(EXAMPLE, tmp_path / "c", "--json", force_worker=False)
    lines = out.splitlines()
    assert lines[0] == "[" and lines[-1] == "]" and len(lines) > 3
    sites = [json.loads(x.rstrip(",")) for x in lines[1:-1]]
    assert sites == json.loads(out)
    assert all(s["path"].endswith(".py") and s["leaves"] for s in sites)
