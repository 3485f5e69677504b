# SPDX-License-Identifier: Apache-2.0
"""MLA prefill through miniflash (FA2 interface, equal Q/K/V head dims)."""

import torch

from mini_metax.attention.backends.fa_utils import flash_attn_varlen_func
from vllm.v1.attention.backends.mla.prefill.base import MLADimensions
from vllm.v1.attention.backends.mla.prefill.flash_attn import FlashAttnPrefillBackend


class MiniFlashAttnPrefillBackend(FlashAttnPrefillBackend):
    @staticmethod
    def get_name() -> str:
        return "FLASH_ATTN"

    @classmethod
    def is_available(cls) -> bool:
        return True

    @classmethod
    def supports_mla_dimensions(cls, mla_dimensions: MLADimensions) -> bool:
        # DeepSeek-style (128 + 64, 128) only.
        return mla_dimensions == MLADimensions(qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

    def _flash_attn_varlen_diff_headdims(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        return_softmax_lse: bool = False,
        softmax_scale: float | None = None,
        out: torch.Tensor | None = None,
        output_scale: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        # miniflash needs equal head dims: pad V up to the QK head dim.
        padded_v = torch.nn.functional.pad(v, [0, q.shape[-1] - v.shape[-1]], value=0)
        attn_out, lse = flash_attn_varlen_func(
            q=q,
            k=k,
            v=padded_v,
            softmax_scale=softmax_scale,
            return_attn_probs=True,
            **kwargs,
        )[:2]
        attn_out = attn_out[..., : v.shape[-1]]
        if out is not None:
            out.copy_(attn_out)
            attn_out = out
        if return_softmax_lse:
            return attn_out, lse
        return attn_out
