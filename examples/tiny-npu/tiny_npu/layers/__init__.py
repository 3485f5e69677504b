# SPDX-License-Identifier: Apache-2.0
"""Feature 8: out-of-tree CustomOp replacements.

* CALL form, in a loop over a literal dict: RMSNorm -> TinyRMSNorm and
  RotaryEmbedding -> TinyRotaryEmbedding (names given explicitly).
* Decorator form without a name: see activation.py (registers "SiluAndMul").
"""

from vllm.model_executor.custom_op import CustomOp

from tiny_npu.layers.activation import TinySiluAndMul  # noqa: F401  (registers on import)
from tiny_npu.layers.rms_norm import TinyRMSNorm
from tiny_npu.layers.rotary import TinyRotaryEmbedding

for name, op_cls in {"RMSNorm": TinyRMSNorm, "RotaryEmbedding": TinyRotaryEmbedding}.items():
    CustomOp.register_oot(_decorated_op_cls=op_cls, name=name)
