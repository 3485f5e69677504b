"""One module per LSP surface; each exports ``register(server)``.

``ALL`` is the wiring order used by :func:`attnlens.lsp.server.create_server`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ALL = ("lifecycle", "documents", "hover", "navigation", "call_hierarchy", "symbols", "commands", "diagnostics",
       "runtime_actions", "lens")


def module(name: str) -> ModuleType:
    if name not in ALL:
        raise ValueError(f"unknown feature {name!r}; known: {', '.join(ALL)}")
    return importlib.import_module(f"{__name__}.{name}")
