"""Do the editor and the CLI give one answer per position? (issue 16 item 1)

For kernel call sites of a workspace (all of them, or every k-th with ``--sample``), compares:

* **CLI**: ``attnlens trace FILE:LINE:COL --json`` (``cli.main``, the command's own code path, on a
  workspace of its own);
* **hover**: the chain the server's hover renders (``Analysis.resolve`` with the hover budget; when
  that is partial, the unbudgeted re-run the server starts in the background, as a user sees on the
  next hover);
* **implementation**: the locations Go to Implementation returns (``navigation.leaf_locations``).

Leaves are compared as (kind, symbol, reachability); implementation as the set of (path, line) of the
CLI's live leaves (a not-installed leaf's target is its import: compared by path only).

    .venv/bin/python bench/agree.py --root /work/metax --python .venv/bin/python --sample 10
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time


def cli_trace(root: str, python: str, cache: str, path: str, line: int, col: int) -> dict:
    from attnlens.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["trace", f"{path}:{line}:{col + 1}", "--root", root, "--python", python, "--cache-dir", cache, "--json"])
    return json.loads(out.getvalue())


def _json_leaves(d: dict) -> list[tuple]:
    return sorted({(lf["kind"], lf["symbol"], lf.get("reachability")) for lf in d.get("leaves") or []}, key=repr)


def _chain_leaves(chain) -> list[tuple]:
    return sorted({(j["kind"], j["symbol"], j.get("reachability")) for j in (lf.to_json() for lf in chain.leaves())},
                  key=repr)


def _registrations(d: dict, symbol: str) -> list[dict]:
    """The registrations of torch op ``symbol`` anywhere in the CLI's JSON (final or tree leaves)."""
    out: list = []
    stack = [d]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if x.get("kind") == "torch_op" and x.get("symbol") == symbol and x.get("registrations"):
                out.extend(x["registrations"])
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return out


def definition_positions(ws) -> list:
    """A site per function and class definition of the workspace (the position of its name)."""
    from types import SimpleNamespace

    out = []
    for mod in ws.query.workspace_modules():
        text = (ws.query.source_text(mod.path) or "").split("\n")
        for q, d in list(mod.summary.functions.items()) + list(mod.summary.classes.items()):
            ln = text[d.line - 1] if 0 < d.line <= len(text) else ""
            col = ln.find(d.name, ln.find("def ") + 1 if "def " in ln else ln.find("class ") + 1)
            if col >= 0:
                out.append(SimpleNamespace(path=mod.path, line=d.line, col=col, call=f"def {q}"))
    return out


def compare(root: str, python: str, sites, cache: str, hover_budget_s: float = 0.5) -> list[dict]:
    """One row per site: the three answers and whether they agree."""
    from attnlens import model as M
    from attnlens.lsp.analysis import Analysis
    from attnlens.lsp.features.navigation import leaf_locations
    from attnlens.workspace import Workspace

    ws = Workspace(root, python=python, cache_dir=cache)
    a = Analysis(ws)
    rows = []
    for s in sites:
        d = cli_trace(root, python, cache, s.path, s.line, s.col)
        d_at = a.def_at(s.path, s.line, s.col)
        if d_at is not None:  # a `def` / `class` name: the hover's and implementation's door (trace_symbol)
            chain = a.q.trace_symbol(d_at.dotted, budget_s=hover_budget_s)
            if chain.partial:
                chain = a.q.trace_symbol(d_at.dotted)
        else:
            r = a.resolve(s.path, s.line, s.col, hover_budget_s)
            chain = r.chain if r is not None else None
            if chain is not None and chain.partial:
                chain = a.resolve(s.path, s.line, s.col, None).chain  # the background completion
        cli = _json_leaves(d)
        hover = _chain_leaves(chain) if chain is not None else []
        impl = set()
        for t in leaf_locations(chain) if chain is not None else []:
            impl.add((t.path, None) if isinstance(t, M.Hop) else (t[0], t[1]))
        want = set()
        for f in d.get("leaves") or []:
            if f.get("reachability") == "dead" and any(x.get("reachability") != "dead" for x in d["leaves"]):
                continue
            if f["kind"] == M.NOT_INSTALLED:
                continue  # its target is the binding import (checked by path below)
            if f["kind"] == M.TORCH_OP:
                # the op's code: the C++ functions its registrations bind (the CLI's tree has them)
                regs = _registrations(d, f["symbol"])
                fns = {(r["function_path"], r["function_line"]) for r in regs if r.get("function_path")}
                want |= fns or ({(f["path"], f["line"])} if f.get("path") and f.get("line") else set())
            elif f.get("path") and f.get("line"):
                want.add((f["path"], f["line"]))
        impl_ok = want <= impl
        rows.append({"site": f"{os.path.relpath(s.path, root)}:{s.line}", "call": s.call, "cli": cli, "hover": hover,
                     "leaves_agree": cli == hover, "impl_agree": impl_ok,
                     "missing_impl": sorted(want - impl, key=repr)})
    ws.close()
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--sample", type=int, default=1, help="every k-th kernel call site (1: all)")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--defs", action="store_true", help="also every function and class definition")
    args = ap.parse_args()
    from attnlens.workspace import Workspace

    cache = args.cache_dir or tempfile.mkdtemp(prefix="attnlens-agree-")
    census = Workspace(args.root, python=args.python, cache_dir=cache)
    sites = census.kernel_sites()[::args.sample]
    if args.defs:
        sites += definition_positions(census)[::args.sample]
    census.close()
    t0 = time.perf_counter()
    rows = compare(args.root, args.python, sites, cache)
    bad = [r for r in rows if not (r["leaves_agree"] and r["impl_agree"])]
    for r in bad:
        print(f"DIFFER {r['site']} {r['call']}: cli {r['cli']} | hover {r['hover']} | implementation misses {r['missing_impl']}")
    print(f"{len(rows)} sites, {len(rows) - len(bad)} agree (leaves and implementation), {len(bad)} differ; "
          f"{time.perf_counter() - t0:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
