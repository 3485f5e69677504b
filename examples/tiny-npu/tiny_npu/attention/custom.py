# SPDX-License-Identifier: Apache-2.0
"""Feature 2: a backend meant for AttentionBackendEnum.CUSTOM, registered WRONGLY.

MISTAKE (on purpose): in vLLM 0.26.0 the signature is
``register_backend(backend, class_path=None, is_mamba=False)``, so the
positional string "TINY_CUSTOM" below is taken as ``class_path``. The call
stores _ATTN_OVERRIDES[CUSTOM] = "TINY_CUSTOM" and returns ``lambda x: x``:
TinyCustomBackend is NOT registered, and CUSTOM.get_path() later returns
"TINY_CUSTOM", which resolve_obj_by_qualname cannot import. Nothing in this
module ever runs as an attention backend.
"""

from dataclasses import dataclass

import torch

from vllm.v1.attention.backend import AttentionImpl, AttentionMetadataBuilder
from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

from tiny_npu.attention.common import TinyBackendBase, per_token_rows


@register_backend(AttentionBackendEnum.CUSTOM, "TINY_CUSTOM")  # stores a path, registers nothing
class TinyCustomBackend(TinyBackendBase):
    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type["TinyCustomImpl"]:
        return TinyCustomImpl

    @staticmethod
    def get_builder_cls() -> type["TinyCustomMetadataBuilder"]:
        return TinyCustomMetadataBuilder


@dataclass
class TinyCustomMetadata:
    num_actual_tokens: int
    token_block_table: torch.Tensor
    token_ctx_lens: torch.Tensor


class TinyCustomMetadataBuilder(AttentionMetadataBuilder[TinyCustomMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False) -> TinyCustomMetadata:
        block_table, ctx = per_token_rows(common_attn_metadata)
        return TinyCustomMetadata(common_attn_metadata.num_actual_tokens, block_table, ctx)


class TinyCustomImpl(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, *args, **kwargs):
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None,
                output_scale=None, output_block_scale=None):
        # Never runs (see the module docstring). Read-only: calls the native op directly.
        n = attn_metadata.num_actual_tokens
        key_cache, value_cache = kv_cache.unbind(0)
        torch.ops._tiny_C.paged_attention(
            output[:n].view(n, self.num_heads, self.head_size),
            query[:n].view(n, self.num_heads, self.head_size),
            key_cache, value_cache, attn_metadata.token_block_table, attn_metadata.token_ctx_lens, self.scale,
        )
        return output
