"""Family ``topk``: the sparse-attention indexer's per-row top-k with -1 padding.

Convention of vLLM's ``top_k_per_row_prefill`` (``torch.ops._C.top_k_per_row_prefill``,
used by vllm/model_executor/layers/sparse_attn_indexer.py): each row ``r`` of
``logits`` is valid on columns ``[row_starts[r], row_ends[r])``; the op writes
the indices of the ``k`` largest valid logits *relative to the row start*, and
``-1`` in every remaining entry when the row has fewer than ``k`` valid columns.
Order within a row is not specified: rows are compared as sets, through the
selected logit values (so ties cannot cause false alarms).

Every case poisons the logits outside each row's range with +1e30, so a kernel
that reads past ``row_ends`` or before ``row_starts`` picks them up.
"""

from __future__ import annotations

from . import _common as C

FAMILY = {
    "name": "topk",
    # the argument names the family's calling conventions pass (rules route a call to a family by them)
    "keywords": ["logits", "row_starts", "row_ends", "out", "indices", "num_rows", "stride0", "stride1", "k", "topk", "topK"],
    "title": "sparse-indexer top-k per row (row ranges, -1 padding)",
    "component": "sparse_indexer.topk",
    "upstream": [
        "vllm._custom_ops.top_k_per_row_prefill",
        "torch.ops._C.top_k_per_row_prefill",
    ],
    "convention": (
        "convention=prefill (default): target(logits float32[R, N], row_starts int32[R], row_ends int32[R], "
        "out int32[R, k], num_rows: int, stride0: int, stride1: int, k: int) -> None, writing indices relative "
        "to row_starts[r] and -1 where a row has fewer than k valid columns. convention=functional: "
        "target(logits, row_starts, row_ends, k) -> int32/int64[R, k] with the same meaning."
    ),
    "cases": [
        {"name": "long_rows", "what": "every row longer than k, random starts"},
        {"name": "short_rows_padded", "what": "rows with fewer than k valid columns (one empty): -1 padding"},
        {"name": "strided_logits", "what": "logits as a column slice of a wider tensor (stride0 > N)"},
        {"name": "mixed", "what": "long, short and empty rows together"},
    ],
    "options": {
        "convention": "prefill | functional",
        "k": "default 64 on CPU, 2048 on GPU (DeepSeek V3.2 indexer)",
        "seed": "base seed (default 0)",
    },
    "tolerance": "exact: same index sets (compared through the selected logits), exact -1 count",
}

POISON = 1e30


def _check(torch, logits, starts, ends, out, k) -> dict:
    lg = logits.detach().cpu().double()
    st, en = starts.detach().cpu().long().tolist(), ends.detach().cpu().long().tolist()
    o = out.detach().cpu().long()
    if tuple(o.shape) != (lg.shape[0], k):
        return {"passed": False, "max_abs_err": float("inf"), "note": f"indices shape {tuple(o.shape)} != "
                f"{(lg.shape[0], k)}"}
    bad_rows = []
    max_err = 0.0
    for r in range(lg.shape[0]):
        n = max(0, en[r] - st[r])
        row = lg[r, st[r]:en[r]]
        idx = o[r]
        valid = idx[idx >= 0]
        n_exp = min(k, n)
        reason = None
        if int((idx < -1).sum()):
            reason = "entries below -1"
        elif valid.numel() != n_exp:
            reason = f"{valid.numel()} indices, expected {n_exp} (and {k - n_exp} x -1)"
        elif valid.numel() and int(valid.max()) >= n:
            reason = f"index {int(valid.max())} outside the row's {n} valid columns"
        elif valid.unique().numel() != valid.numel():
            reason = "duplicate indices"
        else:
            got_vals = torch.sort(row[valid], descending=True).values
            exp_vals = torch.topk(row, n_exp).values if n_exp else row[:0]
            if got_vals.numel():
                err = float((got_vals - exp_vals).abs().max())
                max_err = max(max_err, err)
                if err != 0.0:
                    reason = "selected values are not the top-k of the row"
        if reason:
            bad_rows.append({"row": r, "valid": n, "reason": reason})
    res = {"passed": not bad_rows, "max_abs_err": (float("inf") if bad_rows and max_err == 0 else max_err),
           "max_rel_err": None, "bad_rows": len(bad_rows)}
    if bad_rows:
        res["first_bad_rows"] = bad_rows[:4]
        res["note"] = f"row {bad_rows[0]['row']} ({bad_rows[0]['valid']} valid): {bad_rows[0]['reason']}"
    return res


def run(target, dev, options: dict) -> list:
    import torch

    conv = options.get("convention", "prefill")
    k = int(options.get("k", 64 if dev.type == "cpu" else 2048))
    seed0 = int(options.get("seed", 0))
    suite = C.Suite("topk", dev)
    what = {c["name"]: c["what"] for c in FAMILY["cases"]}

    def case(name, seed, lengths, *, width=None, strided=False):
        def fn():
            g = C.gen(torch, seed)
            R = len(lengths)
            N = width or (max(lengths) + k // 2 + 3)
            starts, ends = [], []
            for n in lengths:
                s = int(torch.randint(0, N - n + 1, (1,), generator=g))
                starts.append(s)
                ends.append(s + n)
            full_w = N + (37 if strided else 0)
            base = torch.randn(R, full_w, generator=g, dtype=torch.float32)
            logits = base[:, 5:5 + N] if strided else base
            for r in range(R):
                logits[r, :starts[r]] = POISON
                logits[r, ends[r]:] = POISON
            logits = logits.to(dev) if not strided else base.to(dev)[:, 5:5 + N]
            st = torch.tensor(starts, dtype=torch.int32, device=dev)
            en = torch.tensor(ends, dtype=torch.int32, device=dev)
            if conv == "functional":
                out = target(logits, st, en, k)
            else:
                out = torch.full((R, k), -7, dtype=torch.int32, device=dev)
                target(logits, st, en, out, R, logits.stride(0), logits.stride(1), k)
            C.sync(torch, dev)
            res = _check(torch, logits, st, en, out, k)
            res["atol"], res["rtol"] = 0.0, 0.0
            res["shapes"] = {**C.shapes_of(logits=logits, out=out if hasattr(out, "shape") else None),
                             "k": k, "row_lengths": list(lengths), "convention": conv}
            return res

        suite.run(name, what[name], fn, seed=seed, dtype="float32", kind="index")

    case("long_rows", seed0 + 0, [k + 1, 2 * k, 3 * k + 5, k + 17])
    case("short_rows_padded", seed0 + 1, [1, k // 2, k - 1, 0, 7])
    case("strided_logits", seed0 + 2, [2 * k, k // 3, k + 9], strided=True)
    case("mixed", seed0 + 3, [0, k, k // 4, 4 * k, 3, k + 1])
    return suite.cases
