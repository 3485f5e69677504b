# SPDX-License-Identifier: Apache-2.0
"""Feature 4: the device-ops singleton ``NpuOps``, picked once by a factory.

Every query row is its own "sequence": ``block_table`` and ``seq_lens`` hold
one row / one context length per query token (see attention/common.py).
"""

import torch

from vllm.platforms import current_platform


class _OpsBase:
    # Shared: all three variants inherit mla_decode from here.
    @staticmethod
    def mla_decode(out, q, kv_cache, block_table, seq_lens, kv_lora_rank, scale):
        torch.ops._tiny_C.mla_decode(out, q, kv_cache, block_table, seq_lens, kv_lora_rank, scale)
        return out


class _CudaOps(_OpsBase):
    # Upstream vLLM Triton kernel; each query row is a length-1 "sequence".
    @staticmethod
    def paged_attention(out, q, k_cache, v_cache, block_table, seq_lens, scale):
        from vllm.v1.attention.ops.triton_unified_attention import unified_attention

        cu_q = torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device)
        unified_attention(q=q, k=k_cache, v=v_cache, out=out, cu_seqlens_q=cu_q, max_seqlen_q=1,
                          seqused_k=seq_lens, max_seqlen_k=int(seq_lens.max()), softmax_scale=scale,
                          causal=True, window_size=(-1, -1), block_table=block_table, softcap=0,
                          q_descale=None, k_descale=None, v_descale=None)
        return out


class _NpuOps(_OpsBase):
    @staticmethod
    def paged_attention(out, q, k_cache, v_cache, block_table, seq_lens, scale):
        torch.ops._tiny_C.paged_attention(out, q, k_cache, v_cache, block_table, seq_lens, scale)
        return out


class _RefOps(_OpsBase):
    # Slow PyTorch reference, one query row at a time (mla_decode inherited).
    @staticmethod
    def paged_attention(out, q, k_cache, v_cache, block_table, seq_lens, scale):
        page = k_cache.shape[1]
        for t, n in enumerate(seq_lens.tolist()):
            blocks = block_table[t, : (n + page - 1) // page]
            k, v = (c[blocks].flatten(0, 1)[:n].transpose(0, 1) for c in (k_cache, v_cache))
            o = torch.nn.functional.scaled_dot_product_attention(q[t].unsqueeze(1), k, v, scale=scale, enable_gqa=True)
            out[t] = o.squeeze(1)
        return out


def _make_ops():
    # Factory: evaluated once, at import. On this OOT platform is_cuda() is
    # False and is_out_of_tree() is True, so the result is always _NpuOps.
    if current_platform.is_cuda():
        return _CudaOps
    if current_platform.is_out_of_tree():
        return _NpuOps
    return _RefOps


NpuOps = _make_ops()
