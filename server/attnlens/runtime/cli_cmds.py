"""CLI pieces: ``attnlens env`` and ``attnlens probe list|run``.

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
    psub = pp.add_subparsers(dest="probe_cmd", metavar="{list,run}")
    pl = psub.add_parser("list", help="list probe families")
    pl.add_argument("--json", action="store_true", help="machine-readable output")
    pl.set_defaults(func=cmd_probe_list)
    pr = psub.add_parser("run", help="run one probe family on a target")
    pr.add_argument("family", choices=probemod.family_names())
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
    pp.set_defaults(func=_probe_help(pp))


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
