# SPDX-License-Identifier: Apache-2.0
"""Mini attention kernels. Backends import the public entry points from here."""

from mini_metax.attention.ops.merge_attn_states import merge_attn_states
from mini_metax.attention.ops.unified import mini_unified_attention_fwd

__all__ = ["merge_attn_states", "mini_unified_attention_fwd"]
