"""Timing for the benchmark scripts: every function once per round, rounds interleaved, so that
load that comes and goes on a shared machine affects every column alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

Fn = Callable[..., Any]


def interleaved_ms(
    fns: dict[str, Fn], inputs: tuple[torch.Tensor, ...], runs: int, warmup: int = 2
) -> dict[str, list[float]]:
    """The ms of each call of each function, `runs` rounds after `warmup` calls of each."""
    for fn in fns.values():
        for _ in range(warmup):
            fn(*inputs)
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(runs):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn(*inputs)
            times[name].append(1000 * (time.perf_counter() - start))
    return times


def median_and_spread(samples: list[float]) -> tuple[float, float]:
    """The median and the spread between the quartiles."""
    q = statistics.quantiles(samples, n=4)
    return statistics.median(samples), q[2] - q[0]
