"""Triton kernels for introspection tests (a plain jit kernel and an autotuned one)."""

import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr, EVEN: tl.constexpr = False):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)


@triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def scale_kernel_tuned(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale, mask=m)
