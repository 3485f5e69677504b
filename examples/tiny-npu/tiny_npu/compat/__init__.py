# SPDX-License-Identifier: Apache-2.0
"""Feature 9: an import hook that serves ``flash_attn`` from this package.

After ``import tiny_npu.compat`` (done by tiny_npu.register_ops), any
``import flash_attn`` / ``from flash_attn import ...`` (also of
``flash_attn.flash_attn_interface``) loads tiny_npu.compat.flash_attn instead.
"""

import builtins

_MODULE_MAP = {
    "flash_attn": "tiny_npu.compat.flash_attn",
    "flash_attn.flash_attn_interface": "tiny_npu.compat.flash_attn",
}

_orig_import = builtins.__import__


def _tiny_import(name, globals=None, locals=None, fromlist=(), level=0):
    target = _MODULE_MAP.get(name) if level == 0 else None
    if target is None:
        return _orig_import(name, globals, locals, fromlist, level)
    # A non-empty fromlist makes __import__ return the leaf module itself.
    return _orig_import(target, globals, locals, fromlist or ("__name__",), 0)


builtins.__import__ = _tiny_import
