# SPDX-License-Identifier: Apache-2.0
"""Feature 3: the MLA backend (selected for (use_mla, use_sparse) == (True, False)).

Cache: (num_blocks, page, kv_lora_rank + rope_dim), latent first, rope last.
"""

from dataclasses import dataclass

import torch

from vllm.v1.attention.backend import AttentionMetadataBuilder, MLAAttentionImpl
from vllm.v1.attention.backends.utils import split_decodes_and_prefills

from tiny_npu.attention.common import TinyBackendBase, per_token_rows
from tiny_npu.ops.cache import write_kv_cache
from tiny_npu.ops.device import NpuOps


class TinyMLABackend(TinyBackendBase):
    @staticmethod
    def get_name() -> str:
        return "TINY_MLA"

    @staticmethod
    def get_impl_cls() -> type["TinyMLAImpl"]:
        return TinyMLAImpl

    @staticmethod
    def get_builder_cls() -> type["TinyMLAMetadataBuilder"]:
        return TinyMLAMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        return (num_blocks, block_size, head_size)

    @classmethod
    def is_mla(cls) -> bool:
        return True


@dataclass
class TinyMLAMetadata:
    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    slot_mapping: torch.Tensor
    token_block_table: torch.Tensor
    token_ctx_lens: torch.Tensor
    prefill_query_start_loc: torch.Tensor


class TinyMLAMetadataBuilder(AttentionMetadataBuilder[TinyMLAMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self._init_reorder_batch_threshold(1)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False) -> TinyMLAMetadata:
        cm = common_attn_metadata
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(cm)
        block_table, ctx = per_token_rows(cm)
        qsl = cm.query_start_loc[num_decodes:]
        return TinyMLAMetadata(
            num_actual_tokens=cm.num_actual_tokens, num_decodes=num_decodes,
            num_decode_tokens=num_decode_tokens, num_prefills=num_prefills,
            slot_mapping=cm.slot_mapping, token_block_table=block_table,
            token_ctx_lens=ctx, prefill_query_start_loc=qsl - qsl[0],
        )


class TinyMLAImpl(MLAAttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads, alibi_slopes, sliding_window,
                 kv_cache_dtype, logits_soft_cap, attn_type, kv_sharing_target_layer_name,
                 q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, qk_head_dim,
                 v_head_dim, kv_b_proj, indexer=None, q_pad_num_heads=None):
        self.num_heads = num_heads
        self.scale = float(scale)
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_lora_rank = kv_lora_rank
        self.qk_nope_head_dim = qk_nope_head_dim
        self.v_head_dim = v_head_dim
        self.kv_b_proj = kv_b_proj
        self.indexer = indexer

    def do_kv_cache_update(self, kv_c_normed, k_pe, kv_cache, slot_mapping, kv_cache_dtype, k_scale):
        # Latent and rope parts: two one-head views of one cache row.
        r = self.kv_lora_rank
        write_kv_cache(kv_c_normed.unsqueeze(1), k_pe.view(k_pe.shape[0], 1, -1),
                       kv_cache[..., :r].unsqueeze(2), kv_cache[..., r:].unsqueeze(2),
                       slot_mapping, kv_cache_dtype)

    def forward_mqa(self, q, kv_c_and_k_pe_cache, attn_metadata: TinyMLAMetadata, layer):
        # Decode: MQA over the latent cache, on the NPU's native MLA kernel.
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)
        n = q.shape[0]
        o = q.new_empty(n, self.num_heads, self.kv_lora_rank)
        NpuOps.mla_decode(o, q, kv_c_and_k_pe_cache, attn_metadata.token_block_table[:n],
                          attn_metadata.token_ctx_lens[:n], self.kv_lora_rank, self.scale)
        return o, None

    def forward_mha(self, q, kv_c_normed, k_pe, kv_c_and_k_pe_cache, attn_metadata: TinyMLAMetadata,
                    k_scale, output, output_scale=None):
        # Prefill: expand the latent and run PyTorch SDPA per request (fresh
        # prompts only: no cached-prefix context is read).
        kv = self.kv_b_proj(kv_c_normed)[0].view(-1, self.num_heads, self.qk_nope_head_dim + self.v_head_dim)
        k_nope, v = kv.split([self.qk_nope_head_dim, self.v_head_dim], dim=-1)
        k = torch.cat((k_nope, k_pe.expand(-1, self.num_heads, -1)), dim=-1)
        out = output.view(-1, self.num_heads, self.v_head_dim)
        bounds = attn_metadata.prefill_query_start_loc.tolist()
        for s, e in zip(bounds[:-1], bounds[1:]):
            out[s:e] = torch.nn.functional.scaled_dot_product_attention(
                q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1),
                is_causal=True, scale=self.scale,
            ).transpose(0, 1)
