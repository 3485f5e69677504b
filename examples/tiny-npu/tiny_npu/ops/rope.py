# SPDX-License-Identifier: Apache-2.0
"""Feature 7: the torch.library op ``tiny::rope`` (in place on q and k).

* ``rope``: the custom_op body, a PyTorch reference; it serves every device
  without a kernel of its own (CPU, CUDA, ...).
* ``_rope_npu``: the PrivateUse1 kernel, launching the Triton ``_rope_kernel``.
* ``_rope_fake``: the fake (meta) implementation for tracing.
"""

import torch

from vllm.triton_utils import triton

from tiny_npu.ops.kernels import _rope_kernel


@torch.library.custom_op("tiny::rope", mutates_args=("q", "k"))
def rope(positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
         cos_sin_cache: torch.Tensor, head_size: int, is_neox: bool) -> None:
    half = cos_sin_cache.shape[-1] // 2
    cos, sin = cos_sin_cache[positions].unsqueeze(1).split(half, dim=-1)
    for x in (q, k):
        x = x.view(x.shape[0], -1, head_size)
        if is_neox:
            x1, x2 = x[..., :half].clone(), x[..., half: 2 * half].clone()
            x[..., :half], x[..., half: 2 * half] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        else:
            x1, x2 = x[..., 0: 2 * half: 2].clone(), x[..., 1: 2 * half: 2].clone()
            x[..., 0: 2 * half: 2], x[..., 1: 2 * half: 2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin


@torch.library.impl("tiny::rope", "PrivateUse1")
def _rope_npu(positions, q, k, cos_sin_cache, head_size, is_neox):
    half = cos_sin_cache.shape[-1] // 2
    for x in (q, k):
        x = x.view(x.shape[0], -1, head_size)
        _rope_kernel[(x.shape[0], x.shape[1])](
            positions, x, cos_sin_cache, x.stride(0), x.stride(1), cos_sin_cache.stride(0),
            HALF=half, IS_NEOX=is_neox, BLOCK=triton.next_power_of_2(half),
        )


@rope.register_fake
def _rope_fake(positions, q, k, cos_sin_cache, head_size, is_neox):
    return None
