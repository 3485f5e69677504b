"""Upstream versions as folders of sources.

An *upstream source* is a folder that holds the upstream package (``vllm/``) and, when
known, its ``*.dist-info``: it is put first on the analysed ``sys.path`` so that the
plugin's ``import vllm...`` resolve to that version, without running any interpreter.

Three spellings are accepted (:func:`resolve`):

* ``installed``: the package as installed in the target interpreter's site-packages;
* a path: a folder that contains ``vllm/`` (a site-packages, an unpacked wheel), the
  ``vllm/`` package folder itself, a virtual environment, or a ``.whl`` file (unpacked
  into the cache);
* a version (``0.19.1``): ``<cache>/upstream/vllm-0.19.1/`` when it was fetched before;
  otherwise, only when the caller asks for it (``download=True``, the CLI's
  ``--download`` or ``attnlens upstream fetch``), ``pip download --no-deps
  --only-binary=:all: --no-cache-dir vllm==0.19.1`` into a temporary folder of the cache,
  after which only the ``.py`` files and the ``.dist-info`` of the wheel are unpacked
  (compiled extensions are skipped) and the wheel is deleted.

The unpacked folder is published with an atomic rename and a completion marker, so an
interrupted fetch never leaves a half folder that looks complete.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..cache import default_cache_root

UPSTREAM_PACKAGE = "vllm"
MARKER = ".attnlens-complete"
_VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!_-]{0,63}$")
_PKG_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
MAX_MEMBER_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 1024 * 1024 * 1024


class UpstreamError(Exception):
    """The upstream version could not be found, fetched or unpacked."""


@dataclass
class UpstreamSource:
    spec: str  # what was asked for
    root: str  # folder to put first on sys.path (holds <package>/)
    version: str  # "" when unknown
    kind: str  # installed | path | version | wheel
    package: str = UPSTREAM_PACKAGE

    @property
    def label(self) -> str:
        v = self.version or "unknown version"
        return f"{self.package} {v}"

    @property
    def package_dir(self) -> str:
        return os.path.join(self.root, self.package)

    def to_json(self) -> dict:
        d = asdict(self)
        d["label"] = self.label
        return d


def upstream_dir(cache_root: str | os.PathLike | None = None) -> Path:
    """``<cache root>/upstream``: shared by every workspace (versions are not per workspace)."""
    base = Path(cache_root).expanduser() if cache_root else default_cache_root()
    return base / "upstream"


def valid_version(version: str) -> bool:
    return bool(_VERSION_RE.match(version or "")) and ".." not in version


def read_version(root: str | os.PathLike, package: str = UPSTREAM_PACKAGE) -> str:
    """The version of ``package`` in ``root``: its dist-info name, else ``_version.py``/``version.py``."""
    root = str(root)
    try:
        entries = os.listdir(root)
    except OSError:
        entries = []
    prefix = package + "-"
    for e in sorted(entries):
        if e.endswith(".dist-info") and e.startswith(prefix):
            v = e[len(prefix):-len(".dist-info")]
            if v:
                return v
    for name in ("_version.py", "version.py"):
        p = os.path.join(root, package, name)
        try:
            text = Path(p).read_text(errors="replace")
        except OSError:
            continue
        m = re.search(r"""__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", text)
        if m:
            return m.group(1)
        m = re.search(r"""^version\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", text, re.M)
        if m:
            return m.group(1)
    return ""


def find_package_root(path: str | os.PathLike, package: str = UPSTREAM_PACKAGE) -> str | None:
    """The folder that contains ``package/`` for a user-given path (see the module docstring)."""
    p = Path(os.path.realpath(path))
    if (p / package / "__init__.py").is_file():
        return str(p)
    if p.name == package and (p / "__init__.py").is_file():
        return str(p.parent)
    if (p / "pyvenv.cfg").is_file() or (p / "lib").is_dir():
        for sp in sorted(p.glob("lib/python*/site-packages")) + sorted(p.glob("Lib/site-packages")):
            if (sp / package / "__init__.py").is_file():
                return str(sp)
    return None


def cached_versions(cache_root: str | os.PathLike | None = None, package: str = UPSTREAM_PACKAGE) -> list[UpstreamSource]:
    out = []
    d = upstream_dir(cache_root)
    if not d.is_dir():
        return out
    for e in sorted(d.iterdir()):
        if e.is_dir() and e.name.startswith(package + "-") and (e / MARKER).is_file():
            out.append(UpstreamSource(e.name[len(package) + 1:], str(e), read_version(e, package) or e.name[len(package) + 1:], "version", package))
    return out


def resolve(spec: str, *, package: str = UPSTREAM_PACKAGE, cache_root: str | os.PathLike | None = None,
            download: bool = False, target=None, timeout: float = 1200.0, pip_python: str | None = None) -> UpstreamSource:
    """Turn ``spec`` (``installed``, a path, a ``.whl`` or a version) into an :class:`UpstreamSource`."""
    if not _PKG_RE.match(package):
        raise UpstreamError(f"invalid package name {package!r}")
    spec = (spec or "").strip()
    if not spec:
        raise UpstreamError("empty upstream specification")
    if spec == "installed":
        if target is None or not getattr(target, "sys_path", None):
            raise UpstreamError("`installed` needs a target interpreter (its sys.path is unknown)")
        for sp in target.sys_path:
            if os.path.isfile(os.path.join(sp, package, "__init__.py")):
                return UpstreamSource(spec, os.path.realpath(sp), read_version(sp, package), "installed", package)
        raise UpstreamError(f"{package} is not installed in the target interpreter {target.python or ''}".strip())
    looks_like_path = os.sep in spec or spec.startswith(".") or spec.endswith(".whl") or os.path.exists(spec)
    if looks_like_path:
        if not os.path.exists(spec):
            raise UpstreamError(f"no such file or folder: {spec}")
        if spec.endswith(".whl") and os.path.isfile(spec):
            return unpack_wheel(spec, package=package, cache_root=cache_root)
        root = find_package_root(spec, package)
        if root is None:
            raise UpstreamError(f"{spec} holds no `{package}` package (expected {package}/__init__.py inside it, "
                                f"a site-packages, a virtual environment or a .whl)")
        return UpstreamSource(spec, root, read_version(root, package), "path", package)
    version = spec[len(package) + 2:] if spec.startswith(package + "==") else spec
    if not valid_version(version):
        raise UpstreamError(f"not a version, a path or `installed`: {spec!r}")
    dest = upstream_dir(cache_root) / f"{package}-{version}"
    if (dest / MARKER).is_file() and (dest / package / "__init__.py").is_file():
        return UpstreamSource(spec, str(dest), read_version(dest, package) or version, "version", package)
    if not download:
        raise UpstreamError(
            f"{package} {version} is not in the cache ({dest}); fetch it with `attnlens upstream fetch {version}` "
            f"(or pass --download), or give a path to its sources")
    return fetch(version, package=package, cache_root=cache_root, timeout=timeout, pip_python=pip_python)


def pip_download_argv(version: str, dest: str, package: str = UPSTREAM_PACKAGE, pip_python: str | None = None) -> list[str]:
    if not valid_version(version):
        raise UpstreamError(f"invalid version {version!r}")
    return [pip_python or sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--no-cache-dir", "--disable-pip-version-check", "--no-input", "-d", dest, f"{package}=={version}"]


def fetch(version: str, *, package: str = UPSTREAM_PACKAGE, cache_root: str | os.PathLike | None = None,
          timeout: float = 1200.0, pip_python: str | None = None, runner=subprocess.run) -> UpstreamSource:
    """``pip download`` the wheel into the cache, unpack its sources, delete the wheel."""
    up = upstream_dir(cache_root)
    up.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".download-", dir=up)
    try:
        argv = pip_download_argv(version, tmp, package, pip_python)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSTARTUP",)}
        env["PIP_NO_INPUT"] = "1"
        try:
            out = runner(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            raise UpstreamError(f"pip download {package}=={version} did not finish within {timeout:.0f} s") from None
        except OSError as e:
            raise UpstreamError(f"cannot run pip: {e}") from None
        if out.returncode != 0:
            err = (out.stderr or b"").decode(errors="replace").strip().splitlines()
            tail = next((ln for ln in reversed(err) if ln.strip()), "no output")
            raise UpstreamError(f"pip download {package}=={version} failed (exit {out.returncode}): {tail}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise UpstreamError(f"pip download {package}=={version} produced no wheel")
        return unpack_wheel(str(wheels[0]), package=package, cache_root=cache_root, version=version, spec=version)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _safe_member(name: str) -> bool:
    if not name or name.startswith(("/", "\\")) or "\\" in name or ":" in name.split("/", 1)[0]:
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts[:-1]) and parts[-1] not in (".", "..")


def wheel_members(names: list[str], package: str = UPSTREAM_PACKAGE) -> list[str]:
    """The members worth unpacking: the package's ``.py`` files and the ``.dist-info``."""
    keep = []
    for n in names:
        if n.endswith("/") or not _safe_member(n):
            continue
        top = n.split("/", 1)[0]
        if top.endswith(".dist-info") and n.count("/") == 1:
            keep.append(n)
        elif top == package and n.endswith(".py"):
            keep.append(n)
    return keep


def unpack_wheel(wheel: str, *, package: str = UPSTREAM_PACKAGE, cache_root: str | os.PathLike | None = None,
                 version: str | None = None, spec: str | None = None) -> UpstreamSource:
    """Unpack the sources of ``wheel`` into ``<cache>/upstream/<package>-<version>/`` (atomically)."""
    up = upstream_dir(cache_root)
    up.mkdir(parents=True, exist_ok=True)
    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as e:
        raise UpstreamError(f"{wheel} is not a readable wheel: {e}") from None
    with zf:
        infos = {i.filename: i for i in zf.infolist()}
        members = wheel_members(list(infos), package)
        if not any(m == f"{package}/__init__.py" for m in members):
            raise UpstreamError(f"{wheel} holds no {package}/__init__.py")
        if version is None:
            di = next((m.split("/", 1)[0] for m in members if m.endswith(".dist-info/METADATA")), "")
            version = di[len(package) + 1:-len(".dist-info")] if di.startswith(package + "-") else ""
            if not valid_version(version):
                version = Path(wheel).name.split("-")[1] if Path(wheel).name.count("-") >= 2 else ""
        if not valid_version(version or ""):
            raise UpstreamError(f"cannot tell the version of {wheel}")
        dest = up / f"{package}-{version}"
        if (dest / MARKER).is_file():
            return UpstreamSource(spec or wheel, str(dest), read_version(dest, package) or version, "version" if spec else "wheel", package)
        total = 0
        tmp = Path(tempfile.mkdtemp(prefix=f".unpack-{package}-{version}-", dir=up))
        try:
            for m in members:
                info = infos[m]
                if info.file_size > MAX_MEMBER_BYTES:
                    continue
                total += info.file_size
                if total > MAX_TOTAL_BYTES:
                    raise UpstreamError(f"{wheel}: sources larger than {MAX_TOTAL_BYTES} bytes")
                out = tmp.joinpath(*m.split("/"))
                if not str(os.path.realpath(out)).startswith(str(os.path.realpath(tmp)) + os.sep):
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(out, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            (tmp / MARKER).write_text(json.dumps({"package": package, "version": version, "wheel": os.path.basename(wheel),
                                                  "files": len(members)}))
            try:
                os.rename(tmp, dest)
            except OSError:
                if not (dest / MARKER).is_file():  # someone else won the race with a complete folder, or a stale one
                    stale = up / f".stale-{package}-{version}-{os.getpid()}"
                    os.rename(dest, stale)
                    os.rename(tmp, dest)
                    shutil.rmtree(stale, ignore_errors=True)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return UpstreamSource(spec or wheel, str(dest), read_version(dest, package) or version, "version" if spec else "wheel", package)
