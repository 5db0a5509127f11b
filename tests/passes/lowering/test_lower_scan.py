"""lower-to-loops of graph.scan: the loop interpreter agrees with the graph
interpreter (eager's cumsum, cumprod, logcumsumexp, cummax, cummin) for every kind, dtype and
dim, and the loop is sequential along the dim inside the parallel loop over the others."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects import scf

from tests.passes.lowering.test_lower_to_loops import (
    check,
    check_random,
    kernels,
    lower,
    make_module,
)
from xfuse.dialects import graph
from xfuse.errors import CodegenError
from xfuse.passes.lowering.gpu_map_parallel import map_kernel

NUMERIC_KINDS = ("sum", "prod", "max", "min", "argmax", "argmin")
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", NUMERIC_KINDS)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_each_kind_dtype_and_dim(kind: str, dtype: torch.dtype, dim: int) -> None:
    check_random([((3, 5, 4), dtype)], lambda x: graph.ScanOp(x, dim, kind))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("dim", [0, 1])
def test_logsumexp(dtype: torch.dtype, dim: int) -> None:
    check_random([((6, 7), dtype)], lambda x: graph.ScanOp(x, dim, "logsumexp"))


@pytest.mark.parametrize("kind", ["max", "min", "argmax", "argmin"])
def test_bool_max_min(kind: str) -> None:
    check_random([((4, 9), torch.bool)], lambda x: graph.ScanOp(x, 1, kind))


NAN, INF = float("nan"), float("inf")
EDGES = torch.tensor(
    [
        [1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0, -0.0],
        [-INF, -INF, 0.0, INF, INF, -INF, NAN, 1.0],
        [0.0, -0.0, 0.0, -0.0, 2.0, 2.0, 1.0, 2.0],
        [INF, -INF, 3.0, -INF, INF, INF, -1.0, 0.5],
    ]
)


@pytest.mark.parametrize("kind", graph.SCAN_KINDS)
def test_ties_nan_and_infinities_as_eager(kind: str) -> None:
    """Ties and NaNs: the later element (cummax/cummin); NaN sticks; logcumsumexp of -inf
    stays -inf, of the same infinity twice that infinity."""
    module = make_module([((4, 8), torch.float32)], lambda x: graph.ScanOp(x, 1, kind))
    check(module, [EDGES])


@pytest.mark.parametrize("shape", [(1, 5), (5, 1), (0, 3), (3, 0), (1,), (7,)])
@pytest.mark.parametrize("kind", ["sum", "argmax"])
def test_size_one_and_empty_dims(shape: tuple[int, ...], kind: str) -> None:
    check_random([(shape, torch.float32)], lambda x: graph.ScanOp(x, len(shape) - 1, kind))


def test_half_accumulates_in_f32_and_rounds_each_step() -> None:
    """Eager's CPU cumsum of f16 keeps an f32 running sum: 2048 + 1 + 1 ... grows, where an
    f16 running sum would stay at 2048."""
    x = torch.cat([torch.tensor([2048.0]), torch.ones(15)]).half().reshape(1, 16)
    module = make_module([((1, 16), torch.float16)], lambda a: graph.ScanOp(a, 1, "sum"))
    check(module, [x])


def test_the_scan_loop_is_sequential_inside_the_parallel_loop() -> None:
    lowered = lower(make_module([((4, 8), torch.float32)], lambda x: graph.ScanOp(x, 1, "sum")))
    (kernel,) = kernels(lowered)
    (par,) = [op for op in kernel.walk() if isinstance(op, scf.ParallelOp)]
    (loop,) = [op for op in par.walk() if isinstance(op, scf.ForOp)]
    assert [o.name for o in loop.body.block.ops].count("memref.store") == 1
    assert "fastmath" not in str(loop)  # the order of the terms is eager's


@pytest.mark.parametrize("kind", ["sum", "prod"])
def test_cuda_maps_a_scan_one_thread_per_row(kind: str) -> None:
    """The running sum is stored at every step: it is no row reduction to split over threads."""
    lowered = lower(make_module([((64, 8), torch.float32)], lambda x: graph.ScanOp(x, 1, kind)))
    (kernel,) = kernels(lowered)
    assert map_kernel(kernel, lowered) == "serial"


def test_a_scan_read_at_another_index_is_refused() -> None:
    def build(x: object) -> object:
        return graph.FlipOp(graph.ScanOp(x, 1, "sum"), [1])

    with pytest.raises(CodegenError, match="read at another index"):
        lower(make_module([((4, 8), torch.float32)], build))


def test_elementwise_producers_in_the_same_kernel() -> None:
    """A producer is computed at the scan's index, inside its loop (or before it, where it
    does not depend on the scan's dim); an elementwise consumer reads the running value."""
    lowered = check_random(
        [((4, 8), torch.float32), ((8,), torch.float32)],
        lambda x, y: graph.SubOp(graph.ScanOp(graph.MulOp(x, graph.ExpOp(y)), 1, "sum"), x),
    )
    assert len(kernels(lowered)) == 1
