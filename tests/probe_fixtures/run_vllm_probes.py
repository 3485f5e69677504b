"""Probe vLLM's own kernels on a GPU machine and dump the evidence (not a test; a helper for GPU runs).

    PYTHONPATH=<vllm sources>:server python3 tests/probe_fixtures/run_vllm_probes.py OUT_DIR [VLLM_SO]

Writes OUT_DIR/env_record.json and OUT_DIR/vllm_evidence.json and prints one line per case.
VLLM_SO (default: next to the importable vllm package) is vLLM's _C_stable_libtorch.abi3.so,
loaded with torch.ops.load_library for the torch-op families.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

from attnlens.cache import Cache
from attnlens.runtime import agent, environment as E, probes


def main(out_dir: str, so: str | None = None) -> int:
    os.makedirs(out_dir, exist_ok=True)
    if so is None:
        spec = importlib.util.find_spec("vllm")
        so = os.path.join(os.path.dirname(spec.origin), "_C_stable_libtorch.abi3.so") if spec else None
    pool = agent.AgentPool()
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    try:
        rec = E.collect(sys.executable, env, pool=pool)
        with open(os.path.join(out_dir, "env_record.json"), "w") as f:
            json.dump(rec, f, indent=1, default=str)
        print(E.summary(rec))
        print(json.dumps(rec.get("runtime"), default=str)[:1500])
        print(json.dumps(rec.get("nvidia"), default=str)[:600])
        runs = [
            ("varlen", "vllm.v1.attention.ops.triton_unified_attention:unified_attention",
             {"convention": "unified_attention"}, None),
            ("varlen", "vllm.v1.attention.ops.triton_unified_attention:unified_attention",
             {"convention": "unified_attention", "dtype": "float16", "head_size": 256}, None),
            ("decode", "vllm.v1.attention.ops.triton_decode_attention:decode_attention_fwd", {}, None),
            ("lse_merge", "vllm.v1.attention.ops.triton_merge_attn_states:merge_attn_states", {}, None),
            ("kv_cache_write", "_C_cache_ops::reshape_and_cache_flash", {}, so),
            ("topk", "_C::top_k_per_row_prefill", {}, so),
        ]
        out = {}
        for fam, tgt, opt, lib in runs:
            r = probes.run_probe(sys.executable, fam, tgt, "cuda", Cache(None), 300, options=dict(opt), env=env,
                                 pool=pool, load_library=lib)
            print(fam, tgt, json.dumps(opt), r.verdict, r.message[:300], r.elapsed_s)
            for c in r.cases:
                print("   ", c["name"], c["status"], c.get("max_abs_err"), (c.get("note") or "")[:300])
            if r.provider.get("kind") == "torch_op":
                print("    provider:", r.provider.get("device_kernel"), "|", r.provider.get("schema"))
            if r.verdict in ("crashed", "error", "timeout"):
                print("    details:", json.dumps(r.details, default=str)[:2000])
            out[f"{fam}:{tgt}:{json.dumps(opt, sort_keys=True)}"] = r.to_dict()
        with open(os.path.join(out_dir, "vllm_evidence.json"), "w") as f:
            json.dump(out, f, indent=1, default=str)
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
