# SPDX-License-Identifier: Apache-2.0
"""Attention-related monkey patches applied at import time.

After ``import mini_metax.patch``, code that looks up these upstream names
through their module/class runs the Mini versions below instead.
"""

import torch

from mini_metax.patch.utils import patch
from vllm.triton_utils import tl, triton


@triton.jit
def _mini_reshape_and_cache_kernel(
    key_ptr,
    value_ptr,
    key_cache_ptr,
    value_cache_ptr,
    slot_mapping_ptr,
    key_stride,
    value_stride,
    block_stride,
    page_stride,
    block_size,
    num_elems: tl.constexpr,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)
    if slot < 0:
        # padding token
        return
    block_idx = slot // block_size
    block_off = slot % block_size
    offs = tl.arange(0, BLOCK)
    mask = offs < num_elems
    k = tl.load(key_ptr + token * key_stride + offs, mask=mask)
    v = tl.load(value_ptr + token * value_stride + offs, mask=mask)
    dst = block_idx * block_stride + block_off * page_stride + offs
    tl.store(key_cache_ptr + dst, k.to(key_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(value_cache_ptr + dst, v.to(value_cache_ptr.dtype.element_ty), mask=mask)


@patch("vllm.v1.attention.ops.triton_reshape_and_cache_flash", "triton_reshape_and_cache_flash")
def mini_triton_reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
) -> None:
    """Write new K/V rows into the paged cache (NHD layout).

    FP8 shares this API: pass kv_cache_dtype="fp8" with k_scale/v_scale.
    """
    num_tokens, num_heads, head_size = key.shape
    block_size = key_cache.shape[1]
    num_elems = num_heads * head_size
    grid = (num_tokens,)
    _mini_reshape_and_cache_kernel[grid](
        key,
        value,
        key_cache,
        value_cache,
        slot_mapping,
        key.stride(0),
        value.stride(0),
        key_cache.stride(0),
        key_cache.stride(1),
        block_size,
        num_elems=num_elems,
        BLOCK=triton.next_power_of_2(num_elems),
    )


@patch("vllm.v1.attention.backends.flash_attn", "FlashAttentionMetadataBuilder.use_cascade_attention")
def _mini_use_cascade_attention(self, *args, **kwargs) -> bool:
    # Cascade attention needs FA3 scheduler metadata; never use it on Mini.
    return False
