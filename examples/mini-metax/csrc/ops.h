// SPDX-License-Identifier: Apache-2.0
// Host entry points of the Mini kernels (see torch_bindings.cpp).
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/torch.h>

void paged_attention_v2(torch::stable::Tensor& out, const torch::stable::Tensor& query,
                        const torch::stable::Tensor& key_cache,
                        const torch::stable::Tensor& value_cache, int64_t num_kv_heads,
                        double scale, const torch::stable::Tensor& block_tables,
                        const torch::stable::Tensor& seq_lens, int64_t block_size,
                        int64_t max_seq_len);

void rotary_embedding(const torch::stable::Tensor& positions, torch::stable::Tensor& query,
                      torch::stable::Tensor& key, int64_t head_size,
                      const torch::stable::Tensor& cos_sin_cache, bool is_neox);

void top_k_per_row(const torch::stable::Tensor& logits, const torch::stable::Tensor& row_starts,
                   const torch::stable::Tensor& row_ends, torch::stable::Tensor& indices,
                   int64_t num_rows, int64_t stride0, int64_t stride1, int64_t top_k);

// Classic (non-stable) ABI: provides the op that vllm._custom_ops calls.
void reshape_and_cache_flash(torch::Tensor& key, torch::Tensor& value, torch::Tensor& key_cache,
                             torch::Tensor& value_cache, torch::Tensor& slot_mapping,
                             const std::string& kv_cache_dtype, torch::Tensor& k_scale,
                             torch::Tensor& v_scale);
