"""Shared helpers for probe families.  torch is imported inside functions only."""

from __future__ import annotations

import inspect
import time
import traceback

# (atol, rtol) per comparison kind and dtype.  Attention values are vLLM's
# kernel-test tolerances (tests/kernels/attention/test_flash_attn.py: bf16
# atol 1.5e-2 rtol 1e-2); copies are exact (test_cache.py compares with
# assert_close defaults on a copy); fp8 cache entries are compared after
# dequantisation with atol 1e-3 rtol 0.1 (test_cache.py).
TOLERANCES = {
    "attention": {
        "bfloat16": (1.5e-2, 1e-2),
        "float16": (1.5e-2, 1e-2),
        "float32": (5e-3, 5e-3),  # allows TF32 matmuls on GPUs
        "float64": (1e-6, 1e-6),
    },
    # LSE computed by the kernel from bf16/fp16 inputs carries their rounding (vLLM's Triton decode
    # kernel multiplies q*k in bf16 before summing: 7e-3 off on an H200); fp32 LSE (merges) is tight.
    "lse": {"bfloat16": (1.5e-2, 1e-2), "float16": (1.5e-2, 1e-2), "*": (2e-3, 1e-3)},
    "copy": {"*": (0.0, 0.0)},
    "fp8_dequant": {"*": (1e-3, 0.1)},
    "index": {"*": (0.0, 0.0)},
}


def tolerance(kind: str, dtype_name: str):
    table = TOLERANCES[kind]
    return table.get(dtype_name) or table.get("*") or (0.0, 0.0)


def dtype(torch, name: str):
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return d


def dname(dt) -> str:
    return str(dt).replace("torch.", "")


def gen(torch, seed: int):
    g = torch.Generator(device="cpu")
    g.manual_seed(int(seed))
    return g


def randn(torch, g, shape, dt, device, scale: float = 1.0):
    """Random normal generated on the CPU (same values on every device), then cast and moved."""
    x = torch.randn(*shape, generator=g, dtype=torch.float32) * scale
    return x.to(dt).to(device)


def rand_uniform(torch, g, shape, lo, hi, device, dt=None):
    x = torch.rand(*shape, generator=g, dtype=torch.float32) * (hi - lo) + lo
    return x.to(dt or torch.float32).to(device)


def randperm(torch, g, n, device=None):
    p = torch.randperm(n, generator=g)
    return p.to(device) if device is not None else p


def compare(out, ref, atol: float, rtol: float) -> dict:
    """Elementwise ``|out - ref| <= atol + rtol * |ref|`` in float64, NaN-safe.

    Where the reference is infinite the output must equal it.  ``max_rel_err`` is
    ``max_abs_err`` relative to the largest finite reference magnitude.
    """
    import torch

    o = out.detach().to("cpu").to(torch.float64)
    r = ref.detach().to("cpu").to(torch.float64)
    if tuple(o.shape) != tuple(r.shape):
        return {"passed": False, "max_abs_err": float("inf"), "max_rel_err": float("inf"),
                "mismatched": None, "note": f"shape {tuple(o.shape)} != expected {tuple(r.shape)}"}
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))
    d = (o - r).abs()
    d = torch.where(same, torch.zeros_like(d), d)
    d = torch.where(torch.isnan(d), torch.full_like(d, float("inf")), d)
    lim = atol + rtol * torch.where(torch.isfinite(r), r.abs(), torch.zeros_like(r))
    bad = d > lim
    n_bad = int(bad.sum())
    max_abs = float(d.max()) if d.numel() else 0.0
    finite_ref = r[torch.isfinite(r)]
    scale = float(finite_ref.abs().max()) if finite_ref.numel() else 0.0
    max_rel = (max_abs / scale) if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    res = {"passed": n_bad == 0, "max_abs_err": max_abs, "max_rel_err": max_rel, "mismatched": n_bad,
           "elements": int(d.numel())}
    if n_bad:
        idx = int(torch.nonzero(bad.flatten())[0])
        res["first_mismatch"] = {"flat_index": idx, "got": float(o.flatten()[idx]), "expected": float(r.flatten()[idx])}
        nonfinite = int((~torch.isfinite(o) & torch.isfinite(r)).sum())
        if nonfinite:
            res["nonfinite_outputs"] = nonfinite
    return res


def bitwise_equal(a, b) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        ia = a.detach().cpu().contiguous().view(torch.uint8)
        ib = b.detach().cpu().contiguous().view(torch.uint8)
        return bool(torch.equal(ia, ib))
    return bool(torch.equal(a.detach().cpu(), b.detach().cpu()))


def accepts(target, name: str):
    """True/False when the signature is readable (``**kwargs`` counts as accepting), else None."""
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    ps = sig.parameters
    if name in ps:
        return True
    if any(p.kind == p.VAR_KEYWORD for p in ps.values()):
        return True
    return False


class Suite:
    """Collects case results.  ``run(name, description, fn, ...)`` never raises."""

    def __init__(self, family: str, device):
        self.family = family
        self.device = device
        self.cases: list = []

    def run(self, name, description, fn, *, seed=None, dtype=None, required=True, shapes=None, kind=None):
        case = {"name": name, "description": description, "seed": seed, "dtype": dtype, "required": required,
                "shapes": shapes or {}, "kind": kind}
        t0 = time.time()
        try:
            res = fn() or {}
        except Exception as e:  # noqa: BLE001 - a raising target is a failed case, not a tool error
            tb = traceback.format_exc()
            res = {"status": "error", "passed": False,
                   "note": f"raised {type(e).__name__}: {str(e)[:1500]}",
                   "error_type": type(e).__name__, "import_error": isinstance(e, ImportError),
                   "traceback": tb[-4000:]}
        case.update(res)
        if "status" not in case:
            p = case.get("passed")
            case["status"] = "skip" if p is None else ("pass" if p else "fail")
        case.setdefault("passed", None if case["status"] == "skip" else case["status"] == "pass")
        case.setdefault("max_abs_err", None)
        case.setdefault("max_rel_err", None)
        case.setdefault("note", "")
        case["elapsed_s"] = round(time.time() - t0, 4)
        self.cases.append(case)
        return case

    def skip(self, name, description, reason, **meta):
        self.cases.append({"name": name, "description": description, "status": "skip", "passed": None,
                           "required": meta.get("required", True), "note": reason, "seed": meta.get("seed"),
                           "dtype": meta.get("dtype"), "shapes": meta.get("shapes", {}),
                           "max_abs_err": None, "max_rel_err": None, "elapsed_s": 0.0})


def sync(torch, device):
    if getattr(device, "type", "cpu") == "cuda":
        torch.cuda.synchronize(device)


def shapes_of(**tensors) -> dict:
    out = {}
    for k, t in tensors.items():
        if t is None:
            continue
        if hasattr(t, "shape"):
            out[k] = {"shape": list(t.shape), "dtype": dname(t.dtype), "stride": list(t.stride())}
        else:
            out[k] = t
    return out
