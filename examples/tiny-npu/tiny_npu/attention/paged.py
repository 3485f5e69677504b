# SPDX-License-Identifier: Apache-2.0
"""Feature 3: the paged backend (selected for (use_mla, use_sparse) == (False, False))."""

from dataclasses import dataclass

import torch

from vllm.v1.attention.backend import AttentionMetadataBuilder, CommonAttentionMetadata

from tiny_npu.attention.common import TinyBackendBase, TinyImplBase, per_token_rows
from tiny_npu.ops.device import NpuOps


class TinyPagedBackend(TinyBackendBase):
    @staticmethod
    def get_name() -> str:
        return "TINY_PAGED"

    @staticmethod
    def get_impl_cls() -> type["TinyPagedImpl"]:
        return TinyPagedImpl

    @staticmethod
    def get_builder_cls() -> type["TinyPagedMetadataBuilder"]:
        return TinyPagedMetadataBuilder


@dataclass
class TinyPagedMetadata:
    num_actual_tokens: int
    slot_mapping: torch.Tensor
    token_block_table: torch.Tensor
    token_ctx_lens: torch.Tensor


class TinyPagedMetadataBuilder(AttentionMetadataBuilder[TinyPagedMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> TinyPagedMetadata:
        block_table, ctx = per_token_rows(common_attn_metadata)
        return TinyPagedMetadata(
            num_actual_tokens=common_attn_metadata.num_actual_tokens,
            slot_mapping=common_attn_metadata.slot_mapping,
            token_block_table=block_table,
            token_ctx_lens=ctx,
        )


class TinyPagedImpl(TinyImplBase):
    # forward and _write_cache are inherited from TinyImplBase.
    def _attend(self, q, key_cache, value_cache, out, attn_metadata: TinyPagedMetadata):
        NpuOps.paged_attention(out, q, key_cache, value_cache, attn_metadata.token_block_table,
                               attn_metadata.token_ctx_lens, self.scale)
