"""`lower-to-loops`: kernels of loop IR that compute what the graph interpreter computes."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.builder import ImplicitBuilder
from xdsl.dialects import func, memref, scf
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from xfuse import interpret
from xfuse.dialects import fusion, graph
from xfuse.errors import CodegenError
from xfuse.interpreters.loops import run_lowered
from xfuse.ir import dtypes
from xfuse.ir.context import make_context, parse
from xfuse.ir.dtypes import bf16_round
from xfuse.ir.names import CODEGEN_ERROR_ATTR, KERNEL_ATTR, PARALLEL_DIMS_ATTR
from xfuse.passes import get_all_passes
from xfuse.passes.lowering.domains import merged_buffer_dims
from xfuse.passes.lowering.index_algebra import (
    ZERO,
    Affine,
    LoopVar,
    Within,
    add,
    constant_index,
    delinearize,
    floordiv,
    linearize,
    mod,
    var_index,
    within,
)
from xfuse.passes.lowering.lower_to_loops import LowerToLoopsPass, is_lone_kernel_op
from xfuse.testing.random_graph import RandomProgram, programs

Build = Callable[..., Sequence[SSAValue | Operation] | SSAValue | Operation]

FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTS = (torch.int32, torch.int64)
ALL = (*FLOATS, *INTS, torch.bool)


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def ttype(shape: Sequence[int], dtype: torch.dtype) -> TensorType[Attribute]:
    return TensorType(dtypes.from_torch(dtype), list(shape))


def make_module(
    args: Sequence[tuple[Sequence[int], torch.dtype]], build: Build, *, group: bool = True
) -> ModuleOp:
    """@forward(args) returning build(*args): inside one fusion.group, or as lone ops."""
    arg_types = [ttype(s, d) for s, d in args]
    block = Block(arg_types=arg_types)
    body = Block(arg_types=arg_types) if group else block
    with ImplicitBuilder(body) as values:
        outs = build(*values)
    outs = [SSAValue.get(v) for v in (outs if isinstance(outs, list | tuple) else [outs])]
    if group:
        body.add_op(fusion.YieldOp(*outs))
        g = fusion.GroupOp(block.args, [v.type for v in outs], Region(body), "test", "test:hand")
        block.add_op(g)
        outs = list(g.results)
    block.add_op(func.ReturnOp(*outs))
    f = func.FuncOp("forward", (arg_types, [v.type for v in outs]), Region(block))
    module = ModuleOp([f])
    module.verify()
    return module


def lower(module: ModuleOp, **options: bool) -> ModuleOp:
    out = module.clone()
    LowerToLoopsPass(**options).apply(make_context(), out)
    out.verify()
    return out


def sample(
    shape: Sequence[int], dtype: torch.dtype, gen: torch.Generator, kind: str = "any"
) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=gen) > 0.5
    if not dtype.is_floating_point:
        x = torch.randint(-6, 7, tuple(shape), generator=gen, dtype=dtype)
        return torch.where(x == 0, 3, x) if kind == "nonzero" else x
    x = torch.randn(shape, generator=gen, dtype=torch.float64)
    if kind == "positive":
        x = x.abs() + 0.5
    elif kind == "nonzero":
        x = x + x.sign() * 0.5
    return x.to(dtype)


def check(module: ModuleOp, inputs: Sequence[torch.Tensor], **options: bool) -> ModuleOp:
    """Lower `module`; the loop interpreter must agree with the graph interpreter."""
    want = interpret(module, inputs)
    lowered = lower(module, **options)
    got = run_lowered(lowered, inputs)
    for w, g in zip(want, got, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, equal_nan=True)
    return lowered


def check_random(
    args: Sequence[tuple[Sequence[int], torch.dtype]],
    build: Build,
    *,
    group: bool = True,
    kinds: Sequence[str] = (),
) -> ModuleOp:
    gen = torch.Generator().manual_seed(0)
    kinds = list(kinds) + ["any"] * (len(args) - len(kinds))
    inputs = [sample(s, d, gen, k) for (s, d), k in zip(args, kinds, strict=True)]
    return check(make_module(args, build, group=group), inputs)


def kernels(module: ModuleOp) -> list[func.FuncOp]:
    return [op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes]


def op_names(op: Operation) -> list[str]:
    return [o.name for o in op.walk()]


def forward_ops(module: ModuleOp) -> list[str]:
    f = next(
        op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == "forward"
    )
    return [op.name for op in f.body.block.ops]


# ---------------------------------------------------------------------------------------------
# Every op, as a lone op (each dtype where it applies)
# ---------------------------------------------------------------------------------------------

FLOAT_UNARY = {
    graph.NegOp: "any",
    graph.AbsOp: "any",
    graph.ReluOp: "any",
    graph.ExpOp: "any",
    graph.LogOp: "positive",
    graph.SqrtOp: "positive",
    graph.RsqrtOp: "positive",
    graph.TanhOp: "any",
    graph.SigmoidOp: "any",
    graph.ErfOp: "any",
    graph.SinOp: "any",
    graph.CosOp: "any",
    graph.ReciprocalOp: "nonzero",
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", FLOAT_UNARY, ids=lambda o: o.name)
def test_float_unary(op: type[graph.UnaryOp], dtype: torch.dtype):
    check_random([((3, 5), dtype)], op, group=False, kinds=[FLOAT_UNARY[op]])


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", [graph.NegOp, graph.AbsOp, graph.ReluOp], ids=lambda o: o.name)
def test_int_unary(op: type[graph.UnaryOp], dtype: torch.dtype):
    check_random([((3, 5), dtype)], op, group=False)


ARITH = [graph.AddOp, graph.SubOp, graph.MulOp, graph.DivOp, graph.MaximumOp, graph.MinimumOp]


@pytest.mark.parametrize("dtype", (*FLOATS, *INTS))
@pytest.mark.parametrize("op", ARITH, ids=lambda o: o.name)
def test_binary(op: type[graph.BinaryOp], dtype: torch.dtype):
    # the rhs broadcasts along the rows (torch broadcasting: index arithmetic, no copy)
    check_random([((3, 5), dtype), ((5,), dtype)], op, group=False, kinds=["any", "nonzero"])


@pytest.mark.parametrize("dtype", FLOATS)
def test_pow(dtype: torch.dtype):
    check_random([((3, 5), dtype), ((3, 1), dtype)], graph.PowOp, group=False, kinds=["positive"])


@pytest.mark.parametrize(
    "op", [graph.AddOp, graph.MulOp, graph.MaximumOp, graph.MinimumOp], ids=lambda o: o.name
)
def test_bool_binary(op: type[graph.BinaryOp]):
    check_random([((4, 3), torch.bool), ((4, 3), torch.bool)], op, group=False)


COMPARISONS = [graph.EqOp, graph.NeOp, graph.LtOp, graph.LeOp, graph.GtOp, graph.GeOp]


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("op", COMPARISONS, ids=lambda o: o.name)
def test_comparison(op: type[graph.BinaryOp], dtype: torch.dtype):
    gen = torch.Generator().manual_seed(1)
    a = sample((4, 6), dtype, gen)
    b = torch.where(torch.rand(4, 6, generator=gen) > 0.5, a, sample((4, 6), dtype, gen))
    check(make_module([((4, 6), dtype)] * 2, op, group=False), [a, b])


@pytest.mark.parametrize("dtype", ALL)
def test_where(dtype: torch.dtype):
    check_random([((3, 4), torch.bool), ((3, 4), dtype), ((), dtype)], graph.WhereOp, group=False)


@pytest.mark.parametrize("src,dst", [(s, d) for s in ALL for d in ALL if s != d])
def test_cast(src: torch.dtype, dst: torch.dtype):
    gen = torch.Generator().manual_seed(2)
    x = sample((4, 5), src, gen)
    if src.is_floating_point:
        x = (x.double() * 20).to(src)
        x[0, :2] = 0  # exact zeros: false when cast to bool
    module = make_module(
        [((4, 5), src)], lambda v: graph.CastOp(v, dtypes.from_torch(dst)), group=False
    )
    check(module, [x])


REDUCTIONS = [
    graph.ReduceSumOp,
    graph.ReduceMeanOp,
    graph.ReduceMaxOp,
    graph.ReduceMinOp,
    graph.ReduceProdOp,
]


REDUCTION_CASES = [
    (op, dtype)
    for op in REDUCTIONS
    for dtype in ALL
    if op is not graph.ReduceMeanOp or dtype.is_floating_point  # mean is float-only
]


@pytest.mark.parametrize(
    "dims,keepdim", [((1,), True), ((0,), False), ((0, 2), True), ((0, 1, 2), False)]
)
@pytest.mark.parametrize(
    "op,dtype", REDUCTION_CASES, ids=[f"{o.name}-{d}" for o, d in REDUCTION_CASES]
)
def test_reduction(
    op: type[graph.ReduceOp], dtype: torch.dtype, dims: tuple[int, ...], keepdim: bool
):
    check_random([((2, 5, 3), dtype)], lambda x: op(x, dims, keepdim), group=False)


def test_reduction_without_dims_is_identity():
    check_random([((2, 3), torch.float32)], lambda x: graph.ReduceSumOp(x, []), group=False)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
@pytest.mark.parametrize("op", [graph.ReduceMaxOp, graph.ReduceMinOp], ids=lambda o: o.name)
def test_max_min_propagate_nan(op: type[graph.ReduceOp], dtype: torch.dtype):
    x = torch.randn(3, 4).to(dtype)
    x[1, 2] = float("nan")
    lowered = check(make_module([((3, 4), dtype)], lambda v: op(v, [1])), [x])
    assert "arith.maximumf" in op_names(lowered) or "arith.minimumf" in op_names(lowered)


def test_nan_semantics_of_elementwise_ops():
    x = torch.tensor([float("nan"), -1.0, 2.0, float("nan")])
    y = torch.tensor([1.0, float("nan"), 0.5, float("nan")])

    def build(a: SSAValue, b: SSAValue):
        return [
            graph.ReluOp(a),
            graph.MaximumOp(a, b),
            graph.MinimumOp(a, b),
            graph.NeOp(a, b),
            graph.EqOp(a, b),
        ]

    check(make_module([((4,), torch.float32)] * 2, build), [x, y])


def test_signed_zero_ties_as_the_cpu_kernels():
    """relu, maximum and minimum keep their first operand where -0.0 and +0.0 tie
    (`xfuse.ties_keep_first`), as eager's CPU kernels; the loop interpreter follows the mark,
    so its values keep the sign that the compiled CPU kernel gives (compared by sign here,
    which `assert_close` does not see)."""
    x = torch.tensor([-0.0, 0.0, -0.0, 0.0, 1.0])
    y = torch.tensor([0.0, -0.0, -0.0, 0.0, -1.0])

    def build(a: SSAValue, b: SSAValue):
        return [graph.ReluOp(a), graph.MaximumOp(a, b), graph.MinimumOp(a, b)]

    module = make_module([((5,), torch.float32)] * 2, build)
    want = [torch.relu(x), torch.maximum(x, y), torch.minimum(x, y)]
    got = run_lowered(lower(module), [x, y])
    for w, g in zip(want, got, strict=True):
        assert torch.equal(g.signbit(), w.signbit()) and torch.equal(g, w), (g, w)
    assert torch.equal(got[1].signbit(), x.signbit())  # the first operand's sign on each tie


@pytest.mark.parametrize(
    ("op", "negative"), [(graph.ReduceMaxOp, False), (graph.ReduceMinOp, True)]
)
def test_ieee_zero_ties_without_the_mark(op: type[graph.ReduceOp], negative: bool):
    """An unmarked `maximumf`/`minimumf` (a reduction, or a CUDA kernel) is IEEE's: +0.0 is the
    larger zero, -0.0 the smaller."""
    x = torch.tensor([[-0.0, 0.0], [0.0, -0.0]])
    module = make_module([((2, 2), torch.float32)], lambda v: op(v, [1]))
    (got,) = run_lowered(lower(module), [x])
    assert got.tolist() == [0.0, 0.0] and got.signbit().tolist() == [negative, negative]


def test_broadcast_in_dim():
    check_random(
        [((3, 1), torch.float32)],
        lambda x: graph.BroadcastInDimOp(x, (2, 3, 4), (1, 2)),
        group=False,
    )


def test_reshape_permute_slice_lone():
    check_random([((4, 6), torch.float32)], lambda x: graph.ReshapeOp(x, (2, 3, 4)), group=False)
    check_random([((2, 3, 4), torch.int64)], lambda x: graph.PermuteOp(x, (2, 0, 1)), group=False)
    check_random(
        [((5, 7), torch.float16)],
        lambda x: graph.SliceOp(x, (1, 0), (5, 7), (2, 3)),
        group=False,
    )


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("dtype", (torch.float32, torch.bool))
def test_concat(dim: int, dtype: torch.dtype):
    shapes = [(2, 3), (1, 3), (3, 3)] if dim == 0 else [(2, 1), (2, 4), (2, 2)]
    check_random([(s, dtype) for s in shapes], lambda *xs: graph.ConcatOp(xs, dim), group=False)


# ---------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------


def test_elementwise_chain_with_broadcasts():
    def build(x: SSAValue, w: SSAValue, b: SSAValue, s: SSAValue):
        y = graph.AddOp(graph.MulOp(x, w), b)  # [4,6] * [6] + [4,1]
        z = graph.MulOp(graph.SigmoidOp(y), s)  # * 0-d
        return graph.TanhOp(z)

    lowered = check_random(
        [
            ((4, 6), torch.float32),
            ((6,), torch.float32),
            ((4, 1), torch.float32),
            ((), torch.float32),
        ],
        build,
    )
    (kernel,) = kernels(lowered)
    names = op_names(kernel)
    assert names.count("scf.parallel") == 1 and "scf.for" not in names
    assert kernel.attributes[PARALLEL_DIMS_ATTR].value.data == 2  # pyright: ignore
    assert "memref.alloc" not in names and "memref.copy" not in names


def test_same_shape_elementwise_uses_one_flat_loop():
    def build(x: SSAValue, y: SSAValue, s: SSAValue):
        return graph.MulOp(graph.AddOp(x, graph.ReshapeOp(y, (2, 3, 4))), s)

    lowered = check_random(
        [((2, 3, 4), torch.float32), ((6, 4), torch.float32), ((1, 1), torch.float32)], build
    )
    (kernel,) = kernels(lowered)
    assert kernel.attributes[PARALLEL_DIMS_ATTR].value.data == 1  # pyright: ignore
    assert [str(t) for t in kernel.function_type.inputs] == [
        "memref<24xf32>",
        "memref<24xf32>",
        "memref<1xf32>",
        "memref<24xf32>",
    ]
    names = op_names(kernel)
    assert "arith.divui" not in names and "arith.remui" not in names


def test_layout_ops_fold_into_index_arithmetic():
    def build(x: SSAValue, b: SSAValue):
        t = graph.PermuteOp(graph.ReshapeOp(x, (2, 3, 4)), (2, 0, 1))  # [4, 2, 3]
        s = graph.SliceOp(t, (0, 0, 0), (4, 2, 3), (2, 1, 2))  # [2, 2, 2]
        return graph.AddOp(s, graph.BroadcastInDimOp(b, (2, 2, 2), (0,)))

    lowered = check_random([((6, 4), torch.float32), ((2,), torch.float32)], build)
    names = op_names(kernels(lowered)[0])
    assert "memref.alloc" not in names and "memref.copy" not in names
    assert names.count("memref.load") == 2


def test_reshape_round_trip_costs_nothing():
    def build(x: SSAValue, y: SSAValue):
        back = graph.ReshapeOp(graph.ReshapeOp(x, (24,)), (4, 6))
        return graph.AddOp(back, graph.PermuteOp(y, (1, 0)))

    lowered = check_random([((4, 6), torch.float32), ((6, 4), torch.float32)], build)
    names = op_names(kernels(lowered)[0])
    assert "arith.divui" not in names and "arith.remui" not in names and "arith.muli" not in names


def _split_sum_of_squares(x: SSAValue):
    """A split reduction's first stage over a channels-last [2, 6, 6, 4]: the 36 positions of
    each image in 3 chunks of 12, and the squares written too (two buffers read through the
    split)."""
    sq = graph.MulOp(x, x)
    chunks = graph.ReshapeOp(sq, (2, 3, 12, 4))
    return graph.ReduceSumOp(chunks, [2]), sq


@pytest.mark.parametrize("merge_dims", [True, False])
def test_buffers_read_through_a_split_merge_the_dims_it_divides(merge_dims: bool):
    lowered = check(
        make_module([((2, 6, 6, 4), torch.float32)], _split_sum_of_squares),
        [torch.randn(2, 6, 6, 4)],
        merge_dims=merge_dims,
    )
    (kernel,) = kernels(lowered)
    names = op_names(kernel)
    assert "arith.divui" not in names and "arith.remui" not in names
    x, _, sq = (str(t) for t in kernel.function_type.inputs)
    assert x == sq == "memref<2x36x4xf32>"


def test_merged_buffer_dims_merge_only_where_divisions_go():
    i, c = LoopVar(0, 36), LoopVar(1, 4)
    split = (*delinearize(var_index(i), (6, 6)), var_index(c))  # (i // 6, i mod 6, c)
    assert merged_buffer_dims((6, 6, 4), [split]) == [[0, 1], [2]]
    three = delinearize(var_index(i), (3, 3, 4))
    assert merged_buffer_dims((3, 3, 4), [three]) == [[0, 1, 2]]
    plain = (var_index(i), var_index(c))
    assert merged_buffer_dims((36, 4), [plain]) is None


def _silu_and_its_mean(x: SSAValue):
    """A squeeze after an activation: SiLU over [C, H, W] and its mean over H and W."""
    y = graph.MulOp(x, graph.SigmoidOp(x))
    return y, graph.ReduceMeanOp(y, [1, 2], keepdim=True)


def _loop_trips(kernel: func.FuncOp) -> list[int]:
    """The constant upper bounds of the kernel's `scf.for` loops, outer first."""
    trips = []
    for loop in kernel.walk():
        if isinstance(loop, scf.ForOp):
            bound = loop.ub.owner
            trips.append(bound.value.value.data if hasattr(bound, "value") else -1)
    return trips


@pytest.mark.parametrize(
    ("shape", "trips"),
    [((3, 28, 28), [49, 16]), ((2, 56, 56), [49, 64]), ((2, 24, 24), [18, 32])],
)
def test_a_reductions_adjacent_dims_loop_as_one(shape: tuple[int, ...], trips: list[int]):
    """The sum's loop (which writes the activation too) runs over the merged dims in blocks
    of whole vectors; eager's values (`check`) either way."""
    inputs = [torch.randn(shape)]
    module = make_module([(shape, torch.float32)], _silu_and_its_mean)
    (kernel,) = kernels(check(module, inputs))
    c, hw = shape[0], shape[1] * shape[2]
    assert [str(t) for t in kernel.function_type.inputs][:2] == [
        f"memref<{c}x{hw}xf32>",
        f"memref<{c}x{hw}xf32>",
    ]
    assert _loop_trips(kernel) == trips
    assert "arith.divui" not in op_names(kernel) and "arith.remui" not in op_names(kernel)
    (nd,) = kernels(check(module, inputs, merge_dims=False))
    assert _loop_trips(nd) == [shape[1], shape[2]]


def test_a_merged_row_read_through_a_division_loops_dim_by_dim():
    """A sum over a transposed [C, H, W] reads the buffer at (c, i mod W, i floordiv W) with
    H and W merged into one loop `i`; no merge of the buffer's dims takes that division out,
    so the kernel loops over H and W one by one, as without the merge."""

    def build(x: SSAValue):
        return graph.ReduceSumOp(graph.PermuteOp(x, (0, 2, 1)), [1, 2])

    (kernel,) = kernels(check_random([((2, 6, 10), torch.float32)], build))
    assert _loop_trips(kernel) == [10, 6]
    assert "arith.divui" not in op_names(kernel) and "arith.remui" not in op_names(kernel)


@pytest.mark.parametrize("wide_sums", [True, False])
def test_a_short_run_of_reduced_dims_is_one_loop_where_it_sums_in_f64(wide_sums: bool):
    """A global average pool's 7x7 is one loop of 49 where short sums accumulate in f64 (LLVM
    vectorizes it; a loop of 7 stays scalar), and two loops of 7 summed in f32 otherwise."""

    def build(x: SSAValue):
        return graph.ReduceMeanOp(x, [2, 3])

    gen = torch.Generator().manual_seed(0)
    module = make_module([((2, 3, 7, 7), torch.float32)], build)
    x = sample((2, 3, 7, 7), torch.float32, gen, "any")
    (kernel,) = kernels(check(module, [x], wide_sums=wide_sums))
    assert _loop_trips(kernel) == ([49] if wide_sums else [7, 7])
    assert ("arith.extf" in op_names(kernel)) == wide_sums


def test_a_short_run_of_reduced_dims_inside_a_longer_f32_sum_keeps_its_loops():
    """A sum over (0, 2, 3) of [2, 3, 7, 7] has 98 terms: too many to accumulate in f64
    (`SHORT_SUM`), so its 7x7 run is not merged into one loop, which would sum in f32 in
    another order than eager's."""

    def build(x: SSAValue):
        return graph.ReduceSumOp(x, [0, 2, 3])

    gen = torch.Generator().manual_seed(0)
    module = make_module([((2, 3, 7, 7), torch.float32)], build)
    x = sample((2, 3, 7, 7), torch.float32, gen, "any")
    (kernel,) = kernels(check(module, [x], wide_sums=True))
    assert 49 not in _loop_trips(kernel)
    assert "arith.extf" not in op_names(kernel)


def test_row_blocks_are_whole_vectors_within_the_dims_accuracy():
    from xfuse.passes.lowering.domains import ROW_LENGTH, VECTOR, _row_blocks

    assert _row_blocks([56, 56]) == [49, 64] and _row_blocks([28, 28]) == [49, 16]
    # the innermost dim is whole vectors, or one masked vector: dim by dim
    assert _row_blocks([112, 112]) is None and _row_blocks([14, 14]) is None
    # no block of whole vectors short enough: a loop of 49 sums less accurately than 7 + 7
    assert _row_blocks([7, 7]) is None and _row_blocks([6, 33]) is None
    for sizes in ([56, 56], [28, 28], [24, 24], [40, 40]):
        outer, block = _row_blocks(sizes) or [0, 0]
        assert outer * block == sizes[0] * sizes[1] and block % VECTOR == 0
        assert outer + block <= ROW_LENGTH * sum(sizes)


def softmax_group(x: SSAValue, *, log: bool = False) -> SSAValue:
    m = graph.ReduceMaxOp(x, [1], keepdim=True)
    shifted = graph.SubOp(x, m)
    e = graph.ExpOp(shifted)
    s = graph.ReduceSumOp(e, [1], keepdim=True)
    if log:
        return graph.SubOp(shifted, graph.LogOp(s))
    return graph.DivOp(e, s)


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.bfloat16))
def test_softmax_is_one_row_kernel(dtype: torch.dtype):
    lowered = check_random([((5, 16), dtype)], softmax_group)
    (kernel,) = kernels(lowered)
    par = next(op for op in kernel.walk() if isinstance(op, scf.ParallelOp))
    loops = [op for op in par.body.block.ops if isinstance(op, scf.ForOp)]
    assert [len(loop.iter_args) for loop in loops] == [1, 1, 0]  # max, sum, normalise
    assert all(str(r.type) == "f32" for loop in loops[:2] for r in loop.results)


def test_log_softmax():
    check_random([((3, 7), torch.float32)], lambda x: softmax_group(x, log=True))


def layer_norm(x: SSAValue, w: SSAValue, b: SSAValue) -> SSAValue:
    eps = graph.ConstantOp.scalar(1e-5, graph.dtype_of(x))
    mean = graph.ReduceMeanOp(x, [1], keepdim=True)
    xc = graph.SubOp(x, mean)
    var = graph.ReduceMeanOp(graph.MulOp(xc, xc), [1], keepdim=True)
    rstd = graph.RsqrtOp(graph.AddOp(var, eps))
    return graph.AddOp(graph.MulOp(graph.MulOp(xc, rstd), w), b)


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_layer_norm(dtype: torch.dtype):
    lowered = check_random([((4, 10), dtype), ((10,), dtype), ((10,), dtype)], layer_norm)
    (kernel,) = kernels(lowered)
    par = next(op for op in kernel.walk() if isinstance(op, scf.ParallelOp))
    # rsqrt once per row, between the variance loop and the output loop
    top = [op.name for op in par.body.block.ops]
    assert "math.rsqrt" in top
    assert [n for n in top if n == "scf.for"] == ["scf.for"] * 3


def test_rms_norm_3d():
    def build(x: SSAValue, w: SSAValue):
        eps = graph.ConstantOp.scalar(1e-6, graph.dtype_of(x))
        ms = graph.ReduceMeanOp(graph.MulOp(x, x), [2], keepdim=True)
        return graph.MulOp(graph.MulOp(x, graph.RsqrtOp(graph.AddOp(ms, eps))), w)

    lowered = check_random([((2, 3, 8), torch.float32), ((8,), torch.float32)], build)
    (kernel,) = kernels(lowered)
    assert kernel.attributes[PARALLEL_DIMS_ATTR].value.data == 2  # pyright: ignore


def test_reduction_over_the_middle_dim_with_prologue_and_epilogue():
    def build(x: SSAValue, b: SSAValue):
        s = graph.ReduceSumOp(graph.ExpOp(x), [1])  # [2, 4]
        m = graph.ReduceMaxOp(graph.AddOp(x, b), [1])  # same dims: same loop
        return graph.SubOp(graph.LogOp(s), m)

    lowered = check_random([((2, 5, 4), torch.float32), ((4,), torch.float32)], build)
    par = next(op for op in kernels(lowered)[0].walk() if isinstance(op, scf.ParallelOp))
    (loop,) = [op for op in par.body.block.ops if isinstance(op, scf.ForOp)]
    assert len(loop.iter_args) == 2


def test_multi_output_group_with_row_and_full_outputs():
    def build(x: SSAValue):
        mean = graph.ReduceMeanOp(x, [1])  # [4]   (row, no keepdim)
        mx = graph.ReduceMaxOp(x, [1], keepdim=True)  # [4, 1] (row, keepdim)
        centred = graph.SubOp(x, graph.BroadcastInDimOp(mean, (4, 6), (0,)))
        return [centred, mean, mx, graph.ExpOp(x)]

    check_random([((4, 6), torch.float32)], build)


def test_outputs_of_one_element_count_share_a_flat_loop():
    def build(x: SSAValue, b: SSAValue):
        y = graph.AddOp(x, b)  # [4, 6]
        return [y, graph.PermuteOp(graph.ExpOp(y), (1, 0)), graph.ReshapeOp(y, (24,))]

    lowered = check_random([((4, 6), torch.float32), ((6,), torch.float32)], build)
    (kernel,) = kernels(lowered)
    assert kernel.attributes[PARALLEL_DIMS_ATTR].value.data == 1  # pyright: ignore
    assert {str(t) for t in kernel.function_type.inputs} == {"memref<24xf32>", "memref<6xf32>"}


def test_concat_and_strided_slice_in_a_group():
    def build(a: SSAValue, b: SSAValue):
        c = graph.ConcatOp([graph.ExpOp(a), b, a], 1)  # [3, 2+3+2]
        s = graph.SliceOp(c, (0, 1), (3, 7), (1, 2))  # [3, 3], crosses the pieces
        return graph.MulOp(s, s)

    lowered = check_random([((3, 2), torch.float32), ((3, 3), torch.float32)], build)
    assert "scf.if" in op_names(kernels(lowered)[0])


def test_a_class_token_before_a_patch_grid_reads_the_grid_without_divisions():
    """ViT's embeddings: a [1, C, H, W] map flattened and transposed to [1, H*W, C] rows, a
    class token concatenated before them: the grid's branch reads its rows as `r - 1`."""

    def build(grid: SSAValue, token: SSAValue, position: SSAValue):
        rows = graph.PermuteOp(graph.ReshapeOp(grid, (1, 4, 6)), (0, 2, 1))  # [1, 6, 4]
        x = graph.AddOp(graph.ConcatOp([token, rows], 1), position)  # [1, 7, 4]
        return graph.SubOp(x, graph.ReduceMeanOp(x, [2], keepdim=True))

    lowered = check_random(
        [((1, 4, 3, 2), torch.float32), ((1, 1, 4), torch.float32), ((1, 7, 4), torch.float32)],
        build,
    )
    names = op_names(kernels(lowered)[0])
    assert "scf.if" in names
    assert "arith.divui" not in names and "arith.remui" not in names


def test_full_reduction_to_a_scalar():
    lowered = check_random([((3, 4), torch.float32)], lambda x: graph.ReduceSumOp(x, [0, 1]))
    assert kernels(lowered)[0].attributes[PARALLEL_DIMS_ATTR].value.data == 1  # pyright: ignore


@pytest.mark.parametrize(
    "args,build",
    [
        ([((0, 4), torch.float32), ((4,), torch.float32)], graph.AddOp),  # no elements
        ([((3, 0), torch.float32)], lambda x: graph.ReduceSumOp(x, [1])),  # empty rows
        ([((), torch.float32), ((), torch.float32)], graph.MulOp),  # 0-d
        ([((1, 1, 4), torch.float32)], lambda x: graph.ReduceSumOp(x, [2], keepdim=True)),
        ([((2, 3), torch.float32)], lambda x: graph.SubOp(x, graph.ReduceMeanOp(x, [0, 1]))),
        (
            [((2, 3, 4), torch.float32)],
            lambda x: graph.ReduceMaxOp(graph.PermuteOp(x, (2, 0, 1)), [0, 2]),
        ),
    ],
    ids=["empty", "empty-rows", "0-d", "size-1-dims", "whole-tensor-row", "permuted-reduction"],
)
@pytest.mark.parametrize("group", [True, False], ids=["group", "lone"])
def test_edge_shapes(args: list[tuple[tuple[int, ...], torch.dtype]], build: Build, group: bool):
    check_random(args, build, group=group)


def test_splat_constants_become_arith_constants():
    text = """
    func.func @forward(%x: tensor<4x3xf32>) -> tensor<4x3xf32> {
      %c = graph.constant dense<2.0> : tensor<f32>
      %k = graph.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
      %r = fusion.group (%x, %c, %k) kind = "elementwise" rule = "test" : (tensor<4x3xf32>, tensor<f32>, tensor<3xf32>) -> tensor<4x3xf32> {
      ^bb0(%a: tensor<4x3xf32>, %s: tensor<f32>, %v: tensor<3xf32>):
        %h = graph.constant dense<0.5> : tensor<4x3xf32>
        %w = graph.constant dense<[[1.0], [2.0], [3.0], [4.0]]> : tensor<4x1xf32>
        %m = graph.mul %a, %s : tensor<4x3xf32>, tensor<f32> -> tensor<4x3xf32>
        %n = graph.add %m, %h : tensor<4x3xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
        %p = graph.mul %n, %v : tensor<4x3xf32>, tensor<3xf32> -> tensor<4x3xf32>
        %q = graph.sub %p, %w : tensor<4x3xf32>, tensor<4x1xf32> -> tensor<4x3xf32>
        fusion.yield %q : tensor<4x3xf32>
      }
      func.return %r : tensor<4x3xf32>
    }
    """
    module = parse(text)
    lowered = check(module, [torch.randn(4, 3)])
    (kernel,) = kernels(lowered)
    # x, the non-splat %k and the non-splat %w (moved before the launch), then the output
    assert len(kernel.function_type.inputs) == 4
    assert forward_ops(lowered) == [
        "graph.constant",
        "graph.constant",
        "fusion.launch",
        "func.return",
    ]


def test_lone_ops_and_externs():
    def build(x: SSAValue, w: SSAValue):
        return graph.ReluOp(graph.MatmulOp(graph.ExpOp(x), w))

    lowered = check_random([((3, 4), torch.float32), ((4, 2), torch.float32)], build, group=False)
    assert forward_ops(lowered) == ["fusion.launch", "graph.matmul", "fusion.launch", "func.return"]
    assert [k.sym_name.data for k in kernels(lowered)] == ["forward_k0", "forward_k1"]


def test_bool_buffers_are_bytes():
    lowered = check_random(
        [((3, 4), torch.float32), ((3, 4), torch.bool)],
        lambda x, m: [
            graph.GtOp(x, graph.ConstantOp.scalar(0.0, graph.dtype_of(x))),
            graph.WhereOp(m, x, x),
        ],
    )
    types = [str(t) for t in kernels(lowered)[0].function_type.inputs]
    assert "memref<12xi8>" in types


# ---------------------------------------------------------------------------------------------
# What one kernel cannot express
# ---------------------------------------------------------------------------------------------


def two_reductions(x: SSAValue):
    return [graph.ReduceSumOp(x, [0]), graph.ReduceSumOp(x, [1])]


def test_reductions_over_different_dims_raise_codegen_error():
    module = make_module([((3, 4), torch.float32)], two_reductions)
    with pytest.raises(CodegenError, match=r"@forward_k0.*different dims"):
        lower(module)


def test_keep_unsupported_leaves_the_group_for_the_fallback():
    module = make_module([((3, 4), torch.float32)], two_reductions)
    lowered = check(module, [torch.randn(3, 4)], keep_unsupported=True)
    (group,) = [op for op in lowered.walk() if isinstance(op, fusion.GroupOp)]
    assert "different dims" in str(group.attributes[CODEGEN_ERROR_ATTR])
    assert kernels(lowered) == []


def test_reduction_read_at_another_row_raises():
    def build(x: SSAValue):
        s = graph.ReduceSumOp(x, [1])  # [4]: one value per row i
        return graph.AddOp(x, graph.BroadcastInDimOp(s, (4, 4), (1,)))  # row i reads s[j]

    with pytest.raises(CodegenError, match="another row"):
        lower(make_module([((4, 4), torch.float32)], build))


def test_output_of_another_shape_raises():
    module = make_module(
        [((3, 4), torch.float32), ((4,), torch.float32)],
        lambda x, b: [graph.ExpOp(x), graph.ExpOp(b)],
    )
    with pytest.raises(CodegenError, match="neither"):
        lower(module)


# ---------------------------------------------------------------------------------------------
# Index expressions
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 4), (3, 1, 5), (6,)])
def test_linearize_of_delinearize_is_the_identity(shape: tuple[int, ...]):
    f = var_index(LoopVar(0, int(torch.tensor(shape).prod())))
    assert linearize(delinearize(f, shape), shape) == f


def test_floordiv_and_mod_simplify():
    i, j = var_index(LoopVar(0, 4)), var_index(LoopVar(1, 8))
    lin = linearize((i, j), (4, 8))
    assert floordiv(lin, 8) == i and mod(lin, 8) == j
    assert floordiv(floordiv(lin, 2), 4) == floordiv(lin, 8)
    assert mod(mod(lin, 16), 8) == j
    assert isinstance(floordiv(j, 3).terms[0][0], type(floordiv(j, 3).terms[0][0]))
    assert floordiv(Affine(((LoopVar(1, 8), 1),), -16), 8).const == -2


def test_an_index_within_a_narrower_range_divides_as_of_it():
    r = var_index(LoopVar(0, 197))  # a concat's row: the class token, then 196 patches
    patch = within(add(r, constant_index(-1)), 0, 195)
    assert isinstance(patch.terms[0][0], Within)
    assert mod(patch, 196) == patch and floordiv(patch, 196) == ZERO
    assert within(r, 0, 196) == r  # its bounds already lie there
    assert within(r, 0, 0) == ZERO
    for n in range(1, 197):
        for c in (7, 14, 196):
            assert evaluate(floordiv(patch, c), {0: n}) == (n - 1) // c
            assert evaluate(mod(patch, c), {0: n}) == (n - 1) % c


def test_index_expressions_agree_with_python_arithmetic():
    i, j = LoopVar(0, 5), LoopVar(1, 7)
    e = linearize((var_index(i), var_index(j)), (5, 7))
    for a, b in itertools.product(range(5), range(7)):
        n = a * 7 + b
        for c in (2, 3, 5, 6, 35):
            assert evaluate(floordiv(e, c), {0: a, 1: b}) == n // c
            assert evaluate(mod(e, c), {0: a, 1: b}) == n % c


def evaluate(e: Affine, env: dict[int, int]) -> int:
    total = e.const
    for atom, k in e.terms:
        if isinstance(atom, LoopVar):
            v = env[atom.ident]
        elif isinstance(atom, Within):
            v = evaluate(atom.arg, env)
        elif hasattr(atom, "divisor"):
            v = evaluate(atom.arg, env) // atom.divisor  # pyright: ignore
        else:
            v = evaluate(atom.arg, env) % atom.modulus  # pyright: ignore
        total += k * v
    return total


# ---------------------------------------------------------------------------------------------
# Loop interpreter details, pass registration, property test
# ---------------------------------------------------------------------------------------------


def test_bf16_rounding_matches_torch():
    x = torch.randn(1000, dtype=torch.float32) * 100
    ours = torch.tensor([float(bf16_round(v)) for v in x.numpy()])
    torch.testing.assert_close(ours, x.to(torch.bfloat16).float(), rtol=0, atol=0)


def test_unwritten_outputs_show_up():
    module = lower(make_module([((2, 3), torch.float32)], graph.ExpOp))
    (kernel,) = kernels(module)
    for store in [op for op in kernel.walk() if isinstance(op, memref.StoreOp)]:
        store.detach()
        store.erase()
    (out,) = run_lowered(module, [torch.zeros(2, 3)])
    assert out.isnan().all()


def test_registered():
    assert get_all_passes()["lower-to-loops"]() is LowerToLoopsPass


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    program=programs(max_ops=12),
    fuser=st.sampled_from([None, "fuse-greedy", "fuse-scored"]),
    merge_dims=st.booleans(),
)
def test_property_lowering_preserves_results(
    program: RandomProgram, fuser: str | None, merge_dims: bool
):
    """interpret(lower-to-loops(fuse(G))) == interpret(G), dims merged or not; groups one
    kernel cannot express stay for the fallback (keep-unsupported), lone ops always lower."""
    want = interpret(program.module, program.inputs())
    module = program.module.clone()
    if fuser is not None:
        get_all_passes()[fuser]()().apply(make_context(), module)
    lowered = lower(module, keep_unsupported=True, merge_dims=merge_dims)
    forward = next(op for op in lowered.ops if isinstance(op, func.FuncOp))
    assert not [op for op in forward.body.block.ops if is_lone_kernel_op(op)]
    got = run_lowered(lowered, program.inputs())
    for w, g in zip(want, got, strict=True):
        torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: torch.nn.functional.layer_norm(x + 1, (64,)).reshape(16, 64), (1, 16, 64)),
        (lambda x: (x - x.amax(-1, keepdim=True)).reshape(1, 4, 32), (1, 1, 4, 32)),
    ],
    ids=["layer-norm-reshaped", "row-max-shifted-reshaped"],
)
def test_full_size_outputs_of_another_shape_lower(
    fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]
) -> None:
    """A row-reduction group whose output is its full-shape value reshaped (GPT-2's layer norm
    before the attention projection) is one kernel: the output is written at the same memory
    position as the full-shape element."""
    import xfuse

    x = torch.randn(shape)
    compiled = xfuse.compile(fn, (x,), quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x), fn(x))


def _parallel_extents(module: ModuleOp) -> list[int]:
    (kernel,) = [
        op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    (loop,) = [op for op in kernel.walk() if isinstance(op, scf.ParallelOp)]
    extents: list[int] = []
    for bound in loop.upperBound:
        assert isinstance(bound.owner, Operation)
        extents.append(bound.owner.properties["value"].value.data)  # type: ignore[union-attr]
    return extents


@pytest.mark.parametrize(
    ("shapes", "merged"),
    [
        (((2, 6, 5, 7), (6, 1, 1)), [2, 6, 35]),  # channels: [N, C, H*W]
        (((1, 6, 5, 7), (1, 6, 5, 1)), [30, 7]),  # a value per row of W: [C*H, W]
        (((3, 4, 5), (3, 1, 5)), [3, 4, 5]),  # broadcast in the middle: nothing merges
        (((4, 5, 6), (5, 6)), [4, 30]),  # trailing dims: [N, H*W]
    ],
)
def test_merged_dims_read_every_buffer_without_dividing(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], merged: list[int]
) -> None:
    """An elementwise kernel loops over adjacent dims merged wherever every access stays a
    plain sum of loop variables, over 1-D buffers; values as without merging."""
    x_shape, p_shape = shapes
    module = make_module(
        [(x_shape, torch.float32), (p_shape, torch.float32)],
        lambda x, p: graph.ReluOp(graph.MulOp(graph.SubOp(x, p), p)),
    )
    gen = torch.Generator().manual_seed(0)
    inputs = [sample(x_shape, torch.float32, gen), sample(p_shape, torch.float32, gen)]
    lowered = check(module, inputs)
    assert _parallel_extents(lowered) == merged
    text = str(lowered)
    assert "arith.divui" not in text and "arith.remui" not in text
    unmerged = check(module, inputs, merge_dims=False)
    assert _parallel_extents(unmerged) == [d for d in x_shape if d != 1]


def _heads(x: SSAValue, b: SSAValue):
    """Attention's split of a [B, T, 3 H D] product plus bias into heads: the key and value
    in [B, H, T, D], the query in [B, T, H, D] (as the attention call's `orders` read it)."""
    qkv = graph.AddOp(x, b)
    b_, t, _ = graph.shape_of(x)
    heads = [
        graph.PermuteOp(
            graph.ReshapeOp(
                graph.SliceOp(qkv, (0, 0, 8 * k), (b_, t, 8 * (k + 1)), (1, 1, 1)), (b_, t, 2, 4)
            ),
            (0, 2, 1, 3),
        )
        for k in range(3)
    ]
    return heads[1], heads[2], graph.PermuteOp(heads[0], (0, 2, 1, 3))


@pytest.mark.parametrize("merge_dims", [True, False])
def test_outputs_permuted_from_one_another_loop_over_each_dim(merge_dims: bool):
    """Outputs of one element count whose shapes differ by a permute: with `merge-dims` (the
    CPU) one loop per dim of the first output's shape, the query stored at the permuted
    index, no division; without (CUDA), one flat loop whose coordinates divide. Eager's values
    either way."""
    inputs = [torch.randn(2, 5, 24), torch.randn(24)]
    module = make_module([((2, 5, 24), torch.float32), ((24,), torch.float32)], _heads)
    (kernel,) = kernels(check(module, inputs, merge_dims=merge_dims))
    divides = "arith.divui" in op_names(kernel) or "arith.remui" in op_names(kernel)
    assert divides != merge_dims
    if merge_dims:
        assert [str(t) for t in kernel.function_type.inputs][2:] == [
            "memref<2x2x5x4xf32>",
            "memref<2x2x5x4xf32>",
            "memref<2x5x2x4xf32>",
        ]


def test_a_permute_of_another_rank_is_no_permuted_output():
    """fuzz seed 76 program 232: outputs of one element count, one of rank 4 and one a
    permute of a rank-3 value; the permuted-outputs domain does not apply (the permutation
    indexed past its rank), so the kernel loops flat, with eager's values."""

    def build(x: SSAValue):
        doubled = graph.MulOp(x, x)
        return graph.ReshapeOp(doubled, (2, 3, 4, 1)), graph.PermuteOp(doubled, (2, 0, 1))

    check_random([((2, 3, 4), torch.float32)], build)
