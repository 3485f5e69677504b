# SPDX-License-Identifier: Apache-2.0
"""Triton MLA decode backend for the Mini GPU."""

import torch

from vllm.model_executor.layers.attention.mla_attention import MLACommonMetadata
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
from vllm.v1.attention.backend import AttentionLayer
from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend, TritonMLAImpl
from vllm.v1.attention.ops.triton_decode_attention import decode_attention_fwd


class MiniTritonMLABackend(TritonMLABackend):
    @staticmethod
    def get_name() -> str:
        return "TRITON_MLA"

    @staticmethod
    def get_impl_cls() -> type["MiniTritonMLAImpl"]:
        return MiniTritonMLAImpl


def _num_kv_splits(max_seq_len: int) -> int:
    # Tuned on SM100 (B200); 4 splits elsewhere from SM 9.0 on, else 8.
    if current_platform.is_device_capability(100):
        return 16 if max_seq_len > 8192 else 8
    cap = current_platform.get_device_capability()
    if cap is not None and cap >= DeviceCapability(9, 0):
        return 4
    return 8


class MiniTritonMLAImpl(TritonMLAImpl):
    def forward_mqa(
        self,
        q: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        kv_c_and_k_pe_cache: torch.Tensor,
        attn_metadata: MLACommonMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        assert attn_metadata.decode is not None
        if isinstance(q, tuple):
            q = torch.cat(q, dim=-1)

        num_tokens, num_heads = q.shape[0], q.shape[1]
        o = torch.zeros(num_tokens, num_heads, self.kv_lora_rank, dtype=q.dtype, device=q.device)
        lse = torch.zeros(num_tokens, num_heads, dtype=q.dtype, device=q.device)
        num_kv_splits = _num_kv_splits(attn_metadata.max_seq_len)
        attn_logits = torch.empty(
            (num_tokens, num_heads, num_kv_splits, self.kv_lora_rank + 1),
            dtype=torch.float32,
            device=q.device,
        )

        kv_cache = kv_c_and_k_pe_cache.unsqueeze(2)
        kv_c_cache = kv_cache[..., : self.kv_lora_rank]
        page_size = kv_cache.size(1)
        decode_attention_fwd(
            q,
            kv_cache,
            kv_c_cache,
            o,
            lse,
            attn_metadata.decode.block_table,
            attn_metadata.decode.seq_lens,
            attn_logits,
            num_kv_splits,
            self.scale,
            page_size,
            k_scale=layer._k_scale,
            v_scale=layer._k_scale,
            is_mla=True,
        )
        return o, lse
