# SPDX-License-Identifier: Apache-2.0
"""Feature 10: a method patched onto an upstream class.

On this platform (is_out_of_tree() is True) upstream
FlashAttentionImpl.do_kv_cache_update is replaced by
_tiny_do_kv_cache_update, which writes through the plugin's cache writer.
"""

from vllm.platforms import current_platform
from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl

from tiny_npu.ops.cache import write_kv_cache


def _tiny_do_kv_cache_update(self, layer, key, value, kv_cache, slot_mapping):
    # Upstream layout (blocks, kv_heads, page, 2*head_size) -> K and V views.
    key_cache, value_cache = kv_cache.transpose(1, 2).split(self.head_size, dim=-1)
    write_kv_cache(key, value, key_cache, value_cache, slot_mapping, self.kv_cache_dtype)


FlashAttentionImpl._tiny_orig_forward = FlashAttentionImpl.forward  # saved, never called

if current_platform.is_out_of_tree():
    FlashAttentionImpl.do_kv_cache_update = _tiny_do_kv_cache_update
