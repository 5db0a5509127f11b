"""lower-to-loops of `graph.gather`: the index tensor's element is a data-dependent atom of the
table's index (wrapped, clamped, reported through the kernel's error flag); the loop
interpreter agrees with the graph interpreter, and a bad index never reads outside a buffer
(the loop interpreter raises on any access outside one)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import MemRefType, TensorType, f32, i64
from xdsl.ir import SSAValue

from tests.passes.lowering.test_lower_to_loops import check, kernels, lower, make_module, op_names
from xfuse.dialects import graph
from xfuse.errors import CodegenError, IndexOutOfRangeError
from xfuse.interpreters.loops import run_lowered
from xfuse.ir.names import ERROR_FLAG_ATTR
from xfuse.passes.lowering.index_algebra import (
    Affine,
    Gathered,
    bounds,
    floordiv,
    is_gathered,
    mod,
)

F32, I64, I32 = torch.float32, torch.int64, torch.int32


def gather(
    table: SSAValue, indices: Sequence[SSAValue], dim: int, shape: Sequence[int], wrap: bool = False
) -> SSAValue:
    return graph.GatherOp(table, list(indices), dim, shape, wrap).result


def the_kernel(module: object) -> func.FuncOp:
    (kernel,) = kernels(module)  # pyright: ignore[reportArgumentType]
    return kernel


def memref_shapes(kernel: func.FuncOp) -> list[tuple[int, ...]]:
    return [
        tuple(t.get_shape()) for t in kernel.function_type.inputs.data if isinstance(t, MemRefType)
    ]


def test_gathered_atom_bounds_and_simplification() -> None:
    g = Gathered(SSAValue.get(graph.ConstantOp.scalar(0, i64, (3,))), (), 7, False)
    e = Affine(((g, 1),))
    assert bounds(e) == (0, 6)
    assert is_gathered(e) and is_gathered(floordiv(Affine(((g, 4),), 1), 2))
    assert mod(e, 7) == e and floordiv(e, 7) == Affine()


def test_embedding_rows_fused_with_elementwise() -> None:
    module = make_module(
        [((10, 4), F32), ((6, 1), I64)],
        lambda t, i: graph.ExpOp(gather(t, [i], 0, (6, 4))),
    )
    lowered = check(module, [torch.randn(10, 4), torch.tensor([[0], [9], [3], [3], [1], [0]])])
    kernel = the_kernel(lowered)
    assert ERROR_FLAG_ATTR in kernel.attributes
    assert memref_shapes(kernel) == [(10, 4), (6, 1), (6, 4), (1,)]  # not flat: rows are 2-D
    names = op_names(kernel)
    assert names.count("arith.index_cast") == 1  # one index per row, shared by its columns
    assert "scf.if" in names


def test_flat_kernel_linearizes_the_gathered_index() -> None:
    """Two outputs of one element count and different shapes: one flat loop, 1-D buffers."""

    def build(t: SSAValue, i: SSAValue) -> list[SSAValue]:
        y = gather(t, [i], 0, (6, 4))
        return [y, graph.ReshapeOp(graph.NegOp(y), [4, 6]).result]

    module = make_module([((10, 4), F32), ((6, 1), I32)], build)
    lowered = check(
        module, [torch.randn(10, 4), torch.tensor([[2], [9], [0], [3], [3], [1]], dtype=I32)]
    )
    assert memref_shapes(the_kernel(lowered)) == [(40,), (6,), (24,), (24,), (1,)]


def test_wrapped_negative_indices_and_two_index_tensors() -> None:
    module = make_module(
        [((5, 6, 7), F32), ((6, 1), I64), ((6, 1), I64)],
        lambda y, a, b: gather(y, [a, b], 0, (6, 7), wrap=True),
    )
    a = torch.tensor([[0], [-1], [4], [-5], [2], [2]])
    b = torch.tensor([[5], [-6], [0], [-1], [3], [3]])
    check(module, [torch.randn(5, 6, 7), a, b])


def test_table_dims_broadcast_and_read_larger() -> None:
    """torch.gather reads an input larger than its index; a size-1 table dim broadcasts."""
    larger = make_module([((4, 5), F32), ((3, 2), I64)], lambda x, i: gather(x, [i], 1, (3, 2)))
    check(larger, [torch.randn(4, 5), torch.tensor([[0, 4], [1, 1], [3, 2]])])
    broadcast = make_module([((1, 5), F32), ((3, 1), I64)], lambda r, j: gather(r, [j], 1, (3, 1)))
    check(broadcast, [torch.randn(1, 5), torch.tensor([[4], [0], [2]])])


@pytest.mark.parametrize("dim", [0, 1])
def test_gather_inside_a_reduction(dim: int) -> None:
    """Summing gathered rows (the index per row), and gathering along the reduced dim (the
    index per element of the row loop)."""
    shape = (6, 4) if dim == 0 else (4, 6)
    index_shape = (6, 1) if dim == 0 else (4, 6)
    module = make_module(
        [((10, 4) if dim == 0 else (4, 10), F32), (index_shape, I64)],
        lambda t, i: graph.ReduceSumOp(gather(t, [i], dim, shape), [1]),
    )
    indices = torch.randint(0, 10, index_shape)
    check(module, [torch.randn(10, 4) if dim == 0 else torch.randn(4, 10), indices])


def test_gather_in_a_concat_branch() -> None:
    module = make_module(
        [((10, 4), F32), ((2, 1), I64), ((3, 4), F32)],
        lambda t, i, x: graph.ConcatOp([gather(t, [i], 0, (2, 4)), x], 0),
    )
    check(module, [torch.randn(10, 4), torch.tensor([[7], [1]]), torch.randn(3, 4)])


def test_a_padded_table_gathered_in_a_later_concat_branch_reads_its_indices_there() -> None:
    """The padding's inside test at a gathered position (an index tensor's load) stays in the
    concat branch that reads it: the positions of the branch before compute no index
    (before, they loaded the index tensor at a negative offset and set the error flag)."""
    module = make_module(
        [((3,), F32), ((2,), F32), ((2,), I64)],
        lambda x, t, i: graph.ConcatOp(
            [x, gather(graph.PadOp(t, (1,), (1,), "constant", 0.0).result, [i], 0, (2,))], 0
        ),
    )
    check(module, [torch.randn(3), torch.randn(2), torch.tensor([0, 2])])


def test_an_iota_gathered_in_a_later_concat_branch_reads_its_indices_there() -> None:
    module = make_module(
        [((3,), I64), ((2,), I64)],
        lambda x, i: graph.ConcatOp(
            [x, gather(graph.IotaOp(TensorType(i64, (5,)), 0, 2, 3).result, [i], 0, (2,))], 0
        ),
    )
    check(module, [torch.arange(3), torch.tensor([4, 1])])


@pytest.mark.parametrize("bad", [10, -1, -11, 2**40])
def test_bad_index_sets_the_flag_and_reads_nothing_outside(bad: int) -> None:
    module = make_module(
        [((10, 4), F32), ((3, 1), I64)], lambda t, i: graph.ExpOp(gather(t, [i], 0, (3, 4)))
    )
    lowered = lower(module)
    with pytest.raises(IndexOutOfRangeError, match="index out of range in self"):
        run_lowered(lowered, [torch.randn(10, 4), torch.tensor([[1], [bad], [2]])])


def test_wrap_accepts_what_torch_wraps_only() -> None:
    module = make_module(
        [((10, 4), F32), ((2, 1), I64)], lambda t, i: gather(t, [i], 0, (2, 4), wrap=True)
    )
    lowered = lower(module)
    run_lowered(lowered, [torch.randn(10, 4), torch.tensor([[-10], [9]])])
    with pytest.raises(IndexError):
        run_lowered(lowered, [torch.randn(10, 4), torch.tensor([[-11], [9]])])


def test_an_empty_gathered_dim_is_refused() -> None:
    module = make_module([((0, 4), F32), ((2, 1), I64)], lambda t, i: gather(t, [i], 0, (2, 4)))
    with pytest.raises(CodegenError, match="empty dim"):
        lower(module)


def test_a_reduction_read_at_gathered_rows_is_refused() -> None:
    module = make_module(
        [((10, 4), F32), ((10, 1), I64)],
        lambda t, i: gather(graph.ReduceSumOp(t, [1], keepdim=True), [i], 0, (10, 1)),
    )
    with pytest.raises(CodegenError, match="another row"):
        lower(module)


def test_kernels_without_gather_take_no_flag() -> None:
    module = make_module([((4,), F32)], lambda x: graph.ExpOp(x))
    kernel = the_kernel(lower(module))
    assert ERROR_FLAG_ATTR not in kernel.attributes
    assert not any(isinstance(op, memref.StoreOp) and op.value.type != f32 for op in kernel.walk())
