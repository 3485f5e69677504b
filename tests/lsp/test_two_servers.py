"""Two language servers in one process share no state (issue 12): hover sections, probe verdicts, the
workspace check's files, the files being traced again and the kernel call sites in progress belong to one
server (or its analysis), and a worker function answers from the frozen request it was given, never from
whichever server's settings happen to be current."""

from __future__ import annotations

import asyncio
import dataclasses
import sys

import pytest

from attnlens.lsp.analysis import Analysis
from attnlens.lsp.config import Settings
from attnlens.lsp.features import hover as hover_feature
from attnlens.lsp.features.navigation import NAV_HINT
from attnlens.lsp.kernels import file_sites
from attnlens.lsp.server import create_server
from attnlens.workspace import Workspace

KERNELS = '''import triton


@triton.jit
def scale_kernel(x_ptr, n):
    pass


def scale(x, n):
    scale_kernel[(1,)](x, n)
'''


@pytest.fixture
def servers():
    a = create_server(features=("lifecycle", "documents", "hover"))  # no navigation, no runtime actions
    b = create_server()
    yield a, b
    a.worker.stop()
    b.worker.stop()


def _workspace(tmp_path, name: str) -> tuple[Workspace, str]:
    root = tmp_path / name
    (root / f"{name}pkg").mkdir(parents=True)
    (root / f"{name}pkg" / "__init__.py").write_text("")
    path = root / f"{name}pkg" / "ops.py"
    path.write_text(KERNELS)
    return Workspace(root, python=sys.executable, cache_dir=tmp_path / f"cache-{name}"), str(path.resolve())


def test_hover_sections_are_per_server(servers):
    a, b = servers
    assert "navigation" not in a.hover_sections.names() and "evidence" not in a.hover_sections.names()
    assert {"navigation", "evidence", "drift"} <= set(b.hover_sections.names())
    a.hover_sections.register("only-a", lambda ctx: "a", order=5)
    assert "only-a" in a.hover_sections.names() and "only-a" not in b.hover_sections.names()
    assert "chain" in a.hover_sections.names() and "chain" in b.hover_sections.names()  # both start with the built-ins


def test_probe_verdicts_and_session_sets_are_per_server(servers):
    from attnlens.lsp.features.runtime_actions import record_probe

    a, b = servers
    a.caps = dataclasses.replace(a.caps, pull_diagnostics=True)  # the client pulls: nothing is published here
    uri = "file:///w/ops.py"

    async def main():
        record_probe(a, {"uri": uri, "line": 3, "family": "lse_merge", "target": "m:f"},
                     {"verdict": "pass", "cases": [{"passed": True}], "family": "lse_merge", "target": "m:f"})

    asyncio.run(main())
    assert [d.range.start.line for d in a.probe_diagnostics[uri]] == [3]
    assert b.probe_diagnostics == {}
    a.workspace_checked_uris.add(uri)
    a.retracing.add("/w/ops.py")
    assert b.workspace_checked_uris == set() and b.retracing == set()


def test_worker_state_and_answers_are_per_server(servers, tmp_path):
    """Each server's analysis keeps its own kernel call sites in progress; a hover computed from server B's
    frozen request shows B's settings and sections (the copy link, the navigation hint), one from A's not."""
    sa, sb = servers
    ws_a, path_a = _workspace(tmp_path, "alpha")
    ws_b, path_b = _workspace(tmp_path, "beta")
    an_a, an_b = Analysis(ws_a), Analysis(ws_b)
    assert an_a.q is ws_a.query and an_b.q is ws_b.query and an_a.q is not an_b.q
    assert [s.call for s in file_sites(an_a, path_a)] == ["scale_kernel[grid]"]
    assert list(an_a.site_progress) == [path_a] and an_b.site_progress == {} and an_b.last_sites == {}
    sb.settings = Settings().with_(hover_copy_link=True)
    line = KERNELS.split("\n").index("    scale_kernel[(1,)](x, n)")
    pos = hover_feature.T.Position(line, 6)
    req_a = sa.request(f"file://{path_a}", pos)
    req_b = sb.request(f"file://{path_b}", pos)
    sb.settings = Settings()  # changed after the request was taken: the worker still sees the request's
    got_a = hover_feature.compute(an_a, req_a, None)
    got_b = hover_feature.compute(an_b, req_b, None)
    assert got_a is not None and got_b is not None
    assert "Runs: `scale_kernel`" in got_a.text and "Runs: `scale_kernel`" in got_b.text
    assert "Copy as Markdown" not in got_a.text and "Copy as Markdown" in got_b.text
    assert NAV_HINT not in got_a.text and NAV_HINT in got_b.text
    assert (got_b.span.line, got_b.span.character) == (line, 4)  # plain data in LSP units; the edge makes the Hover
    h = hover_feature.to_hover(got_b, req_b.markdown)
    assert h.range.start.character == 4 and h.contents.value == got_b.text
    ws_a.close()
    ws_b.close()
