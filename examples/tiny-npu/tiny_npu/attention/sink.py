# SPDX-License-Identifier: Apache-2.0
"""Feature 3: the sink backend (early return when attn_selector_config.has_sink).

Feature 9: ``flash_attn`` is not installed; the import hook installed by
tiny_npu.compat (loaded by register_ops before any backend is resolved) maps
it to tiny_npu.compat.flash_attn.
"""

from dataclasses import dataclass

import torch

from flash_attn import flash_attn_varlen_func

from vllm.v1.attention.backend import AttentionMetadataBuilder, CommonAttentionMetadata

from tiny_npu.attention.common import TinyBackendBase, TinyImplBase, per_token_rows


class TinySinkBackend(TinyBackendBase):
    @staticmethod
    def get_name() -> str:
        return "TINY_SINK"

    @staticmethod
    def get_impl_cls():
        return TinySinkImpl

    @staticmethod
    def get_builder_cls():
        return TinySinkMetadataBuilder

    @classmethod
    def supports_sink(cls) -> bool:
        return True


@dataclass
class TinySinkMetadata:
    num_actual_tokens: int
    slot_mapping: torch.Tensor
    token_block_table: torch.Tensor
    token_ctx_lens: torch.Tensor


class TinySinkMetadataBuilder(AttentionMetadataBuilder[TinySinkMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False) -> "TinySinkMetadata":
        cm: CommonAttentionMetadata = common_attn_metadata
        block_table, ctx = per_token_rows(cm)
        return TinySinkMetadata(cm.num_actual_tokens, cm.slot_mapping, block_table, ctx)


class TinySinkImpl(TinyImplBase):
    # forward and _write_cache are inherited from TinyImplBase.
    def _attend(self, q, key_cache, value_cache, out, attn_metadata: TinySinkMetadata):
        flash_attn_varlen_func(
            q, key_cache, value_cache,
            seqused_k=attn_metadata.token_ctx_lens,
            block_table=attn_metadata.token_block_table,
            softmax_scale=self.scale,
            out=out,
            s_aux=self.sinks,
        )
