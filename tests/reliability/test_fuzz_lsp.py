"""Fuzzed editing against a real `attnlens serve` (see fuzzmachine.py for the rules and invariants).

CI runs a bounded number of sequences (``ATTNLENS_FUZZ_EXAMPLES``, default 100, of
``ATTNLENS_FUZZ_STEPS`` steps, default 40); ``bench/fuzz_lsp.py`` runs thousands.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from .fuzzmachine import FuzzWorld, LspFuzz
from .lspdriver import descendants

EXAMPLES = int(os.environ.get("ATTNLENS_FUZZ_EXAMPLES", "100"))
STEPS = int(os.environ.get("ATTNLENS_FUZZ_STEPS", "40"))


@pytest.mark.slow
def test_fuzzed_editing_never_crashes_hangs_or_diverges(tmp_path):
    world = FuzzWorld(tmp_path, strict=True, huge_lines=2000)
    try:
        world.setup()
        with_hover = [k for k, v in world.baseline.items() if v["hover"]]
        assert len(with_hover) >= len(world.baseline) // 2 >= 5, world.baseline
        LspFuzz.world = world
        run_state_machine_as_test(LspFuzz, settings=settings(
            max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
            phases=[Phase.explicit, Phase.generate, Phase.shrink],
            suppress_health_check=list(HealthCheck)))
        s = world.stats
        print(f"\nfuzz: {world.sequences} sequences, {s.requests} requests ({s.cancels} with $/cancelRequest), "
              f"{dict(s.replies)}, p50 {s.percentile(50) * 1000:.1f} ms, p99 {s.percentile(99) * 1000:.1f} ms, "
              f"{world.equality_checks} equality checks after undo")
        assert world.violations == []
        assert s.requests > 0 and not s.hangs and not s.crashes
        assert world.equality_checks >= 1
    finally:
        pid = world.server.pid if world.server else None
        world.close()
        if pid:
            assert not descendants(pid)
