"""Score a drift report against what the project's own upgrade commits changed.

``changed_symbols(gitdir, commit)`` lists the functions, classes and methods whose
normalised AST changed in ``commit`` (against its first parent), plus the modules
whose module-level statements (imports, constants) changed:

* ``modified``: in both versions, with a different signature, decorators or body
  (comments, formatting and docstrings do not count);
* ``removed``: only in the parent;
* ``added``: only in the commit; an added method also marks its class as changed
  (``class gained method``), since drift reports new hooks on the class.

``score(report_json, changed)`` then counts: changed symbols that drift flagged
(hits), changed symbols it did not flag (missed, with the drift status it gave),
and flagged symbols that the commits left alone (noise).

Run as ``python -m attnlens.upgrade.evaluate --git GITDIR --commit C [--commit C2]
--drift drift.json [--prefix vllm_metax/v1/attention/]``.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from dataclasses import dataclass, field

from . import astsyms as A


def _git(gitdir: str, *args: str) -> bytes:
    out = subprocess.run(["git", "--git-dir", gitdir, *args], capture_output=True, check=False, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {out.stderr.decode(errors='replace').strip()}")
    return out.stdout


def _module_name(path: str) -> str:
    p = path[:-3] if path.endswith(".py") else path
    parts = p.split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _symbols(text: str | None, path: str) -> tuple[dict, str | None]:
    """qualified name -> fingerprint (functions, methods, classes), and the module-level fingerprint."""
    if text is None:
        return {}, None
    pf = A.parse_text(path, text)
    if pf.tree is None:
        return {}, None
    out = {}
    for q, node in pf.defs.items():
        if isinstance(node, ast.ClassDef):
            if "." in q and not isinstance(pf.defs.get(q.rpartition(".")[0]), ast.ClassDef):
                continue  # a class inside a function: part of that function
            rest = [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            fp = (tuple(A.unparse(b) for b in node.bases), tuple(A.unparse(d) for d in node.decorator_list),
                  A.body_hash(ast.Module(body=rest or [ast.Pass()], type_ignores=[])))
            out[q] = ("class", fp)
        else:
            parent = q.rpartition(".")[0]
            if parent and not isinstance(pf.defs.get(parent), ast.ClassDef):
                continue  # nested function: part of its parent
            fp = (A.signature(node), tuple(A.unparse(d) for d in node.decorator_list), A.body_hash(node))
            out[q] = ("method" if parent else "function", fp)
    top = [s for s in pf.tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return out, A.body_hash(ast.Module(body=top or [ast.Pass()], type_ignores=[]))


@dataclass
class Changed:
    commit: str
    modified: dict = field(default_factory=dict)  # dotted -> kind
    removed: dict = field(default_factory=dict)
    added: dict = field(default_factory=dict)
    class_gained: dict = field(default_factory=dict)  # class dotted -> [method]
    modules: list = field(default_factory=list)  # modules whose module-level statements changed
    files: list = field(default_factory=list)

    def touched(self) -> dict:
        """Symbols that existed before the commit and were changed by it (the set drift can flag)."""
        out = dict(self.modified)
        out.update(self.removed)
        for c in self.class_gained:
            out.setdefault(c, "class")
        return out


def changed_symbols(gitdir: str, commit: str, prefixes: tuple = ("vllm_metax/",)) -> Changed:
    ch = Changed(commit)
    names = _git(gitdir, "diff", "--name-status", "--no-renames", f"{commit}^", commit).decode().splitlines()
    for line in names:
        status, _, path = line.partition("\t")
        if not path.endswith(".py") or not path.startswith(prefixes):
            continue
        ch.files.append(path)
        before = after = None
        if status != "A":
            before = _git(gitdir, "show", f"{commit}^:{path}").decode("utf-8", "replace")
        if status != "D":
            after = _git(gitdir, "show", f"{commit}:{path}").decode("utf-8", "replace")
        mod = _module_name(path)
        sb, mb = _symbols(before, path)
        sa, ma = _symbols(after, path)
        if mb != ma and before is not None and after is not None:
            ch.modules.append(mod)
        for q, (kind, fp) in sb.items():
            if q not in sa:
                ch.removed[f"{mod}.{q}"] = kind
            elif sa[q][1] != fp:
                ch.modified[f"{mod}.{q}"] = kind
        for q, (kind, _fp) in sa.items():
            if q not in sb:
                ch.added[f"{mod}.{q}"] = kind
                parent = q.rpartition(".")[0]
                if kind == "method" and parent in sb:
                    ch.class_gained.setdefault(f"{mod}.{parent}", []).append(q.rpartition(".")[2])
    return ch


def baseline_symbols(gitdir: str, rev: str, files: list[str]) -> set:
    """Every function/class/method dotted name defined at ``rev`` in ``files``."""
    out = set()
    for path in sorted(set(files)):
        try:
            text = _git(gitdir, "show", f"{rev}:{path}").decode("utf-8", "replace")
        except RuntimeError:
            continue
        syms, _ = _symbols(text, path)
        mod = _module_name(path)
        out.update(f"{mod}.{q}" for q in syms)
    return out


def score(report: dict, changed: list[Changed], prefix="", baseline: set | None = None) -> dict:
    """``baseline``: symbols that exist in the analysed revision; a symbol a later commit of the series
    changed but an earlier one added is not something drift could flag on the baseline."""
    items = {it["symbol"]: it for it in report["items"]}
    flagged = {s for s, it in items.items() if it.get("flagged")}
    noted = {s for s, it in items.items() if it["status"] in ("removed_upstream", "changed_upstream", "new_hook")}
    touched: dict = {}
    for c in changed:
        touched.update(c.touched())
    added_later = sorted(k for k in touched if baseline is not None and k not in baseline)
    if baseline is not None:
        touched = {k: v for k, v in touched.items() if k in baseline}
    modules = sorted({m for c in changed for m in c.modules})
    prefixes = [prefix] if isinstance(prefix, str) else list(prefix or [])
    pmods = tuple(p.rstrip("/").removesuffix(".py").replace("/", ".") for p in prefixes if p)
    if pmods:
        touched = {k: v for k, v in touched.items() if k.startswith(pmods)}
        modules = [m for m in modules if m.startswith(pmods)]
        flagged = {s for s in flagged if s.startswith(pmods)}
        noted = {s for s in noted if s.startswith(pmods)}
    sym_flagged = {s for s in flagged if s not in modules and items[s]["kind"] != "module"}
    hits = sorted(s for s in touched if s in flagged)
    hits_noted = sorted(s for s in touched if s in noted)
    missed = sorted(s for s in touched if s not in flagged)
    noise = sorted(s for s in sym_flagged if s not in touched)
    mod_items = {s for s, it in items.items() if it["kind"] == "module" and it.get("flagged")}
    return {
        "touched": len(touched), "flagged": len(sym_flagged), "hits": len(hits), "hits_including_info": len(hits_noted),
        "missed": len(missed), "noise": len(noise),
        "recall": round(len(hits) / len(touched), 3) if touched else None,
        "precision": round(len(hits) / len(sym_flagged), 3) if sym_flagged else None,
        "modules_changed": modules, "modules_flagged": sorted(mod_items),
        "modules_hit": sorted(m for m in modules if m in mod_items),
        "hit_symbols": hits,
        "missed_symbols": [{"symbol": s, "kind": touched[s], "drift_status": items[s]["status"] if s in items else "not in report",
                            "counterpart": (items[s].get("counterpart_new") or items[s].get("counterpart_old")) if s in items else None}
                           for s in missed],
        "noise_symbols": [{"symbol": s, "status": items[s]["status"],
                           "rules": sorted({c.get("rule") for c in items[s]["changes"] if c.get("rule") and c["status"] in ("removed_upstream", "changed_upstream", "new_hook")})}
                          for s in noise],
        "added_symbols": sorted({k for c in changed for k in c.added} | set(added_later)),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlens.upgrade.evaluate")
    p.add_argument("--git", required=True, help="git dir (bare mirror or .git)")
    p.add_argument("--commit", action="append", required=True)
    p.add_argument("--drift", required=True, help="JSON written by `attnlens drift --json`")
    p.add_argument("--prefix", action="append", default=[], help="only symbols under these folders/files (repeatable)")
    p.add_argument("--baseline", default=None, help="the revision drift analysed (default: the first commit's parent)")
    a = p.parse_args(argv)
    with open(a.drift) as f:
        report = json.load(f)
    changed = [changed_symbols(a.git, c) for c in a.commit]
    base_rev = _git(a.git, "rev-parse", a.baseline or f"{a.commit[0]}^").decode().strip()
    base = baseline_symbols(a.git, base_rev, [f for c in changed for f in c.files])
    res = score(report, changed, a.prefix, base)
    res["baseline"] = base_rev
    json.dump(res, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
