# SPDX-License-Identifier: Apache-2.0
"""Triton attention backend for the Mini GPU (self-registering)."""

import torch

from mini_metax.attention.ops import mini_unified_attention_fwd
from vllm.utils.torch_utils import is_quantized_kv_cache
from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    TritonAttentionImpl,
    TritonAttentionMetadata,
)


@register_backend(AttentionBackendEnum.TRITON_ATTN)
class MiniTritonAttentionBackend(TritonAttentionBackend):
    @staticmethod
    def get_name() -> str:
        return "TRITON_ATTN"

    @staticmethod
    def get_impl_cls() -> type["MiniTritonAttentionImpl"]:
        return MiniTritonAttentionImpl


class MiniTritonAttentionImpl(TritonAttentionImpl):
    def forward(
        self,
        layer: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: TritonAttentionMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        assert output is not None, "Output tensor must be provided."
        if attn_metadata is None:
            return output.fill_(0)

        n = attn_metadata.num_actual_tokens
        # Upstream layout (blocks, kv_heads, page, 2*head_size) -> K, V views.
        key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
        quantized = is_quantized_kv_cache(self.kv_cache_dtype)
        if quantized:
            key_cache = key_cache.view(self.fp8_dtype)
            value_cache = value_cache.view(self.fp8_dtype)
            # The Mini kernel reads the cache unscaled: fold k_scale into Q.
            torch.ops.mini.scale_cache(query[:n], layer._k_scale)

        mini_unified_attention_fwd(
            output[:n],
            query[:n],
            key_cache,
            value_cache,
            attn_metadata.query_start_loc,
            attn_metadata.seq_lens,
            attn_metadata.block_table,
            self.scale,
        )
        if quantized:
            # ... and v_scale into the output.
            torch.ops.mini.scale_cache(output[:n], layer._v_scale)
        return output
