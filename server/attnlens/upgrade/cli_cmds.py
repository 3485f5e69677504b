"""CLI pieces: ``attnlens drift``, ``attnlens inventory`` and ``attnlens upstream``.

The main CLI calls :func:`add_subparsers` with its subparsers object. Every command
takes ``--root/--python/--cache-dir/--no-cache`` like the core commands, plus
``--subject`` (:mod:`.subjects`). Exit codes: 0 done, 1 ``--fail-on`` matched, 2 an
error (bad arguments, upstream version not available, subject not materialisable).
"""

from __future__ import annotations

import json
import os
import sys

from .subjects import add_subject_argument, subject_of, workspace_for_subject


def _common(p) -> None:
    p.add_argument("--root", default=None, help="plugin checkout to analyse (default: current folder)")
    p.add_argument("--python", default=None, help="target interpreter (default: $VIRTUAL_ENV or python3 on PATH)")
    p.add_argument("--cache-dir", default=None, help="cache folder root (default: $ATTNLENS_CACHE_DIR or ~/.cache/attnlens)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the analysis cache")
    add_subject_argument(p)


def _upstream_args(p, required_from: bool) -> None:
    p.add_argument("--from", dest="old", required=required_from, default=None, metavar="OLD",
                   help="old upstream: a version (fetched into the cache with --download), a path to its sources "
                        "(site-packages, venv, vllm/ folder, .whl) or `installed`")
    p.add_argument("--to", dest="new", default=None, metavar="NEW",
                   help="new upstream, same spellings (default: the vLLM installed in the target interpreter)")
    p.add_argument("--download", action="store_true",
                   help="allow `pip download --no-deps` of a version that is not in the cache yet")


def add_subparsers(sub) -> None:
    d = sub.add_parser("drift", help="what changed upstream between two vLLM versions, for every plugin symbol in scope",
                       description="Classify every plugin symbol in scope against an old and a new upstream: "
                                   "changed_upstream, retained_adaptation, new_hook, removed_upstream, unchanged.")
    _common(d)
    _upstream_args(d, required_from=True)
    d.add_argument("--scope", nargs="*", default=None, metavar="GLOB", help="files to cover (default: attention folders)")
    d.add_argument("--patches", choices=("scope", "all", "none"), default="scope",
                   help="which monkey patches to include (default: those in scope or on attention modules)")
    d.add_argument("--json", action="store_true")
    d.add_argument("--all", action="store_true", help="also list unchanged symbols and retained adaptations")
    d.add_argument("--diff", action="store_true", help="print the upstream body diffs")
    d.add_argument("--fail-on", choices=("never", "flagged", "removed"), default="never",
                   help="exit 1 when a symbol is flagged (or removed upstream)")
    d.set_defaults(func=cmd_drift)

    i = sub.add_parser("inventory", help="per-file upgrade inventory: registration, callers, upstream, differences, "
                                         "findings, evidence and a proposed action")
    _common(i)
    _upstream_args(i, required_from=False)
    i.add_argument("--scope", nargs="*", default=None, metavar="GLOB",
                   help="files to cover (default: <package>/v1/attention/**)")
    i.add_argument("--format", choices=("md", "json"), default="md")
    i.add_argument("--no-rules", action="store_true", help="do not run the rules engine")
    i.set_defaults(func=cmd_inventory, fast_exit=True)

    fx = sub.add_parser("fix", help="quick fixes of upgrade findings (AL108/AL111/AL112/AL120, drift AL302/AL303/"
                                    "AL304/AL308): list them, print a fix as a unified diff, write it with --apply",
                        description="Without --diff or --apply: list the findings that have a quick fix. --finding ID "
                                    "(from `attnlens check/drift --json`) picks one (repeatable), --all every one. "
                                    "Nothing is written without --apply, and only to the working tree.")
    _common(fx)
    _upstream_args(fx, required_from=False)
    fx.add_argument("paths", nargs="*", help="files or folders (default: the whole workspace)")
    fx.add_argument("--finding", action="append", default=None, metavar="ID", help="the finding to fix (repeatable)")
    fx.add_argument("--all", action="store_true", help="every offered fix (one per change), file by file")
    fx.add_argument("--rule", default=None, help="with --all: only these rule ids (comma-separated)")
    fx.add_argument("--diff", action="store_true", help="print the edit as a unified diff")
    fx.add_argument("--apply", action="store_true", help="write the edit to the working tree")
    fx.add_argument("--json", action="store_true", help="list the offers as JSON")
    fx.set_defaults(func=cmd_fix, fast_exit=True)

    u = sub.add_parser("upstream", help="upstream versions in the cache (fetch one with pip download)")
    usub = u.add_subparsers(dest="upstream_command", metavar="ACTION")
    uf = usub.add_parser("fetch", help="pip download --no-deps vllm==VERSION and unpack its sources into the cache")
    uf.add_argument("version")
    uf.add_argument("--cache-dir", default=None)
    uf.add_argument("--timeout", type=float, default=1200.0)
    uf.add_argument("--package", default="vllm")
    uf.set_defaults(func=cmd_upstream_fetch)
    ul = usub.add_parser("list", help="versions unpacked in the cache")
    ul.add_argument("--cache-dir", default=None)
    ul.add_argument("--package", default="vllm")
    ul.set_defaults(func=cmd_upstream_list)
    u.set_defaults(func=lambda args: (u.print_help(), 2)[1])


def _cache_root(args):
    from ..cache import default_cache_root

    return os.path.expanduser(args.cache_dir) if getattr(args, "cache_dir", None) else str(default_cache_root())


def _resolve(spec: str | None, ws, args):
    from .config import load_config
    from .upstream import UpstreamError, resolve

    if spec is None:
        return None
    try:
        return resolve(spec, package=load_config(ws.root).upstream_package, cache_root=_cache_root(args),
                       download=getattr(args, "download", False), target=ws.target)
    except UpstreamError as e:
        raise SystemExit(f"attnlens: {e}") from None


def cmd_drift(args) -> int:
    from .drift import FLAGGED, drift_report

    ws = workspace_for_subject(args)
    ws.query.allow_fork()  # single-threaded CLI: forked prefetch is safe
    old = _resolve(args.old, ws, args)
    new = _resolve(args.new, ws, args) if args.new and args.new != "installed" else None
    rep = drift_report(ws, old, new, globs=args.scope or None, patches=args.patches)
    ws.close()
    if args.json:
        print(json.dumps(rep.to_json(), indent=1, default=str))
    else:
        print(f"subject: {rep.subject.get('description') if rep.subject else ws.root}")
        print(f"upstream: {rep.old.get('label')} ({rep.old.get('root')}) -> {rep.new.get('label')} ({rep.new.get('root')})")
        print(f"scope: {', '.join(rep.scope)}")
        for it in rep.items:
            if not args.all and not it.noted:
                continue
            rel = os.path.relpath(it.path, ws.root)
            mark = "!" if it.flagged else " "
            print(f"{mark} {it.status:20} {rel}:{it.line}  {it.symbol}")
            if it.counterpart_old or it.counterpart_new:
                cp = it.counterpart_new or it.counterpart_old
                if it.counterpart_old and it.counterpart_new and it.counterpart_old != it.counterpart_new:
                    cp = f"{it.counterpart_old} -> {it.counterpart_new}"
                print(f"      upstream: {cp} (via {it.via}, {it.relation})")
            for ch in it.changes:
                if ch.status in FLAGGED or args.all:
                    rule = f"{ch.rule} " if ch.rule else ""
                    at = f" [L{ch.line}]" if ch.line else ""
                    print(f"      {rule}{ch.severity}: {ch.message}{at}")
                    if args.diff and ch.data.get("diff"):
                        for ln in ch.data["diff"].splitlines():
                            print(f"        {ln}")
            for n in it.notes:
                if args.all:
                    print(f"      note: {n}")
        c = rep.counts()
        nflag = sum(1 for it in rep.items if it.flagged)
        print()
        print(f"{len(rep.items)} symbols with an upstream counterpart or an upstream-side change: "
              + ", ".join(f"{k} {v}" for k, v in c.items()) + f"; flagged for review: {nflag} ({rep.elapsed_s:.2f} s)")
        for e in rep.errors:
            print(f"attnlens: analysis error: {e}", file=sys.stderr)
    if args.fail_on == "flagged" and any(it.flagged for it in rep.items):
        return 1
    if args.fail_on == "removed" and any(it.status == "removed_upstream" for it in rep.items):
        return 1
    return 0


def cmd_inventory(args) -> int:
    from .inventory import build_inventory, to_markdown

    ws = workspace_for_subject(args)
    ws.query.allow_fork()  # single-threaded CLI: forked prefetch is safe
    old = _resolve(args.old, ws, args)
    new = _resolve(args.new, ws, args) if args.new and args.new != "installed" else None
    if not args.no_cache:
        try:
            ws.query.prefetch_cpp()
        except Exception:
            pass
    inv = build_inventory(ws, globs=args.scope or None, old=old, new=new, rules=not args.no_rules)
    ws.close()
    if args.format == "json":
        print(json.dumps(inv.to_json(), indent=1, default=str))
    else:
        sys.stdout.write(to_markdown(inv))
    return 0


def cmd_fix(args) -> int:
    """0: done (or listed); 1: a fix was refused or could not be computed; 2: bad arguments."""
    from . import fixes as FX
    from .drift import drift_report

    ws = workspace_for_subject(args)
    ws.query.allow_fork()
    subj = subject_of(ws)
    if args.apply and subj.kind != "worktree":
        print(f"attnlens: --apply writes to the working tree only; the subject is {subj.description} "
              "(use --diff to see the fix)", file=sys.stderr)
        return 2
    old = _resolve(args.old, ws, args)
    new = _resolve(args.new, ws, args) if args.new and args.new != "installed" else None
    drift = drift_report(ws, old, new, patches="none") if old is not None else None
    paths = [p if os.path.isabs(p) or os.path.exists(p) else os.path.join(str(ws.root), p) for p in args.paths] or None
    findings = FX.collect_findings(ws, paths, drift)
    offers = FX.offers(ws, findings, drift)
    root = str(ws.root)
    if not args.finding and not args.all:
        if args.json:
            print(json.dumps([o.to_json(root) for o in offers], indent=1))
        else:
            for o in offers:
                print(f"{o.id}  {os.path.relpath(o.path, root)}:{o.line}  {o.title}")
            print(f"{len(offers)} quick fix(es) for {len(findings)} fixable finding(s); "
                  "show one with --finding ID --diff, write it with --apply")
        return 0
    chosen = []
    status = 0
    if args.finding:
        ids = [f["id"] for f in findings]
        for fid in args.finding:
            try:
                chosen.append(FX.select(offers, fid, ids))
            except FX.FixError as e:
                print(f"attnlens: {e}", file=sys.stderr)
                status = 1
    else:
        rules = {x.strip().upper() for x in (args.rule or "").split(",") if x.strip()}
        chosen = FX.one_per_change([o for o in offers if not rules or o.rule in rules])
    by_path: dict = {}
    for o in chosen:
        by_path.setdefault(o.path, []).append(o)
    for path, todo in by_path.items():
        try:
            with open(path, encoding="utf-8", newline="") as fh:
                before = fh.read()
        except OSError as e:
            print(f"attnlens: cannot read {path}: {e}", file=sys.stderr)
            status = 1
            continue
        text = before
        for o in todo:
            try:
                text = FX.apply(o, text)
            except FX.FixError as e:
                print(f"attnlens: {o.id}: {e}", file=sys.stderr)
                status = 1
                continue
            print(f"# {o.id}: {o.title}", file=sys.stderr)
        if text == before:
            continue
        if args.diff or not args.apply:
            sys.stdout.write(FX.unified_diff(path, before, text, root))
        if args.apply:
            with open(path, encoding="utf-8", newline="") as fh:
                if fh.read() != before:
                    print(f"attnlens: refused: {path} changed while the fix was computed; run again", file=sys.stderr)
                    status = 1
                    continue
            tmp = f"{path}.attnlens-fix"
            with open(tmp, "w", encoding="utf-8", newline="") as fh:
                fh.write(text)
            os.replace(tmp, path)
            print(f"attnlens: wrote {os.path.relpath(path, root)}", file=sys.stderr)
    return status


def cmd_upstream_fetch(args) -> int:
    from .upstream import UpstreamError, resolve

    try:
        src = resolve(args.version, package=args.package, cache_root=_cache_root(args), download=True, timeout=args.timeout)
    except UpstreamError as e:
        print(f"attnlens: {e}", file=sys.stderr)
        return 2
    print(f"{src.label}: {src.root}")
    return 0


def cmd_upstream_list(args) -> int:
    from .upstream import cached_versions

    for s in cached_versions(_cache_root(args), args.package):
        print(f"{s.label}: {s.root}")
    return 0


__all__ = ["add_subparsers", "subject_of"]
