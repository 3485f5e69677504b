"""Typed server settings with defaults, read from the client.

Sources, later wins: defaults, ``initializationOptions``, the
``workspace/configuration`` section ``attnlens`` (or the ``attnlens`` key of
``workspace/didChangeConfiguration`` settings for clients that push). A key
whose value has the wrong type or range is reported (a warning naming the key
and the default used) and replaced by its default; the server never fails on
configuration. ``SETTINGS`` is the single table the docs are written from.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Settings:
    target_python: str | None = None
    """Interpreter of the environment the plugin runs in (vLLM installed there). Default: $VIRTUAL_ENV or python3 on PATH."""
    cache_dir: str | None = None
    """Cache folder root. Default: $ATTNLENS_CACHE_DIR or ~/.cache/attnlens."""
    root: str | None = None
    """Analyse this folder instead of the editor's workspace folder."""
    use_cache: bool = True
    """Read and write the on-disk summary cache."""
    hover_budget_ms: int = 500
    """Time budget of one hover resolution; a longer one answers a labelled partial chain."""
    diagnostics: bool = True
    """Publish rule diagnostics (when the rules engine is installed)."""
    diagnostics_debounce_ms: int = 300
    """Delay after the last edit before diagnostics are recomputed."""
    index_call_sites: bool = True
    """Trace every workspace call site in the background (incoming calls; warm hovers)."""
    max_hover_kernels: int = 40
    """Kernels (distinct targets) listed in a backend hover."""
    hover_copy_link: bool = False
    """End hovers with a *Copy as Markdown* command link (a VS Code `command:` link; the extension turns it on)."""
    code_lens: bool = True
    """Code lens over backend classes and the methods of their parts: `4 kernels · 2 not installed · 1 dummy`."""
    inlay_hints: bool = True
    """Inlay hints after kernel calls: `→ cache_kernels.cu:828`, `→ not installed`, `→ dummy`."""
    installed_symbols: bool = True
    """Workspace symbols include the kernels of installed packages (Triton kernels, Python-registered torch ops)."""
    log_level: str = "info"
    """Server log level: error, warning, info or debug (stderr and window/logMessage)."""
    subject: str = "worktree"
    """What is reviewed: worktree (the files and open buffers), index (the staged snapshot only),
    rev:REV (a commit) or installed (the plugin as installed in the target interpreter)."""

    def with_(self, **kw) -> "Settings":
        return dataclasses.replace(self, **kw)


def _opt_str(v: Any) -> str | None:
    if isinstance(v, str):
        return v.strip() or None  # "" is how string settings say "unset"
    raise ValueError("a string")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise ValueError("true or false")


def _int_range(lo: int, hi: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise ValueError(f"an integer from {lo} to {hi}")
        return v

    return check


def _level(v: Any) -> str:
    if isinstance(v, str) and v.lower() in ("error", "warning", "info", "debug"):
        return v.lower()
    raise ValueError("one of error, warning, info, debug")


def _subject(v: Any) -> str:
    if isinstance(v, str) and (v in ("worktree", "index", "installed") or (v.startswith("rev:") and len(v) > 4)):
        return v
    raise ValueError("worktree, index, installed or rev:REV")


# client key -> (attribute, validator)
SETTINGS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "targetPython": ("target_python", _opt_str),
    "cacheDir": ("cache_dir", _opt_str),
    "root": ("root", _opt_str),
    "useCache": ("use_cache", _bool),
    "hoverBudgetMs": ("hover_budget_ms", _int_range(10, 60_000)),
    "diagnostics": ("diagnostics", _bool),
    "diagnosticsDebounceMs": ("diagnostics_debounce_ms", _int_range(0, 10_000)),
    "indexCallSites": ("index_call_sites", _bool),
    "maxHoverKernels": ("max_hover_kernels", _int_range(0, 1000)),
    "hoverCopyLink": ("hover_copy_link", _bool),
    "codeLens": ("code_lens", _bool),
    "inlayHints": ("inlay_hints", _bool),
    "installedSymbols": ("installed_symbols", _bool),
    "logLevel": ("log_level", _level),
    "subject": ("subject", _subject),
}

# settings whose change needs a new analysis workspace
RESTART_KEYS = ("target_python", "cache_dir", "root", "use_cache", "subject")


def parse(*layers: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Merge ``layers`` (dicts, later wins) over ``base``; return settings and warnings.

    ``None`` values count as unset (VS Code sends null for unset keys). Unknown
    keys are reported too, so a typo does not silently do nothing.
    """
    settings = base or Settings()
    warnings: list[str] = []
    defaults = Settings()
    for layer in layers:
        if layer is None:
            continue
        if not isinstance(layer, dict):
            warnings.append(f"AttnLens: settings must be an object, got {type(layer).__name__}; using the defaults")
            continue
        changes = {}
        for key, value in layer.items():
            if key not in SETTINGS:
                warnings.append(f"AttnLens: unknown setting `attnlens.{key}` ignored")
                continue
            if value is None:
                continue
            attr, check = SETTINGS[key]
            try:
                changes[attr] = check(value)
            except ValueError as e:
                default = getattr(defaults, attr)
                warnings.append(
                    f"AttnLens: setting `attnlens.{key}` = {value!r} is invalid (expected {e}); "
                    f"using the default {default!r}"
                )
                changes[attr] = default
        settings = settings.with_(**changes)
    return settings, warnings


def needs_restart(old: Settings, new: Settings) -> bool:
    return any(getattr(old, k) != getattr(new, k) for k in RESTART_KEYS)
