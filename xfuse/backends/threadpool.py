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
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import torch

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


OVERSUBSCRIBED_LOAD = 2.0
"""The machine counts as oversubscribed while its one-minute load average exceeds this many
runnable threads per CPU. Kernels then keep off OpenMP threads: libgomp's threads spin while
they wait (for the next parallel region, and at its closing barrier for a team thread that has
no core), which, when the cores are taken, costs whole scheduler time slices per launch (torch's
own operators pay them too); the Python pool's threads sleep instead."""

LOAD_CHECK_SECONDS = 1.0
"""How long a reading of the load average is used before it is read again."""


def openmp_setting() -> str:
    """`XFUSE_OPENMP`: "0" (never OpenMP threads), "1" (always, where the process has them),
    else "auto" (OpenMP threads unless the machine is oversubscribed)."""
    value = os.environ.get("XFUSE_OPENMP", "auto")
    return value if value in ("0", "1") else "auto"


def openmp_enabled() -> bool:
    """Whether kernels may run on torch's OpenMP threads (`xfuse.backends.openmp`): where the
    process has them, unless `XFUSE_OPENMP=0`."""
    return openmp_setting() != "0" and openmp_parallel_address() is not None


_forked_child = False
"""Whether this process is a fork of one that imported xfuse: OpenMP's threads (and the Python
pool's) do not exist in a child, and libgomp would wait for them, so kernels keep off OpenMP
threads there and the pool starts new threads. The thread count still follows torch's there
(`torch_thread_count`): reading it reads OpenMP's setting and starts no thread, and a child
that calls `torch.set_num_threads(1)` (as DataLoader's workers do) keeps kernels on the caller."""


@cache
def available_cpus() -> int:
    """The CPUs this process may run on (read once per process: a system call)."""
    return max(1, len(os.sched_getaffinity(0)))


def _after_fork_in_child() -> None:
    global _forked_child
    _forked_child = True
    available_cpus.cache_clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class LoadWatch:
    """Whether the machine is oversubscribed (`OVERSUBSCRIBED_LOAD`), read at most once per
    `LOAD_CHECK_SECONDS`."""

    def __init__(
        self,
        read: Callable[[], float] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read if read is not None else _one_minute_load
        self._clock = clock
        self._checked = -float("inf")
        self._oversubscribed = False

    def oversubscribed(self) -> bool:
        now = self._clock()
        if now - self._checked >= LOAD_CHECK_SECONDS:
            self._checked = now
            self._oversubscribed = self._read() > OVERSUBSCRIBED_LOAD * (os.cpu_count() or 1)
        return self._oversubscribed


def _one_minute_load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def configured_thread_count() -> int | None:
    """`XFUSE_NUM_THREADS`, or None where it is not set."""
    configured = os.environ.get("XFUSE_NUM_THREADS")
    return max(1, int(configured)) if configured else None


def torch_thread_count() -> int:
    """The threads torch's own CPU operators use now (`torch.set_num_threads`), at most the
    CPUs this process may run on: read at each launch that may go parallel (a call into
    torch, no system call)."""
    return min(torch.get_num_threads(), available_cpus())  # each at least 1


def split_range(extent: int, parts: int) -> list[tuple[int, int]]:
    """[0, extent) as at most `parts` contiguous, non-empty chunks of near-equal size."""
    parts = max(1, min(parts, extent))
    bounds = [extent * i // parts for i in range(parts + 1)]
    return [(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False) if hi > lo]


class RangePool:
    """Runs a range function over [0, extent) on up to `threads` threads (the caller is one;
    None: `XFUSE_NUM_THREADS` where set, else as many as torch's own operators use, read at
    each launch, so that after `torch.set_num_threads(1)` kernels run on the caller alone).
    `openmp`: kernels that have an OpenMP entry may run on torch's OpenMP threads instead (the
    same chunks; None: `openmp_enabled()`), which they do unless `follow_load` and the machine
    is oversubscribed (`LoadWatch`; None: unless `XFUSE_OPENMP=1`). `min_work`: less work runs
    on the caller alone (None: `OPENMP_MIN_WORK` on OpenMP threads, else `DEFAULT_MIN_WORK`)."""

    def __init__(
        self,
        threads: int | None = None,
        min_work: int | None = None,
        openmp: bool | None = None,
        follow_load: bool | None = None,
    ) -> None:
        self.fixed_threads = threads if threads is not None else configured_thread_count()
        """The thread count, or None: torch's at each launch (`torch_thread_count`)."""
        self.openmp = openmp_enabled() if openmp is None else openmp
        if follow_load is None:
            follow_load = openmp is None and openmp_setting() == "auto"
        self.follow_load = follow_load
        self.min_work = min_work
        self.load = LoadWatch()
        self._executor: ThreadPoolExecutor | None = None
        self._executor_pid = 0
        self._lock = threading.Lock()

    @property
    def threads(self) -> int:
        """How many threads a range runs on now (the caller is one)."""
        return self.fixed_threads if self.fixed_threads is not None else torch_thread_count()

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is not None and self._executor_pid != os.getpid():
            self._executor, self._lock = None, threading.Lock()  # made before a fork
        with self._lock:
            if self._executor is None:
                most = self.fixed_threads if self.fixed_threads is not None else available_cpus()
                self._executor = ThreadPoolExecutor(
                    max_workers=max(1, most - 1), thread_name_prefix="xfuse-cpu"
                )
                self._executor_pid = os.getpid()
            return self._executor

    def on_openmp(self) -> bool:
        """Whether a kernel with an OpenMP entry runs on OpenMP threads now."""
        if not self.openmp or _forked_child:
            return False
        return not (self.follow_load and self.load.oversubscribed())

    @property
    def inline_below(self) -> int | float:
        """Work under which every kernel runs on the caller, on OpenMP threads or not (the
        launch's fast path: no thread or load decision to make). Where the count follows
        torch's, larger work reads it at each launch (`plan`)."""
        if self.fixed_threads is not None and self.fixed_threads <= 1:
            return float("inf")
        return min(self.min_work_for(True), self.min_work_for(False))

    def min_work_for(self, openmp: bool) -> int:
        """Elements of work from which a kernel runs on threads (OpenMP's or the pool's)."""
        if self.min_work is not None:
            return self.min_work
        return OPENMP_MIN_WORK if openmp else DEFAULT_MIN_WORK

    def plan(self, extent: int, work: int, openmp: bool = False) -> tuple[int, int] | None:
        """How a range of `extent` with `work` elements runs (`openmp`: on OpenMP threads):
        None as one call on the calling thread over all of [0, extent) (a non-empty range too
        small, or too short, to be worth other threads), else `(threads, chunks)`: one chunk
        per thread, `CHUNKS_PER_THREAD` per thread for large work. Reads `threads` once."""
        threads = self.fixed_threads
        if threads is None:
            threads = torch_thread_count()
        if extent > 0 and (threads <= 1 or extent == 1 or work < self.min_work_for(openmp)):
            return None
        parts = threads
        if work >= self.min_work_for(openmp) * BALANCE_FACTOR:
            parts *= CHUNKS_PER_THREAD
        return threads, max(1, min(parts, extent))

    def run(self, function: RangeFunction, extent: int, work: int) -> None:
        """Call `function(lo, hi)` on chunks covering [0, extent) exactly once each."""
        if extent <= 0:
            return
        plan = self.plan(extent, work)
        if plan is None:
            function(0, extent)
            return
        threads, count = plan
        chunks = _Chunks(split_range(extent, count), function)
        pool = self._pool()
        for _ in range(min(threads, len(chunks.chunks)) - 1):
            pool.submit(chunks.drain)
        chunks.drain()
        chunks.wait()

    def shutdown(self) -> None:
        with self._lock:
            if self._executor is not None:
                self._executor.shutdown(wait=True)
                self._executor = None


class _Chunks:
    """Chunks that threads take one at a time until none is left (so that a thread slowed
    down by other work on the machine holds up the others less). The caller takes chunks too
    and then waits only for the chunks other threads have taken: a pool thread that starts
    late, when none is left, costs the caller nothing."""

    def __init__(self, chunks: list[tuple[int, int]], function: RangeFunction) -> None:
        self.chunks = chunks
        self._remaining = iter(chunks)
        self._function = function
        self._running = 0
        self._error: BaseException | None = None
        self._idle = threading.Condition()

    def drain(self) -> None:
        while True:
            with self._idle:
                chunk = next(self._remaining, None)
                if chunk is None or self._error is not None:
                    return
                self._running += 1
            try:
                self._function(*chunk)
            except BaseException as error:  # re-raised on the caller's thread
                with self._idle:
                    self._error = self._error or error
            finally:
                with self._idle:
                    self._running -= 1
                    if self._running == 0:
                        self._idle.notify_all()

    def wait(self) -> None:
        """Until no taken chunk is running; re-raises the first error of any thread."""
        with self._idle:
            while self._running:
                self._idle.wait()
            if self._error is not None:
                raise self._error


_shared: RangePool | None = None
_shared_lock = threading.Lock()


def shared_pool() -> RangePool:
    """The process-wide pool that kernels use unless given their own."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = RangePool()
        return _shared
