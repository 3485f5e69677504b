"""Which code a report is about: the *subject*.

``worktree`` (default)
    the checkout folder as it is on disk, staged or not.
``index``
    the staged snapshot only: ``git checkout-index --all --prefix=<cache>/subjects/index-<key>/``
    exports the index into the cache; unstaged edits and untracked files are not seen.
    The repository, its index file and its working tree are never written:
    ``GIT_OPTIONAL_LOCKS=0`` keeps git from refreshing the index, ``checkout-index`` runs
    without ``-u``, and the snapshot key is a hash of ``git ls-files --stage`` (no
    ``write-tree``, which would write objects).
``rev:REV``
    a committed revision: ``git archive <sha>`` unpacked into ``<cache>/subjects/rev-<sha>/``.
``installed``
    the plugin package as installed in the target interpreter (found through its
    ``sys.path``), copied (``.py`` files) into ``<cache>/subjects/installed-<key>/`` with a
    ``pyproject.toml`` that carries the installed entry points, so that the platform
    profile is read as for a checkout. An editable install is the working tree itself.

For every subject other than the working tree, the target's ``sys.path`` is stripped of
the checkout (an editable install puts it there), so a module missing from the snapshot
is reported missing instead of being silently found in the working tree.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..cache import default_cache_root

SUBJECT_KINDS = ("worktree", "index", "installed", "rev:REV")
MARKER = ".attnlens-subject"
GIT_TIMEOUT = 120.0


class SubjectError(Exception):
    """The subject cannot be materialised (not a git repository, bad revision, not installed, ...)."""


@dataclass
class Subject:
    kind: str  # worktree | index | rev | installed
    path: str  # the folder that is analysed
    description: str
    source_root: str  # the checkout the subject comes from
    rev: str | None = None  # resolved sha for rev:, or the index key

    def to_json(self) -> dict:
        return asdict(self)


def parse_subject(spec: str | None) -> tuple[str, str | None]:
    s = (spec or "worktree").strip()
    if s in ("worktree", "working-tree", "wt"):
        return "worktree", None
    if s in ("index", "staged"):
        return "index", None
    if s == "installed":
        return "installed", None
    if s.startswith("rev:") and len(s) > 4:
        rev = s[4:]
        if rev.startswith("-") or any(c in rev for c in "\n\r\0 ") or len(rev) > 200:
            raise SubjectError(f"invalid revision {rev!r}")
        return "rev", rev
    raise SubjectError(f"unknown subject {spec!r}: use worktree, index, installed or rev:REV")


def _git_env() -> dict:
    env = dict(os.environ)  # GIT_DIR, GIT_INDEX_FILE, ... are the user's: left untouched
    env["GIT_OPTIONAL_LOCKS"] = "0"  # never refresh (write) the index as a side effect
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    return env


def git(root: str | os.PathLike, *args: str, timeout: float = GIT_TIMEOUT, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["git", "-C", str(root), *args], stdout=stdout, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, timeout=timeout, env=_git_env(), check=False)
    except subprocess.TimeoutExpired:
        raise SubjectError(f"git {args[0]} did not finish within {timeout:.0f} s") from None
    except OSError as e:
        raise SubjectError(f"cannot run git: {e}") from None


def _git_ok(root, *args) -> str:
    out = git(root, *args)
    if out.returncode != 0:
        msg = (out.stderr or b"").decode(errors="replace").strip().splitlines()
        raise SubjectError(f"git {' '.join(args[:2])} failed: {msg[-1] if msg else 'exit ' + str(out.returncode)}")
    return out.stdout.decode(errors="replace")


def repo_top(root: str | os.PathLike) -> str:
    return _git_ok(root, "rev-parse", "--show-toplevel").strip()


def subjects_dir(cache_root: str | os.PathLike | None) -> Path:
    base = Path(cache_root).expanduser() if cache_root else default_cache_root()
    return base / "subjects"


def _publish(tmp: Path, dest: Path, meta: dict) -> None:
    (tmp / MARKER).write_text(json.dumps(meta, sort_keys=True))
    try:
        os.rename(tmp, dest)
    except OSError:
        if (dest / MARKER).is_file():
            shutil.rmtree(tmp, ignore_errors=True)  # another process published the same snapshot
        else:
            stale = dest.with_name(dest.name + f".stale-{os.getpid()}")
            os.rename(dest, stale)
            os.rename(tmp, dest)
            shutil.rmtree(stale, ignore_errors=True)


def _root_prefix(root: str) -> str:
    """The checkout folder relative to the repository top ('' when it is the top)."""
    top = os.path.realpath(repo_top(root))
    rel = os.path.relpath(os.path.realpath(root), top)
    return "" if rel == "." else Path(rel).as_posix()


def materialize(root: str | os.PathLike, subject: str | None, cache: str | os.PathLike | None = None,
                target=None) -> tuple[str, str]:
    """``(folder to analyse, description)`` for ``subject`` of the checkout ``root``.

    ``cache`` is the cache root (``--cache-dir``; default ``$ATTNLENS_CACHE_DIR`` or
    ``~/.cache/attnlens``); snapshots go to ``<cache>/subjects/``. ``target`` (a
    :class:`~attnlens.target.TargetInfo`) is needed for ``installed``."""
    s = materialize_subject(root, subject, cache, target)
    return s.path, s.description


def materialize_subject(root, subject, cache=None, target=None) -> Subject:
    root = os.path.realpath(str(root))
    kind, rev = parse_subject(subject)
    if kind == "worktree":
        return Subject("worktree", root, f"working tree of {root}", root)
    if kind == "installed":
        return _installed(root, cache, target)
    out_base = subjects_dir(cache)
    out_base.mkdir(parents=True, exist_ok=True)
    prefix = _root_prefix(root)
    if kind == "index":
        return _index(root, prefix, out_base)
    return _rev(root, prefix, rev or "HEAD", out_base)


def _index(root: str, prefix: str, out_base: Path) -> Subject:
    top = repo_top(root)
    stage = git(top, "ls-files", "--stage", "-z")
    if stage.returncode != 0:
        raise SubjectError("git ls-files --stage failed: " + (stage.stderr or b"").decode(errors="replace").strip())
    key = hashlib.sha256(stage.stdout + prefix.encode()).hexdigest()[:20]
    dest = out_base / f"index-{key}"
    n = stage.stdout.count(b"\0")
    desc = f"staged index of {root} ({n} entries, snapshot {key})"
    if (dest / MARKER).is_file():
        return Subject("index", str(dest / prefix) if prefix else str(dest), desc, root, key)
    tmp = Path(tempfile.mkdtemp(prefix=f".index-{key}-", dir=out_base))
    try:
        out = git(top, "checkout-index", "--all", "--force", f"--prefix={tmp}{os.sep}")
        if out.returncode != 0:
            raise SubjectError("git checkout-index failed: " + (out.stderr or b"").decode(errors="replace").strip())
        _publish(tmp, dest, {"kind": "index", "root": root, "key": key})
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Subject("index", str(dest / prefix) if prefix else str(dest), desc, root, key)


def _rev(root: str, prefix: str, rev: str, out_base: Path) -> Subject:
    top = repo_top(root)
    sha = _git_ok(top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}").strip()
    if not re.fullmatch(r"[0-9a-f]{40,64}", sha):
        raise SubjectError(f"{rev} is not a commit")
    dest = out_base / f"rev-{sha}"
    subj = lambda: Subject("rev", str(dest / prefix) if prefix else str(dest), f"revision {rev} ({sha[:12]}) of {root}", root, sha)  # noqa: E731
    if (dest / MARKER).is_file():
        return subj()
    tmp = Path(tempfile.mkdtemp(prefix=f".rev-{sha[:12]}-", dir=out_base))
    try:
        with tempfile.TemporaryFile(dir=out_base) as tf:
            out = git(top, "archive", "--format=tar", sha, stdout=tf)
            if out.returncode != 0:
                raise SubjectError("git archive failed: " + (out.stderr or b"").decode(errors="replace").strip())
            tf.seek(0)
            _extract_tar(tf, tmp)
        _publish(tmp, dest, {"kind": "rev", "root": root, "sha": sha})
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return subj()


def _extract_tar(fileobj: io.IOBase, dest: Path) -> None:
    real = os.path.realpath(dest)
    with tarfile.open(fileobj=fileobj, mode="r:") as tf:
        for m in tf:
            name = m.name
            if name.startswith(("/", "\\")) or ".." in Path(name).parts:
                continue
            target = os.path.realpath(os.path.join(dest, name))
            if not (target == real or target.startswith(real + os.sep)):
                continue
            if m.isdir():
                os.makedirs(target, exist_ok=True)
            elif m.isfile():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                src = tf.extractfile(m)
                if src is None:
                    continue
                with src, open(target, "wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
            # links, devices and fifos are skipped: a snapshot for analysis needs none of them


# ----------------------------------------------------------------------------- installed


def _workspace_packages(root: str) -> list[str]:
    out = []
    for base in (Path(root), Path(root) / "src"):
        try:
            entries = sorted(os.listdir(base))
        except OSError:
            continue
        for e in entries:
            p = base / e
            if e.isidentifier() and p.is_dir() and (p / "__init__.py").is_file() and e not in ("tests", "test", "docs", "examples"):
                out.append(e)
    return out


def _dist_info_for(site: str, pkg: str) -> Path | None:
    try:
        entries = sorted(os.listdir(site))
    except OSError:
        return None
    for e in entries:
        if not e.endswith(".dist-info"):
            continue
        tl = Path(site, e, "top_level.txt")
        rec = Path(site, e, "RECORD")
        try:
            if tl.is_file() and pkg in tl.read_text(errors="replace").split():
                return Path(site, e)
            if rec.is_file() and f"\n{pkg}/__init__.py," in "\n" + rec.read_text(errors="replace"):
                return Path(site, e)
        except OSError:
            continue
    return None


def _editable_location(site: str, pkg: str) -> str | None:
    """An editable install: the folder that holds ``pkg`` per a ``__editable__`` finder or a ``.pth`` file."""
    try:
        entries = sorted(os.listdir(site))
    except OSError:
        return None
    for e in entries:
        p = os.path.join(site, e)
        if e.startswith("__editable__") and e.endswith("_finder.py"):
            try:
                text = Path(p).read_text(errors="replace")
            except OSError:
                continue
            m = re.search(r"MAPPING\s*(?::[^=]*)?=\s*(\{[^}]*\})", text)
            if m:
                try:
                    mapping = json.loads(m.group(1).replace("'", '"'))
                except ValueError:
                    mapping = {}
                if pkg in mapping:
                    return os.path.dirname(mapping[pkg])
        elif e.endswith(".pth"):
            try:
                lines = Path(p).read_text(errors="replace").splitlines()
            except OSError:
                continue
            for ln in lines:
                ln = ln.strip()
                if ln and not ln.startswith(("#", "import ")) and os.path.isfile(os.path.join(ln, pkg, "__init__.py")):
                    return ln
    return None


def find_installed(root: str, target) -> tuple[str, str, Path | None, bool]:
    """(package, folder holding it, dist-info, editable) of the plugin in the target's site-packages."""
    if target is None or not getattr(target, "sys_path", None):
        raise SubjectError("the installed subject needs a target interpreter (--python)")
    pkgs = _workspace_packages(root)
    if not pkgs:
        raise SubjectError(f"{root} has no top-level Python package to look for")
    real_root = os.path.realpath(root)
    for pkg in pkgs:
        for sp in target.sys_path:
            if not os.path.isdir(sp):
                continue
            rs = os.path.realpath(sp)
            inside = rs == real_root or rs.startswith(real_root + os.sep)
            if os.path.isfile(os.path.join(sp, pkg, "__init__.py")) and not inside:
                return pkg, rs, _dist_info_for(sp, pkg), False
            loc = _editable_location(sp, pkg)
            if loc is not None:
                return pkg, os.path.realpath(loc), _dist_info_for(sp, pkg), True
            if inside and os.path.isfile(os.path.join(sp, pkg, "__init__.py")):
                return pkg, rs, _dist_info_for(sp, pkg), True
    raise SubjectError(f"none of {', '.join(pkgs)} is installed in the target interpreter {target.python or ''}".strip())


def _installed(root: str, cache, target) -> Subject:
    pkg, where, dist, editable = find_installed(root, target)
    version = ""
    if dist is not None:
        version = dist.name[len(dist.name.split("-")[0]) + 1:-len(".dist-info")]
    if editable:
        desc = f"installed {pkg} {version} (editable install of {where}: the working tree)".replace("  ", " ")
        return Subject("installed", where, desc, root, version or None)
    src = Path(where) / pkg
    stamp = hashlib.sha256()
    files = []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if fn.endswith(".py"):
                p = os.path.join(dirpath, fn)
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                files.append(p)
                stamp.update(f"{os.path.relpath(p, src)}|{st.st_mtime_ns}|{st.st_size}\n".encode())
    if dist is not None:
        stamp.update(str(dist).encode())
    key = stamp.hexdigest()[:20]
    out_base = subjects_dir(cache)
    out_base.mkdir(parents=True, exist_ok=True)
    dest = out_base / f"installed-{pkg}-{key}"
    desc = f"installed {pkg} {version or '(unknown version)'} from {where}"
    if (dest / MARKER).is_file():
        return Subject("installed", str(dest), desc, root, version or None)
    tmp = Path(tempfile.mkdtemp(prefix=f".installed-{pkg}-", dir=out_base))
    try:
        for p in files:
            out = tmp / pkg / os.path.relpath(p, src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, out)
        eps = dist / "entry_points.txt" if dist is not None else None
        if eps is not None and eps.is_file():
            (tmp / "pyproject.toml").write_text(_pyproject_from_entry_points(eps.read_text(errors="replace"), pkg, version))
        _publish(tmp, dest, {"kind": "installed", "package": pkg, "from": where, "version": version})
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return Subject("installed", str(dest), desc, root, version or None)


def _pyproject_from_entry_points(text: str, pkg: str, version: str) -> str:
    import configparser

    cp = configparser.ConfigParser(interpolation=None)
    cp.optionxform = str  # type: ignore[assignment]
    try:
        cp.read_string(text)
    except configparser.Error:
        return ""
    lines = ["# written by attnlens from the installed entry_points.txt", "[project]", f'name = "{pkg}"',
             f'version = "{version or "0"}"', ""]
    for section in cp.sections():
        lines.append(f'[project.entry-points."{section}"]')
        for k, v in cp.items(section):
            lines.append(f"{json.dumps(k)} = {json.dumps(v)}")
        lines.append("")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- CLI helpers


def add_subject_argument(parser) -> None:
    """``--subject {worktree,index,installed,rev:REV}`` (default worktree)."""
    parser.add_argument("--subject", default="worktree", metavar="SUBJECT",
                        help="what to analyse: worktree (default), index (the staged snapshot only), "
                             "installed (the plugin as installed in the target interpreter) or rev:REV")


def strip_checkout(target, source_root: str):
    """A copy of ``target`` without sys.path entries inside ``source_root`` (see the module docstring)."""
    from ..target import TargetInfo

    real = os.path.realpath(source_root)
    sp = [p for p in target.sys_path if not (os.path.realpath(p) == real or os.path.realpath(p).startswith(real + os.sep))]
    return TargetInfo(python=target.python, sys_path=sp, version=target.version, prefix=target.prefix,
                      purelib=target.purelib, ext_suffixes=list(target.ext_suffixes or [".so"]), error=target.error,
                      stdlib=list(target.stdlib or []))


def workspace_for_subject(args):
    """A :class:`~attnlens.workspace.Workspace` for ``args.subject`` of ``args.root``.

    Reads ``root``, ``python``, ``cache_dir``, ``no_cache`` and ``subject`` from ``args``
    (missing ones take their defaults). The workspace carries ``ws.subject`` (a
    :class:`Subject`) so that every report can name it."""
    import sys

    from ..cache import Cache
    from ..target import TargetError, TargetInfo, read_target
    from ..workspace import Workspace

    root = getattr(args, "root", None) or os.getcwd()
    if not os.path.isdir(root):
        raise SystemExit(f"attnlens: --root {root} is not a folder")
    root = os.path.realpath(root)
    python = getattr(args, "python", None)
    cache_dir = getattr(args, "cache_dir", None)
    use_cache = not getattr(args, "no_cache", False)
    spec = getattr(args, "subject", None) or "worktree"
    cache_root = Path(cache_dir).expanduser() if cache_dir else default_cache_root()
    target_error = None
    try:
        target = read_target(python, Cache.for_workspace(Path(root), cache_root) if use_cache else None)
    except TargetError as e:
        target_error = str(e)
        target = TargetInfo(python=python or "", sys_path=[], error=str(e))
    try:
        subj = materialize_subject(root, spec, cache_root, target)
    except SubjectError as e:
        raise SystemExit(f"attnlens: subject {spec}: {e}") from None
    if subj.kind != "worktree" and not (subj.kind == "installed" and os.path.realpath(subj.path) == root):
        target = strip_checkout(target, root)
    ws = Workspace(subj.path, python=python, cache_dir=cache_root, use_cache=use_cache, target=target)
    if target_error and not ws.target_error:
        ws.target_error = target_error
    ws.subject = subj
    if ws.target_error:
        print(f"attnlens: warning: {ws.target_error}; analysing the workspace alone", file=sys.stderr)
    return ws


def subject_of(ws) -> Subject:
    s = getattr(ws, "subject", None)
    if isinstance(s, Subject):
        return s
    return Subject("worktree", str(ws.root), f"working tree of {ws.root}", str(ws.root))
