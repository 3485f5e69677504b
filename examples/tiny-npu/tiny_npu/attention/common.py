# SPDX-License-Identifier: Apache-2.0
"""Pieces shared by the Tiny backends.

Feature 3: ``TinyImplBase.forward`` is the template method of the paged and
sink impls: it calls ``self._write_cache`` and then ``self._attend``, which
each subclass overrides (the base ``_attend`` only raises).
"""

import torch

from vllm.v1.attention.backend import AttentionBackend, AttentionImpl, CommonAttentionMetadata

from tiny_npu.ops.cache import write_kv_cache


class TinyBackendBase(AttentionBackend):
    # KV cache layout on the NPU: (2, num_blocks, page, kv_heads, head_size).
    # forward() writes the cache itself; "auto" and "fp8" match ops/cache.py:_WRITERS.
    forward_includes_kv_cache_update: bool = True
    supported_kv_cache_dtypes = ["auto", "fp8"]

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        return (2, num_blocks, block_size, num_kv_heads, head_size)


def per_token_rows(cm: CommonAttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
    """One block-table row and one causal context length per query token."""
    q_lens = cm.query_start_loc[1:] - cm.query_start_loc[:-1]
    req = torch.repeat_interleave(torch.arange(cm.num_reqs, device=q_lens.device), q_lens)
    pos_in_q = torch.arange(req.shape[0], device=q_lens.device) - cm.query_start_loc[req]
    ctx = cm.seq_lens[req] - q_lens[req] + pos_in_q + 1
    return cm.block_table_tensor[req], ctx.to(torch.int32)


class TinyImplBase(AttentionImpl):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type="decoder", kv_sharing_target_layer_name=None, sinks=None):
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.sinks = sinks

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output=None,
                output_scale=None, output_block_scale=None):
        assert output is not None
        if attn_metadata is None:  # profiling run
            return output.fill_(0)
        n = attn_metadata.num_actual_tokens
        key_cache, value_cache = kv_cache.unbind(0)
        if self.kv_sharing_target_layer_name is None:
            self._write_cache(key[:n], value[:n], key_cache, value_cache, attn_metadata)
        q = query[:n].view(n, self.num_heads, self.head_size)
        o = output[:n].view(n, self.num_heads, self.head_size)
        self._attend(q, key_cache, value_cache, o, attn_metadata)
        return output

    def _write_cache(self, key, value, key_cache, value_cache, attn_metadata):
        key = key.view(-1, self.num_kv_heads, self.head_size)
        value = value.view(-1, self.num_kv_heads, self.head_size)
        write_kv_cache(key, value, key_cache, value_cache, attn_metadata.slot_mapping, self.kv_cache_dtype)

    def _attend(self, q, key_cache, value_cache, out, attn_metadata):
        raise NotImplementedError("subclasses attend")
