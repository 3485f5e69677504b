// SPDX-License-Identifier: Apache-2.0
// FP8 KV-cache writer. Which one ops.cpp registers depends on TINY_USE_FP8.
#include "ops.h"

void reshape_and_cache_fp8_npu(const torch::Tensor& key, const torch::Tensor& value,
                               torch::Tensor& k_cache, torch::Tensor& v_cache,
                               const torch::Tensor& slot_mapping) {
  TORCH_CHECK(key.size(0) >= slot_mapping.size(0), "fewer keys than slots");
  // tiny_rt_launch("reshape_and_cache_fp8", key, value, k_cache, v_cache, slot_mapping);
}

void reshape_and_cache_fp8_unsupported(const torch::Tensor&, const torch::Tensor&, torch::Tensor&,
                                       torch::Tensor&, const torch::Tensor&) {
  TORCH_CHECK(false, "tiny_npu was built without TINY_USE_FP8: fp8 KV cache is unsupported");
}
