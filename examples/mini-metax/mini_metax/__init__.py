# SPDX-License-Identifier: Apache-2.0
"""mini_metax: an example vLLM platform plugin for the Mini GPU.

vLLM finds two entry points in pyproject.toml:

* ``vllm.platform_plugins``: ``register()`` returns the qualified name of the
  platform class; vLLM resolves it lazily.
* ``vllm.general_plugins``: ``register_ops()`` runs in every process and
  installs the monkey patches and the out-of-tree CustomOps.
"""


def register():
    return "mini_metax.platform.MiniPlatform"


def register_ops():
    import mini_metax.patch  # noqa: F401  (rebinds upstream attributes)
    import mini_metax.registry.sparse_indexer  # noqa: F401  (CustomOp.register_oot)
