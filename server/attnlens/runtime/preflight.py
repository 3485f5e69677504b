"""Pre-flight check of a probe request: can it succeed in the target environment at all?

A probe imports its target in the target interpreter and runs the family's cases on a device. Some
requests cannot succeed there, whatever the kernel does: torch is missing, the package that provides
the target is not installed, or the kernel has no CPU implementation and the environment has no GPU.
Such a run would only record an ``import_error`` or a wall of ``NotImplementedError`` cases, so the
editor says why before running, with the next step.

Facts about the environment come from the record the runtime collects anyway
(:mod:`attnlens.runtime.environment`: torch importable, GPU count, ``sys.path``); facts about the
target come from the caller as ``requires`` (the editor reads them off the resolved chain), else from
the target's spelling alone:

``requires`` (every key optional)
    ``package``: the import root the target lives in (``miniflash`` for ``miniflash:flash_attn_varlen_func``);
    ``providers``: modules of which one must be importable (the extensions that register a torch op);
    ``device``: ``"required"`` when the kernel has no CPU path (a torch op registered for device keys only,
    or code from a package that is not installed here), ``"cpu"`` when it has one, absent when unknown;
    ``device_why``: the words behind ``device`` ("registered for CUDA only").

Nothing here imports the target or starts a process.
"""

from __future__ import annotations

import glob
import os
from dataclasses import asdict, dataclass, field

from ..model import FinalKind

# dispatch keys whose kernels run without a device
CPU_KEYS = frozenset({"CPU", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                      "CompositeExplicitAutogradNonFunctional", "Math", "DefaultBackend"})


@dataclass
class Preflight:
    ok: bool
    reason: str = ""  # one line: why the probe cannot succeed here ("" when ok)
    next_step: str = ""  # one line: what to do instead
    blockers: list = field(default_factory=list)  # "python", "torch", "package", "device"
    facts: dict = field(default_factory=dict)  # what was checked (for the details view)

    def to_json(self) -> dict:
        return asdict(self)


def target_package(target: str) -> str | None:
    """The import root of a ``pkg.mod:attr`` / ``pkg.mod.attr`` target; None for a torch op."""
    t = (target or "").strip()
    if not t or "::" in t or t.startswith("torch.ops."):
        return None
    root = t.split(":", 1)[0].split(".", 1)[0]
    return root if root.isidentifier() else None


def module_present(record: dict, dotted: str) -> bool:
    """Whether ``dotted`` (a module, e.g. ``pkg._C``) can be found on the target's ``sys.path`` as the
    environment record lists it: a package folder, a ``.py`` file or a native extension."""
    parts = [p for p in dotted.split(".") if p]
    if not parts:
        return False
    for root in record.get("sys_path") or []:
        if not isinstance(root, str) or not os.path.isdir(root):
            continue
        base = root
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            folder = os.path.join(base, part)
            if last and (os.path.isfile(folder + ".py") or glob.glob(glob.escape(folder) + ".*.so")
                         or glob.glob(glob.escape(folder) + "*.pyd") or os.path.isfile(folder + ".so")):
                return True
            if not os.path.isdir(folder):
                break
            if last:
                return True
            base = folder
    return False


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _lacks(names: list[str]) -> str:
    if len(names) == 1:
        return f"does not have `{names[0]}`"
    if len(names) == 2:
        return f"has neither `{names[0]}` nor `{names[1]}`"
    return "has none of " + ", ".join(f"`{n}`" for n in names)


def _code_or(names: list[str]) -> str:
    return " or ".join(f"`{n}`" for n in names)


def check(record: dict | None, family: str, target: str, requires: dict | None = None, *,
          env_error: str | None = None, device: str | None = None) -> Preflight:
    """Can ``family`` on ``target`` succeed in the environment ``record`` describes?

    ``env_error``: why no record could be collected (the interpreter does not start);
    ``device``: the device the request asks for (``cuda``, ``cpu``, ``auto``/None)."""
    req = dict(requires or {})
    if record is None:
        why = env_error or "no environment record"
        return Preflight(False, f"the target interpreter cannot be used: {why}",
                         "select a target Python that starts (AttnLens: Select target Python…)", ["python"],
                         {"environment_error": why})
    gpus = int(((record.get("gpu") or {}).get("count")) or 0)
    torch_error = (record.get("torch") or {}).get("error")
    facts: dict = {"gpus": gpus, "torch": (record.get("torch") or {}).get("version"), "torch_error": torch_error}

    providers = [p for p in req.get("providers") or [] if isinstance(p, str) and p]
    package = req.get("package") if isinstance(req.get("package"), str) else target_package(target)
    present = {m: module_present(record, m) for m in ([package] if package else []) + providers}
    facts["packages"] = present
    no_package = bool(package) and not present[package]
    no_provider = bool(providers) and not any(present[p] for p in providers)

    wanted = (device or "auto").strip().lower()
    asks_device = wanted not in ("", "auto", "cpu")
    no_device = not gpus and (req.get("device") == "required" or asks_device)
    if no_device:
        facts["device_why"] = req.get("device_why") or (f"the request asks for {wanted}" if asks_device else "")

    blockers = [b for b, on in (("torch", bool(torch_error)), ("package", no_package or no_provider),
                                ("device", no_device)) if on]
    if not blockers:
        return Preflight(True, facts=facts)
    needs = [w for w, on in ((f"the provider package `{package}`", no_package),
                             (f"the provider module {_code_or(providers)}", no_provider),
                             ("torch", torch_error), ("a device", no_device)) if on]
    env_words = [w for w, on in (("is CPU-only", no_device), (f"has no torch ({str(torch_error)[:80]})", torch_error),
                                 (f"does not have `{package}`", no_package),
                                 (_lacks(providers), no_provider)) if on]
    reason = f"needs {_and(needs)}; the target environment {_and(env_words)}"
    with_ = _and([w for w, on in ((f"`{package}`", no_package), (_code_or(providers), no_provider),
                                  ("torch", torch_error), ("a GPU", no_device)) if on])
    next_step = (f"run it in an environment with {with_}: select its interpreter (AttnLens: Select target Python…), "
                 f"or on that machine: attnlens probe run {family} --target {target} --python PYTHON")
    return Preflight(False, reason, next_step, blockers, facts)


def requires_from_final(final_kind: str, *, package: str | None = None, dispatch_keys: list | None = None,
                        providers: list | None = None) -> dict:
    """``requires`` from what the static analysis knows of the target (plain values, no model objects):
    the final's kind (a ``FinalKind`` or its JSON spelling), its package, the dispatch keys of its
    registrations, the op's provider modules."""
    req: dict = {}
    if package:
        req["package"] = package
    if providers:
        req["providers"] = list(providers)
    keys = sorted({k for k in dispatch_keys or [] if k})
    if final_kind == FinalKind.TORCH_OP and keys:
        if CPU_KEYS & set(keys):
            req["device"] = "cpu"
        else:
            req["device"] = "required"
            req["device_why"] = f"registered for {', '.join(keys)} only"
    elif final_kind == FinalKind.NOT_INSTALLED:
        req["device"] = "required"
        req["device_why"] = "its code is not installed here, so no CPU path is known"
    elif final_kind in (FinalKind.PYTHON_FUNCTION, FinalKind.TRITON_KERNEL):
        req["device"] = "cpu"  # Python/torch code, or a Triton kernel under TRITON_INTERPRET=1
    return req
