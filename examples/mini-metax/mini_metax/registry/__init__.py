# SPDX-License-Identifier: Apache-2.0
"""Out-of-tree CustomOp replacements; imported by mini_metax.register_ops()."""
