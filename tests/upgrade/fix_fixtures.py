"""A fake upstream `vllm` in two versions and a plugin (`fixplug`) written against 1.0, with one
finding per quick-fix kind against 2.0 and odd formatting and comments the fixes must keep.

What changed upstream from 1.0 to 2.0:

* `is_quantized` moved from `vllm.attention.backend` to `vllm.utils` (upstream's own
  `flash.py` now imports it from there);
* `FlashBackend` now overrides the base hook `supports_sinks()`;
* `FlashMetadata` gained `seq_lens`, which upstream's `FlashImpl.forward` reads (the plugin overrides it) and
  `FlashImpl.num_queries` (the plugin's impl inherits it: the read that runs);
* the custom op `my_op` (and its fake) gained `scale`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attnlens.target import TargetInfo
from attnlens.upgrade.upstream import UpstreamSource
from attnlens.workspace import Workspace

from ..helpers import write_tree

COMMON = {
    "vllm/__init__.py": "",
    "vllm/attention/__init__.py": "",
    "vllm/attention/backends/__init__.py": "",
    "vllm/attention/backends/registry.py": '''
        import enum


        class AttentionBackendEnum(enum.Enum):
            FLASH = "vllm.attention.backends.flash.FlashBackend"


        def register_backend(backend, class_path=None):
            def deco(cls):
                return cls
            return deco
    ''',
}

_BACKEND = '''
    class AttentionBackend:
        @staticmethod
        def get_name():
            raise NotImplementedError

        @classmethod
        def supports_sinks(cls):
            return False
'''

_OPS_V1 = '''
    from vllm.utils import direct_register_custom_op


    def my_op(x, out):
        out.copy_(x)


    def my_op_fake(x, out):
        return None


    direct_register_custom_op(op_name="my_op", op_func=my_op, fake_impl=my_op_fake)
'''

_FLASH_V1 = '''
    from dataclasses import dataclass

    from vllm.attention.backend import AttentionBackend, is_quantized


    @dataclass
    class FlashMetadata:
        num_tokens: int
        max_len: int
        block_size: int = 16


    class FlashBackend(AttentionBackend):
        @staticmethod
        def get_name():
            return "FLASH"

        @staticmethod
        def get_impl_cls():
            return FlashImpl


    class FlashImpl:
        def forward(self, q, metadata):
            return is_quantized("fp8") and metadata.num_tokens

        def num_queries(self, metadata):
            return metadata.max_len
'''

_UTILS_V1 = '''
    def direct_register_custom_op(op_name, op_func, mutates_args=None, fake_impl=None, dispatch_key=None):
        return None
'''


def _edit(text: str, *pairs: tuple[str, str]) -> str:
    """``text`` with each ``old`` (present exactly once) replaced by ``new``: 2.0 as 1.0 plus its changes."""
    for old, new in pairs:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


V1 = dict(COMMON, **{
    "vllm-1.0.0.dist-info/METADATA": "Name: vllm\nVersion: 1.0.0\n",
    "vllm/utils.py": _UTILS_V1,
    "vllm/attention/backend.py": _BACKEND + '''

    def is_quantized(kv_cache_dtype: str) -> bool:
        return kv_cache_dtype.startswith("fp8")
    ''',
    "vllm/ops.py": _OPS_V1,
    "vllm/attention/backends/flash.py": _FLASH_V1,
})

V2 = dict(COMMON, **{
    "vllm-2.0.0.dist-info/METADATA": "Name: vllm\nVersion: 2.0.0\n",
    "vllm/utils.py": _UTILS_V1 + '''

    def is_quantized(kv_cache_dtype: str) -> bool:
        return kv_cache_dtype.startswith(("fp8", "nvfp4"))
''',
    "vllm/attention/backend.py": _BACKEND,
    "vllm/ops.py": _edit(_OPS_V1, ("def my_op(x, out):", "def my_op(x, out, scale: float | None = None):"),
                         ("def my_op_fake(x, out):", "def my_op_fake(x, out, scale: float | None = None):")),
    "vllm/attention/backends/flash.py": _edit(
        _FLASH_V1,
        ("from vllm.attention.backend import AttentionBackend, is_quantized\n",
         "from vllm.attention.backend import AttentionBackend\n    from vllm.utils import is_quantized\n"),
        ("    block_size: int = 16\n", "    block_size: int = 16\n        seq_lens: list | None = None\n"),
        ('''            return "FLASH"
''', '''            return "FLASH"

        @classmethod
        def supports_sinks(cls):
            # sinks need the 2.0 kernels
            return True
'''),
        ("metadata.num_tokens", "metadata.seq_lens"),
        ("return metadata.max_len", "return len(metadata.seq_lens or ())")),
})

FLASH = '''\
from dataclasses import dataclass

from vllm.attention.backend import (
    AttentionBackend,   # the base
    is_quantized,  # moved upstream in 2.0
)
from vllm.attention.backends.flash import FlashImpl


class MiniFlashBackend(AttentionBackend):
    # Vendor note: keep get_name first
    @staticmethod
    def get_name():   # odd spacing kept
        return  "FLASH"

    @staticmethod
    def get_impl_cls():
        return MiniFlashImpl


@dataclass
class FlashMetadata:
    num_tokens : int    # odd spacing
    max_len: int  # trailing comment
    # the vendor block size
    block_size: int = 16


class MiniFlashImpl(FlashImpl):  # inherits num_queries
    def forward(self, q, metadata):
        return is_quantized( "fp8" )  # odd call spacing
'''

OPS = '''\
from vllm.utils import direct_register_custom_op


def mx_my_op(x,   out):  # the vendor kernel
    out.copy_(x)


def mx_my_op_fake(
    x,
    out,  # written in place
):
    return None


direct_register_custom_op(op_name="mx_my_op", op_func=mx_my_op, fake_impl=mx_my_op_fake)
'''

PLUGIN = {
    "pyproject.toml": '''
        [project]
        name = "fixplug"
        version = "0.1"
    ''',
    "fixplug/__init__.py": "",
    "fixplug/platform.py": '''
        from vllm.attention.backends.registry import AttentionBackendEnum, register_backend


        def register_attention_backends():
            register_backend(AttentionBackendEnum.FLASH, class_path="fixplug.attention.flash.MiniFlashBackend")
    ''',
    "fixplug/attention/__init__.py": "",
}

# the exact texts after each fix (one fix applied to the text above)
IMPORT_AFTER = FLASH.replace('''from vllm.attention.backend import (
    AttentionBackend,   # the base
    is_quantized,  # moved upstream in 2.0
)
''', '''from vllm.attention.backend import (
    AttentionBackend,   # the base
)
from vllm.utils import is_quantized
''')

HOOK_AFTER = FLASH.replace('''    def get_name():   # odd spacing kept
        return  "FLASH"
''', '''    def get_name():   # odd spacing kept
        return  "FLASH"

    # Upstream FlashBackend.supports_sinks (vllm/attention/backends/flash.py:21), copied by attnlens fix: state this platform's answer
    @classmethod
    def supports_sinks(cls):
        # sinks need the 2.0 kernels
        return True
''')

FIELDS_AFTER = FLASH.replace('''    block_size: int = 16
''', '''    block_size: int = 16
    seq_lens: list | None = None
''')

OPS_AFTER_FUNC = OPS.replace("def mx_my_op(x,   out):", "def mx_my_op(x,   out,   scale: float | None = None):")
OPS_AFTER_FAKE = OPS.replace('''    out,  # written in place
):''', '''    out,  # written in place
    scale: float | None = None,
):''')


def make(tmp_path: Path) -> tuple[Workspace, UpstreamSource, UpstreamSource]:
    """(workspace of the plugin with 2.0 installed, the 1.0 source, the 2.0 source)."""
    v1, v2, root = tmp_path / "v1", tmp_path / "v2", tmp_path / "plugin"
    write_tree(v1, V1)
    write_tree(v2, V2)
    write_tree(root, PLUGIN)
    (root / "fixplug" / "attention" / "flash.py").write_text(FLASH)
    (root / "fixplug" / "ops.py").write_text(OPS)
    target = TargetInfo(python=sys.executable, sys_path=[str(v2)], stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    ws = Workspace(root, target=target, cache_dir=tmp_path / "cache")
    old = UpstreamSource(str(v1), str(v1), "1.0.0", "path", "vllm")
    new = UpstreamSource(str(v2), str(v2), "2.0.0", "path", "vllm")
    return ws, old, new
