// SPDX-License-Identifier: Apache-2.0
// Stub host-side entry points of the Tiny NPU attention kernels. The device
// code ships in the vendor toolchain; these only validate and enqueue.
#include "ops.h"

namespace {
void check_rows(const torch::Tensor& q, const torch::Tensor& block_table, const torch::Tensor& seq_lens) {
  TORCH_CHECK(q.dim() == 3, "q must be (tokens, heads, head_size)");
  TORCH_CHECK(block_table.size(0) == q.size(0), "one block-table row per query token");
  TORCH_CHECK(seq_lens.size(0) == q.size(0), "one context length per query token");
}
}  // namespace

void paged_attention_npu(torch::Tensor& out, const torch::Tensor& q, const torch::Tensor& k_cache,
                         const torch::Tensor& v_cache, const torch::Tensor& block_table,
                         const torch::Tensor& seq_lens, double scale) {
  check_rows(q, block_table, seq_lens);
  TORCH_CHECK(k_cache.sizes() == v_cache.sizes(), "K and V caches differ in shape");
  // tiny_rt_launch("paged_attention", out, q, k_cache, v_cache, block_table, seq_lens, scale);
}

void mla_decode_npu(torch::Tensor& out, const torch::Tensor& q, const torch::Tensor& kv_cache,
                    const torch::Tensor& block_table, const torch::Tensor& seq_lens,
                    int64_t kv_lora_rank, double scale) {
  check_rows(q, block_table, seq_lens);
  TORCH_CHECK(kv_cache.size(-1) > kv_lora_rank, "cache row must hold latent + rope");
  // tiny_rt_launch("mla_decode", out, q, kv_cache, block_table, seq_lens, kv_lora_rank, scale);
}
