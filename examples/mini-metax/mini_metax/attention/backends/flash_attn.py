# SPDX-License-Identifier: Apache-2.0
"""FlashAttention backend for the Mini GPU, built on the miniflash FA2 port."""

import importlib
from dataclasses import dataclass
from typing import ClassVar

import torch

from mini_metax.attention.backends.fa_utils import (
    get_flash_attn_version,
    is_flash_attn_varlen_func_available,
)
from mini_metax.attention.ops.merge_attn_states import merge_attn_states
from vllm.config.cache import CacheDType
from vllm.logger import init_logger
from vllm.platforms import current_platform
from vllm.v1.attention.backend import AttentionCGSupport, CommonAttentionMetadata
from vllm.v1.attention.backends.flash_attn import (
    FlashAttentionBackend,
    FlashAttentionImpl,
    FlashAttentionMetadataBuilder,
)

if is_flash_attn_varlen_func_available():
    from mini_metax.attention.backends.fa_utils import (
        flash_attn_varlen_func,
        reshape_and_cache_flash,
        get_scheduler_metadata,
        flash_attn_supports_sinks,
    )

try:
    # Older vLLM releases exported this helper; kept for older pins.
    from vllm.v1.attention.backends.fa_utils import flash_attn_supports_fp8
except ImportError:

    def flash_attn_supports_fp8() -> bool:
        return False


logger = init_logger(__name__)


class MiniFlashAttentionBackend(FlashAttentionBackend):
    @staticmethod
    def get_name() -> str:
        return "FLASH_ATTN"

    @staticmethod
    def get_impl_cls() -> type["MiniFlashAttentionImpl"]:
        return MiniFlashAttentionImpl

    @staticmethod
    def get_builder_cls() -> type["MiniFlashAttentionMetadataBuilder"]:
        return MiniFlashAttentionMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_size: int,
        cache_dtype_str: str = "auto",
    ) -> tuple[int, ...]:
        # Mini keeps K and V in separate planes: (2, blocks, page, heads, dim).
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(
        include_num_layers_dimension: bool = False,
    ) -> tuple[int, ...]:
        return (0, 1, 2, 3, 4)

    @classmethod
    def supports_head_size(cls, head_size: int) -> bool:
        # mini fa2 supports 512
        return head_size % 8 == 0 and head_size <= 512

    @classmethod
    def supports_kv_cache_dtype(cls, kv_cache_dtype: CacheDType | None) -> bool:
        if kv_cache_dtype is None:
            return True
        if kv_cache_dtype.startswith("fp8"):
            return get_flash_attn_version() == 3 and current_platform.is_device_capability_family(90)
        return kv_cache_dtype in ["auto", "float16", "bfloat16"]

    @classmethod
    def supports_sink(cls) -> bool:
        return flash_attn_supports_sinks()

    @classmethod
    def supports_per_head_quant_scales(cls) -> bool:
        return flash_attn_supports_fp8()


@dataclass
class MiniFlashAttentionMetadata:
    num_actual_tokens: int
    num_reqs: int
    max_query_len: int
    query_start_loc: torch.Tensor
    max_seq_len: int
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    is_spec_decode: bool = False
    common_prefix_len: int = 0
    prefix_kv_lens: torch.Tensor | None = None
    suffix_kv_lens: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    scheduler_metadata: torch.Tensor | None = None
    native_fp8_cache: bool = False


class MiniFlashAttentionMetadataBuilder(FlashAttentionMetadataBuilder):
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_BATCH

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> MiniFlashAttentionMetadata:
        cm = common_attn_metadata
        scheduler_metadata = get_scheduler_metadata(
            batch_size=cm.num_reqs,
            max_seqlen_q=cm.max_query_len,
            max_seqlen_k=cm.max_seq_len,
            num_heads_q=self.num_heads_q,
            num_heads_kv=self.num_heads_kv,
            headdim=self.headdim,
            cache_seqlens=cm.seq_lens,
            page_size=self.block_size,
            causal=cm.causal,
        )
        # FP8 stores into the cache are native from SM 8.9 (Ada) on.
        native_fp8_cache = current_platform.has_device_capability(89)

        prefix_kv_lens = suffix_kv_lens = None
        if common_prefix_len > 0:
            prefix_kv_lens = torch.tensor([common_prefix_len], dtype=torch.int32, device=self.device)
            suffix_kv_lens = cm.seq_lens - common_prefix_len

        threshold = self.reorder_batch_threshold or 1
        return MiniFlashAttentionMetadata(
            num_actual_tokens=cm.num_actual_tokens,
            num_reqs=cm.num_reqs,
            max_query_len=cm.max_query_len,
            query_start_loc=cm.query_start_loc,
            max_seq_len=cm.max_seq_len,
            seq_lens=cm.seq_lens,
            block_table=cm.block_table_tensor,
            slot_mapping=cm.slot_mapping,
            is_spec_decode=1 < cm.max_query_len <= threshold,
            common_prefix_len=common_prefix_len,
            prefix_kv_lens=prefix_kv_lens,
            suffix_kv_lens=suffix_kv_lens,
            positions=cm.positions,
            scheduler_metadata=scheduler_metadata,
            native_fp8_cache=native_fp8_cache,
        )


class MiniFlashAttentionImpl(FlashAttentionImpl):
    def forward(
        self,
        layer: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: MiniFlashAttentionMetadata,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        assert output is not None, "Output tensor must be provided."
        if attn_metadata is None:
            # Profiling run.
            return output.fill_(0)

        md = attn_metadata
        n = md.num_actual_tokens
        key_cache, value_cache = kv_cache.unbind(0)

        cos_sin_cache = getattr(layer, "mini_cos_sin_cache", None)
        if cos_sin_cache is not None and md.positions is not None:
            rotary_mod = importlib.import_module("mini_metax.attention.ops.rotary")
            apply_rotary = getattr(rotary_mod, "apply_rotary")
            query, key = apply_rotary(md.positions, query, key, self.head_size, cos_sin_cache)

        if self.kv_sharing_target_layer_name is None:
            reshape_and_cache_flash(key, value, key_cache, value_cache, attn_metadata.slot_mapping, self.kv_cache_dtype, layer._k_scale, layer._v_scale)

        if md.max_query_len == 1:
            torch.ops._mini_C.paged_attention_v2(
                output[:n],
                query[:n],
                key_cache,
                value_cache,
                self.num_kv_heads,
                self.scale,
                md.block_table,
                md.seq_lens,
                key_cache.shape[1],
                md.max_seq_len,
            )
        elif md.is_spec_decode:
            self._forward_spec_decode(query, key_cache, value_cache, output, md)
        elif md.common_prefix_len > 0:
            self._forward_cascade(query, key_cache, value_cache, output, md)
        else:
            self._flash_varlen(query[:n], key_cache, value_cache, md, out=output[:n])
        return output

    def _flash_varlen(self, q, key_cache, value_cache, md, out=None, seqused_k=None, causal=True, return_lse=False):
        return flash_attn_varlen_func(
            q=q,
            k=key_cache,
            v=value_cache,
            out=out,
            cu_seqlens_q=md.query_start_loc,
            max_seqlen_q=md.max_query_len,
            seqused_k=md.seq_lens if seqused_k is None else seqused_k,
            max_seqlen_k=md.max_seq_len,
            softmax_scale=self.scale,
            causal=causal,
            window_size=list(self.sliding_window),
            block_table=md.block_table,
            softcap=self.logits_soft_cap,
            return_softmax_lse=return_lse,
            scheduler_metadata=md.scheduler_metadata,
            s_aux=self.sinks,
        )

    def _forward_cascade(self, query, key_cache, value_cache, output, md) -> None:
        n = md.num_actual_tokens
        prefix_out, prefix_lse = self._flash_varlen(
            query[:n], key_cache, value_cache, md, seqused_k=md.prefix_kv_lens, causal=False, return_lse=True
        )
        suffix_out, suffix_lse = self._flash_varlen(
            query[:n], key_cache, value_cache, md, seqused_k=md.suffix_kv_lens, return_lse=True
        )
        merge_attn_states(output[:n], prefix_out, prefix_lse, suffix_out, suffix_lse)

    def _forward_spec_decode(self, query, key_cache, value_cache, output, md) -> None:
        from mini_metax.attention.ops.decode import decode_attention_fwd

        n = md.num_actual_tokens
        num_reqs = md.num_reqs
        # cache is contiguous, no need to check strides
        q = query[:n].view(num_reqs, -1, self.num_heads, self.head_size)
        o = output[:n].view(num_reqs, -1, self.num_heads, self.head_size)
        # softcap is applied inside the mini decode kernel
        decode_attention_fwd(q, key_cache, value_cache, o, md.block_table, md.seq_lens, self.scale, softcap=self.logits_soft_cap)
