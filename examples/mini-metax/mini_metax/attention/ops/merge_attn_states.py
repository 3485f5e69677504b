# SPDX-License-Identifier: Apache-2.0
"""Merge two partial attention results (prefix + suffix) by their LSE."""

import torch

from vllm.platforms import current_platform
from vllm.triton_utils import tl, triton


def merge_attn_states(
    output: torch.Tensor,
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output_lse: torch.Tensor | None = None,
) -> None:
    """output/prefix_output/suffix_output: [tokens, heads, head_size];
    *_lse: [heads, tokens], natural-log base."""
    if current_platform.is_cuda():
        # NVIDIA path (vllm._C); never taken on an out-of-tree platform.
        torch.ops._C.merge_attn_states(
            output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse, None, None
        )
    else:
        merge_attn_states_triton(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse)


def merge_attn_states_triton(
    output: torch.Tensor,
    prefix_output: torch.Tensor,
    prefix_lse: torch.Tensor,
    suffix_output: torch.Tensor,
    suffix_lse: torch.Tensor,
    output_lse: torch.Tensor | None = None,
) -> None:
    num_tokens, num_heads, head_size = output.shape
    grid = (num_tokens, num_heads)
    merge_attn_states_kernel[grid](
        output,
        output_lse,
        prefix_output,
        prefix_lse,
        suffix_output,
        suffix_lse,
        num_tokens,
        output.stride(0),
        output.stride(1),
        head_size,
        triton.next_power_of_2(head_size),
        output_lse is not None,
    )


@triton.jit
def merge_attn_states_kernel(
    output,
    output_lse,
    prefix_output,
    prefix_lse,
    suffix_output,
    suffix_lse,
    num_tokens,
    token_stride,
    head_stride,
    HEAD_SIZE: tl.constexpr,
    PADDED_HEAD_SIZE: tl.constexpr,
    OUTPUT_LSE: tl.constexpr,
):
    token = tl.program_id(0)
    head = tl.program_id(1)
    p_lse = tl.load(prefix_lse + head * num_tokens + token)
    s_lse = tl.load(suffix_lse + head * num_tokens + token)
    max_lse = tl.maximum(p_lse, s_lse)
    p_w = tl.exp(p_lse - max_lse)
    s_w = tl.exp(s_lse - max_lse)
    total = p_w + s_w
    offs = tl.arange(0, PADDED_HEAD_SIZE)
    mask = offs < HEAD_SIZE
    base = token * token_stride + head * head_stride
    p = tl.load(prefix_output + base + offs, mask=mask).to(tl.float32)
    s = tl.load(suffix_output + base + offs, mask=mask).to(tl.float32)
    merged = p * (p_w / total) + s * (s_w / total)
    tl.store(output + base + offs, merged.to(output.dtype.element_ty), mask=mask)
    if OUTPUT_LSE:
        tl.store(output_lse + head * num_tokens + token, tl.log(total) + max_lse)
