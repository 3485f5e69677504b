# SPDX-License-Identifier: Apache-2.0
"""tiny_npu: a second AttnLens example plugin, for the made-up "Tiny" NPU.

The Tiny NPU is an out-of-tree PrivateUse1 device named "npu". Its native
kernels live in the extension ``tiny_npu._tiny_C`` (built from ``csrc/``,
absent from the source tree); the rest is Triton and plain PyTorch.
"""


def register() -> str:
    # Feature 1: `vllm.platform_plugins` entry point; vLLM imports this path lazily.
    return "tiny_npu.platform.TinyNpuPlatform"


def register_ops() -> None:
    # Feature 1: `vllm.general_plugins` entry point; each import has a side effect.
    import tiny_npu.compat  # noqa: F401  feature 9: builtins.__import__ hook
    import tiny_npu.ops.rope  # noqa: F401  feature 7: torch.library op tiny::rope
    import tiny_npu.layers  # noqa: F401  feature 8: CustomOp.register_oot
    import tiny_npu.patches  # noqa: F401  feature 10: FlashAttentionImpl patch
    import tiny_npu.attention.custom  # noqa: F401  feature 2: broken register_backend
