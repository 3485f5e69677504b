# SPDX-License-Identifier: Apache-2.0
"""A tiny import-time monkey-patching helper."""

import importlib
from collections.abc import Callable
from typing import Any

from vllm.logger import init_logger

logger = init_logger(__name__)


def patch(target_module: str, target_attr: str | None = None) -> Callable[[Any], Any]:
    """Replace ``target_module.target_attr`` with the decorated object.

    ``target_attr`` may be dotted (``"SomeClass.method"``) to rebind an
    attribute of a class defined in ``target_module``. When omitted, the
    decorated object's own ``__name__`` is used. The replacement happens as
    soon as the decorator runs, i.e. when the patch module is imported.
    """

    def decorator(replacement: Any) -> Any:
        owner: Any = importlib.import_module(target_module)
        path = (target_attr or replacement.__name__).split(".")
        for part in path[:-1]:
            owner = getattr(owner, part)
        original = getattr(owner, path[-1], None)
        if original is None:
            logger.warning("patch target %s.%s does not exist", target_module, ".".join(path))
        setattr(owner, path[-1], replacement)
        replacement.__wrapped_original__ = original
        return replacement

    return decorator
