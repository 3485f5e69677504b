"""Family ``varlen``: variable-length attention over a paged KV cache.

Discriminating calls (seeded) against a float64 reference modelled on vLLM's
``ref_paged_attn`` (tests/kernels/attention/test_flash_attn.py): causal GQA
decode+prefill mix, MHA with head size 80, pure prefill, sliding window,
soft-cap, and sinks (a call with sinks at -inf must equal attention without
sinks; a call with large per-head sinks must match the reference that adds each
head's sink logit to the softmax denominator; and the two calls must differ).

The cache is poisoned: blocks that no sequence references hold NaN, and the
unused tail slots of each sequence's last block hold V = 1e4 (K = 0), so a
kernel that reads outside the sequence shows it.
"""

from __future__ import annotations

import math

from . import _common as C

FAMILY = {
    "name": "varlen",
    # the argument names the family's calling conventions pass (rules route a call to a family by them)
    "keywords": ["q", "k", "v", "k_cache", "v_cache", "max_seqlen_q", "cu_seqlens_q", "max_seqlen_k", "seqused_k", "softmax_scale", "causal", "window_size", "softcap", "block_table", "out", "s_aux", "q_descale", "k_descale", "v_descale", "sinks"],
    "title": "varlen / paged attention (causal, sliding window, GQA, softcap, sinks)",
    "component": "attention.varlen",
    "upstream": [
        "vllm.vllm_flash_attn.flash_attn_varlen_func",
        "vllm.v1.attention.ops.triton_unified_attention.unified_attention",
        "flash_attn.flash_attn_varlen_func",
    ],
    "convention": (
        "convention=flash_attn_varlen (default): target(q, k_cache, v_cache, max_seqlen_q=int, "
        "cu_seqlens_q=int32[B+1], max_seqlen_k=int, seqused_k=int32[B], softmax_scale=float, causal=True, "
        "window_size=[left, right] (-1 = off; left=W-1 keeps W keys), softcap=float (0 = off), "
        "block_table=int32[B, max_blocks], out=Tensor (only if the signature accepts it), s_aux=float32[H] "
        "(only in sinks cases)) -> out or (out, ...). convention=unified_attention: target(q=, k=, v=, out=, "
        "cu_seqlens_q=, max_seqlen_q=, seqused_k=, max_seqlen_k=, softmax_scale=, causal=True, "
        "window_size=(left, right), block_table=, softcap=, q_descale=None, k_descale=float32[B, KVH], "
        "v_descale=float32[B, KVH], sinks=float32[H] or None) writes out. Shapes: q [tokens, H, D]; "
        "k_cache/v_cache [num_blocks, block_size, KVH, D] (NHD)."
    ),
    "cases": [
        {"name": "causal_gqa", "what": "GQA 8:2, query lengths 1/5/17/1 over 17-100 cached tokens"},
        {"name": "causal_mha_hs80", "what": "MHA 4:4, head size 80 (not a power of two)"},
        {"name": "prefill_causal", "what": "pure prefill (query length == key length), causal"},
        {"name": "sliding_window", "what": "window_size=(15, 0): each query sees its 16 most recent keys"},
        {"name": "softcap", "what": "softcap=10 with large scores, so tanh capping changes the result"},
        {"name": "sinks_neg_inf", "what": "sinks all -inf: must equal attention without sinks"},
        {"name": "sinks_large", "what": "per-head sinks in [1, 6]: must match the reference with sinks"},
        {"name": "sinks_must_differ", "what": "the two sinks calls must differ as much as the reference says"},
        {"name": "kv_packed_head_stride", "what": "K and V caches as the two halves of one [.., KVH, 2*D] tensor "
                                                   "(head stride 2*D, not contiguous)"},
    ],
    "options": {
        "convention": "flash_attn_varlen | unified_attention",
        "dtype": "bfloat16 (default) | float16 | float32",
        "head_size": "default 64 on CPU, 128 on GPU",
        "block_size": "default 16",
        "poison": "true (default): NaN in unreferenced blocks, 1e4 in tail slots",
        "sinks_dtype": "float32 (default)",
        "extra_kwargs": "dict merged into every call (e.g. {\"fa_version\": 2})",
        "seed": "base seed (default 0)",
    },
    "tolerance": "bf16/fp16 atol 1.5e-2 rtol 1e-2; fp32 atol 5e-3 rtol 5e-3 (vLLM test_flash_attn)",
}


def _make_inputs(torch, dev, dt, seed, *, H, KVH, D, bs, qlens, kvlens, poison, q_scale=1.0, num_blocks=None,
                 packed=False):
    g = C.gen(torch, seed)
    T = sum(qlens)
    B = len(qlens)
    q = C.randn(torch, g, (T, H, D), dt, dev, scale=q_scale)
    need = [math.ceil(k / bs) for k in kvlens]
    nb = max(num_blocks or 0, sum(need) + 8)
    k_cache = C.randn(torch, g, (nb, bs, KVH, D), dt, "cpu")
    v_cache = C.randn(torch, g, (nb, bs, KVH, D), dt, "cpu")
    perm = (C.randperm(torch, g, nb - 1) + 1).tolist()  # block 0 is never handed out
    bt = torch.zeros(B, max(need), dtype=torch.int32)
    used = set()
    pos = 0
    for i, n in enumerate(need):
        blocks = perm[pos:pos + n]
        pos += n
        bt[i, :n] = torch.tensor(blocks, dtype=torch.int32)
        used.update(blocks)
    if poison:
        for b in range(nb):
            if b not in used:
                k_cache[b] = float("nan")
                v_cache[b] = float("nan")
        for i, kl in enumerate(kvlens):
            last = int(bt[i, need[i] - 1])
            tail = kl - (need[i] - 1) * bs
            if tail < bs:
                k_cache[last, tail:] = 0.0
                v_cache[last, tail:] = 1e4
    cu = torch.zeros(B + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(torch.tensor(qlens, dtype=torch.int32), 0)
    seqused = torch.tensor(kvlens, dtype=torch.int32)
    k_dev, v_dev = k_cache.to(dev), v_cache.to(dev)
    if packed:
        # one [num_blocks, block_size, KVH, 2*D] tensor, K|V side by side in the last dim: the views have head
        # stride 2*D (what a backend gets from `kv_cache.split(D, dim=-1)` of a packed cache)
        both = torch.cat([k_dev, v_dev], dim=-1)
        k_dev, v_dev = both[..., :D], both[..., D:]
    return {
        "q": q, "k_cache": k_dev, "v_cache": v_dev, "block_table": bt.to(dev),
        "cu_seqlens_q": cu.to(dev), "seqused_k": seqused.to(dev), "qlens": list(qlens), "kvlens": list(kvlens),
        "max_seqlen_q": max(qlens), "max_seqlen_k": max(kvlens), "bs": bs,
    }


def reference(torch, inp, *, scale, causal=True, window_left=-1, softcap=0.0, sinks=None):
    """float64 paged attention, one sequence at a time (vLLM ref_paged_attn, plus sinks)."""
    q = inp["q"].detach().cpu().double()
    kc = inp["k_cache"].detach().cpu().double()
    vc = inp["v_cache"].detach().cpu().double()
    bt = inp["block_table"].detach().cpu().long()
    bs = inp["bs"]
    H = q.shape[1]
    KVH = kc.shape[2]
    out = torch.zeros_like(q)
    start = 0
    for i, (ql, kl) in enumerate(zip(inp["qlens"], inp["kvlens"])):
        nblk = math.ceil(kl / bs)
        blocks = bt[i, :nblk]
        k = kc[blocks].reshape(-1, KVH, kc.shape[-1])[:kl]
        v = vc[blocks].reshape(-1, KVH, vc.shape[-1])[:kl]
        k = k.repeat_interleave(H // KVH, dim=1)
        v = v.repeat_interleave(H // KVH, dim=1)
        qi = q[start:start + ql]
        s = torch.einsum("qhd,khd->hqk", qi, k) * scale
        if softcap and softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qpos = torch.arange(kl - ql, kl).view(-1, 1)
        kpos = torch.arange(kl).view(1, -1)
        mask = torch.zeros(ql, kl, dtype=torch.bool)
        if causal:
            mask |= kpos > qpos
        if window_left is not None and window_left >= 0:
            mask |= kpos < qpos - window_left
        s = s.masked_fill(mask.unsqueeze(0), float("-inf"))
        if sinks is not None:
            sk = sinks.detach().cpu().double().view(H, 1, 1).expand(H, ql, 1)
            allv = torch.cat([s, sk], dim=-1)
            m = allv.max(dim=-1, keepdim=True).values
            m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
            p = torch.exp(s - m)
            denom = p.sum(-1, keepdim=True) + torch.exp(sk - m)
            p = p / denom
        else:
            p = torch.softmax(s, dim=-1)
        out[start:start + ql] = torch.einsum("hqk,khd->qhd", p, v)
        start += ql
    return out


def _call(target, conv, inp, *, scale, causal, window, softcap, sinks, extra, out):
    torch = _torch()
    if conv == "flash_attn_varlen":
        kw = dict(max_seqlen_q=inp["max_seqlen_q"], cu_seqlens_q=inp["cu_seqlens_q"],
                  max_seqlen_k=inp["max_seqlen_k"], seqused_k=inp["seqused_k"], softmax_scale=scale,
                  causal=causal, window_size=list(window), softcap=softcap, block_table=inp["block_table"])
        if C.accepts(target, "out") is not False:
            kw["out"] = out
        if sinks is not None:
            kw["s_aux"] = sinks
        kw.update(extra)
        res = target(inp["q"], inp["k_cache"], inp["v_cache"], **kw)
    elif conv == "unified_attention":
        B = len(inp["qlens"])
        KVH = inp["k_cache"].shape[2]
        ones = torch.ones(B, KVH, dtype=torch.float32, device=inp["q"].device)
        kw = dict(q=inp["q"], k=inp["k_cache"], v=inp["v_cache"], out=out, cu_seqlens_q=inp["cu_seqlens_q"],
                  max_seqlen_q=inp["max_seqlen_q"], seqused_k=inp["seqused_k"], max_seqlen_k=inp["max_seqlen_k"],
                  softmax_scale=scale, causal=causal, window_size=tuple(window), block_table=inp["block_table"],
                  softcap=softcap, q_descale=None, k_descale=ones, v_descale=ones, sinks=sinks)
        kw.update(extra)
        res = target(**kw)
    else:
        raise ValueError(f"unknown convention {conv!r}")
    if isinstance(res, (tuple, list)):
        res = res[0]
    return res if res is not None else out


def _torch():
    import torch

    return torch


def _guess_convention(target) -> str:
    """Pick the calling convention from the target's signature when the caller did not say."""
    import inspect

    try:
        params = set(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return "flash_attn_varlen"
    name = getattr(target, "__name__", "")
    if name == "unified_attention" or {"seqused_k", "out", "q_descale"} <= params:
        return "unified_attention"
    return "flash_attn_varlen"


def run(target, dev, options: dict) -> list:
    torch = _torch()
    conv = options.get("convention") or _guess_convention(target)
    dt = C.dtype(torch, options.get("dtype", "bfloat16"))
    dn = C.dname(dt)
    atol, rtol = C.tolerance("attention", dn)
    D = int(options.get("head_size", 64 if dev.type == "cpu" else 128))
    bs = int(options.get("block_size", 16))
    poison = bool(options.get("poison", True))
    extra = dict(options.get("extra_kwargs") or {})
    sinks_dt = C.dtype(torch, options.get("sinks_dtype", "float32"))
    base = int(options.get("seed", 0))
    suite = C.Suite("varlen", dev)
    mix_q, mix_k = [1, 5, 17, 1], [17, 40, 64, 100]

    def attn_case(name, desc, seed, *, H, KVH, hd, qlens, kvlens, window=(-1, -1), softcap=0.0, q_scale=1.0,
                  sinks_fn=None, keep=None, packed=False):
        def fn():
            inp = _make_inputs(torch, dev, dt, seed, H=H, KVH=KVH, D=hd, bs=bs, qlens=qlens, kvlens=kvlens,
                               poison=poison, q_scale=q_scale, packed=packed)
            scale = 1.0 / math.sqrt(hd)
            sinks = sinks_fn(H, seed).to(sinks_dt).to(dev) if sinks_fn else None
            out = torch.empty_like(inp["q"])
            got = _call(target, conv, inp, scale=scale, causal=True, window=window, softcap=softcap,
                        sinks=sinks, extra=extra, out=out)
            C.sync(torch, dev)
            ref_sinks = sinks if (sinks is not None and bool(torch.isfinite(sinks).any())) else None
            ref = reference(torch, inp, scale=scale, causal=True, window_left=window[0], softcap=softcap,
                            sinks=ref_sinks)
            if keep is not None:
                keep["got"] = got.detach().to("cpu", torch.float64).clone()
                keep["ref"] = ref
            res = C.compare(got, ref, atol, rtol)
            res["shapes"] = {**C.shapes_of(q=inp["q"], k_cache=inp["k_cache"], block_table=inp["block_table"],
                                           sinks=sinks),
                             "query_lens": qlens, "kv_lens": kvlens, "window_size": list(window),
                             "softcap": softcap, "convention": conv}
            return res

        return suite.run(name, desc, fn, seed=seed, dtype=dn, kind="attention")

    attn_case("causal_gqa", FAMILY["cases"][0]["what"], base + 0, H=8, KVH=2, hd=D, qlens=mix_q, kvlens=mix_k)
    attn_case("causal_mha_hs80", FAMILY["cases"][1]["what"], base + 1, H=4, KVH=4, hd=80, qlens=mix_q,
              kvlens=mix_k)
    attn_case("prefill_causal", FAMILY["cases"][2]["what"], base + 2, H=8, KVH=2, hd=D, qlens=[8, 33],
              kvlens=[8, 33])
    attn_case("sliding_window", FAMILY["cases"][3]["what"], base + 3, H=8, KVH=2, hd=D, qlens=mix_q,
              kvlens=mix_k, window=(15, 0))
    attn_case("softcap", FAMILY["cases"][4]["what"], base + 4, H=8, KVH=2, hd=D, qlens=mix_q, kvlens=mix_k,
              softcap=10.0, q_scale=4.0)

    def neg_inf(H, seed):
        return torch.full((H,), float("-inf"))

    def large(H, seed):
        g = C.gen(torch, seed + 1000)
        return torch.linspace(1.0, 6.0, H)[C.randperm(torch, g, H)]

    k_off: dict = {}
    k_on: dict = {}
    c_off = attn_case("sinks_neg_inf", FAMILY["cases"][5]["what"], base + 5, H=8, KVH=2, hd=D, qlens=mix_q,
                      kvlens=mix_k, sinks_fn=neg_inf, keep=k_off)
    c_on = attn_case("sinks_large", FAMILY["cases"][6]["what"], base + 5, H=8, KVH=2, hd=D, qlens=mix_q,
                     kvlens=mix_k, sinks_fn=large, keep=k_on)

    def differ():
        if "got" not in k_off or "got" not in k_on:
            return {"status": "error", "passed": False,
                    "note": f"needs both sinks calls to return (sinks_neg_inf: {c_off['status']}, "
                            f"sinks_large: {c_on['status']})"}
        observed = float((k_off["got"] - k_on["got"]).abs().max())
        expected = float((k_off["ref"] - k_on["ref"]).abs().max())
        ok = observed >= 0.5 * expected and expected > 10 * atol
        return {"passed": ok, "max_abs_err": abs(expected - observed), "max_rel_err":
                (abs(expected - observed) / expected if expected else None),
                "observed_difference": observed, "expected_difference": expected,
                "note": ("outputs differ as the reference does: sinks are implemented" if ok else
                         f"output moved by {observed:.3g} between sinks=-inf and large sinks; the reference "
                         f"moves by {expected:.3g}: sinks are ignored or mis-applied")}

    suite.run("sinks_must_differ", FAMILY["cases"][7]["what"], differ, seed=base + 5, dtype=dn, kind="attention")
    attn_case("kv_packed_head_stride", FAMILY["cases"][8]["what"], base + 6, H=8, KVH=2, hd=D, qlens=mix_q,
              kvlens=mix_k, packed=True)
    return suite.cases
