# SPDX-License-Identifier: Apache-2.0
"""Feature 9: what ``flash_attn`` means on the Tiny NPU (paged KV only)."""

import torch

from tiny_npu.ops.kernels import _paged_sink_attn_kernel


def flash_attn_varlen_func(q, k, v, seqused_k, block_table, softmax_scale, out=None,
                           s_aux=None, causal=True, **unused):
    # q: (tokens, heads, dim); k, v: (blocks, page, kv_heads, dim); one
    # block-table row and one context length per query token.
    tokens, heads, head_dim = q.shape
    out = torch.empty_like(q) if out is None else out
    _paged_sink_attn_kernel[(tokens, heads)](
        q, k, v, out, s_aux if s_aux is not None else q, block_table, seqused_k,
        softmax_scale, q.stride(0), block_table.stride(0), k.stride(0), k.stride(1), k.stride(2),
        GROUPS=heads // k.shape[2], PAGE=k.shape[1], HEAD_DIM=head_dim, HAS_SINK=s_aux is not None,
    )
    return out
