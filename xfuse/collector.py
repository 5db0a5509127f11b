"""Python's cycle collector, paused around work that makes many objects that outlive it."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cycle collector off for the duration; on again after, unless it was off before.

    Compiling and fusing make hundreds of thousands of IR objects that live to the end of the
    work, and each collection would walk them all again. Reference counting still frees what
    the work drops; cyclic garbage made meanwhile is collected once the collector is back on."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
