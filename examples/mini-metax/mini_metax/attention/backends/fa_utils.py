# SPDX-License-Identifier: Apache-2.0
"""Flash-attention entry points for the Mini GPU.

Mirrors vllm/v1/attention/backends/fa_utils.py: every backend imports the
kernels from here, so this module decides what "flash_attn_varlen_func"
means on this platform.
"""

from vllm.logger import init_logger
from vllm.platforms import current_platform

logger = init_logger(__name__)

if current_platform.is_out_of_tree():
    from vllm import _custom_ops as ops

    from mini_metax._dummy_ops import dummy_ops
    from miniflash import flash_attn_varlen_func, flash_attn_with_kvcache  # noqa: F401

    reshape_and_cache_flash = ops.reshape_and_cache_flash
    get_scheduler_metadata = dummy_ops.get_scheduler_metadata


def get_flash_attn_version(
    requires_alibi: bool = False,
    head_size: int | None = None,
    head_size_v: int | None = None,
    has_sinks: bool = False,
) -> int | None:
    # miniflash implements the FA2 interface only.
    return 2


def flash_attn_supports_sinks() -> bool:
    """Attention sinks (``s_aux``): all sinks supported by miniflash."""
    # mini fa2 supports sinks
    return True


def is_flash_attn_varlen_func_available() -> bool:
    return True
