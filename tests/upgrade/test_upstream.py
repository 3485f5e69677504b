"""Upstream sources: paths, cached versions, wheel unpacking, pip download (faked)."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
from attnlens.target import TargetInfo
from attnlens.upgrade import upstream as U


def _wheel(path: Path, version="9.9.9", extra=None):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("vllm/__init__.py", "")
        z.writestr("vllm/_version.py", f"__version__ = version = '{version}'\n")
        z.writestr("vllm/v1/attention/backend.py", "class AttentionBackend: pass\n")
        z.writestr("vllm/_C.abi3.so", b"\x7fELF" + b"\0" * 64)
        z.writestr(f"vllm-{version}.dist-info/METADATA", f"Name: vllm\nVersion: {version}\n")
        z.writestr("../evil.py", "boom")
        z.writestr("/abs.py", "boom")
        for k, v in (extra or {}).items():
            z.writestr(k, v)
    return path


def test_unpack_wheel_only_sources(tmp_path):
    whl = _wheel(tmp_path / "vllm-9.9.9-cp38-abi3-linux_x86_64.whl")
    src = U.resolve(str(whl), cache_root=tmp_path / "cache")
    root = Path(src.root)
    assert src.version == "9.9.9" and root == tmp_path / "cache" / "upstream" / "vllm-9.9.9"
    assert (root / "vllm" / "v1" / "attention" / "backend.py").is_file()
    assert not (root / "vllm" / "_C.abi3.so").exists()
    assert (root / "vllm-9.9.9.dist-info" / "METADATA").is_file()
    assert not (tmp_path / "evil.py").exists() and not (tmp_path / "cache" / "evil.py").exists()
    assert (root / U.MARKER).is_file()
    # now cached by version
    assert U.resolve("9.9.9", cache_root=tmp_path / "cache").root == str(root)
    assert [s.version for s in U.cached_versions(tmp_path / "cache")] == ["9.9.9"]


def test_paths_and_installed(tmp_path):
    sp = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (sp / "vllm").mkdir(parents=True)
    (sp / "vllm" / "__init__.py").write_text("")
    (sp / "vllm-0.20.0.dist-info").mkdir()
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr\n")
    for spec in (str(tmp_path / "venv"), str(sp), str(sp / "vllm")):
        s = U.resolve(spec, cache_root=tmp_path / "cache")
        assert s.root == str(sp) and s.version == "0.20.0" and s.kind == "path"
    s = U.resolve("installed", target=TargetInfo(python=sys.executable, sys_path=[str(sp)]))
    assert s.kind == "installed" and s.version == "0.20.0"
    with pytest.raises(U.UpstreamError):
        U.resolve(str(tmp_path), cache_root=tmp_path / "cache")


def test_version_needs_explicit_download(tmp_path):
    with pytest.raises(U.UpstreamError, match="attnlens upstream fetch 1.2.3"):
        U.resolve("1.2.3", cache_root=tmp_path / "cache")
    with pytest.raises(U.UpstreamError):
        U.resolve("1.2.3; rm -rf /", cache_root=tmp_path / "cache")


def test_fetch_runs_pip_download_argv(tmp_path):
    calls = []

    def fake_run(argv, **kw):
        calls.append((argv, kw))
        dest = argv[argv.index("-d") + 1]
        _wheel(Path(dest) / "vllm-1.2.3-cp38-abi3-manylinux1_x86_64.whl", "1.2.3")

        class R:
            returncode = 0
            stderr = b""
        return R()

    src = U.fetch("1.2.3", cache_root=tmp_path / "cache", runner=fake_run, timeout=5)
    argv, kw = calls[0]
    assert argv[1:5] == ["-m", "pip", "download", "--no-deps"] and "vllm==1.2.3" in argv
    assert "--no-cache-dir" in argv and kw["timeout"] == 5
    assert src.version == "1.2.3" and Path(src.root, "vllm", "__init__.py").is_file()
    up = tmp_path / "cache" / "upstream"
    assert not list(up.glob(".download-*")) and not list(up.glob("*.whl"))


def test_fetch_failure_is_reported(tmp_path):
    def fake_run(argv, **kw):
        class R:
            returncode = 1
            stderr = b"ERROR: No matching distribution found for vllm==0.0.0\n"
        return R()

    with pytest.raises(U.UpstreamError, match="No matching distribution"):
        U.fetch("0.0.0", cache_root=tmp_path / "cache", runner=fake_run)
