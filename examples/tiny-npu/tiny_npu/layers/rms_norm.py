# SPDX-License-Identifier: Apache-2.0
"""Feature 8: RMSNorm on the NPU (a Triton kernel); registered in layers/__init__.py."""

import torch

from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.triton_utils import triton

from tiny_npu.ops.kernels import _rms_norm_kernel


class TinyRMSNorm(RMSNorm):
    def forward_oot(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if residual is not None:
            x = x + residual
            residual = x
        x2d = x.reshape(-1, x.shape[-1])
        out = torch.empty_like(x2d)
        n_cols = x2d.shape[-1]
        _rms_norm_kernel[(x2d.shape[0],)](
            x2d, self.weight, out, x2d.stride(0), n_cols, self.variance_epsilon,
            BLOCK=triton.next_power_of_2(n_cols),
        )
        out = out.view_as(x)
        return out if residual is None else (out, residual)
