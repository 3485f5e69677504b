# SPDX-License-Identifier: Apache-2.0
"""Platform class for the Mini GPU (an out-of-tree, CUDA-like device)."""

import os
from functools import cache
from typing import TYPE_CHECKING

import torch

from vllm.logger import init_logger
from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum
from vllm.v1.attention.backends.mla.prefill.registry import (
    MLAPrefillBackendEnum,
    register_mla_prefill_backend,
)
from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.selector import AttentionSelectorConfig

logger = init_logger(__name__)

# Vendor management library (ships with the Mini driver, not on PyPI).
try:
    import minismi

    minismi.init()
    smi_available = True
except ImportError:
    minismi = None
    smi_available = False


def register_attention_backends() -> None:
    """Point vLLM's attention registries at the Mini implementations."""
    register_backend(AttentionBackendEnum.FLASH_ATTN, class_path="mini_metax.attention.backends.flash_attn.MiniFlashAttentionBackend")
    register_backend(backend=AttentionBackendEnum.TRITON_MLA, class_path="mini_metax.attention.backends.mla.triton_mla.MiniTritonMLABackend")
    register_mla_prefill_backend(backend=MLAPrefillBackendEnum.FLASH_ATTN, class_path="mini_metax.attention.backends.mla.prefill_flash_attn.MiniFlashAttnPrefillBackend")
    # TRITON_ATTN registers itself with the decorator form on import.
    import mini_metax.attention.backends.triton_attn  # noqa: F401


def _get_backend_priorities(use_mla: bool) -> list[AttentionBackendEnum]:
    if use_mla:
        return [AttentionBackendEnum.TRITON_MLA]
    return [AttentionBackendEnum.FLASH_ATTN, AttentionBackendEnum.TRITON_ATTN]


class MiniPlatformBase(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "mini"
    device_type: str = "cuda"
    dispatch_key: str = "CUDA"
    ray_device_key: str = "GPU"
    device_control_env_var: str = "CUDA_VISIBLE_DEVICES"

    @classmethod
    def import_kernels(cls) -> None:
        """Load the extension that registers torch.ops._mini_C / _C_cache_ops."""
        try:
            if os.environ.get("MINI_USE_PRECOMPILED", "0") == "1":
                import minikern._C  # noqa: F401
            else:
                import mini_metax._C  # noqa: F401
        except ImportError as e:
            logger.warning("Failed to import Mini kernels: %r", e)

    @classmethod
    @cache
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        # The management library reports the Mini ISA version, not an
        # NVIDIA SM version, even though the tuple looks the same.
        physical_id = cls.device_id_to_physical_device_id(device_id)
        handle = minismi.device_handle(physical_id)
        major, minor = minismi.isa_version(handle)
        return DeviceCapability(major=major, minor=minor)

    @classmethod
    def is_device_capability_family(cls, capability: int, device_id: int = 0) -> bool:
        """The Mini GPU has no NVIDIA capability families (9.x, 10.x, ...),
        so this never matches."""
        return False

    def is_cuda_alike(self) -> bool:
        return True

    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum | None,
        attn_selector_config: "AttentionSelectorConfig",
        num_heads: int | None = None,
    ) -> str:
        if selected_backend is not None:
            return selected_backend.get_path()
        backend = _get_backend_priorities(attn_selector_config.use_mla)[0]
        logger.info("Using %s backend on Mini.", backend.name)
        return backend.get_path()

    @classmethod
    def check_and_update_config(cls, vllm_config: "VllmConfig") -> None:
        register_attention_backends()

    @classmethod
    def get_default_ir_op_priority(cls, vllm_config: "VllmConfig"):
        """This plugin's Triton provider first (attention/ops/ir_norm.py), then vLLM's C kernels, then native; an
        externally registered `oink` provider in front of them only when MINI_TRY_OINK=1."""
        from vllm.config.kernel import IrOpPriorityConfig

        order = ["mini_triton", "vllm_c", "native"]
        if os.environ.get("MINI_TRY_OINK", "0") == "1":
            order = ["oink", *order]
        return IrOpPriorityConfig.with_default(order)


class SmiMiniPlatform(MiniPlatformBase):
    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        handle = minismi.device_handle(cls.device_id_to_physical_device_id(device_id))
        return minismi.device_name(handle)


class NoSmiMiniPlatform(MiniPlatformBase):
    @classmethod
    @cache
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        major, minor = torch.cuda.get_device_capability(device_id)
        return DeviceCapability(major=major, minor=minor)

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.cuda.get_device_name(device_id)


MiniPlatform = SmiMiniPlatform if smi_available else NoSmiMiniPlatform
