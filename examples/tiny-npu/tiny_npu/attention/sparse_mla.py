# SPDX-License-Identifier: Apache-2.0
"""Feature 3: the sparse MLA backend (selected for (use_mla, use_sparse) == (True, True)).

The impl reuses TinyMLAImpl (do_kv_cache_update is inherited) and overrides
forward_mqa: gather the indexer's top-k slots, then run the dense MLA decode
kernel over the gathered rows. The metadata marks every token as a decode
(MQA) token, so vLLM's MLAAttention never calls the inherited forward_mha.
"""

from dataclasses import dataclass

import torch

from vllm.v1.attention.backend import AttentionMetadataBuilder

from tiny_npu.attention.mla import TinyMLABackend, TinyMLAImpl
from tiny_npu.ops.device import NpuOps


class TinySparseMLABackend(TinyMLABackend):
    @staticmethod
    def get_name() -> str:
        return "TINY_SPARSE_MLA"

    @staticmethod
    def get_impl_cls() -> type["TinySparseMLAImpl"]:
        return TinySparseMLAImpl

    @staticmethod
    def get_builder_cls():
        return TinySparseMLAMetadataBuilder

    @classmethod
    def is_sparse(cls) -> bool:
        return True


@dataclass
class TinySparseMLAMetadata:
    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    slot_mapping: torch.Tensor


class TinySparseMLAMetadataBuilder(AttentionMetadataBuilder[TinySparseMLAMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False) -> TinySparseMLAMetadata:
        cm = common_attn_metadata
        return TinySparseMLAMetadata(
            num_actual_tokens=cm.num_actual_tokens, num_decodes=cm.num_reqs,
            num_decode_tokens=cm.num_actual_tokens, num_prefills=0, slot_mapping=cm.slot_mapping,
        )


class TinySparseMLAImpl(TinyMLAImpl):
    is_sparse = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        assert self.indexer is not None, "sparse MLA needs the top-k indexer"
        self.topk_indices_buffer = self.indexer.topk_indices_buffer

    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata: TinySparseMLAMetadata, layer):
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        n = q.shape[0]
        topk = self.topk_indices_buffer[:n]  # global slot ids, -1 = unused (valid ones first)
        rows = kv_c_and_k_pe_cache.flatten(0, 1)[topk.clamp_min(0)]  # (n, k, dim): n "blocks"
        block_table = torch.arange(n, dtype=torch.int32, device=q.device).unsqueeze(1)
        seq_lens = (topk >= 0).sum(dim=-1, dtype=torch.int32)
        o = q.new_empty(n, self.num_heads, self.kv_lora_rank)
        NpuOps.mla_decode(o, q, rows, block_table, seq_lens, self.kv_lora_rank, self.scale)
        return o, None
