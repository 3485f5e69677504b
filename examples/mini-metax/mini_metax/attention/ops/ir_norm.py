# SPDX-License-Identifier: Apache-2.0
"""A vLLM IR op with a provider of this plugin.

``ir.ops.rms_norm`` is declared by vLLM (``@register_op``); providers register implementations with
``@ir.ops.rms_norm.register_impl("name", supported=...)``. A call runs the first provider in the platform's IR
op priority that is supported and accepts the arguments, the op's own body ("native") last. This plugin adds a
Triton provider for itself, one that only a ROCm build would support, and one the platform's default priority
never lists.
"""

import torch

from vllm import ir
from vllm.platforms import current_platform
from vllm.triton_utils import tl, triton


@triton.jit
def _mini_rms_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x, mask=mask)


@ir.ops.rms_norm.register_impl("mini_triton", supported=current_platform.is_out_of_tree())
def mini_rms_norm(x, weight, epsilon, variance_size=None):
    out = torch.empty_like(x)
    _mini_rms_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


@ir.ops.rms_norm.register_impl("mini_rocm", supported=current_platform.is_rocm())
def rocm_rms_norm(x, weight, epsilon, variance_size=None):
    out = torch.empty_like(x)
    _mini_rms_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


@triton.jit
def _mini_rms_kernel_wide(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK * 2 + tl.arange(0, BLOCK * 2)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


_wide_ok = lambda x, weight, epsilon, variance_size=None: x.shape[-1] % 512 == 0  # noqa: E731


# supported everywhere, but the platform's default priority never lists it: only a --kernel-config that names it
@ir.ops.rms_norm.register_impl("mini_wide", supports_args=_wide_ok)
def wide_rms_norm(x, weight, epsilon, variance_size=None):
    out = torch.empty_like(x)
    _mini_rms_kernel_wide[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), BLOCK=256)
    return out


def normalize(x, weight):
    return ir.ops.rms_norm(x, weight, 1e-6)


def add_normalize(x, residual, weight):
    return ir.ops.fused_add_rms_norm.maybe_inplace(x, residual, weight, 1e-6)
