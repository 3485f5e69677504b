"""Split-KV paged decode attention (vLLM ``decode_attention_fwd`` convention), in Triton.

* ``decode_attention_fwd``                     correct two-stage kernel
* ``decode_attention_fwd_ignores_page_table``  BROKEN: assumes each request's pages are
  contiguous from page 0 (never reads ``req_to_token``)
"""

import triton
import triton.language as tl


@triton.jit
def _tanh(x):
    return 2 * tl.sigmoid(2 * x) - 1


@triton.jit
def _stage1(Q, K, V, sm_scale, Req_to_tokens, B_Seqlen, Att_Out,
            stride_r2t_b, stride_qb, stride_qh,
            stride_kp, stride_ks, stride_kh, stride_vp, stride_vs, stride_vh,
            stride_mb, stride_mh, stride_ms,
            kv_group_num: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
            NUM_KV_SPLITS: tl.constexpr, PAGE_SIZE: tl.constexpr, logit_cap: tl.constexpr, Lk: tl.constexpr,
            USE_TABLE: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    split = tl.program_id(2)
    kvh = h // kv_group_num
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < Lk
    seq_len = tl.load(B_Seqlen + b)
    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_d, mask=mask_d, other=0.0).to(tl.float32)
    per_split = tl.cdiv(seq_len, NUM_KV_SPLITS)
    start = per_split * split
    end = tl.minimum(start + per_split, seq_len)
    e_max = -float("inf")
    e_sum = 0.0
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    if end > start:
        for n0 in range(start, end, BLOCK_N):
            offs_n = n0 + tl.arange(0, BLOCK_N)
            mn = offs_n < end
            if USE_TABLE:
                page = tl.load(Req_to_tokens + stride_r2t_b * b + offs_n // PAGE_SIZE, mask=mn, other=0).to(tl.int64)
            else:
                page = (offs_n // PAGE_SIZE).to(tl.int64)
            slot = offs_n % PAGE_SIZE
            k = tl.load(K + (page * stride_kp + slot * stride_ks)[:, None] + kvh * stride_kh + offs_d[None, :],
                        mask=mn[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            qk = tl.sum(q[None, :] * k, 1) * sm_scale
            if logit_cap > 0:
                qk = logit_cap * _tanh(qk / logit_cap)
            qk = tl.where(mn, qk, float("-inf"))
            v = tl.load(V + (page * stride_vp + slot * stride_vs)[:, None] + kvh * stride_vh + offs_d[None, :],
                        mask=mn[:, None] & mask_d[None, :], other=0.0).to(tl.float32)
            n_max = tl.maximum(tl.max(qk, 0), e_max)
            re = tl.exp(e_max - n_max)
            p = tl.exp(qk - n_max)
            acc = acc * re + tl.sum(p[:, None] * v, 0)
            e_sum = e_sum * re + tl.sum(p, 0)
            e_max = n_max
        base = b * stride_mb + h * stride_mh + split * stride_ms
        tl.store(Att_Out + base + offs_d, acc / e_sum, mask=mask_d)
        tl.store(Att_Out + base + Lk, e_max + tl.log(e_sum))


@triton.jit
def _stage2(Mid, O, Lse, B_Seqlen, stride_mb, stride_mh, stride_ms, stride_ob, stride_oh, stride_lb,
            NUM_KV_SPLITS: tl.constexpr, BLOCK_D: tl.constexpr, Lv: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    seq_len = tl.load(B_Seqlen + b)
    offs_d = tl.arange(0, BLOCK_D)
    mask_d = offs_d < Lv
    e_sum = 0.0
    e_max = -float("inf")
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    for s in range(0, NUM_KV_SPLITS):
        per_split = tl.cdiv(seq_len, NUM_KV_SPLITS)
        start = per_split * s
        end = tl.minimum(start + per_split, seq_len)
        if end > start:
            base = b * stride_mb + h * stride_mh + s * stride_ms
            tv = tl.load(Mid + base + offs_d, mask=mask_d, other=0.0)
            tl_ = tl.load(Mid + base + Lv)
            n_max = tl.maximum(tl_, e_max)
            old = tl.exp(e_max - n_max)
            w = tl.exp(tl_ - n_max)
            acc = acc * old + w * tv
            e_sum = e_sum * old + w
            e_max = n_max
    tl.store(O + b * stride_ob + h * stride_oh + offs_d, (acc / e_sum).to(O.dtype.element_ty), mask=mask_d)
    tl.store(Lse + b * stride_lb + h, e_max + tl.log(e_sum))


def _fwd(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits, num_kv_splits, sm_scale, page_size,
         logit_cap, use_table):
    B, H, D = q.shape
    kvh = k_buffer.shape[-2]
    BLOCK_D = triton.next_power_of_2(D)
    _stage1[(B, H, num_kv_splits)](
        q, k_buffer, v_buffer, sm_scale, req_to_token, b_seq_len, attn_logits,
        req_to_token.stride(0), q.stride(0), q.stride(1),
        k_buffer.stride(0), k_buffer.stride(1), k_buffer.stride(2),
        v_buffer.stride(0), v_buffer.stride(1), v_buffer.stride(2),
        attn_logits.stride(0), attn_logits.stride(1), attn_logits.stride(2),
        kv_group_num=H // kvh, BLOCK_D=BLOCK_D, BLOCK_N=16, NUM_KV_SPLITS=num_kv_splits, PAGE_SIZE=page_size,
        logit_cap=logit_cap, Lk=D, USE_TABLE=use_table)
    _stage2[(B, H)](attn_logits, o, lse, b_seq_len, attn_logits.stride(0), attn_logits.stride(1),
                    attn_logits.stride(2), o.stride(0), o.stride(1), lse.stride(0),
                    NUM_KV_SPLITS=num_kv_splits, BLOCK_D=BLOCK_D, Lv=D)


def decode_attention_fwd(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits, num_kv_splits,
                         sm_scale, page_size=1, logit_cap=0.0, k_scale=None, v_scale=None, is_mla=False):
    _fwd(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits, num_kv_splits, sm_scale, page_size,
         logit_cap, True)


def decode_attention_fwd_ignores_page_table(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits,
                                            num_kv_splits, sm_scale, page_size=1, logit_cap=0.0, k_scale=None,
                                            v_scale=None, is_mla=False):
    """BROKEN: pages assumed contiguous from page 0."""
    _fwd(q, k_buffer, v_buffer, o, lse, req_to_token, b_seq_len, attn_logits, num_kv_splits, sm_scale, page_size,
         logit_cap, False)
