"""Garbage-collector policy for an analysis that keeps ~10^5-10^6 long-lived objects.

The index holds module summaries (dataclasses, tuples, strings) that live as long as the
process and contain no reference cycles. CPython's cyclic collector still walks all of them
on every full (generation 2) collection: with the real vLLM-MetaX checkout and vLLM
installed that is 70-80 ms, and it fires at arbitrary moments, so it showed up as 160 ms
spikes in the diagnostics-after-an-edit benchmark and as 0.5 s of a 3 s cold
``attnlens check`` (docs/performance.md). Reference counting frees almost everything here;
the cyclic collector finds next to nothing (the peak RSS of a cold check is the same with it
off).

Two tools, both standard practice for large long-lived Python heaps:

* :func:`settle` for the language server: after indexing (and after a background refresh
  that left many new long-lived objects) collect once, then ``gc.freeze()`` the survivors
  into the permanent generation, so later collections only walk objects created since.
  Unfreezing first lets cycles among previously frozen objects be reclaimed, so nothing
  accumulates.
* :func:`batch` for one-shot CLI commands: the collector is paused for the command (a
  command's lifetime is bounded; its peak memory is measured equal) and stays off until the
  process exits.
"""

from __future__ import annotations

import contextlib
import gc
import time


def settle(min_unfrozen: int = 0) -> float | None:
    """Collect once and freeze the survivors; returns the seconds it took. With ``min_unfrozen``,
    only when at least that many tracked objects were created since the last freeze (counting
    them is cheap after a freeze: frozen objects are not listed); None when skipped."""
    if min_unfrozen and len(gc.get_objects()) < min_unfrozen:
        return None
    t0 = time.perf_counter()
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return time.perf_counter() - t0


@contextlib.contextmanager
def paused():
    """No collection while a burst of long-lived objects is built (an editor buffer's summary): what was
    made meanwhile is then frozen, so the next young collection does not walk all of it (11-18 ms pauses,
    holding the GIL, measured after a 5,000-line buffer's summary). The young garbage is collected first
    (cheap), so what is frozen is alive; such objects hold no cycles, and the next :func:`settle` unfreezes
    them anyway."""
    was = gc.isenabled()
    if was:
        gc.collect(1)  # the young garbage first (bounded by the thresholds: a millisecond), or it is frozen too
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.enable()


# Set by a process that owns its collector's policy and calls :func:`settle` from time to time (the language
# server): :func:`loading` then freezes what it read. Elsewhere (tests, scripts using the library) a freeze would
# keep for good whatever it caught, garbage cycles included.
FREEZE_AFTER_LOADS = False


@contextlib.contextmanager
def loading():
    """No collection while a burst of long-lived objects is read (a summary read back from the cache folder);
    with ``FREEZE_AFTER_LOADS``, what was made is frozen after it, without a collection first (a young
    collection per read-back would cost a millisecond each). Unfrozen, every summary read back made the next
    full collections walk it: a server on upstream vLLM that read back a few thousand summaries spent twice as
    long on its background work. The next :func:`settle` unfreezes them."""
    was = gc.isenabled()
    if was:
        gc.disable()
    try:
        yield
    finally:
        if was:
            if FREEZE_AFTER_LOADS:
                gc.freeze()
            gc.enable()


def freeze_young() -> None:
    """Move every tracked object into the permanent generation without collecting (constant time):
    while the server loads thousands of summaries, a full collection would walk all of them
    (measured: a 0.67 s indexing step on upstream vLLM, which a hover then waited behind). The next
    :func:`settle` unfreezes, collects once and freezes again, so nothing is lost for good."""
    gc.freeze()


@contextlib.contextmanager
def batch(restore: bool = True):
    """Pause the cyclic collector for a bounded batch of analysis. ``restore``: switch it back
    on afterwards; a process about to exit passes False, because the first collection after
    re-enabling walks every object allocated during the batch (the whole index)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was and restore:
            gc.enable()
