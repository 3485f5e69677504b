# SPDX-License-Identifier: Apache-2.0
"""Feature 8: decorator form WITHOUT a name.

``@SiluAndMul.register_oot`` uses ``cls.__name__`` of the class it is called
on (SiluAndMul), so this registers under "SiluAndMul".
"""

import torch

from vllm.model_executor.layers.activation import SiluAndMul


@SiluAndMul.register_oot
class TinySiluAndMul(SiluAndMul):
    def forward_oot(self, x: torch.Tensor) -> torch.Tensor:
        # No NPU kernel: reuse the upstream PyTorch implementation.
        return self.forward_native(x)
