"""Timing for the benchmark scripts, the one place that times a call.

A clock times one call of a function of no arguments: `host_ms` (the host clock around the
call), `cuda_ms` (CUDA events around the call), `synced_host_ms` (the host clock around the
call, the GPU waited for before it). `interleaved` calls every function once per round, rounds
after warm-up, so that load that comes and goes on a shared machine, or a drift of the GPU's
clocks, affects every column alike; `median_ms` times one function alone."""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import torch

Fn = Callable[..., Any]
Call = Callable[[], Any]
T = TypeVar("T")


def host_ms(fn: Call) -> float:
    """The ms of one call by the host clock (on CUDA: the launch, the GPU not waited for)."""
    start = time.perf_counter()
    fn()
    return 1000 * (time.perf_counter() - start)


def cuda_ms(fn: Call, batch: int = 1) -> float:
    """The ms per call of `batch` calls in a row, with CUDA events. One call: the GPU is idle
    before it, and the host time before its launch counts (latency); several: the GPU stays
    busy while the host queues the next ones (throughput, the kernels' own time)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(batch):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) / batch


def synced_host_ms(fn: Call) -> float:
    """The host ms of one call, the GPU waited for before it (not after)."""
    torch.cuda.synchronize()
    return host_ms(fn)


def device_ms(device: str) -> Callable[[Call], float]:
    """The clock of a call's whole time on `device`: CUDA events on CUDA, else the host clock."""
    return cuda_ms if device.startswith("cuda") else host_ms


def wall_and_host_ms(fn: Call) -> tuple[float, float]:
    """(ms of the call with the GPU waited for after it, host ms of the call alone), both by
    the host clock, the GPU idle before the call (any device: the waits do nothing on the CPU)."""
    sync()
    start = time.perf_counter()
    fn()
    host = 1000 * (time.perf_counter() - start)
    sync()
    return 1000 * (time.perf_counter() - start), host


def events_and_host_ms(fn: Call) -> tuple[float, float]:
    """(ms of the call with the GPU's tail, by CUDA events; host ms of the call alone)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    t0 = time.perf_counter()
    fn()
    host = 1000 * (time.perf_counter() - t0)
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end)), host


def sync() -> None:
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def warm_up(fns: Iterable[Call], calls: int) -> None:
    """`calls` calls of each function, then the GPU (if in use) waited for."""
    for fn in fns:
        for _ in range(calls):
            fn()
    sync()


def interleaved(
    fns: Mapping[str, Call],
    runs: int,
    warmup: int = 0,
    clock: Callable[[Call], T] = host_ms,  # type: ignore[assignment]
    alternate: bool = False,
) -> dict[str, list[T]]:
    """The `clock` samples of each function, `runs` rounds that call each once in turn, after
    `warmup` calls of each; with `alternate`, every second round in the reverse order."""
    warm_up(fns.values(), warmup)
    times: dict[str, list[T]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(runs):
        for name in reversed(names) if alternate and r % 2 else names:
            times[name].append(clock(fns[name]))
    return times


def interleaved_ms(
    fns: dict[str, Fn], inputs: tuple[torch.Tensor, ...], runs: int, warmup: int = 2
) -> dict[str, list[float]]:
    """The host ms of each call of each function on `inputs`, `runs` rounds after `warmup`
    calls of each."""
    return interleaved(bound(fns, inputs), runs, warmup)


def bound(fns: Mapping[str, Fn], args: tuple[Any, ...]) -> dict[str, Call]:
    """Each function with `args` bound: a function of no arguments, as clocks call."""
    return {name: functools.partial(fn, *args) for name, fn in fns.items()}


def median_ms(
    fn: Call, runs: int, warmup: int = 0, clock: Callable[[Call], float] = host_ms
) -> float:
    """The median `clock` ms of `runs` calls of `fn` after `warmup` calls."""
    return medians(interleaved({"fn": fn}, runs, warmup, clock))["fn"]


def medians(times: Mapping[str, Iterable[float]]) -> dict[str, float]:
    """The median of each function's samples."""
    return {name: statistics.median(ts) for name, ts in times.items()}


def median_columns(
    times: Mapping[str, Iterable[tuple[float, ...]]],
) -> dict[str, tuple[float, ...]]:
    """The median of each column of each function's samples (a clock that measures several
    things per call)."""
    return {
        name: tuple(statistics.median(column) for column in zip(*ts, strict=True))
        for name, ts in times.items()
    }


def median_and_spread(samples: list[float]) -> tuple[float, float]:
    """The median and the spread between the quartiles."""
    q = statistics.quantiles(samples, n=4)
    return statistics.median(samples), q[2] - q[0]
