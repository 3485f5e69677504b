// SPDX-License-Identifier: Apache-2.0
// Per-row top-k over [row_start, row_end) of a logits matrix; unused slots get -1.
#include <cfloat>
#include <cuda_runtime.h>

#include "ops.h"

namespace mini {

// One thread per row: simple selection, fine for the example's small top_k.
__global__ void top_k_per_row_kernel(const float* __restrict__ logits,
                                     const int* __restrict__ row_starts,
                                     const int* __restrict__ row_ends, int* __restrict__ indices,
                                     int num_rows, int64_t stride0, int64_t stride1,
                                     int64_t out_stride, int top_k) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= num_rows) return;
  const int start = row_starts[row], end = row_ends[row];
  int* out = indices + row * out_stride;
  for (int k = 0; k < top_k; ++k) {
    int best = -1;
    float best_val = -FLT_MAX;
    for (int c = start; c < end; ++c) {
      bool taken = false;
      for (int j = 0; j < k; ++j) taken |= (out[j] == c - start);
      const float v = logits[row * stride0 + c * stride1];
      if (!taken && v > best_val) {
        best_val = v;
        best = c - start;
      }
    }
    out[k] = best;  // -1 once the row is exhausted
  }
}

}  // namespace mini

void top_k_per_row(const torch::stable::Tensor& logits, const torch::stable::Tensor& row_starts,
                   const torch::stable::Tensor& row_ends, torch::stable::Tensor& indices,
                   int64_t num_rows, int64_t stride0, int64_t stride1, int64_t top_k) {
  const int threads = 128;
  const int blocks = (num_rows + threads - 1) / threads;
  mini::top_k_per_row_kernel<<<blocks, threads>>>(
      static_cast<const float*>(logits.data_ptr()),
      static_cast<const int*>(row_starts.data_ptr()),
      static_cast<const int*>(row_ends.data_ptr()), static_cast<int*>(indices.data_ptr()),
      num_rows, stride0, stride1, indices.stride(0), top_k);
}
