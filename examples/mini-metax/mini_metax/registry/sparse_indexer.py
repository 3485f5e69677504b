# SPDX-License-Identifier: Apache-2.0
"""Out-of-tree replacement of vLLM's sparse attention indexer (DeepSeek V3.2).

CustomOp.__new__ looks the class name "SparseAttnIndexer" up in the OOT
registry, so every SparseAttnIndexer the model builds becomes this class.
"""

import torch

from vllm.forward_context import get_forward_context
from vllm.model_executor.custom_op import CustomOp
from vllm.model_executor.layers.sparse_attn_indexer import SparseAttnIndexer


@CustomOp.register_oot(name="SparseAttnIndexer")
class MiniSparseAttnIndexer(SparseAttnIndexer):
    def forward_oot(self, hidden_states, q_quant, k, weights):
        # Upstream forward_native raises on OOT platforms; use our path.
        return self.forward_cuda(hidden_states, q_quant, k, weights)

    def forward_cuda(
        self,
        hidden_states: torch.Tensor,
        q_quant: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
        k: torch.Tensor,
        weights: torch.Tensor,
    ) -> torch.Tensor:
        q = q_quant[0] if isinstance(q_quant, tuple) else q_quant
        topk = self.topk_indices_buffer
        attn_metadata = get_forward_context().attn_metadata
        if not isinstance(attn_metadata, dict):
            # Profiling run: nothing to select.
            return topk
        meta = attn_metadata[self.k_cache.prefix]
        topk[: hidden_states.shape[0]] = -1

        if meta.prefill is not None:
            for chunk in meta.prefill.chunks:
                rows = slice(chunk.token_start, chunk.token_end)
                # logits[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s])
                scores = torch.einsum("thd,sd->ths", q[rows].float(), k[rows].float()).relu_()
                logits = (scores * weights[rows].float().unsqueeze(-1)).sum(dim=1)
                torch.ops._mini_C.top_k_per_row(
                    logits,
                    chunk.cu_seqlen_ks,
                    chunk.cu_seqlen_ke,
                    topk[rows, : self.topk_tokens],
                    logits.shape[0],
                    logits.stride(0),
                    logits.stride(1),
                    self.topk_tokens,
                )

        # -1 means "no token". Rows shorter than topk_tokens end in -1, and the
        # kernel can leave interior holes; move them to the end of each row.
        holes = (topk < 0).to(torch.int8)
        order = torch.argsort(holes, dim=-1, stable=True)
        topk.copy_(torch.gather(topk, -1, order))
        return topk
