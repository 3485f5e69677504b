# SPDX-License-Identifier: Apache-2.0
"""Feature 5: KV-cache writers chosen from a literal dict by kv_cache_dtype."""

import torch

from vllm.triton_utils import triton

from tiny_npu.ops.kernels import _write_kv_kernel


def _write_auto(key, value, k_cache, v_cache, slot_mapping):
    # Unquantized cache: Triton scatter. key/value (tokens, heads, dim);
    # caches (blocks, page, heads, dim).
    k_dim, v_dim = key.shape[-1], value.shape[-1]
    _write_kv_kernel[(slot_mapping.shape[0], key.shape[1])](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        *k_cache.stride()[:3], *v_cache.stride()[:3],
        PAGE=k_cache.shape[1], K_DIM=k_dim, V_DIM=v_dim, BLOCK=triton.next_power_of_2(max(k_dim, v_dim)),
    )


def _write_fp8(key, value, k_cache, v_cache, slot_mapping):
    # FP8 cache: native op (csrc/ops.cpp, built with or without TINY_USE_FP8).
    torch.ops._tiny_C.reshape_and_cache_fp8(key, value, k_cache, v_cache, slot_mapping)


_WRITERS = {"auto": _write_auto, "fp8": _write_fp8}


def write_kv_cache(key, value, k_cache, v_cache, slot_mapping, kv_cache_dtype="auto"):
    # Literal-dict dispatch; any other dtype string raises KeyError.
    _WRITERS[kv_cache_dtype](key, value, k_cache, v_cache, slot_mapping)
