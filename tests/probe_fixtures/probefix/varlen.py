"""Paged varlen attention in plain torch, vllm_flash_attn-style signature.

``flash_attn_varlen_func`` is correct; ``flash_attn_varlen_func_ignores_sinks``
accepts ``s_aux`` and silently drops it (the "maca fa2 supports sinks" claim
that a signature alone cannot refute).  ``unified_attention`` wraps the same
computation in the convention of vLLM's Triton ``unified_attention``.
"""

import math

import torch


def _attend(q, k_cache, v_cache, cu_seqlens_q, seqused_k, block_table, softmax_scale, causal, window_size,
            softcap, sinks, out):
    T, H, D = q.shape
    bs = k_cache.shape[1]
    KVH = k_cache.shape[2]
    cu = cu_seqlens_q.tolist()
    kvl = seqused_k.tolist()
    left = window_size[0] if window_size is not None else -1
    for i in range(len(kvl)):
        qs, qe, kl = cu[i], cu[i + 1], kvl[i]
        ql = qe - qs
        if ql == 0:
            continue
        nb = math.ceil(kl / bs)
        blocks = block_table[i, :nb].long()
        k = k_cache[blocks].reshape(-1, KVH, D)[:kl].float().repeat_interleave(H // KVH, dim=1)
        v = v_cache[blocks].reshape(-1, KVH, D)[:kl].float().repeat_interleave(H // KVH, dim=1)
        s = torch.einsum("qhd,khd->hqk", q[qs:qe].float(), k) * softmax_scale
        if softcap and softcap > 0:
            s = softcap * torch.tanh(s / softcap)
        qpos = torch.arange(kl - ql, kl, device=q.device).view(-1, 1)
        kpos = torch.arange(kl, device=q.device).view(1, -1)
        mask = torch.zeros(ql, kl, dtype=torch.bool, device=q.device)
        if causal:
            mask |= kpos > qpos
        if left is not None and left >= 0:
            mask |= kpos < qpos - left
        s = s.masked_fill(mask, float("-inf"))
        if sinks is not None:
            sk = sinks.float().view(H, 1, 1).expand(H, ql, 1)
            p = torch.softmax(torch.cat([s, sk], dim=-1), dim=-1)[..., :-1]
        else:
            p = torch.softmax(s, dim=-1)
        out[qs:qe] = torch.einsum("hqk,khd->qhd", p, v).to(out.dtype)
    return out


def flash_attn_varlen_func(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None, seqused_k=None,
                           q_v=None, dropout_p=0.0, softmax_scale=None, causal=False, window_size=None, softcap=0.0,
                           alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None,
                           return_softmax_lse=False, out=None, s_aux=None, **kwargs):
    """Reference-style paged attention with sinks (``s_aux``) honoured."""
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if out is None:
        out = torch.empty_like(q)
    return _attend(q, k, v, cu_seqlens_q, seqused_k, block_table, softmax_scale, causal, window_size, softcap,
                   s_aux, out)


def flash_attn_varlen_func_ignores_sinks(q, k, v, max_seqlen_q, cu_seqlens_q, max_seqlen_k, cu_seqlens_k=None,
                                         seqused_k=None, softmax_scale=None, causal=False, window_size=None,
                                         softcap=0.0, block_table=None, out=None, **kwargs):
    """BROKEN: ``s_aux`` is swallowed by ``**kwargs`` and never applied."""
    if softmax_scale is None:
        softmax_scale = q.shape[-1] ** -0.5
    if out is None:
        out = torch.empty_like(q)
    return _attend(q, k, v, cu_seqlens_q, seqused_k, block_table, softmax_scale, causal, window_size, softcap,
                   None, out)


def unified_attention(q, k, v, out, cu_seqlens_q, max_seqlen_q, seqused_k, max_seqlen_k, softmax_scale, causal,
                      window_size, block_table, softcap, q_descale, k_descale, v_descale, sinks=None, **kwargs):
    """vLLM ``unified_attention`` convention (writes ``out``)."""
    _attend(q, k, v, cu_seqlens_q, seqused_k, block_table, softmax_scale, causal, window_size, softcap, sinks, out)
