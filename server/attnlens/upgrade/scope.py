"""Which files of the plugin an upgrade review covers.

Globs are relative to the workspace root and use ``/``: ``*`` stays inside one path
segment, ``**`` spans any number of segments, and a plain folder name means everything
under it (``vllm_metax/v1/attention`` = ``vllm_metax/v1/attention/**``).

Defaults, per top-level package ``P`` of the workspace:

* narrow (the inventory): ``P/v1/attention/**``; where the package has no
  ``v1/attention`` folder, every folder named ``attention`` inside it;
* wide (drift): the narrow scope plus every folder whose name contains ``attention`` or
  ``attn`` (MLA layers, sparse-indexer custom ops) and every file named ``*attention*.py``
  (model-specific attention wrappers). Drift also adds the modules of registered classes
  and the plugin's monkey patches, wherever they are.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path


@functools.lru_cache(maxsize=256)
def _glob_re(pattern: str) -> re.Pattern:
    p = pattern.strip().replace(os.sep, "/")
    while p.startswith("./"):
        p = p[2:]
    p = p.rstrip("/")
    if not any(c in p for c in "*?[") and not p.endswith(".py"):
        p = p + "/**"
    out = []
    i = 0
    while i < len(p):
        if p.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif p.startswith("**", i):
            out.append(".*")
            i += 2
        elif p[i] == "*":
            out.append("[^/]*")
            i += 1
        elif p[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(p[i]))
            i += 1
    return re.compile("^" + "".join(out) + "$")


def matches(rel: str, globs: list[str]) -> bool:
    rel = rel.replace(os.sep, "/")
    return any(_glob_re(g).match(rel) for g in globs if g.strip())


def relpath(root, path: str) -> str:
    try:
        r = os.path.relpath(os.path.realpath(path), os.path.realpath(root))
    except ValueError:
        return path
    return Path(r).as_posix()


def top_packages(ws) -> list[str]:
    return sorted({name.split(".", 1)[0] for name in ws.index.ws_files})


def default_globs(ws, wide: bool = False) -> list[str]:
    out: list[str] = []
    files = {relpath(ws.root, p) for p in ws.index.ws_files.values()}
    for pkg in top_packages(ws):
        pkg_path = relpath(ws.root, os.path.dirname(ws.index.ws_files[pkg])) if pkg in ws.index.ws_files else pkg
        if any(f.startswith(f"{pkg_path}/v1/attention/") for f in files):
            out.append(f"{pkg_path}/v1/attention/**")
        else:
            dirs = sorted({f.rsplit("/", 1)[0] for f in files if f.startswith(pkg_path + "/")})
            att = [d for d in dirs if d.rsplit("/", 1)[-1] == "attention" and not any(d.startswith(x + "/") for x in dirs if x.rsplit("/", 1)[-1] == "attention" and x != d)]
            out.extend(f"{d}/**" for d in att)
        if wide:
            dirs = sorted({f.rsplit("/", 1)[0] for f in files if f.startswith(pkg_path + "/")})
            for d in dirs:
                last = d.rsplit("/", 1)[-1]
                if ("attention" in last or "attn" in last) and not matches(d + "/x.py", out):
                    out.append(f"{d}/**")
            for f in sorted(files):
                if f.startswith(pkg_path + "/") and "attention" in f.rsplit("/", 1)[-1] and not matches(f, out):
                    out.append(f)
    return out


def scope_files(ws, globs: list[str]) -> list[str]:
    """Workspace files (absolute paths) whose root-relative path matches ``globs``, sorted."""
    out = []
    for p in ws.index.ws_files.values():
        if matches(relpath(ws.root, p), globs):
            out.append(p)
    return sorted(out, key=lambda p: relpath(ws.root, p))


def scope_modules(ws, globs: list[str]):
    wanted = set(scope_files(ws, globs))
    names = [n for n in sorted(ws.index.ws_files) if ws.index.ws_files[n] in wanted]
    return list(ws.index.modules_named(names))  # only those are summarised
