"""``attnlens check`` and ``attnlens rules`` (loaded by :mod:`attnlens.cli`)."""

from __future__ import annotations

import json
import os
import sys
import time


def add_subparsers(sub) -> None:
    c = sub.add_parser("check", help="run the contract rules over plugin files (exit 1 when error findings exist)")
    c.add_argument("paths", nargs="*", help="files or folders (relative to the current folder or to --root); default: the whole workspace")
    c.add_argument("--root", default=None, help="plugin checkout to analyse (default: current folder)")
    c.add_argument("--python", default=None, help="target interpreter (default: $VIRTUAL_ENV or python3 on PATH)")
    c.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    c.add_argument("--cache-dir", default=None, help="cache folder root (default: $ATTNLENS_CACHE_DIR or ~/.cache/attnlens)")
    c.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    c.add_argument("--select", default=None, help="comma-separated rule ids to report (default: all)")
    c.add_argument("--ignore", default=None, help="comma-separated rule ids not to report")
    c.add_argument("--min-severity", choices=("error", "warning", "info"), default="info")
    c.add_argument("--contracts", action="append", default=None, metavar="DIR",
                   help="contract folder or file (repeatable; default: $ATTNLENS_CONTRACTS, <root>/.attnlens/contracts, the shipped contracts/)")
    c.add_argument("-o", "--output", default=None, help="write the report to this file instead of stdout")
    from ..upgrade.subjects import add_subject_argument

    add_subject_argument(c)
    c.add_argument("--timing", action="store_true", help="print timing and cache statistics to stderr")
    c.add_argument("-v", "--verbose", action="store_true", help="text format: each finding's evidence and related locations")
    c.set_defaults(func=cmd_check, fast_exit=True)

    r = sub.add_parser("rules", help="list the contract rules")
    r.add_argument("--format", choices=("text", "json"), default="text")
    r.set_defaults(func=cmd_rules, fast_exit=True)


def _ids(text):
    return {x.strip().upper() for x in (text or "").split(",") if x.strip()}


def cmd_check(args) -> int:
    t0 = time.perf_counter()
    from ..workspace import Workspace
    from .contracts import default_contract_dirs, load_contracts
    from .engine import RULES, SEVERITY_RANK, Engine, rules_table

    root = args.root or os.getcwd()
    if not os.path.isdir(root):
        print(f"attnlens: --root {root} is not a folder", file=sys.stderr)
        return 2
    from ..upgrade.subjects import workspace_for_subject

    ws = workspace_for_subject(args)  # --subject worktree|index|rev:REV|installed; prints target warnings
    ws.query.allow_fork()  # single-threaded CLI
    _ = Workspace
    table = rules_table()
    select = _ids(args.select)
    ignore = _ids(args.ignore)
    unknown = (select | ignore) - set(RULES)
    if unknown:
        print(f"attnlens: unknown rule id(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    contracts = load_contracts(args.contracts if args.contracts else default_contract_dirs(ws.root))
    for e in contracts.errors:
        print(f"attnlens: contract error: {e}", file=sys.stderr)
    engine = Engine(ws, contracts=contracts, use_cache=not args.no_cache)
    if engine.needs_checking(args.paths or None):
        engine.start_prefetch()
    t1 = time.perf_counter()
    findings = engine.check_paths(args.paths or None)
    t2 = time.perf_counter()
    min_rank = SEVERITY_RANK[args.min_severity]
    findings = [f for f in findings if (not select or f.rule in select) and f.rule not in ignore
                and SEVERITY_RANK.get(f.severity, 2) <= min_rank]
    for e in engine.errors:
        print(f"attnlens: warning: {e}", file=sys.stderr)
    subj = getattr(ws, "subject", None)
    subject = {"kind": subj.kind, "path": str(subj.path), "description": subj.description} if subj is not None else \
        {"kind": "worktree", "path": str(ws.root), "description": f"working tree of {ws.root}"}
    if args.format == "json":
        out = json.dumps([dict(f.to_json(ws.root), subject=subject) for f in findings], indent=1)
    elif args.format == "sarif":
        from .sarif import to_sarif

        rules = [r for r in table if (not select or r.id in select) and r.id not in ignore]
        sarif = to_sarif(findings, rules, ws.root)
        for run in sarif.get("runs", []):
            run.setdefault("properties", {})["attnlens.subject"] = subject
        out = json.dumps(sarif, indent=1)
    else:
        lines = []
        for f in findings:
            j = f.to_json(ws.root)
            lines.append(f"{j['path']}:{j['line']}:{j['col']}: {f.severity} {f.rule} [{RULES[f.rule].name}] {f.message}")
            if args.verbose and f.detail:
                lines.extend("    " + x for x in f.detail.splitlines())
            for r in j.get("related", ()) if args.verbose else ():
                lines.append(f"    {r['path']}:{r['line']}:{r['col']}: {r['message']}")
        counts = {}
        for f in findings:
            counts[f.severity] = counts.get(f.severity, 0) + 1
        lines.append(f"subject: {subject['description']}")
        lines.append(f"{len(findings)} finding(s)" + (": " + ", ".join(f"{counts[k]} {k}" for k in ("error", "warning", "info") if k in counts) if counts else ""))
        out = "\n".join(lines)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(out + "\n")
    else:
        try:
            sys.stdout.write(out + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            pass
    engine.stop_prefetch()
    ws.close()
    if args.timing:
        t3 = time.perf_counter()
        print(f"attnlens check: setup {t1 - t0:.3f} s, rules {t2 - t1:.3f} s, output {t3 - t2:.3f} s, total {t3 - t0:.3f} s; "
              f"modules checked {engine.stats['checked']}, by the second checker {engine.stats.get('helper', 0)}, "
              f"from cache {engine.stats['cached']}", file=sys.stderr)
        if engine.timings:
            print("  per check: " + ", ".join(f"{k} {v:.2f}s" for k, v in sorted(engine.timings.items(), key=lambda kv: -kv[1])), file=sys.stderr)
    return 1 if any(f.severity == "error" for f in findings) else 0


def cmd_rules(args) -> int:
    from .engine import rules_table

    table = rules_table()
    if args.format == "json":
        print(json.dumps([r.to_json() for r in table], indent=1))
    else:
        for r in table:
            print(f"{r.id}  {r.name:<28} {r.severity:<8} {r.summary}")
    return 0
