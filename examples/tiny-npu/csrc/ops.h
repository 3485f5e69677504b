// SPDX-License-Identifier: Apache-2.0
// Declarations of the Tiny NPU kernels registered in ops.cpp.
#pragma once

#include <torch/all.h>

void paged_attention_npu(torch::Tensor& out, const torch::Tensor& q, const torch::Tensor& k_cache,
                         const torch::Tensor& v_cache, const torch::Tensor& block_table,
                         const torch::Tensor& seq_lens, double scale);

void mla_decode_npu(torch::Tensor& out, const torch::Tensor& q, const torch::Tensor& kv_cache,
                    const torch::Tensor& block_table, const torch::Tensor& seq_lens,
                    int64_t kv_lora_rank, double scale);

void reshape_and_cache_fp8_npu(const torch::Tensor& key, const torch::Tensor& value,
                               torch::Tensor& k_cache, torch::Tensor& v_cache,
                               const torch::Tensor& slot_mapping);

void reshape_and_cache_fp8_unsupported(const torch::Tensor& key, const torch::Tensor& value,
                                       torch::Tensor& k_cache, torch::Tensor& v_cache,
                                       const torch::Tensor& slot_mapping);
