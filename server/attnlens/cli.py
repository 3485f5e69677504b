"""``attnlens`` command line: the same analysis as the language server, headless.

Every question goes through the workspace's :class:`~attnlens.query.Query`, the door the language
server uses too (``.importlinter``: the CLI imports no analysis module behind it)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sys
import time

from . import __version__


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help="plugin checkout to analyse (default: current folder)")
    p.add_argument("--python", default=None, help="target interpreter (default: $VIRTUAL_ENV or python3 on PATH)")
    p.add_argument("--cache-dir", default=None, help="cache folder root (default: $ATTNLENS_CACHE_DIR or ~/.cache/attnlens)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the cache")
    from .upgrade.subjects import add_subject_argument

    add_subject_argument(p)


def _query(args):
    """The query of the workspace of ``--root`` for ``--subject`` (worktree, index, rev:REV, installed)."""
    from .upgrade.subjects import workspace_for_subject

    q = workspace_for_subject(args).query
    q.allow_fork()  # the CLI is single-threaded: forked prefetch workers are safe here
    return q


def _subject(q) -> dict:
    s = q.subject
    if s is None:
        return {"kind": "worktree", "path": str(q.root)}
    return {"kind": s.kind, "path": str(s.path), "description": s.description}


def _parse_position(spec: str) -> tuple[str, int, int]:
    parts = spec.rsplit(":", 2)
    if len(parts) != 3:
        raise SystemExit(f"attnlens: position must be FILE:LINE:COL, got {spec!r}")
    path, line, col = parts
    try:
        return path, int(line), int(col)
    except ValueError:
        raise SystemExit(f"attnlens: LINE and COL must be numbers in {spec!r}") from None


def cmd_trace(args) -> int:
    q = _query(args)
    path, line, col = _parse_position(args.position)
    path = os.path.abspath(path)
    subj = q.subject
    root = os.path.realpath(args.root or os.getcwd())
    if subj is not None and subj.kind != "worktree" and os.path.realpath(path).startswith(root + os.sep):
        # the position names a worktree file: read the same file of the subject's snapshot
        path = os.path.join(str(q.root), os.path.relpath(os.path.realpath(path), root))
    if not os.path.isfile(path):
        print(f"attnlens: no such file: {path}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    chain = q.trace_at(path, line, max(col - 1, 0))
    dt = time.perf_counter() - t0
    q.close()
    if chain is None:
        msg = f"nothing to trace at {path}:{line}:{col} (not a name or call, or not a Python module of the workspace)"
        if args.json:
            print(json.dumps({"error": msg}))
        else:
            print(f"attnlens: {msg}", file=sys.stderr)
        return 1
    if args.json:
        d = chain.to_json()
        d["elapsed_ms"] = round(dt * 1000, 3)
        d["subject"] = _subject(q)
        print(json.dumps(d, indent=1))
    else:
        from .render import chain_text

        print(chain_text(chain, q.platform_defaults()))
        if args.timing:
            print(f"(resolved in {dt * 1000:.2f} ms)")
    return 0


def cmd_backends(args) -> int:
    q = _query(args)
    t0 = time.perf_counter()
    if not args.no_cache:
        q.prefetch_cpp()
    entries = q.backends(with_call_sites=not args.no_call_sites, include_custom_ops=args.custom_ops)
    dt = time.perf_counter() - t0
    q.close()
    if args.json:
        print(json.dumps([dict(e.to_json(), subject=_subject(q)) for e in entries], indent=1))
    else:
        from .render import backends_table

        print(f"subject: {_subject(q).get('description') or _subject(q)['kind']}")
        print(backends_table(entries, q.root))
        if args.timing:
            print(f"({len(entries)} entries in {dt:.3f} s)")
    return 0


def cmd_sites(args) -> int:
    q = _query(args)
    paths = [os.path.abspath(p) if os.path.exists(p) else os.path.join(str(q.root), p) for p in args.paths] or None
    key = q.derived_key("sites", repr(sorted(paths or [])), "json-lines" if args.json else "text")
    stored = q.open_derived_text(key) if not args.no_cache else None
    if stored is not None:
        q.close()
        with stored:
            shutil.copyfileobj(stored, sys.stdout, 1 << 20)
        return 0
    split = not args.no_cache and q.sites_split(paths)
    if not args.no_cache:
        q.prefetch_cpp()
        if not split:
            q.prefetch_summaries()  # a worker parses from the end of the module list (what the traces lead to)
    # the output is written as the sites are traced, and to the cache folder alongside (an output past 256 M
    # characters is cheaper to recompute than to keep: upstream vLLM's JSON is ~100 MB, ~30 s to make); it was
    # made whole first, then pickled: 965 MB at the peak of `sites --json` over upstream vLLM
    sink = q.derived_text_writer(key, 256 << 20) if not args.no_cache else None
    records = q.kernel_site_records(paths, functools.partial(_site_record, str(q.root), args.json))
    try:
        for chunk in _sites_chunks(records, args.json):
            sys.stdout.write(chunk)
            if sink is not None:
                sink.write(chunk)
    except BaseException:
        if sink is not None:
            sink.discard()
        records.close()  # (a reader that went away: the forked helper is stopped now, not left to finish)
        raise
    if sink is not None:
        sink.commit()
    q.close()
    return 0


def _site_record(root: str, as_json: bool, s) -> tuple:
    """What the output says of one site (a plain value: a forked helper renders its own sites): its JSON line, or
    its text line, its leaf kinds, whether every live leaf runs on the device and whether every leaf is dead."""
    if as_json:
        return (json.dumps(s.to_json()),)
    from . import model as M
    from .render import site_leaves_text

    leaves = s.chain.leaves()
    rel = os.path.relpath(s.path, root)
    live = [lf for lf in leaves if lf.reachable is not False]
    runtime = bool(live) and all(lf.final.kind in M.RUNTIME_LEAF_KINDS for lf in live)
    return (f"{rel}:{s.line}:{s.col + 1}  {s.call} -> {site_leaves_text(s.chain)}",
            "+".join(sorted({str(lf.final.kind) for lf in leaves})) or "none", runtime, bool(leaves) and not live)


def _sites_chunks(records, as_json: bool):
    """The output of ``attnlens sites`` from the sites' records (:func:`_site_record`), in pieces as they come."""
    if as_json:
        # a JSON array with one site per line: the C encoder (json's indenting encoder is pure Python: upstream
        # vLLM's 23,000 sites took 3.5 s to write indented, 1.2 s like this), and a site greps as one line
        yield "["
        sep = "\n"
        for r in records:
            yield sep + r[0]
            sep = ",\n"
        yield ("]" if sep == "\n" else "\n]") + "\n"
        return
    from collections import Counter

    from . import model as M

    counts: Counter = Counter()
    n = all_runtime = all_dead = 0
    for r in records:
        yield r[0] + "\n"
        counts[r[1]] += 1
        n += 1
        all_runtime += 1 if r[2] else 0
        all_dead += 1 if not r[2] and r[3] else 0
    yield (f"\n{n} kernel call sites by leaf kinds: " + ", ".join(f"{k} {v}" for k, v in counts.most_common())
           + f"\n{all_runtime} of {n} sites have every live leaf in {{{', '.join(M.RUNTIME_LEAF_KINDS)}}}; "
           f"{all_dead} are dead on this platform (every leaf)\n")


def cmd_profile(args) -> int:
    q = _query(args)
    info = q.platform_summary()
    info["kernel_providers"] = [{"module": m, "guard": g, "status": s} for m, g, s in q.kernel_providers()]
    info["target"] = q.target.to_json() if not q.target_error else {"error": q.target_error}
    print(json.dumps(info, indent=1))
    return 0


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnlens", description="See the code that really runs behind vLLM plugin attention code.")
    p.add_argument("--version", action="version", version=f"attnlens {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("trace", help="resolve the call or name at FILE:LINE:COL to the code that runs")
    _common(t)
    t.add_argument("--json", action="store_true")
    t.add_argument("--timing", action="store_true", help="print the resolution time")
    t.add_argument("position", help="FILE:LINE:COL (1-based)")
    t.set_defaults(func=cmd_trace, fast_exit=True)

    b = sub.add_parser("backends", help="list registered backends with impl/builder, upstream counterpart and kernels")
    _common(b)
    b.add_argument("--json", action="store_true")
    b.add_argument("--no-call-sites", action="store_true", help="skip resolving kernel call sites")
    b.add_argument("--custom-ops", action="store_true", help="also list out-of-tree CustomOp registrations")
    b.add_argument("--timing", action="store_true")
    b.set_defaults(func=cmd_backends, fast_exit=True)

    st = sub.add_parser("sites", help="every kernel call site under PATHS with its final target (a census)")
    _common(st)
    st.add_argument("--json", action="store_true")
    st.add_argument("paths", nargs="*", help="files or folders (default: the whole workspace)")
    st.set_defaults(func=cmd_sites, fast_exit=True)

    pr = sub.add_parser("profile", help="show the platform profile used to evaluate branch guards")
    _common(pr)
    pr.set_defaults(func=cmd_profile, fast_exit=True)

    wanted = _EXTENSIONS
    if command in BUILTIN_COMMANDS:
        wanted = ()  # keep start-up fast: do not import the other command groups
    elif command in COMMAND_MODULES:
        wanted = (COMMAND_MODULES[command],)
    for mod_name in wanted:
        try:
            mod = __import__(mod_name, fromlist=["add_subparsers"])
        except ImportError as e:
            if command in COMMAND_MODULES:
                print(f"attnlens: the `{command}` command is unavailable: {mod_name} failed to import: {e}", file=sys.stderr)
            continue
        mod.add_subparsers(sub)
    return p


BUILTIN_COMMANDS = {"trace", "backends", "sites", "profile"}
_EXTENSIONS = ("attnlens.runtime.cli_cmds", "attnlens.rules.cli_cmds", "attnlens.lsp.cli_cmds", "attnlens.upgrade.cli_cmds")
COMMAND_MODULES = {
    "env": "attnlens.runtime.cli_cmds", "probe": "attnlens.runtime.cli_cmds",
    "check": "attnlens.rules.cli_cmds", "contracts": "attnlens.rules.cli_cmds",
    "serve": "attnlens.lsp.cli_cmds",
    "drift": "attnlens.upgrade.cli_cmds", "inventory": "attnlens.upgrade.cli_cmds", "fix": "attnlens.upgrade.cli_cmds",
}


def _command_of(argv: list[str]) -> str | None:
    for a in argv:
        if not a.startswith("-"):
            return a
    return None


def run() -> None:
    """The ``attnlens`` console script and ``python -m attnlens``: one command, then exit."""
    sys.exit(main(one_shot=True))


def _leave(code: int) -> None:
    """Exit without tearing the heap down object by object (0.3 s after a check of the real
    vLLM-MetaX checkout; mypy leaves the same way). Only for analysis-only commands: one that
    owns processes (``probe``, ``env``, ``serve``) relies on exit handlers to stop them. What
    interpreter exit would still do that matters is done first: the cache's pending writes,
    the log handlers, the standard streams."""
    try:
        from .cache import flush_all

        flush_all()
    except Exception:  # noqa: BLE001, S110 - leaving anyway
        pass
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass
    os._exit(code)


def main(argv: list[str] | None = None, one_shot: bool = False) -> int:
    """Run one command. ``one_shot``: the process exits afterwards, so the cyclic collector,
    paused for the command, is not switched back on (its first run would walk the whole heap
    just before exit: 0.3 s after a check of the real vLLM-MetaX checkout), and an
    analysis-only command (``fast_exit`` in its parser) leaves through :func:`_leave`."""
    argv = sys.argv[1:] if argv is None else argv
    p = build_parser(_command_of(argv))
    args = p.parse_args(argv)
    if not getattr(args, "func", None):
        p.print_help()
        return 2
    try:
        if getattr(args, "long_lived", False):  # the server manages the collector itself
            return int(args.func(args) or 0)
        from .gcpolicy import batch

        with batch(restore=not one_shot):  # a bounded command: no full collections over the index
            code = int(args.func(args) or 0)
        if one_shot and getattr(args, "fast_exit", False):
            _leave(code)
        return code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
