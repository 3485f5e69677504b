"""KV-cache writes in the ``reshape_and_cache_flash`` convention.

* ``reshape_and_cache_flash``          torch, correct (skips -1, honours strides, fp8 scales)
* ``reshape_and_cache_flash_triton``   a @triton.jit kernel, correct (runs under TRITON_INTERPRET=1)
* ``reshape_and_cache_flash_writes_padding``  BROKEN: uses the slot as an index even when it is -1,
  so padding tokens land in the last slot of the cache
* ``reshape_and_cache_flash_assumes_contiguous``  BROKEN: writes the cache's storage as if it were a
  contiguous [num_blocks, block_size, KVH, D] tensor (a kernel without stride arguments): right for
  contiguous caches, wrong for permuted or packed views
"""

import torch
import triton
import triton.language as tl


def _quant(x, kv_cache_dtype, scale, cache):
    if kv_cache_dtype == "auto":
        return x.to(cache.dtype)
    q = (x.float() / scale.float()).to(torch.float8_e4m3fn)
    return q.view(torch.uint8) if cache.dtype == torch.uint8 else q


def reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale, v_scale):
    bs = key_cache.shape[1]
    valid = slot_mapping >= 0
    idx = torch.nonzero(valid).flatten()
    slots = slot_mapping[idx].long()
    blk, off = slots // bs, slots % bs
    key_cache[blk, off] = _quant(key[idx], kv_cache_dtype, k_scale, key_cache)
    value_cache[blk, off] = _quant(value[idx], kv_cache_dtype, v_scale, value_cache)


def reshape_and_cache_flash_writes_padding(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                           k_scale, v_scale):
    """BROKEN: no check for -1; Python-style negative indexing writes the last slot."""
    bs = key_cache.shape[1]
    nb = key_cache.shape[0]
    for t, s in enumerate(slot_mapping.tolist()):
        s = s % (nb * bs)  # -1 -> last slot, as a flat C index would after wrap-around
        key_cache[s // bs, s % bs] = _quant(key[t], kv_cache_dtype, k_scale, key_cache)
        value_cache[s // bs, s % bs] = _quant(value[t], kv_cache_dtype, v_scale, value_cache)


def reshape_and_cache_flash_assumes_contiguous(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype,
                                               k_scale, v_scale):
    """BROKEN: ignores the caches' strides (what a kernel taking only base pointers does)."""
    nb, bs, H, D = key_cache.shape
    row = H * D
    for cache, x, sc in ((key_cache, key, k_scale), (value_cache, value, v_scale)):
        flat = torch.as_strided(cache, (nb * bs * row,), (1,), cache.storage_offset())
        for t, s in enumerate(slot_mapping.tolist()):
            if s >= 0:
                flat[s * row:(s + 1) * row] = _quant(x[t], kv_cache_dtype, sc, cache).reshape(-1)


@triton.jit
def _cache_kernel(key_ptr, value_ptr, kc_ptr, vc_ptr, slot_ptr,
                  stride_kt, stride_kh, stride_vt, stride_vh,
                  stride_kcb, stride_kcs, stride_kch,
                  stride_vcb, stride_vcs, stride_vch,
                  block_size, head_size,
                  NUM_HEADS: tl.constexpr, BLOCK_D: tl.constexpr):
    t = tl.program_id(0)
    slot = tl.load(slot_ptr + t).to(tl.int64)
    if slot < 0:
        return
    blk = slot // block_size
    off = slot % block_size
    h = tl.arange(0, NUM_HEADS)[:, None]
    d = tl.arange(0, BLOCK_D)[None, :]
    m = d < head_size
    k = tl.load(key_ptr + t * stride_kt + h * stride_kh + d, mask=m)
    v = tl.load(value_ptr + t * stride_vt + h * stride_vh + d, mask=m)
    tl.store(kc_ptr + blk * stride_kcb + off * stride_kcs + h * stride_kch + d, k, mask=m)
    tl.store(vc_ptr + blk * stride_vcb + off * stride_vcs + h * stride_vch + d, v, mask=m)


def reshape_and_cache_flash_triton(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, k_scale,
                                   v_scale):
    if kv_cache_dtype != "auto":
        # quantise on the host side, then copy bytes with the same kernel
        key = _quant(key, kv_cache_dtype, k_scale, key_cache)
        value = _quant(value, kv_cache_dtype, v_scale, value_cache)
    T, H, D = key.shape
    assert key.stride(2) == 1 and key_cache.stride(3) == 1
    _cache_kernel[(T,)](key, value, key_cache, value_cache, slot_mapping,
                        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
                        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
                        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
                        key_cache.shape[1], D,
                        NUM_HEADS=H, BLOCK_D=triton.next_power_of_2(D))
