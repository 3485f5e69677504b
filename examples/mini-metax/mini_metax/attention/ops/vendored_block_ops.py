# SPDX-License-Identifier: Apache-2.0
"""The copy of a vendor's block ops that this plugin ships (what ``dispatch._import_block_ops`` falls back to
when the vendor's package is not installed)."""

from mini_metax.attention.ops.dispatch import _copy_kernel


def copy_blocks(src, dst):
    n = src.numel()
    _copy_kernel[(triton_cdiv(n, 1024),)](src, dst, n, BLOCK=1024)


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
