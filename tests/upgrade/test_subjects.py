"""Subjects: worktree, staged index, revision, installed; the repository is never written."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from attnlens.target import TargetInfo
from attnlens.upgrade.subjects import (
    SubjectError,
    add_subject_argument,
    materialize,
    materialize_subject,
    parse_subject,
    strip_checkout,
    workspace_for_subject,
)

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"]


def _git(repo, *args):
    return subprocess.run(GIT + ["-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "plug" / "attention").mkdir(parents=True)
    (r / "plug" / "__init__.py").write_text("")
    (r / "plug" / "attention" / "__init__.py").write_text("")
    (r / "plug" / "attention" / "mod.py").write_text("VALUE = 1\n")
    _git(r, "init", "-q")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "one")
    # staged: VALUE = 2 and a new staged module; unstaged on top: VALUE = 3; untracked: extra.py
    (r / "plug" / "attention" / "mod.py").write_text("VALUE = 2\n")
    (r / "plug" / "attention" / "staged_new.py").write_text("def f():\n    return 1\n")
    _git(r, "add", "plug/attention/mod.py", "plug/attention/staged_new.py")
    (r / "plug" / "attention" / "mod.py").write_text("VALUE = 3\n")
    (r / "plug" / "attention" / "extra.py").write_text("def g():\n    return 2\n")
    _git(r, "status", "--porcelain")  # let git settle the index's stat cache before the tests measure it
    return r


def _state(r: Path):
    """Index bytes and mtime, .git entries, and `git status --porcelain` (run so that it cannot refresh the index)."""
    idx = r / ".git" / "index"
    st = idx.stat()
    digest = hashlib.sha256(idx.read_bytes()).hexdigest()
    entries = sorted(p.name for p in (r / ".git").iterdir())
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0")
    status = subprocess.run(["git", "-C", str(r), "status", "--porcelain"], check=True, capture_output=True, text=True,
                            env=env).stdout
    assert idx.stat().st_mtime_ns == st.st_mtime_ns
    return status, digest, st.st_mtime_ns, entries


def test_parse_subject():
    assert parse_subject(None) == ("worktree", None)
    assert parse_subject("rev:HEAD~1") == ("rev", "HEAD~1")
    with pytest.raises(SubjectError):
        parse_subject("rev:--output=/tmp/x")
    with pytest.raises(SubjectError):
        parse_subject("bogus")


def test_index_sees_staged_not_unstaged(repo, tmp_path):
    before = _state(repo)
    path, desc = materialize(repo, "index", tmp_path / "cache")
    after = _state(repo)
    assert before == after  # status, index bytes and mtime, .git entries (no lock left behind)
    assert (Path(path) / "plug/attention/mod.py").read_text() == "VALUE = 2\n"
    assert (Path(path) / "plug/attention/staged_new.py").exists()
    assert not (Path(path) / "plug/attention/extra.py").exists()  # untracked
    assert "staged index" in desc
    assert str(tmp_path / "cache") in path
    # the same index gives the same snapshot (cached)
    assert materialize(repo, "index", tmp_path / "cache")[0] == path


def test_index_respects_git_index_file(repo, tmp_path, monkeypatch):
    alt = tmp_path / "alt-index"
    env = dict(os.environ, GIT_INDEX_FILE=str(alt))
    subprocess.run(["git", "-C", str(repo), "read-tree", "HEAD"], check=True, env=env)
    monkeypatch.setenv("GIT_INDEX_FILE", str(alt))
    path, _ = materialize(repo, "index", tmp_path / "cache")
    assert (Path(path) / "plug/attention/mod.py").read_text() == "VALUE = 1\n"
    assert not (Path(path) / "plug/attention/staged_new.py").exists()


def test_rev_sees_committed(repo, tmp_path):
    before = _state(repo)
    path, desc = materialize(repo, "rev:HEAD", tmp_path / "cache")
    assert _state(repo) == before
    assert (Path(path) / "plug/attention/mod.py").read_text() == "VALUE = 1\n"
    assert not (Path(path) / "plug/attention/staged_new.py").exists()
    assert "revision HEAD" in desc
    with pytest.raises(SubjectError):
        materialize(repo, "rev:no-such-branch", tmp_path / "cache")


def test_worktree_is_root(repo, tmp_path):
    path, desc = materialize(repo, "worktree", tmp_path / "cache")
    assert path == os.path.realpath(repo) and "working tree" in desc


def test_subject_of_subfolder_checkout(repo, tmp_path):
    path, _ = materialize(repo / "plug", "index", tmp_path / "cache")
    assert path.endswith(os.sep + "plug") and (Path(path) / "attention/mod.py").read_text() == "VALUE = 2\n"


def test_workspace_for_subject_strips_the_checkout(repo, tmp_path):
    """A module only in the working tree must not be found through an editable sys.path entry."""
    import argparse

    p = argparse.ArgumentParser()
    p.add_argument("--root")
    p.add_argument("--python")
    p.add_argument("--cache-dir")
    p.add_argument("--no-cache", action="store_true")
    add_subject_argument(p)
    args = p.parse_args(["--root", str(repo), "--subject", "index", "--cache-dir", str(tmp_path / "cache"),
                         "--python", sys.executable])
    t = TargetInfo(python=sys.executable, sys_path=[str(repo), "/nonexistent"])
    assert strip_checkout(t, str(repo)).sys_path == ["/nonexistent"]
    before = _state(repo)
    ws = workspace_for_subject(args)
    assert _state(repo) == before
    assert ws.subject.kind == "index"
    assert "plug.attention.staged_new" in ws.index.ws_files
    assert "plug.attention.extra" not in ws.index.ws_files
    assert ws.index.locate("plug.attention.extra") is None
    assert all(not os.path.realpath(sp).startswith(os.path.realpath(repo)) for sp in ws.target.sys_path)
    ws.close()


def test_installed_copy_and_editable(tmp_path):
    root = tmp_path / "checkout"
    (root / "plug").mkdir(parents=True)
    (root / "plug" / "__init__.py").write_text("X = 'checkout'\n")
    site = tmp_path / "site"
    (site / "plug").mkdir(parents=True)
    (site / "plug" / "__init__.py").write_text("X = 'installed'\n")
    (site / "plug" / "m.py").write_text("Y = 1\n")
    di = site / "plug-1.2.3.dist-info"
    di.mkdir()
    (di / "top_level.txt").write_text("plug\n")
    (di / "entry_points.txt").write_text("[vllm.platform_plugins]\nplug = plug:register\n")
    t = TargetInfo(python=sys.executable, sys_path=[str(site)])
    s = materialize_subject(root, "installed", tmp_path / "cache", t)
    assert s.kind == "installed" and "1.2.3" in s.description
    assert (Path(s.path) / "plug" / "__init__.py").read_text() == "X = 'installed'\n"
    assert "vllm.platform_plugins" in (Path(s.path) / "pyproject.toml").read_text()
    # an editable install (a .pth pointing at the checkout) is the working tree
    site2 = tmp_path / "site2"
    site2.mkdir()
    (site2 / "plug.pth").write_text(str(root) + "\n")
    s2 = materialize_subject(root, "installed", tmp_path / "cache", TargetInfo(python=sys.executable, sys_path=[str(site2)]))
    assert s2.path == os.path.realpath(root) and "editable" in s2.description
    with pytest.raises(SubjectError):
        materialize_subject(root, "installed", tmp_path / "cache", TargetInfo(python=sys.executable, sys_path=[str(tmp_path)]))


def test_not_a_repository(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    with pytest.raises(SubjectError):
        materialize(d, "index", tmp_path / "cache")
