// SPDX-License-Identifier: Apache-2.0
// Feature 6: schemas and PrivateUse1 ("npu") implementations of torch.ops._tiny_C.*
// Built into the extension tiny_npu._tiny_C (loaded by TinyNpuPlatform.import_kernels).
#include <torch/library.h>

#include "ops.h"

TORCH_LIBRARY_FRAGMENT(_tiny_C, m) {
  m.def("paged_attention(Tensor! out, Tensor q, Tensor k_cache, Tensor v_cache, Tensor block_table, Tensor seq_lens, float scale) -> ()");
  m.def("mla_decode(Tensor! out, Tensor q, Tensor kv_cache, Tensor block_table, Tensor seq_lens, int kv_lora_rank, float scale) -> ()");
  m.def("reshape_and_cache_fp8(Tensor key, Tensor value, Tensor! k_cache, Tensor! v_cache, Tensor slot_mapping) -> ()");
}

TORCH_LIBRARY_IMPL(_tiny_C, PrivateUse1, m) {
  m.impl("paged_attention", &paged_attention_npu);
  m.impl("mla_decode", &mla_decode_npu);
#ifdef TINY_USE_FP8
  m.impl("reshape_and_cache_fp8", &reshape_and_cache_fp8_npu);
#else
  m.impl("reshape_and_cache_fp8", &reshape_and_cache_fp8_unsupported);
#endif
}
