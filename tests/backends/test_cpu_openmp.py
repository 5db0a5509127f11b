"""CPU kernels on torch's OpenMP threads (`xfuse.backends.openmp`): the `k.parallel` entry
covers the range exactly once, for any thread and chunk count, and the pool picks it."""

from __future__ import annotations

import pytest
import torch

from tests.backends.test_cpu import gelu_sigmoid, row_sum_kernel, unary_f32
from xfuse.backends.cpu import CPUBackend, CPUKernel
from xfuse.backends.openmp import openmp_parallel_address
from xfuse.backends.threadpool import BALANCE_FACTOR, CHUNKS_PER_THREAD, RangePool, openmp_enabled
from xfuse.ir.context import parse

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


def test_chunk_count_is_one_per_thread_more_for_large_work() -> None:
    pool = RangePool(threads=2, min_work=10, openmp=False)
    assert pool.chunk_count(extent=100, work=10) == 2
    assert pool.chunk_count(extent=100, work=10 * BALANCE_FACTOR) == 2 * CHUNKS_PER_THREAD
    assert pool.chunk_count(extent=3, work=10 * BALANCE_FACTOR) == 3  # no empty chunks
    assert pool.chunk_count(extent=1, work=10) == 1


def test_openmp_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XFUSE_OPENMP", "0")
    assert not openmp_enabled()
    assert not RangePool().openmp
    monkeypatch.delenv("XFUSE_OPENMP")
    assert openmp_enabled() == (openmp_parallel_address() is not None)


def test_openmp_threads_start_at_less_work_than_the_python_pool() -> None:
    from xfuse.backends.threadpool import DEFAULT_MIN_WORK, OPENMP_MIN_WORK

    assert OPENMP_MIN_WORK < DEFAULT_MIN_WORK
    on, off = RangePool(threads=2, openmp=True), RangePool(threads=2, openmp=False)
    assert (on.min_work, off.min_work) == (OPENMP_MIN_WORK, DEFAULT_MIN_WORK)
    assert not on.runs_inline(extent=64, work=OPENMP_MIN_WORK)
    assert on.runs_inline(extent=64, work=OPENMP_MIN_WORK - 1)
    assert off.runs_inline(extent=64, work=OPENMP_MIN_WORK)
    assert RangePool(threads=2, min_work=5, openmp=True).min_work == 5
