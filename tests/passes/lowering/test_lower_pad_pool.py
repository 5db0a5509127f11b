"""lower-to-loops of graph.pad and graph.pool: the loop interpreter (which refuses a load
outside its buffer) agrees with the graph interpreter, lone and fused with neighbours."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects import arith, memref, scf

from tests.passes.lowering.test_lower_to_loops import (
    check_random,
    kernels,
    lower,
    make_module,
    op_names,
)
from xfuse.dialects import graph

DTYPES = (torch.float32, torch.bfloat16, torch.int64, torch.bool)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("low", "high"), [((0, 2), (1, 0)), ((-1, 1), (2, -2)), ((3, 0), (0, 4)), ((-2, -1), (0, 0))]
)
def test_constant_pad(low: tuple[int, int], high: tuple[int, int], dtype: torch.dtype) -> None:
    value = 1.0 if dtype == torch.bool else -3.0
    check_random([((4, 5), dtype)], lambda x: graph.PadOp(x, low, high, "constant", value))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize(("low", "high"), [((1, 3), (2, 4)), ((0, -1), (3, 1))])
def test_mode_pad(mode: str, low: tuple[int, int], high: tuple[int, int]) -> None:
    check_random([((4, 5), torch.float32)], lambda x: graph.PadOp(x, low, high, mode))


def test_pad_fused_with_its_consumer() -> None:
    def build(x: object, y: object) -> object:
        padded = graph.PadOp(x, (1, 1), (1, 1), "constant", 0.0)
        return graph.MulOp(padded, y)

    lowered = check_random([((3, 4), torch.float32), ((5, 6), torch.float32)], build)
    assert len(kernels(lowered)) == 1


def test_a_slice_inside_the_padding_loads_nothing() -> None:
    def build(x: object) -> object:
        padded = graph.PadOp(x, (0, 3), (0, 0), "constant", 2.0)
        return graph.SliceOp(padded, (0, 0), (2, 3), (1, 1))

    lowered = check_random([((2, 4), torch.float32)], build)
    assert "memref.load" not in op_names(lowered)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "ceil"),
    [
        ((3, 3), (2, 2), (1, 1), (1, 1), False),
        ((3, 2), (2, 3), (1, 0), (2, 1), True),
        ((1, 1), (2, 2), (0, 0), (1, 1), False),
        ((6, 6), (3, 3), (3, 2), (1, 1), True),  # 36 elements: an scf.for nest
    ],
)
def test_max_pool(kernel, stride, padding, dilation, ceil, dtype) -> None:  # noqa: ANN001
    check_random(
        [((2, 3, 9, 10), dtype)],
        lambda x: graph.PoolOp(x, "max", kernel, stride, padding, dilation, ceil),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("divisor", [None, 5])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "ceil"),
    [((3,), (2,), (1,), True), ((2, 3), (1, 2), (1, 1), False), ((7, 6), (4, 4), (3, 3), True)],
)
def test_avg_pool(kernel, stride, padding, ceil, include, divisor, dtype) -> None:  # noqa: ANN001
    n = len(kernel)
    check_random(
        [((2, 9, 11) if n == 2 else (2, 11), dtype)],
        lambda x: graph.PoolOp(x, "avg", kernel, stride, padding, (1,) * n, ceil, include, divisor),
    )


def test_max_pool_3d() -> None:
    check_random(
        [((2, 5, 6, 7), torch.float32)],
        lambda x: graph.PoolOp(x, "max", (2, 3, 2), (2, 2, 1), (1, 1, 0), (1, 1, 2), True),
    )


def test_pool_of_an_elementwise_value_and_a_consumer_is_one_kernel() -> None:
    def build(x: object) -> object:
        pooled = graph.PoolOp(graph.ReluOp(x), "max", (2, 2), (2, 2), (0, 0), (1, 1))
        return graph.AddOp(pooled, pooled)

    lowered = check_random([((1, 2, 6, 6), torch.float32)], build)
    (kernel,) = kernels(lowered)
    # 4 window positions, none of them guarded: no padding, no ceil overhang.
    loads = [op for op in kernel.walk() if isinstance(op, memref.LoadOp)]
    assert len(loads) == 4
    assert not [op for op in kernel.walk() if isinstance(op, arith.SelectOp)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "ceil"),
    [((3, 3), (2, 2), (1, 1), (1, 1), True), ((6, 6), (3, 3), (3, 2), (1, 2), False)],
)
def test_argmax_pool(kernel, stride, padding, dilation, ceil, dtype) -> None:  # noqa: ANN001
    check_random(
        [((2, 3, 9, 10), dtype)],
        lambda x: graph.PoolOp(x, "argmax", kernel, stride, padding, dilation, ceil),
    )


@pytest.mark.parametrize("kind", ["max", "avg", "argmax"])
@pytest.mark.parametrize(
    ("shape", "sizes"), [((2, 8, 8), (5, 7)), ((2, 40, 13), (3, 2)), ((3, 7), (3,))]
)
def test_adaptive_pool(kind: str, shape: tuple[int, ...], sizes: tuple[int, ...]) -> None:
    n = len(sizes)
    check_random(
        [(shape, torch.float32)],
        lambda x: graph.PoolOp(x, kind, [1] * n, [1] * n, [0] * n, [1] * n, adaptive=sizes),
    )


# ---------------------------------------------------------------------------------------------
# Windows larger than their input: the window loop walks the input's positions only
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("include", [True, False])
@pytest.mark.parametrize("divisor", [None, 3])
@pytest.mark.parametrize(
    ("shape", "kernel", "stride", "padding"),
    [
        ((2, 2, 3), (40, 40), (40, 40), (0, 0)),  # one window covering the input (ceil)
        ((2, 5, 7), (9, 8), (2, 3), (4, 4)),  # padded windows larger than the input
        ((2, 11), (40,), (3,), (20,)),
    ],
)
def test_avg_pool_of_a_window_larger_than_the_input(
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[int, ...],
    include: bool,
    divisor: int | None,
) -> None:
    n = len(kernel)
    check_random(
        [(shape, torch.float32)],
        lambda x: graph.PoolOp(x, "avg", kernel, stride, padding, (1,) * n, True, include, divisor),
    )


@pytest.mark.parametrize("kind", ["max", "argmax"])
@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [((12, 9), (5, 4), (6, 4), (1, 1)), ((6, 6), (3, 2), (3, 3), (2, 2))],
)
def test_max_pool_of_a_window_larger_than_the_input(
    kind: str,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> None:
    check_random(
        [((2, 3, 5, 6), torch.float32)],
        lambda x: graph.PoolOp(x, kind, kernel, stride, padding, dilation, True),
    )


def test_a_huge_window_loops_over_the_input_only() -> None:
    """AvgPool2d(1280, ceil_mode=True) over a 2x2 map (EfficientNet's head in transformers):
    each window loop runs from the first to the last position inside the input, unguarded,
    and the divisor (the window clipped to the input, count_include_pad off) is a constant."""

    def build(x: object) -> object:
        act = graph.MulOp(x, graph.SigmoidOp(x))
        return graph.PoolOp(act, "avg", (1280, 1280), (1280, 1280), (0, 0), (1, 1), True)

    args = [((1, 4, 2, 2), torch.float32)]
    (kernel,) = kernels(lower(make_module(args, build)))  # looked at before it runs
    loops = [op for op in kernel.walk() if isinstance(op, scf.ForOp)]
    assert len(loops) == 2
    for loop in loops:
        assert isinstance(loop.ub.owner, arith.ConstantOp)
        assert loop.ub.owner.value.value.data == 2  # pyright: ignore[reportAttributeAccessIssue]
    assert not [op for op in kernel.walk() if isinstance(op, arith.SelectOp | arith.MinSIOp)]
    check_random(args, build)
