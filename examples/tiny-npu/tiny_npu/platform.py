# SPDX-License-Identifier: Apache-2.0
"""Feature 1: the Tiny NPU platform class."""

from typing import TYPE_CHECKING

from vllm.platforms.interface import Platform, PlatformEnum
from vllm.v1.attention.backends.registry import AttentionBackendEnum

if TYPE_CHECKING:
    from vllm.v1.attention.selector import AttentionSelectorConfig


class TinyNpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "npu"
    device_type: str = "npu"
    dispatch_key: str = "PrivateUse1"
    ray_device_key: str = "NPU"
    device_control_env_var: str = "TINY_VISIBLE_DEVICES"
    simple_compile_backend: str = "eager"

    @classmethod
    def import_kernels(cls) -> None:
        # Registers torch.ops._tiny_C.* (csrc/ops.cpp); not in the source tree.
        import tiny_npu._tiny_C  # noqa: F401

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return "Tiny NPU"

    @classmethod
    def is_device_capability_family(cls, capability: int, device_id: int = 0) -> bool:
        # Constant: the NPU has no NVIDIA capability families, so never True.
        return False

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum | None,
        attn_selector_config: "AttentionSelectorConfig",
        num_heads: int | None = None,
    ) -> str:
        # Backend selection by code only: none of the class paths below is
        # registered with register_backend.
        # (a) early return for attention sinks
        if attn_selector_config.has_sink:
            return "tiny_npu.attention.sink.TinySinkBackend"
        # (b) an enum member's path: whatever register_backend stored for
        # CUSTOM (see attention/custom.py: it stored "TINY_CUSTOM").
        if selected_backend == AttentionBackendEnum.CUSTOM:
            return AttentionBackendEnum.CUSTOM.get_path()
        # (c) literal dict keyed by (use_mla, use_sparse); (False, True) is missing.
        backends = {
            (False, False): "tiny_npu.attention.paged.TinyPagedBackend",
            (True, False): "tiny_npu.attention.mla.TinyMLABackend",
            (True, True): "tiny_npu.attention.sparse_mla.TinySparseMLABackend",
        }
        return backends[(attn_selector_config.use_mla, attn_selector_config.use_sparse)]
