"""
Progress of long compilations, on the terminal.

    with Progress.create(quiet) as progress:
        progress.stage("imported 1234 ops")     # replaces the status line
        progress.count("kernels compiled")      # 1, 2, 3, ... (redrawn at most every 0.1 s)
        progress.lap("export")                  # a phase ends: its seconds in `phases`
        progress.finish("1234 ops -> 56 groups -> 60 kernels")  # the line that stays,
                                                # with the total and each phase's seconds

On a terminal (stderr is a TTY) one status line is redrawn in place. It is quiet when stderr
is not a TTY, when `XFUSE_QUIET` is set (to anything but 0), or with `quiet=True`; `quiet=False`
asks for progress even off a terminal, written as plain lines (stages and the last line only).
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import TextIO

ENV_QUIET = "XFUSE_QUIET"
PREFIX = "xfuse: "
CLEAR_LINE = "\r\x1b[K"


def env_quiet() -> bool:
    return os.environ.get(ENV_QUIET, "") not in ("", "0")


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


@dataclass
class Progress:
    """Stages and counters of one piece of work, shown on `stream` when `enabled`. `live`
    redraws one line in place (a terminal); otherwise stages are lines of their own."""

    stream: TextIO
    enabled: bool
    live: bool
    min_interval: float = 0.1
    started: float = field(default_factory=time.perf_counter)
    counts: dict[str, int] = field(default_factory=dict[str, int])
    phases: dict[str, float] = field(default_factory=dict[str, float])
    """Seconds of each phase of the work, in order (`lap`), quiet or not."""
    _lap_at: float = field(default=0.0, init=False)
    _drawn_at: float = field(default=-1.0, init=False)
    _open_line: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self._lap_at = self.started

    @classmethod
    def create(cls, quiet: bool | None = None, stream: TextIO | None = None) -> Progress:
        """Progress on `stream` (stderr): automatic with `quiet=None` (shown on a terminal
        unless `XFUSE_QUIET` is set), never with True, always with False."""
        out = sys.stderr if stream is None else stream
        terminal = is_terminal(out)
        enabled = (terminal and not env_quiet()) if quiet is None else not quiet
        return cls(out, enabled, live=terminal)

    @classmethod
    def silent(cls) -> Progress:
        return cls(sys.stderr, enabled=False, live=False)

    def stage(self, text: str) -> None:
        """A new stage of the work: always drawn."""
        self._draw(text, force=True)

    def lap(self, phase: str) -> float:
        """End `phase`, begun at the last `lap` (or at the start): its seconds are kept in
        `phases`, and the last line shows them. Returns them."""
        now = time.perf_counter()
        seconds = now - self._lap_at
        self.phases[phase] = self.phases.get(phase, 0.0) + seconds
        self._lap_at = now
        return seconds

    def count(self, what: str, step: int = 1) -> int:
        """Add `step` to the counter `what` and show it (throttled); returns the new count."""
        n = self.counts.get(what, 0) + step
        self.counts[what] = n
        if self.live:
            self._draw(f"{what}: {n}", force=False)
        return n

    def finish(self, text: str) -> None:
        """The last line, with the time taken; it stays on the terminal."""
        if not self.enabled:
            return
        laps = "".join(f", {name} {t:.1f}" for name, t in self.phases.items())
        line = f"{PREFIX}{text} ({time.perf_counter() - self.started:.1f} s{laps})"
        self._write((CLEAR_LINE if self.live else "") + line + "\n")
        self._open_line = False

    def clear(self) -> None:
        """Remove an unfinished status line (the work failed or was interrupted)."""
        if self.enabled and self.live and self._open_line:
            self._write(CLEAR_LINE)
            self._open_line = False

    def _draw(self, text: str, force: bool) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self._drawn_at < self.min_interval:
            return
        self._drawn_at = now
        if self.live:
            self._write(f"{CLEAR_LINE}{PREFIX}{text}")
            self._open_line = True
        else:
            self._write(f"{PREFIX}{text}\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.clear()
