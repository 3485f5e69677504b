"""Probe families.  Standalone: stdlib only at import time, torch imported lazily.

Each family module defines ``FAMILY`` (metadata: description, contract
component, calling convention, cases, options) and ``run(target, device,
options) -> list[case dict]``.  This package adds target resolution, device
choice, the verdict and the provider description.

These modules are imported under two names: ``_attnlens_agent.probes`` inside
the agent, and ``attnlens.agent.probes`` on the host (metadata only; the host
never calls ``run``).
"""

from __future__ import annotations

import importlib
import os
import time

FAMILY_MODULES = ["varlen", "kv_cache_write", "lse_merge", "decode", "topk"]


def _family_module(name: str):
    if name not in FAMILY_MODULES:
        raise ValueError(f"unknown probe family {name!r}; known: {', '.join(FAMILY_MODULES)}")
    return importlib.import_module(f"{__name__}.{name}")


def catalog() -> list:
    return [dict(_family_module(n).FAMILY) for n in FAMILY_MODULES]


def _pick_device(torch, device: str | None):
    d = (device or "auto").strip()
    if d == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(d)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(f"device {d!r} requested but torch.cuda.is_available() is False")
    return dev


def verdict(cases: list) -> str:
    req = [c for c in cases if c.get("required", True) and c.get("status") != "skip"]
    if not req:
        return "inconclusive"
    return "pass" if all(c.get("status") == "pass" for c in req) else "fail"


def run_probe(params: dict) -> dict:
    """Agent-side entry: resolve the target, run the family's cases, return the raw result."""
    from .. import targets as T

    family = params.get("family") or ""
    mod = _family_module(family)
    target = params.get("target") or ""
    options = dict(params.get("options") or {})
    t0 = time.time()
    base = {"family": family, "target": target, "options": options}
    try:
        obj, info = T.resolve(target, module=params.get("module"), load_library=params.get("load_library"))
    except T.TargetImportError as e:
        return {**base, "status": "import_error", "verdict": "import_error", "import_error": e.to_dict(),
                "message": f"importing {e.module} failed: {e.type}: {e.message}", "cases": []}
    except T.TargetNotFound as e:
        return {**base, "status": "not_found", "verdict": "error", "message": str(e), "cases": []}
    import torch

    dev = _pick_device(torch, params.get("device"))
    key = {"cuda": "CUDA", "cpu": "CPU", "xpu": "XPU", "privateuseone": "PrivateUse1"}.get(dev.type, dev.type.upper())
    provider = T.describe(obj, info, device_key=key)
    cases = mod.run(obj, dev, options)
    v = verdict(cases)
    extra: dict = {}
    # The call itself imported something that is not installed (a lazy import inside the
    # target): nothing was measured, and the import error is the finding.
    imp = [c for c in cases if c.get("import_error")]
    if v == "fail" and imp and not any(c.get("status") == "pass" for c in cases):
        v = "import_error"
        note = imp[0].get("note", "")
        extra["message"] = f"the call raised an import error ({len(imp)} cases): {note}"
        extra["import_error"] = {"module": None, "type": imp[0].get("error_type"),
                                 "message": note.split(": ", 1)[-1], "traceback": imp[0].get("traceback", "")}
    return {
        **base,
        **extra,
        "status": "ok",
        "verdict": v,
        "cases": cases,
        "provider": provider,
        "device": str(dev),
        "device_name": (torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"),
        "interpret": os.environ.get("TRITON_INTERPRET", "") == "1",
        "torch": torch.__version__,
        "elapsed_s": round(time.time() - t0, 3),
        "convention": mod.FAMILY.get("convention"),
    }
