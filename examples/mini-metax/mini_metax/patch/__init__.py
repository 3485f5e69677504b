# SPDX-License-Identifier: Apache-2.0
"""Importing this package applies every patch below, once, at import time."""

from mini_metax.patch import attention  # noqa: F401
