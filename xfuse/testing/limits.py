"""A time limit for one program under test (a hang is a failure too)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from xfuse.errors import XfuseError


class ProgramTimeout(XfuseError):
    """A program under test ran past its time limit."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    """Raise `ProgramTimeout` in the block after `seconds` (SIGALRM: in the main thread of a
    platform that has it; elsewhere the block runs without a limit)."""
    if not hasattr(signal, "SIGALRM") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise ProgramTimeout(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
