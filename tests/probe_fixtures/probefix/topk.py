"""Per-row top-k with -1 padding (vLLM ``top_k_per_row_prefill`` convention)."""

import torch


def _rows(logits, row_starts, row_ends, k, pad):
    R = logits.shape[0]
    res = torch.full((R, k), -1, dtype=torch.int32, device=logits.device)
    st, en = row_starts.tolist(), row_ends.tolist()
    for r in range(R):
        n = max(0, en[r] - st[r])
        if pad:
            m = min(k, n)
            if m:
                res[r, :m] = torch.topk(logits[r, st[r]:en[r]], m).indices.to(torch.int32)
        else:
            # BROKEN: takes k columns from the row start whatever the row length, never writes -1
            m = min(k, logits.shape[1] - st[r])
            res[r, :m] = torch.topk(logits[r, st[r]:st[r] + max(k, n)], m).indices.to(torch.int32)
    return res


def top_k_per_row_prefill(logits, row_starts, row_ends, out, num_rows, stride0, stride1, topk):
    out.copy_(_rows(logits, row_starts, row_ends, topk, pad=True))


def top_k_per_row_prefill_ignores_padding(logits, row_starts, row_ends, out, num_rows, stride0, stride1, topk):
    """BROKEN: ignores the -1 contract for rows shorter than k."""
    out.copy_(_rows(logits, row_starts, row_ends, topk, pad=False))


def topk_functional(logits, row_starts, row_ends, k):
    return _rows(logits, row_starts, row_ends, k, pad=True)
