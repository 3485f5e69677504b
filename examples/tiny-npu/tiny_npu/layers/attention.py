# SPDX-License-Identifier: Apache-2.0
"""Feature 11: an Attention layer whose ``self.impl`` is bound at construction.

``Attention.__init__`` (vLLM) calls get_attn_backend(..., use_mla=False,
has_sink=...) -> TinyNpuPlatform.get_attn_backend_cls, then sets
``self.impl = backend.get_impl_cls()(...)``.
"""

import torch

from vllm.forward_context import get_forward_context
from vllm.model_executor.layers.attention.attention import Attention


class TinyAttention(Attention):
    def forward(self, query, key, value, output_shape=None, output_dtype=None):
        # NPU pre-step: the Tiny kernels need dense token-major rows.
        query, key, value = query.contiguous(), key.contiguous(), value.contiguous()
        attn_metadata = get_forward_context().attn_metadata
        if isinstance(attn_metadata, dict):
            attn_metadata = attn_metadata[self.layer_name]
        kv_cache = self.kv_cache
        output = torch.empty(output_shape or query.shape, dtype=output_dtype or query.dtype, device=query.device)
        self.impl.forward(self, query, key, value, kv_cache, attn_metadata, output=output)
        return output
