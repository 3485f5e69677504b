"""The traces of `attnlens sites` alone, in one process (no forked helper), after every workspace module's
summary is read: what a resolver change costs or saves, without the summaries' cost and the split's noise.

    python bench/bench_sites_traces.py --root /tmp/vllm-ws --cache-dir /tmp/cc --out /tmp/sites.json

Prints the load time, then the wall and CPU seconds of the traces; ``--out`` gets the same text as `attnlens
sites --json` (compare two resolvers' outputs with ``cmp``). Run it twice with the same ``--cache-dir`` so that
the summaries come from the cache folder (the first run builds them). ``gc`` is off, as in the CLI.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--cache-dir", required=True)
    ap.add_argument("--out", default="/dev/null")
    a = ap.parse_args()
    gc.disable()
    from attnlens import cli

    args = cli.build_parser().parse_args(["sites", "--root", a.root, "--python", a.python, "--cache-dir", a.cache_dir, "--json"])
    q = cli._query(args)
    q.ws.allow_fork = False
    q.ws.index.allow_fork = False
    t = time.time()
    for n in sorted(q.ws.index.ws_files):
        q.ws.index.module(n)
    print("load", round(time.time() - t, 2), "s", file=sys.stderr)
    t, c = time.time(), time.process_time()
    recs = q.kernel_site_records(None, functools.partial(cli._site_record, str(q.root), True))
    with open(a.out, "w") as fh:
        for chunk in cli._sites_chunks(recs, True):
            fh.write(chunk)
    print("traces", round(time.time() - t, 2), "s wall,", round(time.process_time() - c, 2), "s CPU", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
