# SPDX-License-Identifier: Apache-2.0
"""Feature 6: the plugin's own Triton kernels. Each is launched with
``kernel[grid](...)`` from exactly one Python wrapper (named in the comment)."""

from vllm.triton_utils import tl, triton


@triton.jit
def _write_kv_kernel(
    key_ptr, value_ptr, k_cache_ptr, v_cache_ptr, slot_ptr,
    k_tok, k_head, v_tok, v_head, kc_blk, kc_slot, kc_head, vc_blk, vc_slot, vc_head,
    PAGE: tl.constexpr, K_DIM: tl.constexpr, V_DIM: tl.constexpr, BLOCK: tl.constexpr,
):
    # Launched by ops/cache.py:_write_auto. Grid (tokens, kv heads); any cache
    # strides (block, slot-in-page, head), last dim contiguous.
    tok = tl.program_id(0)
    head = tl.program_id(1)
    slot = tl.load(slot_ptr + tok).to(tl.int64)
    if slot < 0:  # padding token
        return
    blk = slot // PAGE
    off = slot % PAGE
    d = tl.arange(0, BLOCK)
    k = tl.load(key_ptr + tok * k_tok + head * k_head + d, mask=d < K_DIM)
    tl.store(k_cache_ptr + blk * kc_blk + off * kc_slot + head * kc_head + d, k, mask=d < K_DIM)
    v = tl.load(value_ptr + tok * v_tok + head * v_head + d, mask=d < V_DIM)
    tl.store(v_cache_ptr + blk * vc_blk + off * vc_slot + head * vc_head + d, v, mask=d < V_DIM)


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, row_stride, n_cols, eps, BLOCK: tl.constexpr):
    # Launched by layers/rms_norm.py:TinyRMSNorm.forward_oot. One program per row.
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * row_stride + offs, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(out_ptr + row * n_cols + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_kernel(
    pos_ptr, x_ptr, cos_sin_ptr, tok_stride, head_stride, cs_stride,
    HALF: tl.constexpr, IS_NEOX: tl.constexpr, BLOCK: tl.constexpr,
):
    # Launched by ops/rope.py:_rope_npu, in place. Grid (tokens, heads).
    tok = tl.program_id(0)
    head = tl.program_id(1)
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < HALF
    cos = tl.load(cos_sin_ptr + pos * cs_stride + offs, mask=mask).to(tl.float32)
    sin = tl.load(cos_sin_ptr + pos * cs_stride + HALF + offs, mask=mask).to(tl.float32)
    base = x_ptr + tok * tok_stride + head * head_stride
    if IS_NEOX:
        i1 = offs
        i2 = offs + HALF
    else:
        i1 = offs * 2
        i2 = offs * 2 + 1
    x1 = tl.load(base + i1, mask=mask).to(tl.float32)
    x2 = tl.load(base + i2, mask=mask).to(tl.float32)
    tl.store(base + i1, (x1 * cos - x2 * sin).to(x_ptr.dtype.element_ty), mask=mask)
    tl.store(base + i2, (x2 * cos + x1 * sin).to(x_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _paged_sink_attn_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, sink_ptr, block_table_ptr, ctx_ptr,
    scale, q_stride, bt_stride, blk_stride, slot_stride, kv_head_stride,
    GROUPS: tl.constexpr, PAGE: tl.constexpr, HEAD_DIM: tl.constexpr, HAS_SINK: tl.constexpr,
):
    # Launched by compat/flash_attn.py:flash_attn_varlen_func. Grid (tokens, q heads).
    # Online softmax over the token's pages; a sink adds exp(sink - m) to the
    # denominator only.
    tok = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUPS
    ctx = tl.load(ctx_ptr + tok)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + tok * q_stride + h * HEAD_DIM + d).to(tl.float32)
    if HAS_SINK:
        m = tl.load(sink_ptr + h).to(tl.float32)
        denom = 1.0
    else:
        m = float("-inf")
        denom = 0.0
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    offs = tl.arange(0, PAGE)
    for start in range(0, ctx, PAGE):
        blk = tl.load(block_table_ptr + tok * bt_stride + start // PAGE).to(tl.int64)
        valid = start + offs < ctx
        kv_off = blk * blk_stride + offs[:, None] * slot_stride + kvh * kv_head_stride + d[None, :]
        k = tl.load(k_cache_ptr + kv_off, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.where(valid, tl.sum(k * q[None, :], axis=1) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(v_cache_ptr + kv_off, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        denom = denom * alpha + tl.sum(p, axis=0)
        m = m_new
    out = acc / denom
    tl.store(out_ptr + tok * q_stride + h * HEAD_DIM + d, out.to(out_ptr.dtype.element_ty))
