# SPDX-License-Identifier: Apache-2.0
"""Placeholders for upstream kernels the Mini GPU does not provide.

Backends copied from upstream keep their call sites; these stand-ins make the
calls harmless (or loud) instead of failing at import time.
"""

from vllm.logger import init_logger

logger = init_logger(__name__)


class _DummyOps:
    def get_scheduler_metadata(self, *args, **kwargs):
        # FA3 ahead-of-time scheduling has no Mini equivalent.
        logger.warning_once("get_scheduler_metadata is not supported on Mini; returning None")
        return None

    def flash_mla_with_kvcache(self, *args, **kwargs):
        logger.warning_once("flash_mla_with_kvcache is not supported on Mini; returning None")
        return None

    def cp_gather_cache(self, *args, **kwargs):
        raise NotImplementedError("cp_gather_cache is not implemented for Mini")


dummy_ops = _DummyOps()
