"""Family ``decode``: single-token decode attention over a paged cache, split-KV.

Convention of vLLM's Triton ``decode_attention_fwd``
(vllm/v1/attention/ops/triton_decode_attention.py): one query token per request,
pages addressed through ``req_to_token`` (a per-request page table), the KV
length split into ``num_kv_splits`` partitions whose partial results go through
``attn_logits`` and are merged into ``o`` and ``lse`` (natural log).

Discriminating cases: MHA with page size 1, GQA with page size 16 and a random
page table (a kernel that assumes contiguous pages fails), logit cap, more
splits than tokens (empty partitions), and the LSE written next to the output.
Unreferenced pages hold NaN; tail slots of the last page hold V = 1e4.
"""

from __future__ import annotations

import math

from . import _common as C

FAMILY = {
    "name": "decode",
    # the argument names the family's calling conventions pass (rules route a call to a family by them)
    "keywords": ["q", "k_buffer", "v_buffer", "o", "lse", "req_to_token", "b_seq_len", "attn_logits", "num_kv_splits", "sm_scale", "page_size", "logit_cap"],
    "title": "decode attention kernel (paged, split-KV, GQA, logit cap, LSE)",
    "component": "attention.decode",
    "upstream": [
        "vllm.v1.attention.ops.triton_decode_attention.decode_attention_fwd",
    ],
    "convention": (
        "target(q [B, H, D], k_buffer [num_pages, page_size, KVH, D], v_buffer [num_pages, page_size, KVH, D], "
        "o [B, H, D], lse float32[B, H], req_to_token int32[B, max_pages] (page indices), b_seq_len int32[B], "
        "attn_logits float32[B, H, num_kv_splits, D + 1], num_kv_splits: int, sm_scale: float, page_size: int, "
        "logit_cap: float (0 = off)) -> None; writes o and lse (natural log of the softmax denominator of the "
        "scaled, capped scores)."
    ),
    "cases": [
        {"name": "contiguous_single", "what": "one request whose pages are 0, 1, 2 in order (baseline layout)"},
        {"name": "mha_page1", "what": "MHA 4:4, page size 1, random page table"},
        {"name": "mha_page1.lse", "what": "LSE of the same call"},
        {"name": "gqa_page16", "what": "GQA 8:2, page size 16, random page table, sequence lengths 1..77"},
        {"name": "gqa_page16.lse", "what": "LSE of the same call"},
        {"name": "logit_cap", "what": "logit_cap=10 with large scores"},
        {"name": "more_splits_than_tokens", "what": "num_kv_splits=8 with 1-5 tokens: empty partitions"},
    ],
    "options": {
        "dtype": "bfloat16 (default) | float16 | float32",
        "head_size": "default 64 on CPU, 128 on GPU",
        "num_kv_splits": "default 4",
        "poison": "true (default)",
        "seed": "base seed (default 0)",
    },
    "tolerance": "output and lse: bf16/fp16 atol 1.5e-2 rtol 1e-2; fp32 output 5e-3, lse atol 2e-3 rtol 1e-3",
}


def _inputs(torch, dev, dt, seed, *, B_lens, H, KVH, D, page, poison, q_scale=1.0, contiguous=False):
    g = C.gen(torch, seed)
    B = len(B_lens)
    q = C.randn(torch, g, (B, H, D), dt, dev, scale=q_scale)
    need = [math.ceil(n / page) for n in B_lens]
    npages = sum(need) + 8
    kb = C.randn(torch, g, (npages, page, KVH, D), dt, "cpu")
    vb = C.randn(torch, g, (npages, page, KVH, D), dt, "cpu")
    perm = (C.randperm(torch, g, npages - 1) + 1).tolist()
    if contiguous:
        perm = list(range(npages))  # request 0 gets pages 0, 1, 2, ... in order
    r2t = torch.zeros(B, max(need), dtype=torch.int32)
    used, pos = set(), 0
    for i, n in enumerate(need):
        r2t[i, :n] = torch.tensor(perm[pos:pos + n], dtype=torch.int32)
        used.update(perm[pos:pos + n])
        pos += n
    if poison:
        for p in range(npages):
            if p not in used:
                kb[p] = float("nan")
                vb[p] = float("nan")
        for i, n in enumerate(B_lens):
            last = int(r2t[i, need[i] - 1])
            tail = n - (need[i] - 1) * page
            if tail < page:
                kb[last, tail:] = 0.0
                vb[last, tail:] = 1e4
    return q, kb.to(dev), vb.to(dev), r2t.to(dev), torch.tensor(B_lens, dtype=torch.int32, device=dev)


def reference(torch, q, kb, vb, r2t, lens, page, scale, cap):
    q64, k64, v64 = q.detach().cpu().double(), kb.detach().cpu().double(), vb.detach().cpu().double()
    r2t = r2t.detach().cpu().long()
    B, H, D = q64.shape
    KVH = k64.shape[2]
    out = torch.zeros(B, H, v64.shape[-1], dtype=torch.float64)
    lse = torch.zeros(B, H, dtype=torch.float64)
    for b, n in enumerate(lens.tolist()):
        tok = torch.arange(n)
        pages = r2t[b, tok // page]
        k = k64[pages, tok % page].repeat_interleave(H // KVH, dim=1)  # [n, H, D]
        v = v64[pages, tok % page].repeat_interleave(H // KVH, dim=1)
        s = torch.einsum("hd,nhd->hn", q64[b], k) * scale
        if cap and cap > 0:
            s = cap * torch.tanh(s / cap)
        lse[b] = torch.logsumexp(s, dim=-1)
        out[b] = torch.einsum("hn,nhd->hd", torch.softmax(s, dim=-1), v)
    return out, lse


def run(target, dev, options: dict) -> list:
    import torch

    dt = C.dtype(torch, options.get("dtype", "bfloat16"))
    dn = C.dname(dt)
    atol, rtol = C.tolerance("attention", dn)
    l_atol, l_rtol = C.tolerance("lse", dn)  # the LSE inherits the input dtype's rounding
    D = int(options.get("head_size", 64 if dev.type == "cpu" else 128))
    splits_default = int(options.get("num_kv_splits", 4))
    poison = bool(options.get("poison", True))
    seed0 = int(options.get("seed", 0))
    suite = C.Suite("decode", dev)
    what = {c["name"]: c["what"] for c in FAMILY["cases"]}

    def case(name, seed, *, lens, H, KVH, page, cap=0.0, q_scale=1.0, splits=None, check_lse=False,
             contiguous=False):
        splits = splits or splits_default
        keep: dict = {}

        def fn():
            q, kb, vb, r2t, blen = _inputs(torch, dev, dt, seed, B_lens=lens, H=H, KVH=KVH, D=D, page=page,
                                           poison=poison, q_scale=q_scale, contiguous=contiguous)
            B = len(lens)
            o = torch.full((B, H, D), float("nan"), dtype=dt, device=dev)
            lse = torch.full((B, H), float("nan"), dtype=torch.float32, device=dev)
            logits = torch.empty(B, H, splits, D + 1, dtype=torch.float32, device=dev)
            scale = 1.0 / math.sqrt(D)
            target(q, kb, vb, o, lse, r2t, blen, logits, splits, scale, page, cap)
            C.sync(torch, dev)
            ref, ref_lse = reference(torch, q, kb, vb, r2t, blen, page, scale, cap)
            keep["lse"], keep["ref_lse"] = lse, ref_lse
            res = C.compare(o, ref, atol, rtol)
            res.update({"atol": atol, "rtol": rtol})
            shapes = {**C.shapes_of(q=q, k_buffer=kb, req_to_token=r2t, attn_logits=logits),
                      "seq_lens": list(lens), "page_size": page, "num_kv_splits": splits, "logit_cap": cap}
            res["shapes"] = shapes
            keep["shapes"] = shapes
            if not res["passed"]:
                res["note"] = f"output off by up to {res['max_abs_err']:.3g}"
            return res

        c = suite.run(name, what[name], fn, seed=seed, dtype=dn, kind="attention")
        if check_lse:
            def lse_fn():
                if "lse" not in keep:
                    return {"status": "error", "passed": False, "note": f"the call failed ({c['status']})"}
                r = C.compare(keep["lse"], keep["ref_lse"], l_atol, l_rtol)
                r.update({"atol": l_atol, "rtol": l_rtol, "shapes": keep["shapes"]})
                if not r["passed"]:
                    r["note"] = f"lse off by up to {r['max_abs_err']:.3g} (natural log expected)"
                return r

            suite.run(name + ".lse", what[name + ".lse"], lse_fn, seed=seed, dtype="float32", kind="lse")

    case("contiguous_single", seed0 + 4, lens=[45], H=8, KVH=2, page=16, contiguous=True)
    case("mha_page1", seed0 + 0, lens=[1, 7, 33, 64], H=4, KVH=4, page=1, check_lse=True)
    case("gqa_page16", seed0 + 1, lens=[1, 16, 17, 77], H=8, KVH=2, page=16, check_lse=True)
    case("logit_cap", seed0 + 2, lens=[5, 40], H=8, KVH=2, page=16, cap=10.0, q_scale=4.0)
    case("more_splits_than_tokens", seed0 + 3, lens=[1, 2, 3, 5], H=8, KVH=2, page=16, splits=8)
    return suite.cases
