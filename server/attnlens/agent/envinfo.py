"""Environment record, collected inside the target interpreter.

Standalone (stdlib only at import time).  Vendor-neutral: it records what the
machine offers (CUDA or MACA or neither) and never fails because a tool or a
library is absent; a field that could not be read holds ``None`` or an
``error`` string.

Versions of the GPU runtime and driver are read from the libraries actually
mapped into this process (``/proc/self/maps``) after torch initialised its
device runtime, not from ``nvcc`` on ``PATH`` (torch.utils.collect_env's
pitfall).
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import importlib.metadata as md
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
import time

# Distributions (and their top-level modules) whose versions and locations
# matter for attention code on any device. The installed vLLM plugins and what they
# require are found from their entry points (``plugin_packages``), not listed here.
PACKAGES = [
    ("torch", "torch"),
    ("triton", "triton"),
    ("pytorch-triton", None),
    ("vllm", "vllm"),
    ("flash_attn", "flash_attn"),
    ("flash-attn", None),
    ("vllm-flash-attn", None),
    ("flashinfer-python", "flashinfer"),
    ("xformers", "xformers"),
    ("numpy", "numpy"),
    ("transformers", "transformers"),
    ("pymxsml", "pymxsml"),
]

ENV_PREFIXES = (
    "TORCH", "NCCL", "PYTORCH", "CUDA", "CUBLAS", "CUDNN", "OMP_", "MKL_", "NVIDIA",
    "VLLM", "MACA", "MCCL", "MX", "TRITON", "HIP", "ROCM", "LD_LIBRARY_PATH", "PYTHONPATH",
    "USE_PRECOMPILED_KERNEL",
)
SECRET = re.compile(r"secret|token|api|access|password", re.I)

VENDOR_LIB = re.compile(
    r"/(lib(cuda|cudart|nvrtc|cublas|cublasLt|cudnn|nccl|nvidia-ml|mc\w*|maca\w*|mx\w*|hip\w*|amdhip64|rocm\w*|"
    r"torch_cuda|c10_cuda|torch_hip|c10_hip|mccl)[^/]*\.so[^/]*)$"
)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _run(argv: list[str], timeout: float = 10.0) -> dict:
    """Run a tool (argv list, never a shell string); absent tools are recorded, not fatal."""
    exe = shutil.which(argv[0])
    if exe is None:
        return {"present": False}
    try:
        p = subprocess.run(
            [exe] + argv[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            timeout=timeout, check=False, text=True, errors="replace",
        )
    except subprocess.TimeoutExpired:
        return {"present": True, "path": exe, "error": f"timed out after {timeout} s"}
    except OSError as e:
        return {"present": True, "path": exe, "error": f"{type(e).__name__}: {e}"}
    return {"present": True, "path": exe, "returncode": p.returncode, "stdout": p.stdout[-6000:],
            "stderr": p.stderr[-2000:]}


def _mapped_libraries() -> list[str]:
    """Vendor libraries mapped into this process, sorted (map order follows load addresses)."""
    seen = []
    try:
        with open("/proc/self/maps", "r", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6 and parts[5].startswith("/"):
                    path = " ".join(parts[5:])
                    if VENDOR_LIB.search(path) and path not in seen:
                        seen.append(path)
    except OSError:
        pass
    return sorted(seen)


def _lib_version(paths: list[str], pattern: str, func: str) -> dict | None:
    """Call ``func(int*)`` (cudaRuntimeGetVersion, cuDriverGetVersion, ...) in a mapped library."""
    rx = re.compile(pattern)
    for p in paths:
        if rx.search(os.path.basename(p)):
            try:
                lib = ctypes.CDLL(p)
                fn = getattr(lib, func)
            except (OSError, AttributeError):
                continue
            v = ctypes.c_int(0)
            try:
                rc = fn(ctypes.byref(v))
            except Exception as e:  # noqa: BLE001
                return {"library": p, "error": f"{type(e).__name__}: {e}"}
            return {"library": p, "function": func, "rc": int(rc), "value": int(v.value)}
    return None


PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")


def plugin_packages() -> list:
    """(distribution, top-level module) of every installed vLLM plugin: a distribution other than vLLM itself
    with an entry point in ``vllm.platform_plugins`` / ``vllm.general_plugins``."""
    out: list = []
    seen: set = {"vllm"}
    try:
        eps = md.entry_points()
        groups = [eps.select(group=g) for g in PLUGIN_GROUPS] if hasattr(eps, "select") else \
            [eps.get(g, []) for g in PLUGIN_GROUPS]
    except Exception:  # noqa: BLE001 - no plugin information is an answer
        return out
    for ep in (e for g in groups for e in g):
        dist = getattr(ep, "dist", None)
        name = getattr(dist, "name", None)
        if not name or name in seen:
            continue
        seen.add(name)
        out.append((name, (getattr(ep, "value", "") or "").split(":", 1)[0].split(".", 1)[0] or None))
    return out


def _packages() -> dict:
    out = {}
    plugins = plugin_packages()
    for dist, mod in PACKAGES + [p for p in plugins if p[0] not in {d for d, _m in PACKAGES}]:
        entry: dict = {}
        try:
            d = md.distribution(dist)
            entry["version"] = d.version
            try:
                entry["dist_path"] = str(getattr(d, "_path", "")) or None
            except Exception:  # noqa: BLE001
                pass
        except md.PackageNotFoundError:
            pass
        except Exception as e:  # noqa: BLE001
            entry["dist_error"] = f"{type(e).__name__}: {e}"
        if mod:
            try:
                spec = importlib.util.find_spec(mod)
            except Exception as e:  # noqa: BLE001 - a broken package is worth recording
                spec = None
                entry["find_spec_error"] = f"{type(e).__name__}: {e}"
            if spec is not None:
                loc = spec.origin if spec.origin not in (None, "namespace") else None
                if loc is None and spec.submodule_search_locations:
                    loc = list(spec.submodule_search_locations)[0]
                entry["location"] = loc
        if entry:
            if dist in {d for d, m in plugins if m}:
                entry["vllm_plugin"] = True
            out[dist] = entry
    return out


def _env_vars() -> dict:
    out = {}
    for k, v in sorted(os.environ.items()):
        if any(k.startswith(p) for p in ENV_PREFIXES) and not SECRET.search(k):
            out[k] = v[:500]
    return out


def _torch_info() -> dict:
    try:
        import torch
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        return {"error": f"{type(e).__name__}: {e}"}
    t: dict = {
        "version": torch.__version__,
        "file": getattr(torch, "__file__", None),
        "git_version": getattr(torch.version, "git_version", None),
        "debug": bool(getattr(torch.version, "debug", False)),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "cxx11_abi": _safe(lambda: bool(torch.compiled_with_cxx11_abi())),
        "cudnn": _safe(lambda: torch.backends.cudnn.version()),
        "loaded_libraries": sorted(getattr(torch.ops, "loaded_libraries", set()) or []),
    }
    # MACA builds of torch report through the CUDA API; record any extra version attributes.
    extra = {k: str(getattr(torch.version, k)) for k in dir(torch.version)
             if not k.startswith("_") and k not in ("cuda", "hip", "git_version", "debug", "__version__")
             and isinstance(getattr(torch.version, k), (str, int))}
    if extra:
        t["version_fields"] = extra
    avail = _safe(lambda: bool(torch.cuda.is_available()))
    t["cuda_available"] = avail
    devices = []
    if avail:
        n = _safe(lambda: torch.cuda.device_count()) or 0
        for i in range(n):
            d: dict = {"index": i}
            try:
                p = torch.cuda.get_device_properties(i)
                d.update(
                    {
                        "name": p.name,
                        "capability": [p.major, p.minor],
                        "total_memory": int(p.total_memory),
                        "multi_processor_count": int(getattr(p, "multi_processor_count", 0) or 0),
                        "uuid": str(getattr(p, "uuid", "")) or None,
                        "l2_cache_size": getattr(p, "L2_cache_size", None),
                    }
                )
            except Exception as e:  # noqa: BLE001
                d["error"] = f"{type(e).__name__}: {e}"
            devices.append(d)
        _safe(lambda: torch.zeros(1, device="cuda"))  # maps the runtime / driver libraries
    t["device_count"] = len(devices)
    t["devices"] = devices
    return t


def _triton_info() -> dict:
    if importlib.util.find_spec("triton") is None:
        return {"present": False}
    try:
        import triton
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, KeyboardInterrupt):
            raise
        return {"present": True, "error": f"{type(e).__name__}: {e}"}
    info: dict = {
        "present": True,
        "version": getattr(triton, "__version__", None),
        "file": getattr(triton, "__file__", None),
        "interpret": os.environ.get("TRITON_INTERPRET", "") in ("1", "true", "True"),
    }
    try:
        tgt = triton.runtime.driver.active.get_current_target()
        info["target"] = {"backend": getattr(tgt, "backend", None), "arch": str(getattr(tgt, "arch", None)),
                          "warp_size": getattr(tgt, "warp_size", None)}
    except Exception as e:  # noqa: BLE001 - no driver on a CPU machine
        info["target"] = None
        info["target_error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return info


def _maca_info() -> dict:
    maca_path = os.environ.get("MACA_PATH") or ("/opt/maca" if os.path.isdir("/opt/maca") else None)
    m: dict = {"maca_path": maca_path}
    if maca_path:
        vf = os.path.join(maca_path, "Version.txt")
        try:
            with open(vf, "r", errors="replace") as f:
                text = f.read(4096)
            m["version_file"] = vf
            m["version_txt"] = text.strip()
            mm = re.search(r"Version:(.*)", text)
            m["version"] = mm.group(1).strip() if mm else None
        except OSError:
            m["version_file"] = None
    smi = _run(["mx-smi"])
    m["mx_smi"] = {"present": smi.get("present", False)}
    if smi.get("present"):
        out = smi.get("stdout", "") or ""
        m["mx_smi"]["returncode"] = smi.get("returncode")
        m["mx_smi"]["error"] = smi.get("error")
        for label, key in (("BIOS Version", "bios_version"), ("Kernel Mode Driver Version", "driver_version"),
                           ("MACA Version", "maca_version"), ("mx-smi  version", "mx_smi_version")):
            mm = re.search(re.escape(label) + r"\s*:\s*(.+)", out)
            if mm:
                m["mx_smi"][key] = mm.group(1).strip()
        m["mx_smi"]["head"] = out[:1500]
    return m


def _nvidia_info() -> dict:
    r = _run(["nvidia-smi", "--query-gpu=name,driver_version,pci.bus_id,uuid", "--format=csv,noheader"])
    out: dict = {"present": r.get("present", False)}
    if r.get("present"):
        out["returncode"] = r.get("returncode")
        out["error"] = r.get("error")
        rows = []
        for line in (r.get("stdout") or "").splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) >= 2:
                rows.append({"name": cells[0], "driver_version": cells[1],
                             "pci_bus_id": cells[2] if len(cells) > 2 else None,
                             "uuid": cells[3] if len(cells) > 3 else None})
        out["gpus"] = rows
    try:
        with open("/proc/driver/nvidia/version") as f:
            out["proc_driver_version"] = f.readline().strip()
    except OSError:
        pass
    return out


def _git_sha(path: str | None) -> str | None:
    """Commit of a source checkout that a package is installed from (editable installs)."""
    if not path:
        return None
    d = os.path.dirname(os.path.abspath(path))
    for _ in range(6):
        head = os.path.join(d, ".git", "HEAD")
        if os.path.isfile(head):
            try:
                ref = open(head).read().strip()
                if ref.startswith("ref: "):
                    rp = os.path.join(d, ".git", ref[5:])
                    if os.path.isfile(rp):
                        return open(rp).read().strip()
                    return None
                return ref
            except OSError:
                return None
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    return None


def collect() -> dict:
    t0 = time.time()
    rec: dict = {
        "schema": 1,
        "collected_at": _now(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
            "prefix": sys.prefix,
            "base_prefix": sys.base_prefix,
        },
        "os": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "libc": " ".join(platform.libc_ver()).strip() or None,
        },
        "sys_path": [p for p in sys.path if p],
    }
    rec["torch"] = _torch_info()
    rec["triton"] = _triton_info()
    libs = _mapped_libraries()
    rec["runtime"] = {
        "mapped_libraries": libs,
        "cuda_runtime": _lib_version(libs, r"^libcudart", "cudaRuntimeGetVersion"),
        "cuda_driver": _lib_version(libs, r"^libcuda\.so", "cuDriverGetVersion"),
        "hip_runtime": _lib_version(libs, r"^libamdhip64", "hipRuntimeGetVersion"),
        "maca_runtime": _lib_version(libs, r"^libmcruntime", "mcRuntimeGetVersion"),
        "maca_driver": _lib_version(libs, r"^libmcruntime", "mcDriverGetVersion"),
    }
    rec["maca"] = _maca_info()
    rec["nvidia"] = _nvidia_info()
    pk = _packages()
    for name in ["vllm", "flash_attn"] + [n for n, e in pk.items() if e.get("vllm_plugin")]:
        if name in pk:
            sha = _git_sha(pk[name].get("location"))
            if sha:
                pk[name]["git_sha"] = sha
    rec["packages"] = pk
    rec["env_vars"] = _env_vars()
    rec["gpu"] = summarize_gpu(rec)
    rec["collect_s"] = round(time.time() - t0, 3)
    return rec


def summarize_gpu(rec: dict) -> dict:
    devs = (rec.get("torch") or {}).get("devices") or []
    names = [d.get("name") for d in devs if d.get("name")]
    vendor = None
    if (rec.get("maca") or {}).get("mx_smi", {}).get("present") or any("MetaX" in (n or "") for n in names):
        vendor = "metax"
    elif (rec.get("torch") or {}).get("hip"):
        vendor = "amd"
    elif names:
        vendor = "nvidia" if (rec.get("torch") or {}).get("cuda") else "unknown"
    return {"count": len(devs), "models": sorted(set(names)), "vendor": vendor}


def _safe(fn):
    try:
        return fn()
    except Exception:  # noqa: BLE001
        return None
