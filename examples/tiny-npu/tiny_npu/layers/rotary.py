# SPDX-License-Identifier: Apache-2.0
"""Feature 8: RotaryEmbedding via the torch.library op tiny::rope (ops/rope.py)."""

import torch

from vllm.model_executor.layers.rotary_embedding import RotaryEmbedding

import tiny_npu.ops.rope  # noqa: F401  (defines torch.ops.tiny.rope)


class TinyRotaryEmbedding(RotaryEmbedding):
    def forward_oot(self, positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor | None = None):
        assert key is not None, "tiny::rope rotates q and k together"
        torch.ops.tiny.rope(positions, query, key, self.cos_sin_cache, self.head_size, self.is_neox_style)
        return query, key
