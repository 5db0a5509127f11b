"""CPU kernels on torch's OpenMP threads (`xfuse.backends.openmp`): the `k.parallel` entry
covers the range exactly once, for any thread and chunk count, and the pool picks it."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator

import pytest
import torch

from tests.backends.test_cpu import gelu_sigmoid, row_sum_kernel, unary_f32
from tests.backends.test_cpu_symbolic import SOFTMAX
from xfuse.backends.cpu import CPUBackend, CPUKernel
from xfuse.backends.openmp import openmp_parallel_address
from xfuse.backends.threadpool import (
    BALANCE_FACTOR,
    CHUNKS_PER_THREAD,
    OVERSUBSCRIBED_LOAD,
    LoadWatch,
    RangePool,
    openmp_enabled,
    openmp_setting,
)
from xfuse.ir.context import parse
from xfuse.ir.functions import kernel_functions
from xfuse.pipeline import pipeline

needs_openmp = pytest.mark.skipif(
    openmp_parallel_address() is None, reason="this torch has no OpenMP runtime"
)


def build(pool: RangePool, text: str, name: str) -> CPUKernel:
    backend = CPUBackend(pool=pool)
    return backend.load(backend.compile(parse(text), name), name)


@needs_openmp
def test_the_artifact_has_an_openmp_entry() -> None:
    backend = CPUBackend(pool=RangePool(threads=1))
    assert backend.openmp and backend.target.endswith("+openmp")
    ir = str(backend.optimized(parse(unary_f32("math.sqrt", 100)), "k"))
    assert "define void @k.parallel(i64 %.1, i64 %.2, ptr %.3, ptr %.4)" in ir
    assert "call void @GOMP_parallel(ptr nonnull @k.chunks" in ir
    assert "atomicrmw add" in ir
    kernel_ = build(RangePool(threads=1), unary_f32("math.sqrt", 100), "k")
    assert kernel_.parallel is not None


@needs_openmp
@pytest.mark.parametrize(("threads", "chunks"), [(1, 1), (2, 2), (2, 8), (3, 7), (4, 515)])
def test_the_openmp_entry_covers_the_range_once(threads: int, chunks: int) -> None:
    kernel_ = build(RangePool(threads=1), gelu_sigmoid(515, 256), "gelu_sigmoid")
    x, w, b = torch.randn(515, 256), torch.randn(256), torch.randn(256)
    single, parallel = torch.empty(515, 256), torch.full((515, 256), float("nan"))
    kernel_([x, w, b, single])
    assert kernel_.parallel is not None
    pointers = [t.data_ptr() for t in (x, w, b, parallel)]
    kernel_.parallel(threads, chunks, *pointers)
    assert torch.equal(single, parallel)


def sized_softmax(pool: RangePool) -> CPUKernel:
    """The softmax kernel of `test_cpu_symbolic` (sizes s0 rows, s1 columns) on `pool`."""
    module = pipeline("fuse-greedy,lower-to-loops")(parse(SOFTMAX))
    (kernel,) = kernel_functions(module)
    backend = CPUBackend(pool=pool)
    name = kernel.sym_name.data
    return backend.load(backend.compile(module, name), name)


@needs_openmp
@pytest.mark.parametrize(("threads", "chunks"), [(1, 1), (2, 2), (2, 8), (3, 37)])
def test_the_openmp_entry_of_a_kernel_with_sizes_covers_the_range_once(
    threads: int, chunks: int
) -> None:
    kernel_ = sized_softmax(RangePool(threads=1))
    assert kernel_.parallel is not None
    x, w = torch.randn(37, 300), torch.tensor(0.7)
    probs, mean = torch.full((37, 300), float("nan")), torch.full((37,), float("nan"))
    pointers = [t.data_ptr() for t in (x, w, probs, mean)]
    kernel_.parallel(threads, chunks, 37, *pointers, 37, 300)
    torch.testing.assert_close(probs, torch.softmax(x * w, dim=1))
    torch.testing.assert_close(mean, (x * w).mean(dim=1))


@needs_openmp
@pytest.mark.parametrize("openmp", [True, False])
def test_a_kernel_with_sizes_runs_on_the_openmp_entry_or_the_pool(openmp: bool) -> None:
    pool = RangePool(threads=2, min_work=100, openmp=openmp)
    kernel_ = sized_softmax(pool)
    entry = kernel_.parallel
    assert entry is not None
    calls: list[tuple[int, int, int]] = []

    def record(threads: int, chunks: int, extent: int, *arguments: int) -> None:
        calls.append((threads, chunks, extent))
        entry(threads, chunks, extent, *arguments)

    kernel_.parallel = record  # type: ignore[assignment]
    x, w = torch.randn(50, 64), torch.tensor(0.7)
    probs, mean = torch.empty(50, 64), torch.empty(50)
    kernel_.launch_sized([x, w, probs, mean], [50, 64], 50)
    torch.testing.assert_close(probs, torch.softmax(x * w, dim=1))
    plan = pool.plan(50, x.numel() * 2 + 51, True)
    assert plan is not None
    assert calls == ([(*plan, 50)] if openmp else [])
    pool.shutdown()


@needs_openmp
def test_a_static_kernel_of_a_symbolic_program_runs_on_the_openmp_entry() -> None:
    """A symbolic program launches its kernels of static sizes (a padded weight) with
    `launch_sized` too: their OpenMP entry takes no extent (it has the compiled one), and the
    pointers are passed where it reads them."""
    text = gelu_sigmoid(515, 256)
    x, w, b = torch.randn(515, 256), torch.randn(256), torch.randn(256)
    single, parallel = torch.empty(515, 256), torch.full((515, 256), float("nan"))
    build(RangePool(threads=1), text, "gelu_sigmoid")([x, w, b, single])
    pool = RangePool(threads=2, min_work=0, openmp=True)
    kernel_ = build(pool, text, "gelu_sigmoid")
    assert kernel_.parallel is not None and kernel_.sizes is None
    kernel_.launch_sized([x, w, b, parallel], [], None)
    assert torch.equal(single, parallel)
    pool.shutdown()


@needs_openmp
def test_a_kernel_compiled_with_no_sizes_takes_its_extent_on_the_openmp_entry() -> None:
    """A kernel compiled with a sizes table that names no size (`xfuse.size_args = []`) has an
    OpenMP entry that takes the extent, as every kernel with sizes has: `launch_sized` passes
    it, and a plain call, which would not, is refused."""
    text = gelu_sigmoid(515, 256).replace("xfuse.kernel,", "xfuse.kernel, xfuse.size_args = [],")
    x, w, b = torch.randn(515, 256), torch.randn(256), torch.randn(256)
    single, parallel = torch.empty(515, 256), torch.full((515, 256), float("nan"))
    build(RangePool(threads=1), gelu_sigmoid(515, 256), "gelu_sigmoid")([x, w, b, single])
    pool = RangePool(threads=2, min_work=0, openmp=True)
    kernel_ = build(pool, text, "gelu_sigmoid")
    assert kernel_.parallel is not None and kernel_.sizes == 0
    with pytest.raises(ValueError, match="takes 0 sizes: use launch_sized"):
        kernel_([x, w, b, parallel])
    kernel_.launch_sized([x, w, b, parallel], [], None)
    assert torch.equal(single, parallel)
    pool.shutdown()


@needs_openmp
def test_a_row_reduction_on_openmp_threads_equals_one_thread() -> None:
    text = row_sum_kernel(37, 300)
    x = torch.randn(37, 300).bfloat16()
    results = []
    for pool in (RangePool(threads=1), RangePool(threads=2, min_work=0, openmp=True)):
        kernel_ = build(pool, text, "row_sum")
        total, best = torch.empty(37), torch.empty(37)
        kernel_([x, total, best])
        results.append((total, best))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@needs_openmp
@pytest.mark.parametrize("openmp", [True, False])
def test_the_pool_chooses_the_openmp_entry_or_its_threads(openmp: bool) -> None:
    pool = RangePool(threads=2, min_work=100, openmp=openmp)
    kernel_ = build(pool, unary_f32("math.sqrt", 1000), "k")
    assert kernel_.parallel is not None
    calls: list[tuple[int, int]] = []
    entry = kernel_.parallel

    def record(threads: int, chunks: int, *pointers: int) -> None:
        calls.append((threads, chunks))
        entry(threads, chunks, *pointers)

    kernel_.parallel = record  # type: ignore[assignment]
    x, out = torch.rand(1000), torch.empty(1000)
    kernel_([x, out])
    torch.testing.assert_close(out, x.sqrt())
    assert calls == ([(2, 2)] if openmp else [])
    pool.shutdown()


@pytest.fixture
def torch_threads() -> Iterator[None]:
    """Restores torch's thread count after a test that sets it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def test_the_thread_count_follows_torchs_unless_configured(
    monkeypatch: pytest.MonkeyPatch, torch_threads: None
) -> None:
    monkeypatch.delenv("XFUSE_NUM_THREADS", raising=False)
    pool = RangePool(min_work=10)
    torch.set_num_threads(1)
    assert pool.threads == 1 and pool.plan(extent=100, work=10**9) is None
    cpus = len(os.sched_getaffinity(0))
    torch.set_num_threads(cpus + 1)  # never more than the CPUs the process may run on
    assert pool.threads == cpus
    assert pool.plan(extent=100, work=10) == (None if cpus == 1 else (cpus, cpus))
    monkeypatch.setenv("XFUSE_NUM_THREADS", "3")
    configured = RangePool(min_work=10)
    torch.set_num_threads(1)
    assert configured.threads == 3 and configured.plan(extent=100, work=10) == (3, 3)


@needs_openmp
def test_a_kernel_keeps_off_openmp_threads_while_torch_has_one(
    monkeypatch: pytest.MonkeyPatch, torch_threads: None
) -> None:
    """`torch.set_num_threads(1)` after the kernel loaded: its large launches run on the
    caller, and go back to OpenMP threads when torch has more."""
    monkeypatch.delenv("XFUSE_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    pool = RangePool(min_work=100, openmp=True)
    kernel_ = build(pool, unary_f32("math.sqrt", 1000), "k")
    calls: list[tuple[int, int]] = []
    entry = kernel_.parallel
    assert entry is not None

    def record(threads: int, chunks: int, *pointers: int) -> None:
        calls.append((threads, chunks))
        entry(threads, chunks, *pointers)

    kernel_.parallel = record  # type: ignore[assignment]
    x, out = torch.rand(1000), torch.empty(1000)
    torch.set_num_threads(1)
    kernel_([x, out])
    torch.testing.assert_close(out, x.sqrt())
    assert calls == []
    torch.set_num_threads(2)
    kernel_([x, out.zero_()])
    torch.testing.assert_close(out, x.sqrt())
    assert calls == ([(2, 2)] if len(os.sched_getaffinity(0)) >= 2 else [])


def test_the_plan_has_one_chunk_per_thread_more_for_large_work() -> None:
    pool = RangePool(threads=2, min_work=10, openmp=False)
    assert pool.plan(extent=100, work=10) == (2, 2)
    assert pool.plan(extent=100, work=10 * BALANCE_FACTOR) == (2, 2 * CHUNKS_PER_THREAD)
    assert pool.plan(extent=3, work=10 * BALANCE_FACTOR) == (2, 3)  # no empty chunks
    assert pool.plan(extent=1, work=10) is None  # one row runs on the caller


def test_openmp_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XFUSE_OPENMP", "0")
    assert not openmp_enabled()
    assert not RangePool().openmp and not RangePool().on_openmp()
    monkeypatch.delenv("XFUSE_OPENMP")
    assert openmp_enabled() == (openmp_parallel_address() is not None)


def test_openmp_threads_start_at_less_work_than_the_python_pool() -> None:
    from xfuse.backends.threadpool import DEFAULT_MIN_WORK, OPENMP_MIN_WORK

    assert OPENMP_MIN_WORK < DEFAULT_MIN_WORK
    pool = RangePool(threads=2)
    assert (pool.min_work_for(True), pool.min_work_for(False)) == (
        OPENMP_MIN_WORK,
        DEFAULT_MIN_WORK,
    )
    assert pool.plan(extent=64, work=OPENMP_MIN_WORK, openmp=True) == (2, 2)
    assert pool.plan(extent=64, work=OPENMP_MIN_WORK - 1, openmp=True) is None
    assert pool.plan(extent=64, work=OPENMP_MIN_WORK) is None
    assert RangePool(threads=2, min_work=5).min_work_for(True) == 5


class FakeLoad(LoadWatch):
    def __init__(self, oversubscribed: bool) -> None:
        super().__init__()
        self.value = oversubscribed

    def oversubscribed(self) -> bool:
        return self.value


def test_an_oversubscribed_machine_keeps_kernels_off_openmp_threads() -> None:
    pool = RangePool(threads=2, openmp=True, follow_load=True)
    pool.load = FakeLoad(True)
    assert not pool.on_openmp()
    pool.load = FakeLoad(False)
    assert pool.on_openmp()
    pinned = RangePool(threads=2, openmp=True)  # an explicit choice does not follow the load
    pinned.load = FakeLoad(True)
    assert pinned.on_openmp() and not pinned.follow_load
    assert not RangePool(threads=2, openmp=False, follow_load=True).on_openmp()


def test_the_load_is_read_at_most_once_a_second() -> None:
    import os

    readings = iter([1000.0, 0.0])
    clock = iter([100.0, 100.5, 101.5])
    watch = LoadWatch(lambda: next(readings), lambda: next(clock))
    assert watch.oversubscribed()  # 1000 runnable threads
    assert watch.oversubscribed()  # half a second later: not read again
    assert not watch.oversubscribed()  # read again: idle
    assert LoadWatch(lambda: 0.0).oversubscribed() is False
    cpus = os.cpu_count() or 1
    assert LoadWatch(lambda: OVERSUBSCRIBED_LOAD * cpus + 0.5).oversubscribed()


def test_xfuse_openmp_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for value, setting in [("0", "0"), ("1", "1"), ("auto", "auto"), ("yes", "auto")]:
        monkeypatch.setenv("XFUSE_OPENMP", value)
        assert openmp_setting() == setting
    monkeypatch.setenv("XFUSE_OPENMP", "1")
    assert not RangePool().follow_load
    monkeypatch.delenv("XFUSE_OPENMP")
    assert RangePool().follow_load == openmp_enabled()


@needs_openmp
def test_a_kernel_on_an_oversubscribed_machine_runs_on_the_python_pool() -> None:
    pool = RangePool(threads=2, min_work=100, openmp=True, follow_load=True)
    pool.load = FakeLoad(True)
    kernel_ = build(pool, unary_f32("math.sqrt", 1000), "k")
    calls: list[int] = []
    entry = kernel_.parallel
    assert entry is not None
    kernel_.parallel = lambda *args: calls.append(1) or entry(*args)  # type: ignore[assignment]
    x, out = torch.rand(1000), torch.empty(1000)
    kernel_([x, out])
    torch.testing.assert_close(out, x.sqrt())
    assert calls == []
    pool.load = FakeLoad(False)
    kernel_([x, out])
    assert calls == [1]
    pool.shutdown()


def test_the_caller_does_not_wait_for_a_pool_thread_that_has_not_started() -> None:
    import threading

    pool = RangePool(threads=2, min_work=1, openmp=False)
    busy = threading.Event()
    pool._pool().submit(busy.wait)  # the pool's one thread is taken
    seen: list[tuple[int, int]] = []
    pool.run(lambda lo, hi: seen.append((lo, hi)), extent=10, work=10)
    assert sorted(seen) == [(0, 5), (5, 10)]  # all on the caller, without waiting
    busy.set()
    pool.shutdown()


def test_an_error_in_a_chunk_reaches_the_caller() -> None:
    pool = RangePool(threads=2, min_work=1, openmp=False)

    def fail(lo: int, hi: int) -> None:
        if lo == 0:
            raise ValueError("chunk 0")

    with pytest.raises(ValueError, match="chunk 0"):
        pool.run(fail, extent=10, work=10)
    pool.shutdown()


def run_in_forked_child(check: Callable[[], bool]) -> None:
    """Run `check` in a child made by `os.fork` and assert that it returned True. The child
    runs none of torch's parallel operators: after `torch.set_num_threads(n > 1)` (as the
    tests above call) and a parallel region, torch's own operators (MKL's vector functions
    even on 1000 elements) wait forever in a forked child for the parent's OpenMP team."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if check() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@needs_openmp
def test_a_forked_child_runs_kernels_without_waiting_for_missing_threads() -> None:
    pool = RangePool(threads=2, min_work=100, openmp=True)
    kernel_ = build(pool, unary_f32("math.sqrt", 1000), "k")
    x, out = torch.rand(1000), torch.empty(1000)
    kernel_([x, out])  # OpenMP's team exists now
    expected = out.clone()
    python_pool = RangePool(threads=2, min_work=1, openmp=False)
    python_pool.run(lambda lo, hi: None, extent=4, work=4)  # and the pool's thread

    def check() -> bool:  # both must work (and not hang)
        assert not pool.on_openmp()
        out.zero_()
        kernel_([x, out])
        seen: list[int] = []
        python_pool.run(lambda lo, hi: seen.append(hi - lo), extent=4, work=4)
        return torch.equal(out, expected) and sum(seen) == 4

    run_in_forked_child(check)
    assert pool.on_openmp()
    python_pool.shutdown()


@needs_openmp
def test_a_forked_child_follows_torchs_thread_count(
    monkeypatch: pytest.MonkeyPatch, torch_threads: None
) -> None:
    """In a forked child (no OpenMP there) kernels run on the caller and the Python pool, on
    as many threads as torch has there, read from any thread, `torch.set_num_threads(1)` (as
    DataLoader's workers call) keeping them on the caller."""
    monkeypatch.delenv("XFUSE_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    pool = RangePool(min_work=100, openmp=True)
    kernel_ = build(pool, unary_f32("math.sqrt", 1000), "k")
    x, out = torch.rand(1000), torch.empty(1000)
    kernel_([x, out])  # on OpenMP's team where there are 2 CPUs
    expected = out.clone()

    def launch_on_a_new_thread() -> bool:
        out.zero_()
        thread = threading.Thread(target=kernel_, args=([x, out],))
        thread.start()
        thread.join()
        return torch.equal(out, expected)

    def check() -> bool:
        if pool.on_openmp() or pool.threads != min(2, len(os.sched_getaffinity(0))):
            return False
        ran = launch_on_a_new_thread()
        torch.set_num_threads(1)
        return ran and pool.plan(1000, 2000) is None and launch_on_a_new_thread()

    run_in_forked_child(check)
