// SPDX-License-Identifier: Apache-2.0
// reshape_and_cache_flash for the (blocks, page, kv_heads, head_size) layout.
#include <ATen/cuda/CUDAContext.h>
#include <torch/torch.h>

#include "ops.h"

namespace mini {

template <typename scalar_t>
__global__ void reshape_and_cache_flash_kernel(const scalar_t* __restrict__ key,
                                               const scalar_t* __restrict__ value,
                                               scalar_t* __restrict__ key_cache,
                                               scalar_t* __restrict__ value_cache,
                                               const int64_t* __restrict__ slot_mapping,
                                               int64_t key_stride, int64_t value_stride,
                                               int64_t block_stride, int64_t page_stride,
                                               int block_size, int n) {
  const int64_t token = blockIdx.x;
  const int64_t slot = slot_mapping[token];
  if (slot < 0) return;  // padding
  const int64_t dst = (slot / block_size) * block_stride + (slot % block_size) * page_stride;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    key_cache[dst + i] = key[token * key_stride + i];
    value_cache[dst + i] = value[token * value_stride + i];
  }
}

}  // namespace mini

void reshape_and_cache_flash(torch::Tensor& key, torch::Tensor& value, torch::Tensor& key_cache,
                             torch::Tensor& value_cache, torch::Tensor& slot_mapping,
                             const std::string& kv_cache_dtype, torch::Tensor& k_scale,
                             torch::Tensor& v_scale) {
  TORCH_CHECK(kv_cache_dtype == "auto", "Mini cache kernel: only kv_cache_dtype=auto");
  const int num_tokens = slot_mapping.size(0);
  const int n = key.size(1) * key.size(2);
  const auto stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, key.scalar_type(), "mini_cache", [&] {
    mini::reshape_and_cache_flash_kernel<scalar_t><<<num_tokens, 256, 0, stream>>>(
        key.data_ptr<scalar_t>(), value.data_ptr<scalar_t>(), key_cache.data_ptr<scalar_t>(),
        value_cache.data_ptr<scalar_t>(), slot_mapping.data_ptr<int64_t>(), key.stride(0),
        value.stride(0), key_cache.stride(0), key_cache.stride(1), key_cache.size(1), n);
  });
}
