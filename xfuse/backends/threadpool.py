"""
Parallel execution of CPU kernels: a kernel `k(lo, hi, ptrs...)` runs its outermost parallel
loop over `[lo, hi)`, so the range `[0, extent)` is cut into one contiguous chunk per thread (a
few per thread for large kernels, taken dynamically) and the chunks run on threads. Where the
process has torch's OpenMP runtime, a kernel's own entry runs them on its threads
(`xfuse.backends.openmp`: one foreign call, no Python per chunk); else on a shared Python
pool, where ctypes releases the GIL during each foreign call, so the chunks really run at the
same time. Small kernels (less work than `min_work` elements) run on the calling thread:
waking threads costs more than they save.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from xfuse.backends.openmp import openmp_parallel_address

DEFAULT_MIN_WORK = 1 << 20
"""Elements (inputs plus outputs) below which a kernel runs single-threaded on the Python
pool (waking a pool thread costs tens of microseconds, and its chunks cost a foreign call each)."""

OPENMP_MIN_WORK = 1 << 16
"""The same on OpenMP threads, which start at once when torch's last operator left them
spinning (torch's own operators go parallel from 32768 elements, `at::internal::GRAIN_SIZE`)."""

CHUNKS_PER_THREAD = 4
"""Large kernels are cut into this many chunks per thread, taken dynamically (load balance)."""

BALANCE_FACTOR = 64
"""Kernels with at least `min_work * BALANCE_FACTOR` elements are cut into `CHUNKS_PER_THREAD`
chunks per thread; smaller ones into one chunk per thread (each chunk costs a foreign call)."""

RangeFunction = Callable[[int, int], None]


def openmp_enabled() -> bool:
    """Whether kernels run on torch's OpenMP threads (`xfuse.backends.openmp`): where the
    process has them, unless `XFUSE_OPENMP=0`."""
    return os.environ.get("XFUSE_OPENMP") != "0" and openmp_parallel_address() is not None


def default_thread_count() -> int:
    """`XFUSE_NUM_THREADS`, else the CPUs this process may run on."""
    configured = os.environ.get("XFUSE_NUM_THREADS")
    if configured:
        return max(1, int(configured))
    return max(1, len(os.sched_getaffinity(0)))


def split_range(extent: int, parts: int) -> list[tuple[int, int]]:
    """[0, extent) as at most `parts` contiguous, non-empty chunks of near-equal size."""
    parts = max(1, min(parts, extent))
    bounds = [extent * i // parts for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


class RangePool:
    """Runs a range function over [0, extent) on up to `threads` threads (the caller is one).
    `openmp`: kernels that have an OpenMP entry run on torch's OpenMP threads instead (the
    same chunks; None: `openmp_enabled()`). `min_work` (None: `OPENMP_MIN_WORK` on OpenMP
    threads, else `DEFAULT_MIN_WORK`): less work runs on the caller alone."""

    def __init__(
        self,
        threads: int | None = None,
        min_work: int | None = None,
        openmp: bool | None = None,
    ) -> None:
        self.threads = threads if threads is not None else default_thread_count()
        self.openmp = openmp_enabled() if openmp is None else openmp
        if min_work is None:
            min_work = OPENMP_MIN_WORK if self.openmp else DEFAULT_MIN_WORK
        self.min_work = min_work
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=max(1, self.threads - 1), thread_name_prefix="xfuse-cpu"
                )
            return self._executor

    def runs_inline(self, extent: int, work: int) -> bool:
        """Whether `run` calls the function once, on the calling thread, over all of [0,
        extent) (a non-empty range too small, or too short, to be worth other threads)."""
        return extent > 0 and (self.threads <= 1 or extent == 1 or work < self.min_work)

    def chunk_count(self, extent: int, work: int) -> int:
        """How many chunks a range of `extent` with `work` elements is cut into when it runs
        on threads: one per thread, `CHUNKS_PER_THREAD` per thread for large work."""
        parts = self.threads
        if work >= self.min_work * BALANCE_FACTOR:
            parts *= CHUNKS_PER_THREAD
        return max(1, min(parts, extent))

    def run(self, function: RangeFunction, extent: int, work: int) -> None:
        """Call `function(lo, hi)` on chunks covering [0, extent) exactly once each."""
        if extent <= 0:
            return
        if self.runs_inline(extent, work):
            function(0, extent)
            return
        chunks = split_range(extent, self.chunk_count(extent, work))
        if len(chunks) <= self.threads:
            pool = self._pool()
            futures = [pool.submit(function, lo, hi) for lo, hi in chunks[1:]]
            try:
                function(*chunks[0])
            finally:
                for future in futures:
                    future.result()
            return
        # More chunks than threads: each thread takes the next chunk when it is done with one
        # (next() on a shared iterator is atomic under the GIL), so that a thread slowed down by
        # other work on the machine does not hold up the others.
        remaining = iter(chunks)

        def drain() -> None:
            for lo, hi in remaining:
                function(lo, hi)

        pool = self._pool()
        futures = [pool.submit(drain) for _ in range(self.threads - 1)]
        try:
            drain()
        finally:
            for future in futures:
                future.result()

    def shutdown(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


_shared: RangePool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> RangePool:
    """The process-wide pool that kernels use unless given their own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RangePool()
        return _shared
