# SPDX-License-Identifier: Apache-2.0
"""Unified (prefill + decode) paged attention in Triton, exposed as torch ops.

``torch.ops.vllm.mini_unified_attention`` is registered from Python with
vLLM's ``direct_register_custom_op`` so that torch.compile treats the whole
call as one opaque op; ``torch.ops.mini.scale_cache`` uses the stock
``torch.library.custom_op`` path.
"""

import torch

from vllm.triton_utils import tl, triton
from vllm.utils.torch_utils import direct_register_custom_op


@triton.jit
def _mini_unified_attention_kernel(
    out_ptr,
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    token_req_ptr,
    query_start_loc_ptr,
    seq_lens_ptr,
    block_table_ptr,
    scale,
    tok_stride,
    head_stride,
    kv_stride_block,
    kv_stride_page,
    kv_stride_head,
    bt_stride,
    num_queries_per_kv: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    PADDED_D: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    tok = tl.program_id(0)
    head = tl.program_id(1)
    req = tl.load(token_req_ptr + tok)
    q_start = tl.load(query_start_loc_ptr + req)
    q_len = tl.load(query_start_loc_ptr + req + 1) - q_start
    kv_len = tl.load(seq_lens_ptr + req) - q_len + (tok - q_start) + 1

    d = tl.arange(0, PADDED_D)
    d_mask = d < HEAD_SIZE
    q = tl.load(q_ptr + tok * tok_stride + head * head_stride + d, mask=d_mask, other=0.0).to(tl.float32)
    m_i = float("-inf")
    l_i = 0.0
    acc = tl.zeros([PADDED_D], dtype=tl.float32)
    for start in range(0, kv_len, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_mask = n < kv_len
        block = tl.load(block_table_ptr + req * bt_stride + n // PAGE_SIZE, mask=n_mask, other=0)
        kv_off = block * kv_stride_block + (n % PAGE_SIZE) * kv_stride_page + (head // num_queries_per_kv) * kv_stride_head
        mask = n_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + kv_off[:, None] + d[None, :], mask=mask, other=0.0).to(tl.float32)
        v = tl.load(v_cache_ptr + kv_off[:, None] + d[None, :], mask=mask, other=0.0).to(tl.float32)
        s = tl.where(n_mask, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        l_i = l_i * alpha + tl.sum(p, axis=0)
        m_i = m_new
    tl.store(out_ptr + tok * tok_stride + head * head_stride + d, (acc / l_i).to(out_ptr.dtype.element_ty), mask=d_mask)


def mini_unified_attention(
    output: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
) -> None:
    num_tokens, num_heads, head_size = query.shape
    token_ids = torch.arange(num_tokens, device=query.device, dtype=query_start_loc.dtype)
    token_req = torch.searchsorted(query_start_loc, token_ids, right=True) - 1
    grid = (num_tokens, num_heads)
    _mini_unified_attention_kernel[grid](
        output,
        query,
        key_cache,
        value_cache,
        token_req,
        query_start_loc,
        seq_lens,
        block_table,
        scale,
        query.stride(0),
        query.stride(1),
        key_cache.stride(0),
        key_cache.stride(1),
        key_cache.stride(2),
        block_table.stride(0),
        num_queries_per_kv=num_heads // key_cache.shape[2],
        HEAD_SIZE=head_size,
        PADDED_D=triton.next_power_of_2(head_size),
        PAGE_SIZE=key_cache.shape[1],
        BLOCK_N=64,
    )


def mini_unified_attention_fake(
    output: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
) -> None:
    return


direct_register_custom_op(
    op_name="mini_unified_attention",
    op_func=mini_unified_attention,
    mutates_args=["output"],
    fake_impl=mini_unified_attention_fake,
)


@torch.library.custom_op("mini::scale_cache", mutates_args=("cache",))
def scale_cache(cache: torch.Tensor, scale: torch.Tensor) -> None:
    """In place: cache *= scale (scale is a 0-d float32 tensor)."""
    cache.mul_(scale.to(cache.dtype))


def mini_unified_attention_fwd(
    output: torch.Tensor,
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    torch.ops.vllm.mini_unified_attention(
        output, query, key_cache, value_cache, query_start_loc, seq_lens, block_table, scale
    )
    return output
