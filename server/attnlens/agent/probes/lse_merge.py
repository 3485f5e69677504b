"""Family ``lse_merge``: merging two partial attention results by their log-sum-exp.

Modelled on vLLM's ``merge_attn_states`` (section 2.2 of arXiv 2501.01005):
``out = (e^{p_lse - m} p_out + e^{s_lse - m} s_out) / (e^{p_lse - m} + e^{s_lse - m})`` and
``out_lse = m + log(...)``, with LSE in natural log by default (``lse_base`` option
``2`` for kernels that document base-2 LSE, e.g. FlashInfer's).

Discriminating cases: widely spread LSE values (a kernel that uses ``exp2`` on a
natural-log LSE, or ``exp`` on a base-2 one, is off by far more than the
tolerance); empty partitions (LSE = -inf on one side must give exactly the other
side, never NaN); an output with a padded head stride.  Both sides empty
(advisory: vLLM 0.26 emits zeros and -inf, older kernels NaN) and ``+inf``
treated as empty (FA2 convention, advisory) are reported but do not decide the
verdict.
"""

from __future__ import annotations

import math

from . import _common as C

FAMILY = {
    "name": "lse_merge",
    # the argument names the family's calling conventions pass (rules route a call to a family by them)
    "keywords": ["output", "prefix_output", "prefix_lse", "suffix_output", "suffix_lse", "output_lse"],
    "title": "LSE merge of two partial attentions (LSE base, empty partitions at -inf)",
    "component": "attention.merge_states",
    "upstream": [
        "vllm.v1.attention.ops.merge_attn_states.merge_attn_states",
        "vllm.v1.attention.ops.triton_merge_attn_states.merge_attn_states",
        "torch.ops._C.merge_attn_states",
    ],
    "convention": (
        "target(output [T, H, D], prefix_output [T, H, D], prefix_lse float32[H, T], suffix_output [T, H, D], "
        "suffix_lse float32[H, T], output_lse=float32[H, T] or None) -> None; writes output (and output_lse). "
        "LSE natural log unless option lse_base=2."
    ),
    "cases": [
        {"name": "basic", "what": "bf16 outputs, LSE uniform in [-4, 4]"},
        {"name": "output_lse", "what": "same call with output_lse; '<case>.lse' entries check the merged LSE"},
        {"name": "lse_base", "what": "LSE differences up to +-8: exp vs exp2 confusion is far off"},
        {"name": "empty_prefix", "what": "prefix LSE = -inf for every token: output must equal the suffix, no NaN"},
        {"name": "empty_suffix", "what": "suffix LSE = -inf for some tokens: output must equal the prefix"},
        {"name": "padded_output_stride", "what": "output is a view with a padded head stride"},
        {"name": "both_empty", "what": "(advisory) both LSE -inf: zeros and -inf, not NaN (vLLM 0.26)"},
        {"name": "pos_inf_as_empty", "what": "(advisory) +inf LSE treated as an empty partition (FA2)"},
    ],
    "options": {
        "dtype": "bfloat16 (default) | float16 | float32",
        "head_size": "default 64 on CPU, 128 on GPU",
        "lse_base": "e (default) | 2",
        "seed": "base seed (default 0)",
    },
    "tolerance": "output: bf16/fp16 atol 1.5e-2 rtol 1e-2, fp32 5e-3; output_lse: atol 2e-3 rtol 1e-3",
}


def reference(torch, p_out, p_lse, s_out, s_lse, base="e"):
    """float64 merge.  LSE arrays are [H, T]; outputs [T, H, D]."""
    po, so = p_out.detach().cpu().double(), s_out.detach().cpu().double()
    pl, sl = p_lse.detach().cpu().double(), s_lse.detach().cpu().double()
    pl = torch.where(pl == float("inf"), torch.full_like(pl, float("-inf")), pl)
    sl = torch.where(sl == float("inf"), torch.full_like(sl, float("-inf")), sl)
    ln_b = 1.0 if base == "e" else math.log(2.0)
    m = torch.maximum(pl, sl)
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    pe = torch.exp((pl - m_safe) * ln_b)
    se = torch.exp((sl - m_safe) * ln_b)
    tot = pe + se
    empty = tot == 0
    tot_safe = torch.where(empty, torch.ones_like(tot), tot)
    pw = (pe / tot_safe).transpose(0, 1).unsqueeze(-1)  # [T, H, 1]
    sw = (se / tot_safe).transpose(0, 1).unsqueeze(-1)
    out = po * pw + so * sw
    out = torch.where(empty.transpose(0, 1).unsqueeze(-1), torch.zeros_like(out), out)
    lse = torch.where(empty, torch.full_like(m, float("-inf")), torch.log(tot_safe) / ln_b + m_safe)
    return out, lse


def run(target, dev, options: dict) -> list:
    import torch

    dt = C.dtype(torch, options.get("dtype", "bfloat16"))
    dn = C.dname(dt)
    atol, rtol = C.tolerance("attention", dn)
    l_atol, l_rtol = C.tolerance("lse", "float32")  # float32 LSE in, float32 arithmetic
    D = int(options.get("head_size", 64 if dev.type == "cpu" else 128))
    base = str(options.get("lse_base", "e"))
    seed0 = int(options.get("seed", 0))
    suite = C.Suite("lse_merge", dev)
    T, H = 9, 4

    def case(name, seed, *, lse_range=4.0, empty_prefix=(), empty_suffix=(), pos_inf_prefix=(),
             with_lse=False, padded=False, required=True):
        what = next(c["what"] for c in FAMILY["cases"] if c["name"] == name)
        keep: dict = {}

        def fn():
            g = C.gen(torch, seed)
            p_out = C.randn(torch, g, (T, H, D), dt, dev)
            s_out = C.randn(torch, g, (T, H, D), dt, dev)
            p_lse = C.rand_uniform(torch, g, (H, T), -lse_range, lse_range, "cpu")
            s_lse = C.rand_uniform(torch, g, (H, T), -lse_range, lse_range, "cpu")
            for t in empty_prefix:
                p_lse[:, t] = float("-inf")
                p_out[t] = 0.0  # vLLM's mask_empty_context zeroes undefined partial outputs
            for t in empty_suffix:
                s_lse[:, t] = float("-inf")
                s_out[t] = 0.0
            for t in pos_inf_prefix:
                p_lse[:, t] = float("inf")
                p_out[t] = 0.0
            p_lse, s_lse = p_lse.to(dev), s_lse.to(dev)
            if padded:
                store = torch.full((T, H, D + 16), 7.0, dtype=dt, device=dev)
                out = store[:, :, :D]
            else:
                store = None
                out = torch.full((T, H, D), float("nan"), dtype=dt, device=dev)
            out_lse = torch.full((H, T), float("nan"), dtype=torch.float32, device=dev) if with_lse else None
            if with_lse:
                target(out, p_out, p_lse, s_out, s_lse, output_lse=out_lse)
            else:
                target(out, p_out, p_lse, s_out, s_lse)
            C.sync(torch, dev)
            ref, ref_lse = reference(torch, p_out, p_lse, s_out, s_lse, base)
            res = C.compare(out, ref, atol, rtol)
            res.update({"atol": atol, "rtol": rtol})
            notes = []
            if store is not None:
                pad_ok = bool((store[:, :, D:] == 7.0).all())
                res["padding_untouched"] = pad_ok
                if not pad_ok:
                    notes.append("wrote into the padding beyond head_size")
                    res["passed"] = False
            if res.get("nonfinite_outputs"):
                notes.append(f"{res['nonfinite_outputs']} non-finite outputs where the reference is finite")
            if not res["passed"] and not notes:
                notes.append(f"merged output off by up to {res['max_abs_err']:.3g} (LSE base {base} expected)")
            res["note"] = "; ".join(notes)
            res["shapes"] = {**C.shapes_of(output=out, prefix_output=p_out, prefix_lse=p_lse),
                             "lse_base": base, "empty_prefix_tokens": list(empty_prefix),
                             "empty_suffix_tokens": list(empty_suffix)}
            keep.update(out_lse=out_lse, ref_lse=ref_lse, shapes=res["shapes"])
            return res

        c = suite.run(name, what, fn, seed=seed, dtype=dn, required=required, kind="attention")
        if with_lse:
            def lse_fn():
                if keep.get("out_lse") is None:
                    return {"status": "error", "passed": False, "note": f"the call failed ({c['status']})"}
                r = C.compare(keep["out_lse"], keep["ref_lse"], l_atol, l_rtol)
                r.update({"atol": l_atol, "rtol": l_rtol, "shapes": keep["shapes"]})
                if not r["passed"]:
                    r["note"] = f"output_lse off by up to {r['max_abs_err']:.3g} (LSE base {base} expected)"
                return r

            suite.run(name + ".lse", f"output_lse of '{name}'", lse_fn, seed=seed, dtype="float32",
                      required=required, kind="lse")

    case("basic", seed0 + 0)
    case("output_lse", seed0 + 1, with_lse=True)
    case("lse_base", seed0 + 2, lse_range=8.0, with_lse=True)
    case("empty_prefix", seed0 + 3, empty_prefix=tuple(range(T)), with_lse=True)
    case("empty_suffix", seed0 + 4, empty_suffix=(1, 5), with_lse=True)
    case("padded_output_stride", seed0 + 5, padded=True)
    case("both_empty", seed0 + 6, empty_prefix=(3,), empty_suffix=(3,), with_lse=True, required=False)
    case("pos_inf_as_empty", seed0 + 7, pos_inf_prefix=(1, 4), required=False)
    return suite.cases
