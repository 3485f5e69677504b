"""Upgrade settings of a plugin checkout.

Read from ``attnlens.toml`` at the root (tables at top level) or from the plugin's
``pyproject.toml`` under ``[tool.attnlens]``; ``attnlens.toml`` wins key by key::

    [upstream-map]                       # plugin prefix -> upstream prefix (modules or symbols)
    "vllm_metax.models.deepseek_v4.attention" = "vllm.model_executor.models.deepseek_v4"
    "vllm_metax.v1.attention.backends.mla.common.MacaMLACommonImpl" = "vllm.model_executor.layers.attention.mla_attention.MLACommonImpl"

    [upgrade]
    from = "0.19.1"                      # default old version for drift and hover notes
    upstream-package = "vllm"
    class-prefixes = ["Maca", "Metax", "MX", "Mx"]
    scope = ["vllm_metax/v1/attention/**"]

In ``pyproject.toml`` the same tables are ``[tool.attnlens.upstream-map]`` and
``[tool.attnlens.upgrade]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib  # type: ignore[import-not-found]
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DEFAULT_PREFIXES = ("Maca", "Metax", "MetaX", "MX", "Mx")


@dataclass
class UpgradeConfig:
    upstream_map: dict = field(default_factory=dict)
    old: str | None = None
    upstream_package: str = "vllm"
    class_prefixes: tuple = DEFAULT_PREFIXES
    scope: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def map_prefix(self, dotted: str) -> tuple[str, str] | None:
        """(plugin prefix, upstream prefix) of the longest mapping that covers ``dotted``."""
        best = None
        for k, v in self.upstream_map.items():
            if dotted == k or dotted.startswith(k + "."):
                if best is None or len(k) > len(best[0]):
                    best = (k, v)
        return best


def _load(path: Path, errors: list) -> dict | None:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    except Exception as e:  # tomllib.TOMLDecodeError
        errors.append(f"{path}: {e}")
        return None


def _apply(cfg: UpgradeConfig, tables: dict, source: str) -> None:
    m = tables.get("upstream-map") or tables.get("upstream_map") or {}
    if isinstance(m, dict):
        for k, v in m.items():
            if isinstance(k, str) and isinstance(v, str) and k and v:
                cfg.upstream_map[k.strip()] = v.strip()
    up = tables.get("upgrade") or {}
    if isinstance(up, dict):
        if isinstance(up.get("from"), str):
            cfg.old = up["from"]
        pkg = up.get("upstream-package") or up.get("upstream_package")
        if isinstance(pkg, str) and pkg.isidentifier():
            cfg.upstream_package = pkg
        pre = up.get("class-prefixes") or up.get("class_prefixes")
        if isinstance(pre, list) and all(isinstance(x, str) for x in pre):
            cfg.class_prefixes = tuple(pre)
        sc = up.get("scope")
        if isinstance(sc, list) and all(isinstance(x, str) for x in sc):
            cfg.scope = list(sc)
    cfg.sources.append(source)


def load_config(root: str | Path) -> UpgradeConfig:
    root = Path(root)
    cfg = UpgradeConfig()
    pp = root / "pyproject.toml"
    if pp.is_file():
        data = _load(pp, cfg.errors)
        tool = ((data or {}).get("tool") or {}).get("attnlens")
        if isinstance(tool, dict):
            _apply(cfg, tool, str(pp))
    at = root / "attnlens.toml"
    if at.is_file():
        data = _load(at, cfg.errors)
        if isinstance(data, dict):
            _apply(cfg, data, str(at))
    return cfg
