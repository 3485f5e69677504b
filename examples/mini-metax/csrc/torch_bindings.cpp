// SPDX-License-Identifier: Apache-2.0
// Torch op registrations of the Mini extension (built as mini_metax._C).
#include <torch/csrc/stable/library.h>
#include <torch/library.h>

#include "ops.h"

// Mini-only ops, stable ABI: torch.ops._mini_C.*
STABLE_TORCH_LIBRARY_FRAGMENT(_mini_C, ops) {
  ops.def("paged_attention_v2(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, int num_kv_heads, float scale, Tensor block_tables, Tensor seq_lens, int block_size, int max_seq_len) -> ()");
  ops.def("rotary_embedding(Tensor positions, Tensor! query, Tensor! key, int head_size, Tensor cos_sin_cache, bool is_neox) -> ()");
  ops.def("top_k_per_row(Tensor logits, Tensor row_starts, Tensor row_ends, Tensor! indices, int num_rows, int stride0, int stride1, int top_k) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(_mini_C, CUDA, ops) {
  ops.impl("paged_attention_v2", TORCH_BOX(&paged_attention_v2));
  ops.impl("rotary_embedding", TORCH_BOX(&rotary_embedding));
  ops.impl("top_k_per_row", TORCH_BOX(&top_k_per_row));
}

// Upstream's namespace: vllm._custom_ops.reshape_and_cache_flash calls
// torch.ops._C_cache_ops.reshape_and_cache_flash, which this library provides.
TORCH_LIBRARY_FRAGMENT(_C_cache_ops, cache_ops) {
  cache_ops.def("reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()");
}

TORCH_LIBRARY_IMPL(_C_cache_ops, CUDA, cache_ops) {
  cache_ops.impl("reshape_and_cache_flash", &reshape_and_cache_flash);
}
