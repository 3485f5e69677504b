# SPDX-License-Identifier: Apache-2.0
"""Paged decode attention in Triton, used for uniform multi-token (MTP) decode."""

import torch

from vllm.triton_utils import tl, triton


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 32}, num_warps=4),
        triton.Config({"BLOCK_N": 64}, num_warps=4),
        triton.Config({"BLOCK_N": 64}, num_warps=8),
    ],
    key=["HEAD_SIZE", "PAGE_SIZE"],
)
@triton.heuristics({"EVEN_D": lambda args: args["HEAD_SIZE"] == args["PADDED_D"]})
@triton.jit
def _decode_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    o_ptr,
    block_table_ptr,
    seq_lens_ptr,
    sm_scale,
    q_stride_req,
    q_stride_tok,
    q_stride_head,
    kv_stride_block,
    kv_stride_page,
    kv_stride_head,
    bt_stride,
    q_len,
    num_queries_per_kv: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    PADDED_D: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    EVEN_D: tl.constexpr,
):
    req = tl.program_id(0)
    tok = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // num_queries_per_kv

    seq_len = tl.load(seq_lens_ptr + req)
    # causal: query token `tok` sees the context plus the tokens before it
    kv_len = seq_len - q_len + tok + 1

    d = tl.arange(0, PADDED_D)
    d_mask = d < HEAD_SIZE
    q_off = req * q_stride_req + tok * q_stride_tok + head * q_stride_head
    if EVEN_D:
        q = tl.load(q_ptr + q_off + d).to(tl.float32)
    else:
        q = tl.load(q_ptr + q_off + d, mask=d_mask, other=0.0).to(tl.float32)

    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([PADDED_D], dtype=tl.float32)
    for start in range(0, kv_len, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < kv_len
        block = tl.load(block_table_ptr + req * bt_stride + n // PAGE_SIZE, mask=n_mask, other=0)
        kv_off = block * kv_stride_block + (n % PAGE_SIZE) * kv_stride_page + kv_head * kv_stride_head
        kv_mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        v = tl.load(v_cache_ptr + kv_off[:, None] + d[None, :], mask=kv_mask, other=0.0)
        s = tl.sum(k.to(tl.float32) * q[None, :], axis=1) * sm_scale
        s = tl.where(n_mask, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        acc = acc * alpha + tl.sum(p[:, None] * v.to(tl.float32), axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new

    out = acc / l_i
    tl.store(o_ptr + q_off + d, out.to(o_ptr.dtype.element_ty), mask=d_mask)


def _decode_impl(
    q: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    o: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    **kwargs,  # accepts upstream-only options
) -> None:
    # q/o: [num_reqs, q_len, num_heads, head_size]
    # key_cache/value_cache: [num_blocks, page_size, num_kv_heads, head_size]
    num_reqs, q_len, num_heads, head_size = q.shape
    grid = (num_reqs, q_len, num_heads)
    _decode_kernel[grid](
        q,
        key_cache,
        value_cache,
        o,
        block_table,
        seq_lens,
        sm_scale,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        block_table.stride(0),
        q_len,
        num_queries_per_kv=num_heads // key_cache.shape[2],
        HEAD_SIZE=head_size,
        PADDED_D=triton.next_power_of_2(head_size),
        PAGE_SIZE=key_cache.shape[1],
    )


def decode_attention_fwd(*args, **kwargs):
    """Decode attention entry point; all options are accepted here."""
    return _decode_impl(*args, **kwargs)
