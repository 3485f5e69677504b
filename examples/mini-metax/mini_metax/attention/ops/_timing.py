# SPDX-License-Identifier: Apache-2.0
"""Optional wall-clock tracing for Mini attention ops (MINI_TRACE_OPS=1)."""

import functools
import os
import time

from vllm.logger import init_logger

logger = init_logger(__name__)

_TRACE = os.environ.get("MINI_TRACE_OPS", "0") == "1"


def _timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _TRACE:
            return fn(*args, **kwargs)
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        logger.debug("%s took %.3f ms", fn.__qualname__, (time.perf_counter() - start) * 1e3)
        return result

    return wrapper
