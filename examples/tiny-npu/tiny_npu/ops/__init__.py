# SPDX-License-Identifier: Apache-2.0
"""Device ops: Triton kernels (kernels.py), the ops singleton (device.py),
the KV-cache writers (cache.py) and the torch.library op tiny::rope (rope.py)."""
