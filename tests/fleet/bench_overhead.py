"""Benchmark (not a test): a campaign on one node vs the same probes with `attnlens probe run` one after another.

    .venv/bin/python tests/fleet/bench_overhead.py [REPEATS]

Both start without an environment record (a fresh cache folder each), on .venv-target with the probefix
fixtures (CPU, TRITON_INTERPRET=1). Prints the sequential time, the campaign time with and without
Ray's start-up (ray.init of a local one-node cluster, recorded by the runner), and the ratio.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = os.environ.get("ATTNLENS_TEST_TARGET_PYTHON") or str(REPO / ".venv-target" / "bin" / "python")
PP = os.pathsep.join([str(REPO / "tests" / "probe_fixtures")])
CELLS = [("lse_merge", "probefix.lse_merge:merge_attn_states"), ("varlen", "probefix.varlen:flash_attn_varlen_func"),
         ("kv_cache_write", "probefix.kv_cache:reshape_and_cache_flash"), ("topk", "probefix.topk:top_k_per_row_prefill"),
         ("decode", "probefix.decode:decode_attention_fwd")]
CLI = [sys.executable, "-m", "attnlens.cli"]


def sequential(tmp: str) -> float:
    t0 = time.monotonic()
    for fam, tgt in CELLS:
        p = subprocess.run(CLI + ["probe", "run", fam, "--target", tgt, "--python", PY, "--env", f"PYTHONPATH={PP}",
                                  "--root", tmp, "--cache-dir", tmp + "/cache", "--json"], capture_output=True, text=True,
                           timeout=600)
        assert json.loads(p.stdout)["verdict"] == "pass", p.stdout[-500:]
    return time.monotonic() - t0


def campaign(tmp: str) -> tuple[float, float, float]:
    argv = CLI + ["probe", "matrix", "--host", f"name=one,python={PY},env.PYTHONPATH={PP}", "--name", "bench",
                  "--root", tmp, "--cache-dir", tmp + "/cache", "--format", "json"]
    for fam, tgt in CELLS:
        argv += ["--probe", f"{fam}={tgt}"]
    t0 = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=900, env=dict(os.environ, RAY_ADDRESS=""))
    wall = time.monotonic() - t0
    m = json.loads(p.stdout)
    assert m["counts"].get("pass") == len(CELLS), (m["counts"], p.stderr[-2000:])
    run = m["runs"][-1]
    return wall, run["elapsed_s"], run["ray_start_s"]


def main(repeats: int) -> None:
    seq, walls, camp, start = [], [], [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as a:
            seq.append(sequential(a))
        with tempfile.TemporaryDirectory() as b:
            w, e, s = campaign(b)
            walls.append(w), camp.append(e - s), start.append(s)
    med = statistics.median
    print(f"{len(CELLS)} probes, {repeats} repeat(s), medians:")
    print(f"  attnlens probe run x{len(CELLS)} one after another: {med(seq):.1f} s")
    print(f"  probe matrix on one local Ray node: campaign {med(camp):.1f} s (ratio {med(camp) / med(seq):.2f}x), "
          f"ray.init {med(start):.1f} s, whole command {med(walls):.1f} s (ratio {med(walls) / med(seq):.2f}x)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
