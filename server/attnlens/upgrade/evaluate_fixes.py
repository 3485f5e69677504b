"""Score the quick fixes offered on a plugin snapshot against what its maintainers really did.

``python -m attnlens.upgrade.evaluate_fixes --root BEFORE --real AFTER --python PY --from OLD [--to NEW]``

Every offered fix (one per change, as ``attnlens fix --all``) is applied to the BEFORE text of
its file (in memory), and its target is looked up in the AFTER tree (the maintainers' sync):

* ``import``: AFTER imports the name from the replacement module (``match``), or still from the
  removed one / not at all (``no``);
* ``hook``: AFTER's class defines the hook with upstream's body (``match``), with a body of its
  own (``partial``: the decision was made, differently), or not at all (``no``);
* ``op_param`` / ``fields``: per parameter or field, AFTER has it with the same annotation and
  default (``match`` when all do, ``partial`` when some do).

Bodies and annotations are compared as normalised ASTs (formatting, comments and docstrings do
not count). Nothing is written.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys


def _tree(path: str):
    try:
        with open(path, encoding="utf-8") as fh:
            return ast.parse(fh.read())
    except (OSError, SyntaxError, ValueError):
        return None


def _find(tree, qual: str):
    body = tree.body if tree is not None else []
    node = None
    for name in qual.split("."):
        node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                     and n.name == name), None)
        if node is None:
            return None
        body = node.body
    return node


def _norm(node) -> str:
    body = list(getattr(node, "body", []))
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        body = body[1:]
    return "|".join(ast.dump(s, include_attributes=False) for s in body)


def _expr(text):
    if text is None:
        return None
    try:
        return ast.dump(ast.parse(text, mode="eval").body, include_attributes=False)
    except SyntaxError:
        return text


def score(offer, real_path: str) -> tuple[str, str]:
    tree = _tree(real_path)
    if tree is None:
        return "no", "the file is gone in the real sync"
    s = offer.spec
    if offer.kind == "import":
        rmod, rname = s.get("replacement_module"), s.get("replacement_name")
        froms = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
        if rmod and (rmod, rname) in froms:
            return "match", f"imports {rname} from {rmod}"
        if (s["module"], s["name"]) in froms:
            return "no", f"still imports {s['name']} from {s['module']}"
        where = [m for m, a in froms if a == (rname or s["name"])]
        return "no", f"imports it from {where[0]}" if where else "does not import it"
    if offer.kind == "hook":
        cls = _find(tree, s["class"])
        fn = _find(tree, f"{s['class']}.{s['hook']}") if cls is not None else None
        if fn is None:
            return "no", "the class does not define it"
        up = ast.parse("class _X:\n" + s["source"]).body[0].body[0] if s["source"].startswith((" ", "\t")) else ast.parse(s["source"]).body[0]
        return ("match", "upstream's body") if _norm(fn) == _norm(up) else ("partial", "defined with a body of its own")
    if offer.kind == "op_param":
        fn = _find(tree, s["function"])
        if fn is None:
            return "no", "the function is gone"
        a = fn.args
        allp = a.posonlyargs + a.args + a.kwonlyargs
        defaults = dict(zip([p.arg for p in (a.posonlyargs + a.args)][::-1], [ast.dump(d) for d in a.defaults[::-1]]))
        defaults.update({p.arg: ast.dump(d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
        ann = {p.arg: ast.dump(p.annotation) if p.annotation is not None else None for p in allp}
        ok = [p["name"] for p in s["params"] if p["name"] in ann and ann[p["name"]] == _expr(p["annotation"])
              and defaults.get(p["name"]) == _expr(p["default"])]
        return _verdict(ok, [p["name"] for p in s["params"]])
    if offer.kind == "fields":
        cls = _find(tree, s["class"])
        if cls is None:
            return "no", "the class is gone"
        have = {st.target.id: (ast.dump(st.annotation), ast.dump(st.value) if st.value is not None else None)
                for st in cls.body if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}
        ok = [t["name"] for t in s["fields"] if have.get(t["name"]) == (_expr(t["annotation"]), _expr(t["default"]))]
        return _verdict(ok, [t["name"] for t in s["fields"]])
    return "no", "unknown kind"


def _verdict(ok: list, wanted: list) -> tuple[str, str]:
    if len(ok) == len(wanted):
        return "match", f"all of {', '.join(wanted)}"
    if ok:
        return "partial", f"{', '.join(ok)} of {', '.join(wanted)}"
    return "no", f"none of {', '.join(wanted)}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m attnlens.upgrade.evaluate_fixes")
    p.add_argument("--root", required=True)
    p.add_argument("--real", required=True, help="the maintainers' tree after the sync")
    p.add_argument("--python", default=None)
    p.add_argument("--cache-dir", default=None)
    p.add_argument("--from", dest="old", default=None)
    p.add_argument("--to", dest="new", default=None)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    from ..cache import default_cache_root
    from ..workspace import Workspace
    from . import fixes as FX
    from .drift import drift_report
    from .upstream import resolve

    ws = Workspace(args.root, python=args.python, cache_dir=args.cache_dir)
    root_cache = args.cache_dir or str(default_cache_root())
    old = resolve(args.old, cache_root=root_cache, target=ws.target) if args.old else None
    new = resolve(args.new, cache_root=root_cache, target=ws.target) if args.new and args.new != "installed" else None
    drift = drift_report(ws, old, new, patches="none") if old is not None else None
    offers = FX.offers(ws, FX.collect_findings(ws, None, drift), drift)
    rows = []
    texts: dict = {}
    for o in FX.one_per_change(offers):
        if o.path not in texts:
            with open(o.path, encoding="utf-8") as fh:
                texts[o.path] = fh.read()
        try:
            texts[o.path] = FX.apply(o, texts[o.path])
            applied = True
        except FX.FixError as e:
            applied = str(e)
        rel = os.path.relpath(o.path, args.root)
        verdict, why = score(o, os.path.join(args.real, rel))
        rows.append({"id": o.id, "kind": o.kind, "path": rel, "title": o.title, "applied": applied is True,
                     "error": None if applied is True else applied, "verdict": verdict, "why": why})
    ws.close()
    counts = {k: sum(1 for r in rows if r["verdict"] == k) for k in ("match", "partial", "no")}
    if args.json:
        print(json.dumps({"offers": len(rows), "counts": counts, "rows": rows}, indent=1))
    else:
        for r in rows:
            print(f"{r['verdict']:8} {r['kind']:9} {r['path']}  {r['title'][:110]}\n         {r['why']}"
                  + ("" if r["applied"] else f"  [not applied: {r['error']}]"))
        print(f"{len(rows)} fixes offered: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
