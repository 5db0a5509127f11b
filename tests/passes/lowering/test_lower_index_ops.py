"""`lower-to-loops` of the index-arithmetic ops (graph.iota, graph.flip, graph.roll): their
elements come from the loop index, and the loop interpreter agrees with the graph's."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects.builtin import TensorType, i32, i64

from tests.passes.lowering.test_lower_to_loops import (
    check,
    check_random,
    forward_ops,
    kernels,
    make_module,
    op_names,
)
from xfuse.dialects import graph
from xfuse.passes.lowering.index_algebra import (
    Clamp,
    LoopVar,
    Reflect,
    add,
    bounds,
    clamp,
    constant_index,
    floordiv,
    loop_vars,
    mod,
    reflect,
    scale,
    var_index,
)
from xfuse.passes.lowering.operand_index import flipped_index, rolled_index


@pytest.mark.parametrize(
    ("shape", "dim", "start", "step", "dtype"),
    [
        ((7,), 0, 0, 1, i64),
        ((7,), 0, 5, -3, i64),
        ((3, 5), 1, -2, 4, i32),
        ((3, 5), 0, 10, 1, i64),
        ((0,), 0, 1, 2, i64),
        ((4,), 0, 2**31 - 2, 1, i32),  # i32 wraps as eager's int32 arange
    ],
)
def test_lone_iota_is_a_kernel(shape, dim, start, step, dtype) -> None:
    module = make_module([], lambda: graph.IotaOp(TensorType(dtype, shape), dim, start, step))
    lowered = check(module, [])
    assert forward_ops(lowered) == ["fusion.launch", "func.return"]
    (kernel,) = kernels(lowered)
    assert len(kernel.function_type.inputs.data) == 1  # its output: computed from the index
    assert "arith.index_cast" in op_names(kernel) or 0 in shape


def test_lone_iota_outside_a_group_is_a_kernel() -> None:
    module = make_module([], lambda: graph.IotaOp(TensorType(i64, [6])), group=False)
    assert len(kernels(check(module, []))) == 1


def test_iota_fuses_into_its_consumer_as_a_broadcast_comparison() -> None:
    """tril's mask: two iotas compared, selecting the input: one kernel, one input buffer."""

    def build(x):
        rows = graph.IotaOp(TensorType(i64, [5, 1]), 0)
        cols = graph.IotaOp(TensorType(i64, [1, 6]), 1)
        keep = graph.LeOp(cols, rows)
        zero = graph.ConstantOp.scalar(0.0, graph.dtype_of(x))
        return [rows, cols, keep, zero, graph.WhereOp(keep, x, zero)]

    lowered = check_random([((5, 6), torch.float32)], lambda x: build(x)[-1])
    (kernel,) = kernels(lowered)
    assert len(kernel.function_type.inputs.data) == 2  # x, the output


def test_iota_is_computed_once_per_row() -> None:
    """An iota along the outer dim does not depend on the inner loop: hoisted out of it."""
    module = make_module(
        [((4, 8), torch.float32)],
        lambda x: [
            i := graph.IotaOp(TensorType(i64, [4, 1]), 0, 3, 2),
            c := graph.CastOp(i, graph.dtype_of(x)),
            graph.ReduceSumOp(graph.MulOp(x, c), [1]),
        ][-1],
    )
    lowered = check(module, [torch.randn(4, 8)])
    (kernel,) = kernels(lowered)
    assert op_names(kernel).count("arith.index_cast") == 1


@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), (0, 1, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16])
def test_flip(dims, dtype) -> None:
    check_random([((3, 4, 5), dtype)], lambda x: graph.FlipOp(x, dims), group=False)


@pytest.mark.parametrize(
    ("shifts", "dims"), [((1,), (0,)), ((4,), (2,)), ((2, 3), (1, 2)), ((1, 1, 1), (0, 1, 2))]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool, torch.float16])
def test_roll(shifts, dims, dtype) -> None:
    check_random([((3, 4, 5), dtype)], lambda x: graph.RollOp(x, shifts, dims), group=False)


def test_flip_and_roll_fuse_with_elementwise_ops_and_reshapes() -> None:
    def build(x, y):
        f = graph.FlipOp(x, [1])
        r = graph.RollOp(f, [2], [0])
        s = graph.ReshapeOp(r, [20])
        return graph.AddOp(graph.ReshapeOp(s, [4, 5]), graph.FlipOp(y, [0, 1]))

    lowered = check_random([((4, 5), torch.float32), ((4, 5), torch.float32)], build)
    assert len(kernels(lowered)) == 1


def test_flipping_twice_is_the_identity_index() -> None:
    i = var_index(LoopVar(0, 6))
    assert flipped_index(flipped_index((i,), (6,), (0,)), (6,), (0,)) == (i,)


def test_counting_down_has_the_right_bounds() -> None:
    i = var_index(LoopVar(0, 6))
    (e,) = flipped_index((i,), (6,), (0,))
    assert bounds(e) == (0, 5)
    assert bounds(add(scale(i, -2), constant_index(3))) == (-7, 3)
    # floor division and modulo of a count-down index stay exact
    for v in range(6):
        assert _eval(floordiv(e, 4), v) == (5 - v) // 4
        assert _eval(mod(e, 4), v) == (5 - v) % 4
    (r,) = rolled_index((i,), (6,), {0: 2})
    assert [_eval(r, v) for v in range(6)] == [(v - 2) % 6 for v in range(6)]


def test_clamp_and_reflect_keep_an_index_in_range() -> None:
    i = var_index(LoopVar(0, 6))
    assert clamp(i, 0, 5) == i and reflect(i, 6) == i
    shifted = add(i, constant_index(-2))
    ((clamped, _),) = clamp(shifted, 0, 5).terms
    assert clamped == Clamp(shifted, 0, 5) and bounds(clamp(shifted, 0, 5)) == (0, 3)
    ((reflected, _),) = reflect(shifted, 6).terms
    assert reflected == Reflect(shifted, 6)


def _eval(e, v: int) -> int:
    """The value of an affine expression of one loop variable (ident 0) at `v`."""
    return _eval2(e, {0: v})


def test_concat_of_empty_tensors_lowers() -> None:
    """An empty diagonal concatenated (fuzz seed 7, program 2): the index's bounds pass every
    input's offset; the loop never runs."""
    check_random(
        [((5, 0), torch.float32), ((5, 0), torch.float32)],
        lambda a, b: graph.ConcatOp([a, b], 1),
        group=False,
    )
    check_random(
        [((0, 3), torch.float32), ((0, 3), torch.float32)],
        lambda a, b: graph.FlipOp(graph.ConcatOp([a, b], 0), [0, 1]),
    )


def _eval2(e, env: dict[int, int]) -> int:
    """The value of an affine expression of several loop variables (by ident)."""
    from xfuse.passes.lowering.index_algebra import FloorDiv, LoopVar, Mod

    total = e.const
    for atom, k in e.terms:
        if isinstance(atom, LoopVar):
            total += k * env[atom.ident]
        elif isinstance(atom, FloorDiv):
            total += k * (_eval2(atom.arg, env) // atom.divisor)
        else:
            assert isinstance(atom, Mod)
            total += k * (_eval2(atom.arg, env) % atom.modulus)
    return total


def test_a_column_below_a_common_factor_leaves_the_division() -> None:
    """`floor((96 r + c) / (96 * 56)) = floor(r / 56)` and `(96 r + c) mod (96 * 56) =
    96 (r mod 56) + c` for a column c in [0, 96): a row's index arithmetic no longer depends on
    the column (Swin's window reverse read each channel through divisions by 5376 and 672, which
    kept the CPU's layer norm from vectorizing). Exact at every point, and none of the column."""
    r, c = LoopVar(0, 3136), LoopVar(1, 96)
    e = add(scale(var_index(r), 96), var_index(c))
    for d in (5376, 672, 192, 96 * 7):
        q, m = floordiv(e, d), mod(e, d)
        assert 1 not in loop_vars(q)
        for rv in (0, 1, 55, 56, 57, 671, 3135):
            for cv in (0, 1, 95):
                env = {0: rv, 1: cv}
                assert _eval2(q, env) == (96 * rv + cv) // d
                assert _eval2(m, env) == (96 * rv + cv) % d
    # a part that reaches the factor keeps the division (a column of 97 is not below 96)
    wide = add(scale(var_index(r), 96), var_index(LoopVar(2, 97)))
    assert 2 in loop_vars(floordiv(wide, 5376))
