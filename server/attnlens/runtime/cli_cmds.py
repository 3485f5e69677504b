"""CLI pieces: ``attnlens env`` and ``attnlens probe list|run|matrix``.

The main CLI (``attnlens/cli.py``, owned elsewhere) calls
:func:`add_subparsers` with its ``argparse`` subparsers object; every parser
added here sets ``func`` to its handler, which takes the parsed namespace and
returns the exit code (probe run: 0 pass, 1 a failed verdict, 2 an error).

Probes run only on explicit request (``probe run``); nothing here runs one
implicitly.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from ..cache import Cache
from . import environment as envmod
from . import probes as probemod
from .agent import AgentPool, default_pool

_POOL: AgentPool | None = None  # tests may inject a pool


def _pool() -> AgentPool:
    return _POOL or default_pool()


def default_python() -> str:
    """``$ATTNLENS_TARGET_PYTHON``, else the resolver's default ($VIRTUAL_ENV, python3 on PATH)."""
    env = os.environ.get("ATTNLENS_TARGET_PYTHON")
    if env:
        return env
    try:
        from ..target import default_python as _target_default

        return _target_default()
    except ImportError:  # pragma: no cover - attnlens.target is part of the package
        return shutil.which("python3") or sys.executable


def resolve_python(python: str) -> str:
    """Bare names (``python3``) are looked up on PATH; relative paths become absolute."""
    from ..target import resolve_python as _resolve

    return _resolve(python)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", default=None, metavar="PY",
                   help="target interpreter (where torch and the kernels are installed); default "
                        "$ATTNLENS_TARGET_PYTHON, $VIRTUAL_ENV or python3 on PATH")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment variable for the agent (repeatable; NAME= with no value removes it)")
    p.add_argument("--root", default=None, metavar="DIR",
                   help="workspace (plugin checkout) whose cache folder is used (default: current folder)")
    p.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="cache folder root (default: $ATTNLENS_CACHE_DIR or ~/.cache/attnlens)")
    p.add_argument("--no-cache", action="store_true", help="write no evidence / environment record")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def add_subparsers(subparsers) -> None:
    """Register ``env`` and ``probe`` (with ``list`` and ``run``) on an argparse subparsers object."""
    pe = subparsers.add_parser("env", help="show the target interpreter's environment record",
                               description="Collect (or reuse) the environment record of the target interpreter.")
    _common(pe)
    pe.add_argument("--refresh", action="store_true", help="collect again even if nothing seems changed")
    pe.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    pe.set_defaults(func=cmd_env)

    pp = subparsers.add_parser("probe", help="list or run runtime probes",
                               description="Runtime probes: discriminating calls against float64 references.")
    psub = pp.add_subparsers(dest="probe_cmd", metavar="{list,run,matrix}")
    pl = psub.add_parser("list", help="list probe families")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.set_defaults(func=cmd_probe_list)
    pr = psub.add_parser("run", help="run one probe family on a target")
    pr.add_argument("family", type=probemod.canonical_family, choices=probemod.family_names(),
                    help="probe family; the older names " + ", ".join(sorted(probemod.FAMILY_ALIASES))
                    + " are accepted")
    pr.add_argument("--target", required=True, metavar="SYMBOL",
                    help="pkg.mod:attr, dotted pkg.mod.attr, ns::op or torch.ops.ns.op")
    pr.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    pr.add_argument("--timeout", type=float, default=probemod.DEFAULT_TIMEOUT_S,
                    help=f"seconds before the probe is killed (default {probemod.DEFAULT_TIMEOUT_S:g})")
    pr.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="family option (repeatable; VALUE parsed as JSON when it can be)")
    pr.add_argument("--module", default=None, help="module to import first (e.g. the op's provider)")
    pr.add_argument("--load-library", default=None, metavar="SO", help="torch.ops.load_library() this file first")
    g = pr.add_mutually_exclusive_group()
    g.add_argument("--interpret", dest="interpret", action="store_true", default=None,
                   help="run Triton kernels under TRITON_INTERPRET=1 (default on CPU)")
    g.add_argument("--no-interpret", dest="interpret", action="store_false")
    _common(pr)
    pr.set_defaults(func=cmd_probe_run)
    _add_matrix(psub)
    pp.set_defaults(func=_probe_help(pp))


def _add_matrix(psub) -> None:
    pm = psub.add_parser(
        "matrix", help="run a probe campaign on many hosts (Ray) and report the matrix",
        description="A campaign = cells (family, target, options) x hosts. Hosts are the nodes of a Ray cluster "
                    "(--ray-address; a local one when none is given), filtered by the campaign's [[host]] "
                    "tables or --host; --runner local runs every host as an interpreter on this machine. "
                    "Results: evidence records in the workspace cache and a matrix (Markdown, JSON or HTML).")
    pm.add_argument("campaign", nargs="?", default=None, metavar="CAMPAIGN.toml",
                    help="campaign file (TOML, data only: [[probe]] and [[host]] tables; docs/probes.md)")
    pm.add_argument("--probe", action="append", default=[], metavar="FAMILY=TARGET",
                    help="add a cell (repeatable)")
    pm.add_argument("--from-check", nargs="+", default=None, metavar="PATH",
                    help="add a cell for every probe the contract findings of PATHS ask for (attnlens check), "
                         "deduplicated by (family, target)")
    pm.add_argument("--from-inventory", default=None, metavar="INVENTORY.json",
                    help="add the probes an upgrade inventory (attnlens inventory --format json) asks for")
    pm.add_argument("--host", action="append", default=[], metavar="SPEC",
                    help="a host: name=N[,resource=R][,node_id=ID][,address=IP][,hostname=H][,label.K=V]"
                         "[,python=PY][,env.NAME=V][,num_gpus=G][,parallel=P] (repeatable)")
    pm.add_argument("--ray-address", default=None, metavar="auto|HOST:PORT",
                    help="the Ray cluster (default: start a local one on this machine)")
    pm.add_argument("--runner", choices=("ray", "local"), default="ray",
                    help="ray (default; needs attnlens[fleet]) or local (no Ray: hosts are local interpreters)")
    pm.add_argument("--device", default=None, help="device of cells that name none (auto, cpu, cuda, cuda:N)")
    pm.add_argument("--timeout", type=float, default=None, help="seconds per cell (default: the campaign's or "
                                                                 f"{probemod.DEFAULT_TIMEOUT_S:g})")
    pm.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="option for cells added with --probe / --from-check (repeatable)")
    pm.add_argument("--name", default=None, help="campaign name (where its state is stored; default from the file)")
    pm.add_argument("--resume", action="store_true",
                    help="run only the cells that are missing or failed to run (lost, timeout, crashed, error)")
    pm.add_argument("--retry-failed", action="store_true",
                    help="with --resume, also run again cells whose verdict was fail / import_error / inconclusive")
    pm.add_argument("--report-only", action="store_true", help="run nothing: render the stored state")
    pm.add_argument("--dry-run", action="store_true", help="print the cells and hosts, run nothing")
    pm.add_argument("--format", choices=("md", "json", "html"), default="md", help="matrix format (default md)")
    pm.add_argument("--output", "-o", default=None, metavar="FILE", help="write the matrix there")
    pm.add_argument("--report-dir", default=None, metavar="DIR", help="write matrix.md, matrix.json, matrix.html there")
    _common(pm)
    pm.set_defaults(func=cmd_probe_matrix)


def _probe_help(pp):
    def f(args) -> int:
        pp.print_help(sys.stderr)
        return 2

    return f


# ---------------------------------------------------------------------------


def _cache(args) -> Cache:
    """The workspace cache folder, as the rest of AttnLens computes it (the only place we write)."""
    if getattr(args, "no_cache", False):
        return Cache(None)
    root = Path(getattr(args, "root", None) or os.getcwd())
    cache_dir = getattr(args, "cache_dir", None)
    return Cache.for_workspace(root, Path(cache_dir) if cache_dir else None)


def _env_overrides(items: list[str]) -> dict:
    out: dict = {}
    for it in items or []:
        if "=" not in it:
            raise ValueError(f"--env expects NAME=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        if not k or any(c in k for c in "\0="):
            raise ValueError(f"bad environment variable name {k!r}")
        out[k] = v if v != "" else None
    return out


def _options(items: list[str]) -> dict:
    out: dict = {}
    for it in items or []:
        if "=" not in it:
            raise ValueError(f"--option expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    return out


def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n")


def cmd_env(args) -> int:
    python = resolve_python(args.python or default_python())
    try:
        env = _env_overrides(args.env)
        cache = _cache(args)
        record, changed, prev = envmod.load_or_collect(python, cache, refresh=bool(args.refresh), env=env,
                                                       pool=_pool(), timeout=args.timeout)
    except (ValueError, envmod.EnvironmentError_) as e:
        if args.json:
            _print_json({"error": str(e), "python": python})
        else:
            print(f"attnlens env: {e}", file=sys.stderr)
        return 2
    summary = envmod.summary(record)
    if args.json:
        _print_json({"python": python, "hash": record.get("hash"), "changed": changed, "previous_hash": prev,
                     "summary": summary, "record": record})
        return 0
    print(f"python:  {python}")
    print(f"summary: {summary}")
    h = record.get("hash")
    if changed:
        print(f"hash:    {h}  (CHANGED: was {prev})")
    elif prev:
        print(f"hash:    {h}  (unchanged)")
    else:
        print(f"hash:    {h}  (first record)")
    t = record.get("torch") or {}
    if t.get("error"):
        print(f"torch:   NOT IMPORTABLE: {t['error']}")
    else:
        print(f"torch:   {t.get('version')}  git {str(t.get('git_version'))[:12]}  cuda {t.get('cuda')}  "
              f"hip {t.get('hip')}  cxx11_abi {t.get('cxx11_abi')}  {t.get('file')}")
    for d in t.get("devices") or []:
        cap = ".".join(str(x) for x in d.get("capability") or [])
        print(f"gpu{d.get('index')}:    {d.get('name')}  cap {cap}  {int(d.get('total_memory') or 0) // 2**20} MiB  "
              f"SMs {d.get('multi_processor_count')}")
    if not t.get("devices"):
        print("gpu:     none visible to torch")
    rt = record.get("runtime") or {}
    for k in ("cuda_runtime", "cuda_driver", "hip_runtime", "maca_runtime", "maca_driver"):
        v = rt.get(k)
        if v:
            print(f"{k + ':':<9}{v.get('value')}  ({v.get('library')})")
    maca = record.get("maca") or {}
    if maca.get("maca_path") or (maca.get("mx_smi") or {}).get("present"):
        print(f"maca:    path {maca.get('maca_path')}  version {maca.get('version')}  "
              f"mx-smi {'present' if (maca.get('mx_smi') or {}).get('present') else 'absent'}")
    tr = record.get("triton") or {}
    if tr.get("present"):
        print(f"triton:  {tr.get('version')}  target {tr.get('target') or tr.get('target_error', '')[:80]}  "
              f"interpret {tr.get('interpret')}")
    for name, pk in sorted((record.get("packages") or {}).items()):
        if pk.get("version") or pk.get("location"):
            print(f"  {name:<20} {str(pk.get('version') or '-'):<16} {pk.get('location') or ''}")
    return 0


def cmd_probe_list(args) -> int:
    fams = probemod.families()
    if args.json:
        _print_json(fams)
        return 0
    for f in fams:
        print(f"{f['name']:<16} {f['title']}")
        print(f"{'':<16} component: {f['component']}")
        print(f"{'':<16} cases: {', '.join(c['name'] for c in f['cases'])}")
    print("\nattnlens probe run FAMILY --target SYMBOL [--python PY] [--device DEV]  (see docs/probes.md)")
    return 0


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    try:
        return f"{float(v):.2e}"
    except (TypeError, ValueError):
        return str(v)


def cmd_probe_run(args) -> int:
    python = resolve_python(args.python or default_python())
    try:
        env = _env_overrides(args.env)
        options = _options(args.option)
        if args.interpret is not None:
            options["interpret"] = bool(args.interpret)
        cache = _cache(args)
        rec = probemod.run_probe(python, args.family, args.target, args.device, cache, args.timeout,
                                 options=options, env=env, pool=_pool(), module=args.module,
                                 load_library=args.load_library)
    except ValueError as e:
        if args.json:
            _print_json({"error": str(e)})
        else:
            print(f"attnlens probe run: {e}", file=sys.stderr)
        return 2
    path = cache.folder / "evidence" / f"{rec.id}.json" if cache.enabled else None
    if args.json:
        d = rec.to_dict()
        d["evidence_path"] = str(path) if path else None
        d["exit_code"] = rec.exit_code
        _print_json(d)
        return rec.exit_code
    mode = "triton interpreter" if rec.interpret else "native"
    print(f"probe {rec.family} on {rec.target} ({rec.device}, {mode})")
    pv = rec.provider or {}
    if pv:
        where = pv.get("file") or pv.get("qualname") or ""
        line = f":{pv['line']}" if pv.get("line") else ""
        print(f"provider: {pv.get('kind', '?')} {pv.get('qualname') or pv.get('symbol') or ''} {where}{line}")
        dk = pv.get("device_kernel")
        if dk:
            print(f"          {pv.get('device_key')}: {dk}")
    if rec.environment.get("summary"):
        print(f"environment: {rec.environment['summary']}")
    if rec.environment.get("changed_from"):
        print(f"             (environment changed since the last record, was {rec.environment['changed_from']})")
    for c in rec.cases:
        st = str(c.get("status", "?")).upper()
        req = "" if c.get("required", True) else " (advisory)"
        print(f"  {st:<5} {c.get('name', ''):<26} max_abs {_fmt(c.get('max_abs_err')):>9}  "
              f"max_rel {_fmt(c.get('max_rel_err')):>9}  seed {c.get('seed')} {c.get('dtype') or ''}{req}")
        if c.get("note") and st != "PASS":
            print(f"        {c['note'][:300]}")
    n = len(rec.cases)
    ok = sum(1 for c in rec.cases if c.get("status") == "pass")
    msg = f" - {rec.message}" if rec.message else ""
    print(f"verdict: {rec.verdict.upper()} ({ok}/{n} cases pass){msg}")
    if rec.details.get("import_error"):
        ie = rec.details["import_error"]
        print(f"import error (evidence, verbatim): {ie.get('type')}: {ie.get('message')}")
    if rec.verdict in ("crashed", "timeout") and rec.details.get("stderr_tail"):
        lines = rec.details["stderr_tail"].splitlines()
        start = max((i for i, ln in enumerate(lines) if ln.startswith("Fatal Python error")), default=len(lines) - 15)
        print("agent stderr (tail):")
        for line in lines[max(0, start):][:30]:
            print(f"  | {line}")
    print(f"evidence: {rec.id}" + (f"  ({path})" if path else ""))
    return rec.exit_code


# ----------------------------------------------------------------------------- probe matrix


def _campaign_from_args(args):
    from ..fleet import campaign as C

    camp = C.load_toml(args.campaign) if args.campaign else C.Campaign(cells=[])
    extra: list = []
    opts = _options(args.option)
    for p in args.probe:
        fam, sep, tgt = p.partition("=")
        if not sep:
            raise C.CampaignError(f"--probe expects FAMILY=TARGET, got {p!r}")
        extra.append(C.Cell.from_dict({"family": fam, "target": tgt, "options": opts}, f"--probe {p}"))
    if args.from_check:
        root = str(Path(args.root or os.getcwd()).resolve())
        findings = C.check_findings(root, args.from_check, python=args.python)
        for c in C.from_findings(findings, root):
            c.options = dict(opts)
            extra.append(c)
    if args.from_inventory:
        try:
            inv = json.loads(Path(args.from_inventory).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise C.CampaignError(f"cannot read inventory {args.from_inventory}: {e}") from None
        for c in C.from_inventory(inv if isinstance(inv, dict) else {}):
            c.options = dict(opts)
            extra.append(c)
    camp.cells = C.dedup(list(camp.cells) + C.dedup(extra, by_target=True))
    for c in camp.cells:
        if args.device and c.device == "auto":
            c.device = args.device
        if args.timeout:
            c.timeout = float(args.timeout)
    env = _env_overrides(args.env)
    if env:
        for c in camp.cells:
            c.env = {**env, **c.env}
    hosts = [C.parse_host_arg(h) for h in args.host]
    if hosts:
        names = {h.name for h in hosts}
        camp.hosts = [h for h in camp.hosts if h.name not in names] + hosts
    if args.name:
        camp.name = args.name
    if not camp.cells:
        raise C.CampaignError("the campaign has no cells (give CAMPAIGN.toml, --probe, --from-check or "
                              "--from-inventory)")
    return camp


def cmd_probe_matrix(args) -> int:
    from ..fleet import campaign as C
    from ..fleet import report as R
    from ..fleet import runner as F

    def fail(msg: str) -> int:
        if args.format == "json" and not args.output:
            _print_json({"error": msg})
        else:
            print(f"attnlens probe matrix: {msg}", file=sys.stderr)
        return 2

    try:
        camp = _campaign_from_args(args)
        cache = _cache(args)
    except (C.CampaignError, ValueError) as e:
        return fail(str(e))
    if args.dry_run:
        d = camp.to_dict()
        if args.format == "json":
            _print_json(d)
        else:
            print(f"campaign {camp.id}: {len(camp.cells)} cell(s)")
            for c in camp.cells:
                print(f"  {c.family:<15} {c.target}" + (f"   <- {', '.join(c.origin[:3])}" if c.origin else ""))
            for h in camp.hosts:
                print(f"  host {h.name}: {h.selectors() or 'any node'}; python {h.python or '(Ray worker)'}")
            if not camp.hosts:
                print("  hosts: every node the Ray cluster lists" if args.runner == "ray" else "  host: local")
        return 0
    python = resolve_python(args.python) if args.python else None
    progress = (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        if args.report_only:
            st = F.load_state(cache, camp)
        elif args.runner == "local":
            st = F.run_local(camp, cache, python=python or resolve_python(default_python()), resume=args.resume,
                             retry_verdicts=args.retry_failed, progress=progress, pool=_pool())
        else:
            st = F.run_ray(camp, cache, address=args.ray_address, python=python, resume=args.resume,
                           retry_verdicts=args.retry_failed, progress=progress)
    except (F.FleetUnavailable, C.CampaignError, ValueError) as e:
        return fail(str(e))
    m = R.build(st)
    if args.report_dir:
        out = Path(args.report_dir)
        out.mkdir(parents=True, exist_ok=True)
        for fmt, name in (("md", "matrix.md"), ("json", "matrix.json"), ("html", "matrix.html")):
            (out / name).write_text(R.render(m, fmt), encoding="utf-8")
    text = R.render(m, args.format)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    statuses = [c.get("status") for r in m["rows"] if r["case"] == R.VERDICT_ROW for c in r["hosts"].values()]
    if any(s == "error" for s in statuses):
        return 2 if all(s == "error" for s in statuses) else 1
    return 0 if statuses and all(s == "pass" for s in statuses) else 1
