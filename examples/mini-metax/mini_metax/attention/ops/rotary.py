# SPDX-License-Identifier: Apache-2.0
"""Rotary embedding applied inside attention (models that defer RoPE)."""

import torch

from mini_metax.attention.ops._timing import _timed


class RotaryFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, positions, query, key, head_size, cos_sin_cache, is_neox):
        # In-place on query/key: [num_tokens, num_heads * head_size].
        torch.ops._mini_C.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)
        return query, key

    @staticmethod
    def backward(ctx, grad_query, grad_key):
        raise NotImplementedError("rotary_embedding is inference-only on Mini")


@_timed
def apply_rotary(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    return RotaryFn.apply(positions, query, key, head_size, cos_sin_cache, is_neox)
