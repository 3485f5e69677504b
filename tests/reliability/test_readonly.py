"""Read-only proof: a full session writes nothing outside the cache folder.

Before and after a session (server started and indexed, edits without save,
hovers, pull diagnostics, call hierarchy; CLI ``check`` (worktree and
``--subject index``), ``drift --from PATH``, ``inventory``, ``backends``,
``probe run`` on the CPU in the target interpreter), the test hashes:

* the analysis venv's site-packages: every file's size and mtime, sha256 of every ``.py``;
* the target venv's site-packages likewise (when a target interpreter exists);
* a git checkout (a copy of examples/mini-metax with one commit, one staged and one
  unstaged change and an untracked file): every file's bytes, mode and mtime, ``.git``
  included, and the git index file (bytes and mtime) named on its own;
* a private ``$HOME`` given to every process (nothing may appear there).

Also: the cache folder is written atomically and survives SIGKILL of a
``backends`` run at random moments (torn files detected and rebuilt).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types as T

from .conftest import copy_example
from .lspdriver import PYTHON, ServerHandle, TextModel

REPO = Path(__file__).resolve().parents[2]
ATTNLENS = [sys.executable, "-m", "attnlens.cli"]
FA = "mini_metax/attention/backends/flash_attn.py"

PROBE_TARGET = '''"""A correct LSE merge (torch), imported by the probe from the checkout."""
import torch


def merge(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    p_lse = torch.where(prefix_lse == float("inf"), float("-inf"), prefix_lse.float())
    s_lse = torch.where(suffix_lse == float("inf"), float("-inf"), suffix_lse.float())
    m = torch.maximum(p_lse, s_lse)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    pe, se = torch.exp(p_lse - m_safe), torch.exp(s_lse - m_safe)
    tot = pe + se
    empty = tot == 0
    tot_safe = torch.where(empty, torch.ones_like(tot), tot)
    o = prefix_output.float() * (pe / tot_safe).t().unsqueeze(-1) + suffix_output.float() * (se / tot_safe).t().unsqueeze(-1)
    o = torch.where(empty.t().unsqueeze(-1), torch.zeros_like(o), o)
    output.copy_(o.to(output.dtype))
    if output_lse is not None:
        output_lse.copy_(torch.where(empty, torch.full_like(m, float("-inf")), torch.log(tot_safe) + m_safe))
'''


# ------------------------------------------------------------------------------- snapshots
def site_packages(python: str) -> Path:
    out = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, timeout=60, check=True)
    return Path(out.stdout.strip())


def snapshot_tree(top: Path, hash_all: bool = False) -> dict[str, tuple]:
    """relative path -> (kind, size, mtime_ns, mode, sha256 or None) of every entry under ``top``."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            rel = os.path.relpath(p, top)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
                continue
            if name in dirnames:
                out[rel] = ("dir", st.st_mode)
                continue
            digest = None
            if hash_all or name.endswith(".py"):
                with open(p, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            out[rel] = ("file", st.st_size, st.st_mtime_ns, st.st_mode, digest)
    return out


def diff_snapshots(before: dict, after: dict) -> list[str]:
    out = []
    for k in sorted(set(before) | set(after)):
        if k not in after:
            out.append(f"removed: {k}")
        elif k not in before:
            out.append(f"added:   {k}")
        elif before[k] != after[k]:
            out.append(f"changed: {k} {before[k]} -> {after[k]}")
    return out


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env=env, timeout=60).stdout


def make_checkout(tmp: Path) -> Path:
    """examples/mini-metax as a git repo: one commit, one staged change, one unstaged change, one untracked file."""
    repo = copy_example(tmp / "checkout")
    (repo / "probe_targets.py").write_text(PROBE_TARGET)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    staged = repo / "mini_metax" / "attention" / "ops" / "decode.py"
    staged.write_text(staged.read_text() + "\n# staged change\n")
    git(repo, "add", str(staged))
    unstaged = repo / FA
    unstaged.write_text(unstaged.read_text() + "\n# unstaged change\n")
    (repo / "mini_metax" / "untracked_note.py").write_text("NOTE = 'untracked'\n")
    # let every mtime settle before the first snapshot (git writes the index with racy-git care)
    time.sleep(1.1)
    return repo


def snapshot_all(paths: dict[str, Path]) -> dict[str, dict]:
    snaps = {}
    for name, p in paths.items():
        snaps[name] = snapshot_tree(p, hash_all=name in ("checkout", "home"))
    return snaps


# ------------------------------------------------------------------------------- the session
def cli(args: list[str], env: dict, timeout: float = 600, ok=(0, 1)) -> subprocess.CompletedProcess:
    out = subprocess.run(ATTNLENS + args, capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode in ok, f"attnlens {' '.join(args[:2])}: exit {out.returncode}\n{out.stderr[-3000:]}"
    return out


def lsp_session(repo: Path, cache: Path, env: dict) -> None:
    srv = ServerHandle(repo, cache, env=env)
    try:
        srv.start()
        srv.wait_indexed(120)
        fa = repo / FA
        text = fa.read_text()
        uri = srv.open(fa, text)
        model = TextModel(text)
        i = text.index("reshape_and_cache_flash(key, value")
        p = model.position(i)
        h = srv.hover(uri, p.line, p.character, timeout=30)
        assert h.ok and h.result, h
        # edits without save: the buffer changes, the disk must not
        for n in range(5):
            srv.change(uri, 2 + n, [T.TextDocumentContentChangePartial(
                range=T.Range(T.Position(0, 0), T.Position(0, 0)), text=f"# edit {n}\n")])
        rep = srv.request(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": uri}}, timeout=120)
        assert rep.ok, rep
        rep = srv.request(T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, {
            "textDocument": {"uri": uri}, "position": {"line": p.line + 5, "character": p.character}}, timeout=30)
        assert rep.ok, rep
        if rep.result:
            rep = srv.request(T.CALL_HIERARCHY_INCOMING_CALLS, {"item": rep.result[0]}, timeout=60)
            assert rep.ok, rep
        for cmd in ("attnlens.backends", "attnlens.status"):
            assert srv.command(cmd, timeout=120).ok
        srv.notify(T.TEXT_DOCUMENT_DID_SAVE, T.DidSaveTextDocumentParams(T.TextDocumentIdentifier(uri)))
        srv.close_doc(uri)
    finally:
        srv.close()


def old_vllm_copy(tmp: Path) -> Path:
    """The installed vllm's Python sources (and dist-info) as the "old" upstream for drift (no download)."""
    sp = site_packages(PYTHON)
    dst = tmp / "old-upstream"
    shutil.copytree(sp / "vllm", dst / "vllm", ignore=lambda d, names: [
        n for n in names if not n.endswith(".py") and not os.path.isdir(os.path.join(d, n))])
    for di in sp.glob("vllm-*.dist-info"):
        shutil.copytree(di, dst / di.name)
    return dst


def user_env(home: Path, cache: Path) -> dict:
    # a user's shell: no PYTHONDONTWRITEBYTECODE (it would hide .pyc files written into the checkout)
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "ATTNLENS_CONTRACTS", "PYTHONDONTWRITEBYTECODE")}
    env.update(HOME=str(home), ATTNLENS_CACHE_DIR=str(cache))
    return env


class Watch:
    """Snapshots of the watched trees and the git index, before and after."""

    def __init__(self, tmp: Path, repo: Path, extra: dict[str, Path] | None = None):
        from tests.probe_fixtures.runtime_support import target_python

        self.repo = repo
        self.home = tmp / "home"
        self.home.mkdir()
        self.cache = tmp / "cache"
        self.watched = {"checkout": repo, "home": self.home, "venv-site-packages": site_packages(PYTHON),
                        **(extra or {})}
        tpy = target_python()
        self.target = tpy if os.path.exists(tpy) else None
        if self.target:
            self.watched["target-site-packages"] = site_packages(tpy)
        self.env = user_env(self.home, self.cache)
        self.index_file = repo / ".git" / "index"
        self.index_before = (self.index_file.read_bytes(), self.index_file.stat().st_mtime_ns)
        self.before = snapshot_all(self.watched)

    def changes(self) -> dict[str, list[str]]:
        after = snapshot_all(self.watched)
        problems = {name: diff_snapshots(self.before[name], after[name]) for name in self.watched}
        index_now = (self.index_file.read_bytes(), self.index_file.stat().st_mtime_ns)
        if index_now != self.index_before:
            problems["git-index"] = [f"changed: .git/index (mtime {self.index_before[1]} -> {index_now[1]})"]
        return {k: v for k, v in problems.items() if v}

    def cache_files(self) -> list[str]:
        return sorted(str(p.relative_to(self.cache)) for p in self.cache.rglob("*") if p.is_file())


def report(problems: dict[str, list[str]]) -> str:
    return "written outside the cache folder:\n" + "\n".join(
        f"[{k}] {line}" for k, lines in problems.items() for line in lines[:20])


@pytest.mark.slow
def test_full_session_writes_nothing_outside_the_cache(tmp_path):
    repo = make_checkout(tmp_path)
    old = old_vllm_copy(tmp_path)
    w = Watch(tmp_path, repo, {"old-upstream": old})
    lsp_session(repo, w.cache, w.env)
    common = ["--root", str(repo), "--python", PYTHON, "--cache-dir", str(w.cache)]
    cli(["check", *common, "--format", "json"], w.env)
    cli(["backends", *common, "--json"], w.env, ok=(0,))
    cli(["backends", *common, "--subject", "index", "--json"], w.env, ok=(0,))  # git checkout-index into the cache
    cli(["drift", *common, "--from", str(old), "--json"], w.env)
    cli(["inventory", *common, "--format", "json"], w.env)
    problems = w.changes()
    files = w.cache_files()
    print(f"\ncache folder got {len(files)} files in: " + ", ".join(sorted({'/'.join(Path(f).parts[:2]) for f in files})))
    assert not problems, report(problems)
    assert files


@pytest.mark.slow
def test_probe_run_writes_nothing_outside_the_cache(tmp_path):
    repo = make_checkout(tmp_path)
    w = Watch(tmp_path, repo)
    if w.target is None:
        pytest.skip("no target interpreter (scripts/setup.sh --target)")
    from tests.probe_fixtures.runtime_support import require_target

    require_target()
    out = cli(["probe", "run", "lse_merge", "--python", w.target, "--target", "probe_targets:merge", "--device", "cpu",
               "--timeout", "300", "--root", str(repo), "--cache-dir", str(w.cache), "--env", f"PYTHONPATH={repo}",
               "--json"], w.env, ok=(0,))
    assert json.loads(out.stdout)["verdict"] == "pass"
    assert any(f.split("/")[1] == "evidence" for f in w.cache_files())
    problems = w.changes()
    assert not problems, report(problems)


# ------------------------------------------------------------------------------- kill at any moment
def _backends(root: Path, cache: Path, timeout: float = 300) -> list:
    out = subprocess.run(ATTNLENS + ["backends", "--json", "--custom-ops", "--root", str(root), "--python", PYTHON,
                                     "--cache-dir", str(cache)], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    entries = json.loads(out.stdout)
    for e in entries:
        e.pop("subject", None)
    return entries


def _killed_run(root: Path, cache: Path, after_s: float) -> int | None:
    p = subprocess.Popen(ATTNLENS + ["backends", "--json", "--custom-ops", "--root", str(root), "--python", PYTHON,
                                     "--cache-dir", str(cache)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(after_s)
    try:
        os.killpg(p.pid, signal.SIGKILL)  # the run and any prefetch worker it forked
    except ProcessLookupError:
        pass
    return p.wait(30)


@pytest.mark.slow
def test_cache_survives_sigkill_at_random_moments(tmp_path, example_copy):
    t0 = time.monotonic()
    clean = _backends(example_copy, tmp_path / "clean")
    full_s = time.monotonic() - t0
    cache = tmp_path / "cache"
    rng = random.Random(int(os.environ.get("ATTNLENS_KILL_SEED", "20261130")))
    # even runs start from an empty cache; odd runs continue from what the kill left, and finish sooner
    moments = [rng.uniform(0.05, max(0.3, full_s * (1.0 if i % 2 == 0 else 0.5)))
               for i in range(int(os.environ.get("ATTNLENS_KILLS", "10")))]
    killed = 0
    for i, at in enumerate(moments):
        if i % 2 == 0:
            shutil.rmtree(cache, ignore_errors=True)  # a fresh cache, then a second run over what the kill left
        rc = _killed_run(example_copy, cache, at)
        killed += rc == -signal.SIGKILL
        # no temporary file of an interrupted atomic write may be read as an entry
        for p in cache.rglob("*"):
            if p.is_file() and not p.name.startswith("."):
                assert p.suffix in (".pickle", ".json"), p
    assert killed >= len(moments) // 3, f"only {killed} runs were killed before they finished"
    # plant torn files as a kill mid-write without the atomic rename would leave them
    pickles = sorted(cache.rglob("*.pickle"))
    for p in pickles[:: max(1, len(pickles) // 10)]:
        data = p.read_bytes()
        p.write_bytes(data[: len(data) // 3])
    again = _backends(example_copy, cache)
    assert again == clean, "results after killed runs differ from a clean run"
    again2 = _backends(example_copy, cache)  # and the rebuilt cache is consistent
    assert again2 == clean
    leftovers = [p for p in cache.rglob(".*.tmp")]
    print(f"\n{len(moments)} kills ({killed} mid-run) at {', '.join(f'{m:.2f}' for m in sorted(moments))} s of a "
          f"{full_s:.1f} s run; {len(leftovers)} orphaned temp files (never read)")
