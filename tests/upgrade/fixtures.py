"""Two versions of a fake upstream package (`fakevllm`) and a plugin (`miniplug`) written against v1."""

from __future__ import annotations

import sys
from pathlib import Path

from attnlens.target import TargetInfo
from attnlens.upgrade.upstream import UpstreamSource
from attnlens.workspace import Workspace

from ..helpers import write_tree

COMMON = {
    "fakevllm/__init__.py": "",
    "fakevllm/attention/__init__.py": "",
    "fakevllm/attention/backends/__init__.py": "",
    "fakevllm/attention/backends/registry.py": '''
        import enum


        class AttentionBackendEnum(enum.Enum):
            FLASH = "fakevllm.attention.backends.flash.FlashBackend"
            OTHER = "fakevllm.attention.backends.other.OtherBackend"


        def register_backend(backend, class_path=None):
            def deco(cls):
                return cls
            return deco
    ''',
}

V1 = dict(COMMON, **{
    "fakevllm-1.0.0.dist-info/METADATA": "Name: fakevllm\nVersion: 1.0.0\n",
    "fakevllm/ops.py": '''
        def kernel_call(a, b):
            return a
    ''',
    "fakevllm/attention/backend.py": '''
        class AttentionBackend:
            @staticmethod
            def get_name():
                raise NotImplementedError

            @classmethod
            def supports_head_size(cls, head_size):
                return True


        class AttentionImpl:
            def forward(self, q, k, v):
                raise NotImplementedError


        class AttentionMetadataBuilder:
            def build(self, common_prefix_len, common_attn_metadata):
                raise NotImplementedError
    ''',
    "fakevllm/attention/backends/flash.py": '''
        from dataclasses import dataclass

        from fakevllm.attention.backend import AttentionBackend, AttentionImpl, AttentionMetadataBuilder


        @dataclass
        class FlashMetadata:
            num_tokens: int
            max_len: int


        class FlashBackend(AttentionBackend):
            @staticmethod
            def get_name():
                return "FLASH"

            @staticmethod
            def get_impl_cls():
                return FlashImpl

            @staticmethod
            def get_builder_cls():
                return FlashBuilder


        class FlashBuilder(AttentionMetadataBuilder):
            def build(self, common_prefix_len, common_attn_metadata):
                return FlashMetadata(common_attn_metadata.num_tokens, common_attn_metadata.max_len)


        class FlashImpl(AttentionImpl):
            def forward(self, q, k, v):
                return helper(q)

            def scale(self):
                factor = 1.0
                return factor * 2


        def helper(x):
            return x + 1


        def old_util(x):
            return x


        def stable(x):
            return x * 3
    ''',
    "fakevllm/attention/backends/other.py": '''
        from fakevllm.attention.backend import AttentionBackend


        class OtherBackend(AttentionBackend):
            @staticmethod
            def get_name():
                return "OTHER"
    ''',
})

V2 = dict(COMMON, **{
    "fakevllm-2.0.0.dist-info/METADATA": "Name: fakevllm\nVersion: 2.0.0\n",
    "fakevllm/ops.py": '''
        def kernel_call(a, b, c):
            return a + c
    ''',
    "fakevllm/attention/backend.py": '''
        class AttentionBackend:
            @staticmethod
            def get_name():
                raise NotImplementedError

            @classmethod
            def supports_head_size(cls, head_size):
                return True

            @classmethod
            def supports_sinks(cls):
                return False


        class AttentionImpl:
            def forward(self, q, k, v, sinks=None):
                raise NotImplementedError


        class AttentionMetadataBuilder:
            def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
                raise NotImplementedError
    ''',
    "fakevllm/attention/backends/flash.py": '''
        from dataclasses import dataclass

        from fakevllm.attention.backend import AttentionBackend, AttentionImpl, AttentionMetadataBuilder


        @dataclass
        class FlashMetadata:
            num_tokens: int
            max_len: int
            seq_lens: list | None = None


        class FlashBackend(AttentionBackend):
            @staticmethod
            def get_name():
                return "FLASH"

            @staticmethod
            def get_impl_cls():
                return FlashImpl

            @staticmethod
            def get_builder_cls():
                return FlashBuilder

            @classmethod
            def supports_sinks(cls):
                return True


        class FlashBuilder(AttentionMetadataBuilder):
            def build(self, common_prefix_len, common_attn_metadata, fast_build: bool = False):
                return FlashMetadata(common_attn_metadata.num_tokens, common_attn_metadata.max_len)


        class FlashImpl(AttentionImpl):
            def forward(self, q, k, v, sinks=None):
                return helper(q)

            def softmax_scale(self):
                factor = 1.0
                return factor * 2


        def helper(x):
            y = x + 1
            return y


        def stable(x):
            return x * 3
    ''',
    "fakevllm/attention/backends/other.py": '''
        from fakevllm.attention.backend import AttentionBackend


        class OtherBackend(AttentionBackend):
            @staticmethod
            def get_name():
                return "OTHER"

            @classmethod
            def supports_sinks(cls):
                return True
    ''',
})

PLUGIN = {
    "pyproject.toml": '''
        [project]
        name = "miniplug"
        version = "0.1"

        [tool.attnlens.upgrade]
        upstream-package = "fakevllm"
    ''',
    "miniplug/__init__.py": "",
    "miniplug/platform.py": '''
        from fakevllm.attention.backends.registry import AttentionBackendEnum, register_backend


        def register_attention_backends():
            register_backend(AttentionBackendEnum.FLASH, class_path="miniplug.attention.backends.flash.MacaFlashBackend")
    ''',
    "miniplug/attention/__init__.py": "",
    "miniplug/attention/ops/__init__.py": "",
    "miniplug/attention/backends/__init__.py": "",
    "miniplug/attention/backends/unused.py": '''
        def never_called(x):
            return x
    ''',
    "miniplug/attention/backends/flash.py": '''
        from dataclasses import dataclass

        from fakevllm import ops
        from fakevllm.attention.backend import AttentionBackend, AttentionImpl, AttentionMetadataBuilder
        from fakevllm.attention.backends.flash import old_util as upstream_old_util


        @dataclass
        class FlashMetadata:
            num_tokens: int
            max_len: int


        class MacaFlashBackend(AttentionBackend):
            @staticmethod
            def get_name():
                return "FLASH"

            @staticmethod
            def get_impl_cls():
                return FlashImpl

            @staticmethod
            def get_builder_cls():
                return FlashBuilder


        class FlashBuilder(AttentionMetadataBuilder):
            def build(self, common_prefix_len, common_attn_metadata):
                return FlashMetadata(common_attn_metadata.num_tokens, common_attn_metadata.max_len)


        class FlashImpl(AttentionImpl):
            def forward(self, q, k, v, sinks=None):
                # Metax Modification: the maca kernel needs a contiguous query
                q = q.contiguous()
                return helper(q)

            def scale(self):
                factor = 1.0
                return factor * 2


        def helper(x):
            return x + 1


        def old_util(x):
            return upstream_old_util(x)


        def stable(x):
            return x * 3


        def plugin_only(x):
            return ops.kernel_call(helper(x), 2)
    ''',
}


def make(tmp_path: Path) -> tuple[Workspace, UpstreamSource, UpstreamSource]:
    """(workspace of the plugin against v2 as the installed upstream, v1 source, v2 source)."""
    v1 = tmp_path / "v1"
    v2 = tmp_path / "v2"
    root = tmp_path / "plugin"
    write_tree(v1, V1)
    write_tree(v2, V2)
    write_tree(root, PLUGIN)
    target = TargetInfo(python=sys.executable, sys_path=[str(v2)], stdlib=sorted(getattr(sys, "stdlib_module_names", ())))
    ws = Workspace(root, target=target, cache_dir=tmp_path / "cache")
    old = UpstreamSource(str(v1), str(v1), "1.0.0", "path", "fakevllm")
    new = UpstreamSource(str(v2), str(v2), "2.0.0", "path", "fakevllm")
    return ws, old, new
