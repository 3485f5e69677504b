// SPDX-License-Identifier: Apache-2.0
// In-place rotary embedding on query/key, float32 reference.
#include <cuda_runtime.h>

#include "ops.h"

namespace mini {

__global__ void rotary_embedding_kernel(const int64_t* __restrict__ positions,
                                        float* __restrict__ query, float* __restrict__ key,
                                        const float* __restrict__ cos_sin_cache, int rot_dim,
                                        int q_stride, int k_stride, int num_heads,
                                        int num_kv_heads, int head_size, bool is_neox) {
  const int token = blockIdx.x;
  const float* cache = cos_sin_cache + positions[token] * rot_dim;
  const int half = rot_dim / 2;
  const int total = (num_heads + num_kv_heads) * half;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int head = i / half, j = i % half;
    float* base = head < num_heads ? query + token * q_stride + head * head_size
                                   : key + token * k_stride + (head - num_heads) * head_size;
    const int x_idx = is_neox ? j : 2 * j;
    const int y_idx = is_neox ? j + half : 2 * j + 1;
    const float c = cache[j], s = cache[j + half];
    const float x = base[x_idx], y = base[y_idx];
    base[x_idx] = x * c - y * s;
    base[y_idx] = y * c + x * s;
  }
}

}  // namespace mini

void rotary_embedding(const torch::stable::Tensor& positions, torch::stable::Tensor& query,
                      torch::stable::Tensor& key, int64_t head_size,
                      const torch::stable::Tensor& cos_sin_cache, bool is_neox) {
  const int num_tokens = positions.size(0);
  const int num_heads = query.size(1) / head_size;
  const int num_kv_heads = key.size(1) / head_size;
  mini::rotary_embedding_kernel<<<num_tokens, 256>>>(
      static_cast<const int64_t*>(positions.data_ptr()), static_cast<float*>(query.data_ptr()),
      static_cast<float*>(key.data_ptr()), static_cast<const float*>(cos_sin_cache.data_ptr()),
      cos_sin_cache.size(1), query.stride(0), key.stride(0), num_heads, num_kv_heads, head_size,
      is_neox);
}
