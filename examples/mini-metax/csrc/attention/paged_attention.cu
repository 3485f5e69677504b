// SPDX-License-Identifier: Apache-2.0
// Decode-only paged attention (one query token per sequence), float32 reference.
#include <cfloat>
#include <cuda_runtime.h>

#include "../ops.h"

namespace mini {

constexpr int kThreads = 128;

__global__ void paged_attention_v2_kernel(float* __restrict__ out, const float* __restrict__ q,
                                          const float* __restrict__ k_cache,
                                          const float* __restrict__ v_cache,
                                          const int* __restrict__ block_tables,
                                          const int* __restrict__ seq_lens, int num_heads,
                                          int num_kv_heads, int head_size, int block_size,
                                          int max_blocks, float scale) {
  const int seq = blockIdx.x;
  const int head = blockIdx.y;
  const int kv_head = head / (num_heads / num_kv_heads);
  const int len = seq_lens[seq];
  const float* qh = q + (seq * num_heads + head) * head_size;

  for (int d = threadIdx.x; d < head_size; d += blockDim.x) {
    float acc = 0.f, m = -FLT_MAX, l = 0.f;
    for (int t = 0; t < len; ++t) {
      const int block = block_tables[seq * max_blocks + t / block_size];
      const long base = ((long)block * block_size + t % block_size) * num_kv_heads + kv_head;
      const float* kt = k_cache + base * head_size;
      float s = 0.f;
      for (int i = 0; i < head_size; ++i) s += qh[i] * kt[i];
      s *= scale;
      const float m_new = fmaxf(m, s);
      const float alpha = __expf(m - m_new), p = __expf(s - m_new);
      acc = acc * alpha + p * v_cache[base * head_size + d];
      l = l * alpha + p;
      m = m_new;
    }
    out[(seq * num_heads + head) * head_size + d] = acc / l;
  }
}

}  // namespace mini

void paged_attention_v2(torch::stable::Tensor& out, const torch::stable::Tensor& query,
                        const torch::stable::Tensor& key_cache,
                        const torch::stable::Tensor& value_cache, int64_t num_kv_heads,
                        double scale, const torch::stable::Tensor& block_tables,
                        const torch::stable::Tensor& seq_lens, int64_t block_size,
                        int64_t max_seq_len) {
  const int num_seqs = query.size(0), num_heads = query.size(1), head_size = query.size(2);
  dim3 grid(num_seqs, num_heads);
  mini::paged_attention_v2_kernel<<<grid, mini::kThreads>>>(
      static_cast<float*>(out.data_ptr()), static_cast<const float*>(query.data_ptr()),
      static_cast<const float*>(key_cache.data_ptr()),
      static_cast<const float*>(value_cache.data_ptr()),
      static_cast<const int*>(block_tables.data_ptr()),
      static_cast<const int*>(seq_lens.data_ptr()), num_heads, num_kv_heads, head_size,
      block_size, block_tables.size(1), static_cast<float>(scale));
}
