"""A torch op registered from Python through torch.library (vLLM helper style).

``probefix_ops::reshape_and_cache_flash`` has the schema of vLLM's
``_C_cache_ops::reshape_and_cache_flash`` and a CPU kernel; ``probefix_ops::scaled_add``
is a ``torch.library.custom_op``.
"""

import torch

from .kv_cache import reshape_and_cache_flash as _impl

_lib = torch.library.Library("probefix_ops", "FRAGMENT")
_lib.define(
    "reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache, Tensor(b!) value_cache, "
    "Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()"
)


def _cpu_kernel(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale):
    _impl(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale)


_lib.impl("reshape_and_cache_flash", _cpu_kernel, "CPU")


@torch.library.custom_op("probefix_ops::scaled_add", mutates_args=())
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    """x + alpha * y"""
    return x + alpha * y
