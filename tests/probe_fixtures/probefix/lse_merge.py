"""LSE merge of two partial attentions (vLLM ``merge_attn_states`` convention).

* ``merge_attn_states``             @triton.jit kernel, correct (natural-log LSE, empty partitions)
* ``merge_attn_states_exp2``        BROKEN: @triton.jit kernel using exp2/log2 on natural-log LSE
* ``merge_attn_states_autotuned``   correct kernel behind @triton.autotune; under TRITON_INTERPRET=1
                                    the autotuner is bypassed: ``kernel.fn[grid](..., **config.kwargs)``
* ``merge_attn_states_torch``       torch, correct
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _merge_kernel(out_ptr, out_lse_ptr, p_ptr, p_lse_ptr, s_ptr, s_lse_ptr,
                  stride_in_t, stride_in_h, stride_out_t, stride_out_h, num_tokens, head_size,
                  OUTPUT_LSE: tl.constexpr, BLOCK_D: tl.constexpr, USE_EXP2: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    p_lse = tl.load(p_lse_ptr + h * num_tokens + t)
    s_lse = tl.load(s_lse_ptr + h * num_tokens + t)
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)
    m = tl.maximum(p_lse, s_lse)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    if USE_EXP2:
        pe = tl.exp2(p_lse - m_safe)
        se = tl.exp2(s_lse - m_safe)
    else:
        pe = tl.exp(p_lse - m_safe)
        se = tl.exp(s_lse - m_safe)
    tot = pe + se
    empty = tot == 0.0
    tot_safe = tl.where(empty, 1.0, tot)
    d = tl.arange(0, BLOCK_D)
    dm = d < head_size
    po = tl.load(p_ptr + t * stride_in_t + h * stride_in_h + d, mask=dm, other=0.0).to(tl.float32)
    so = tl.load(s_ptr + t * stride_in_t + h * stride_in_h + d, mask=dm, other=0.0).to(tl.float32)
    o = po * (pe / tot_safe) + so * (se / tot_safe)
    o = tl.where(empty, 0.0, o)
    tl.store(out_ptr + t * stride_out_t + h * stride_out_h + d, o.to(out_ptr.dtype.element_ty), mask=dm)
    if OUTPUT_LSE:
        if USE_EXP2:
            lse = tl.log2(tot_safe) + m_safe
        else:
            lse = tl.log(tot_safe) + m_safe
        lse = tl.where(empty, float("-inf"), lse)
        tl.store(out_lse_ptr + h * num_tokens + t, lse)


def _launch(kernel, output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse, use_exp2, **cfg):
    T, H, D = output.shape
    assert prefix_output.stride(1) == suffix_output.stride(1)
    kernel[(T, H)](output, output_lse if output_lse is not None else prefix_lse, prefix_output, prefix_lse,
                   suffix_output, suffix_lse, prefix_output.stride(0), prefix_output.stride(1),
                   output.stride(0), output.stride(1), T, D,
                   OUTPUT_LSE=output_lse is not None, USE_EXP2=use_exp2, **cfg)


def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    _launch(_merge_kernel, output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse, False,
            BLOCK_D=triton.next_power_of_2(output.shape[2]))


def merge_attn_states_exp2(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    """BROKEN: treats natural-log LSE as base 2."""
    _launch(_merge_kernel, output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse, True,
            BLOCK_D=triton.next_power_of_2(output.shape[2]))


@triton.autotune(configs=[triton.Config({"BLOCK_D": 256}, num_warps=4), triton.Config({"BLOCK_D": 512}, num_warps=8)],
                 key=["head_size"])
@triton.jit
def _merge_kernel_autotuned(out_ptr, out_lse_ptr, p_ptr, p_lse_ptr, s_ptr, s_lse_ptr,
                            stride_in_t, stride_in_h, stride_out_t, stride_out_h, num_tokens, head_size,
                            OUTPUT_LSE: tl.constexpr, BLOCK_D: tl.constexpr, USE_EXP2: tl.constexpr):
    t = tl.program_id(0)
    h = tl.program_id(1)
    p_lse = tl.load(p_lse_ptr + h * num_tokens + t)
    s_lse = tl.load(s_lse_ptr + h * num_tokens + t)
    p_lse = tl.where(p_lse == float("inf"), float("-inf"), p_lse)
    s_lse = tl.where(s_lse == float("inf"), float("-inf"), s_lse)
    m = tl.maximum(p_lse, s_lse)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    pe = tl.exp(p_lse - m_safe)
    se = tl.exp(s_lse - m_safe)
    tot = pe + se
    empty = tot == 0.0
    tot_safe = tl.where(empty, 1.0, tot)
    d = tl.arange(0, BLOCK_D)
    dm = d < head_size
    po = tl.load(p_ptr + t * stride_in_t + h * stride_in_h + d, mask=dm, other=0.0).to(tl.float32)
    so = tl.load(s_ptr + t * stride_in_t + h * stride_in_h + d, mask=dm, other=0.0).to(tl.float32)
    o = po * (pe / tot_safe) + so * (se / tot_safe)
    o = tl.where(empty, 0.0, o)
    tl.store(out_ptr + t * stride_out_t + h * stride_out_h + d, o.to(out_ptr.dtype.element_ty), mask=dm)
    if OUTPUT_LSE:
        lse = tl.where(empty, float("-inf"), tl.log(tot_safe) + m_safe)
        tl.store(out_lse_ptr + h * num_tokens + t, lse)


def merge_attn_states_autotuned(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    T, H, D = output.shape
    args = (output, output_lse if output_lse is not None else prefix_lse, prefix_output, prefix_lse, suffix_output,
            suffix_lse, prefix_output.stride(0), prefix_output.stride(1), output.stride(0), output.stride(1), T, D)
    if os.environ.get("TRITON_INTERPRET") == "1":
        # the autotuner benchmarks through the active GPU driver: bypass it under the interpreter
        cfg = _merge_kernel_autotuned.configs[0]
        _merge_kernel_autotuned.fn[(T, H)](*args, OUTPUT_LSE=output_lse is not None, USE_EXP2=False, **cfg.kwargs)
    else:
        _merge_kernel_autotuned[(T, H)](*args, OUTPUT_LSE=output_lse is not None, USE_EXP2=False)


def merge_attn_states_torch(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None):
    p_lse = torch.where(prefix_lse == float("inf"), float("-inf"), prefix_lse.float())
    s_lse = torch.where(suffix_lse == float("inf"), float("-inf"), suffix_lse.float())
    m = torch.maximum(p_lse, s_lse)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    pe, se = torch.exp(p_lse - m_safe), torch.exp(s_lse - m_safe)
    tot = pe + se
    empty = tot == 0
    tot_safe = torch.where(empty, torch.ones_like(tot), tot)
    pw = (pe / tot_safe).t().unsqueeze(-1)
    sw = (se / tot_safe).t().unsqueeze(-1)
    o = prefix_output.float() * pw + suffix_output.float() * sw
    o = torch.where(empty.t().unsqueeze(-1), torch.zeros_like(o), o)
    output.copy_(o.to(output.dtype))
    if output_lse is not None:
        output_lse.copy_(torch.where(empty, torch.full_like(m, float("-inf")), torch.log(tot_safe) + m_safe))
