"""Layout and indexing ops: broadcast, reshape, permute, slice, concat, gather, and the index
arithmetic of iota, flip and roll."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from random import Random
from typing import Any, ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    TensorType,
    UnitAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import Fuzz, OpBuilder, OpFacts
from xfuse.dialects.graph.base import (
    Broadcast,
    Dim,
    Elementwise,
    Extern,
    Injective,
    OneTensorOp,
    SameTypeOp,
    _check_counts,
    _check_dims,
    _check_result_shape,
    _check_same_dtype,
    _check_tensor,
    _i64_array,
    _ints,
    dims_numel,
    dims_of,
    dtype_of,
    fmt_shape,
    is_symbolic,
    numel,
    shape_of,
    size_table,
    tensor_of,
)
from xfuse.dialects.graph.externs import TorchCallOp
from xfuse.dialects.graph.sizes import MIN_SIZE, SizeExpr, SizeExprAttr, SizesAttr

# ---------------------------------------------------------------------------------------------
# Broadcast
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class BroadcastInDimOp(OneTensorOp):
    """Broadcast: operand dim i becomes result dim dims[i] (size 1 or equal); other result
    dims are new. `%y = graph.broadcast_in_dim %x dims = [1] : tensor<4xf32> -> tensor<3x4xf32>`"""

    name = "graph.broadcast_in_dim"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.expand.default",),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    dims = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Broadcast())
    assembly_format = "$input `dims` `=` $dims attr-dict `:` type($input) `->` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, shape: Sequence[Dim], dims: Sequence[int]):
        super().__init__(input, shape, dims=_i64_array(dims))

    @property
    def dim_map(self) -> tuple[int, ...]:
        return _ints(self.dims)

    def verify_(self) -> None:
        self._check_tensors()
        dims = self.dim_map
        in_shape, out_shape = dims_of(self.input), dims_of(self.result)
        if len(dims) != len(in_shape):
            raise VerifyException(
                f"expected {len(in_shape)} dims (the operand's rank), found {len(dims)}"
            )
        _check_dims(dims, len(out_shape))
        if list(dims) != sorted(dims):
            raise VerifyException(f"expected increasing dims, found {list(dims)}")
        for i, d in enumerate(dims):
            if in_shape[i] not in (1, out_shape[d]):
                raise VerifyException(
                    f"operand dim {i} of size {in_shape[i]} cannot broadcast to result dim "
                    f"{d} of size {out_shape[d]}"
                )


# ---------------------------------------------------------------------------------------------
# Layout (injective) ops
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(OneTensorOp):
    """Row-major reshape (torch's view/reshape on a contiguous tensor).
    `%y = graph.reshape %x : tensor<4x8xf32> -> tensor<32xf32>`"""

    name = "graph.reshape"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.view.default",
            "aten.reshape.default",
            "aten._unsafe_view.default",
            "aten.unsqueeze.default",
            "aten.squeeze.default",
            "aten.squeeze.dim",
            "aten.squeeze.dims",
            "aten.flatten.using_ints",
        ),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def verify_(self) -> None:
        self._check_tensors()
        if is_symbolic(self.input) or is_symbolic(self.result):
            self._check_symbolic_numel()
            return
        n_in, n_out = numel(shape_of(self.input)), numel(shape_of(self.result))
        if n_in != n_out:
            raise VerifyException(
                f"expected the result to have {n_in} elements like the operand, found {n_out}"
            )

    def _check_symbolic_numel(self) -> None:
        """The element counts, as polynomials of input symbols, are equal."""
        table = size_table(self)
        n_in, n_out = dims_numel(dims_of(self.input)), dims_numel(dims_of(self.result))
        if table is None or not table.equal(n_in, n_out):
            raise VerifyException(
                f"expected the result to have {n_in} elements like the operand, found "
                f"{n_out} (not equal for every size of their symbols)"
            )


@irdl_op_definition
class PermuteOp(OneTensorOp):
    """Dim permutation: result dim i is operand dim perm[i].
    `%y = graph.permute %x perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>`"""

    name = "graph.permute"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.permute.default",),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    perm = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `perm` `=` $perm attr-dict `:` type($input) `->` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, perm: Sequence[int]):
        input = SSAValue.get(input)
        super().__init__(input, [dims_of(input)[p] for p in perm], perm=_i64_array(perm))

    @property
    def permutation(self) -> tuple[int, ...]:
        return _ints(self.perm)

    def verify_(self) -> None:
        self._check_tensors()
        shape, perm = dims_of(self.input), self.permutation
        if sorted(perm) != list(range(len(shape))):
            raise VerifyException(
                f"expected a permutation of [0, {len(shape)}), found {list(perm)}"
            )
        _check_result_shape(self, [shape[p] for p in perm])


@irdl_op_definition
class SliceOp(OneTensorOp):
    """Strided slice, per dim `start:limit:stride` (stride > 0). Along a symbolic dim a
    negative limit counts from its end, `-1 - k` standing for `size - k`: `0:-1:1`
    (`WHOLE_SYMBOLIC_DIM`) keeps it whole, the result naming its symbol; another such slice
    (a stencil's tap, `3:-4:1`) has a symbol of the function's table as its result dim, whose
    polynomial is `(size - k - start + stride - 1) floordiv stride`. A negative start counts
    from the end too, within its last elements that every size has (its symbol's lowest size,
    `SizesAttr.lowest`: `MIN_SIZE`, or an input symbol's range's low end), with such a limit:
    `-2:-1:1` is the last element, a static result dim. A non-negative limit slices a
    symbolic dim within its first such elements, a static result dim.
    `%y = graph.slice %x start = [0, 2] limit = [4, 8] stride = [1, 2] : tensor<4x8xf32> -> tensor<4x3xf32>`"""

    name = "graph.slice"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.slice.Tensor",),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    start = prop_def(DenseArrayBase[I64])
    limit = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `start` `=` $start `limit` `=` $limit `stride` `=` $stride attr-dict "
        "`:` type($input) `->` type($result)"
    )
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(
        self,
        input: SSAValue | Operation,
        start: Sequence[int],
        limit: Sequence[int],
        stride: Sequence[int],
        dims: Sequence[Dim] | None = None,
    ):
        """`dims`, the result's dims, where a symbolic dim is sliced from its end but not
        whole (its symbol there)."""
        in_dims = dims_of(SSAValue.get(input))
        # a symbolic dim's limit DYNAMIC_INDEX (`shape_of`'s) is the whole dim
        limit = [
            -1 if isinstance(d, str) and e == DYNAMIC_INDEX else e
            for d, e in zip(in_dims, limit, strict=True)
        ]
        super().__init__(
            input,
            slice_dims(in_dims, start, limit, stride) if dims is None else dims,
            start=_i64_array(start),
            limit=_i64_array(limit),
            stride=_i64_array(stride),
        )

    @property
    def bounds(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return _ints(self.start), _ints(self.limit), _ints(self.stride)

    @property
    def index(self) -> tuple[slice, ...]:
        """The slice as a Python index (`x[op.index]`) at any size: a start or limit `-1 - k`
        from a symbolic dim's end as `-k` (a limit none for the whole dim)."""
        start, limit, stride = self.bounds
        return tuple(
            slice(s if s >= 0 else s + 1, e if e >= 0 else None if e == -1 else e + 1, k)
            for s, e, k in zip(start, limit, stride, strict=True)
        )

    def verify_(self) -> None:
        self._check_tensors()
        dims = dims_of(self.input)
        start, limit, stride = self.bounds
        _check_counts(len(dims), "the operand's rank", start=start, limit=limit, stride=stride)
        from_end: dict[int, Dim] = {}
        for i, (s, e, k) in enumerate(zip(start, limit, stride, strict=True)):
            d = dims[i]
            if (s, e, k) == WHOLE_SYMBOLIC_DIM and isinstance(d, str):
                continue
            lowest = lowest_size(self, d) if isinstance(d, str) else d
            if isinstance(d, str) and s < 0:
                if not (k > 0 and s < e < 0 and -1 - s <= lowest):
                    raise VerifyException(
                        f"expected a slice within the last {lowest} elements of symbolic dim "
                        f"{i} (limit after start, both from the end, a positive stride), found "
                        f"{s}:{e}:{k}"
                    )
                continue
            if isinstance(d, str) and e < 0:
                from_end[i] = self._sliced_symbol(i, d, s, -1 - e, k)
                continue
            # a symbolic dim is at least its lowest size long: a slice within that is static
            size = lowest
            if k <= 0:
                raise VerifyException(f"expected a positive stride in dim {i}, found {k}")
            if not 0 <= s <= e <= size:
                raise VerifyException(
                    f"expected 0 <= start <= limit <= {size} in dim {i}, found {s}:{e}"
                )
        expected = slice_dims(dims, start, limit, stride)
        _check_result_shape(self, tuple(from_end.get(i, d) for i, d in enumerate(expected)))

    def _sliced_symbol(self, i: int, symbol: str, start: int, back: int, stride: int) -> Dim:
        """The result dim `i` of symbolic input dim `symbol` sliced from `start` to `back`
        elements before its end by `stride`: a symbol whose polynomial is the slice's length
        for every size."""
        if start < 0 or stride <= 0:
            raise VerifyException(
                f"expected a start >= 0 and a positive stride in dim {i}, found {start}, {stride}"
            )
        found = dims_of(self.result)
        at = found[i] if len(found) > i else "none"
        size = SizeExpr.symbol(symbol)
        table = size_table(self)
        length = None if table is None else sliced_length(table, size, start, back, stride)
        if table is None or length is None or not isinstance(at, str | int):
            raise VerifyException(
                f"expected result dim {i} of size ({size} - {back + start}) / {stride} rounded "
                f"up, found {at} (no symbol of the function's table)"
            )
        if table.expand(length) != table.expand(SizeExpr.dim(at)):
            raise VerifyException(
                f"expected result dim {i} of size ({size} - {back + start}) / {stride} rounded "
                f"up, found {at} (not equal for every size of its symbol)"
            )
        return at


def sliced_length(
    table: SizesAttr, size: SizeExpr, start: int, back: int, stride: int
) -> SizeExpr | None:
    """The length of a dim of `size` (a polynomial of the table's symbols) sliced from
    `start` to `back` elements before its end by `stride`, `(size - back - start + stride -
    1) floordiv stride`, as a polynomial of the table's symbols; None where its floor division
    is no symbol of the table."""
    return table.floordiv(size - SizeExpr.constant(back + start - stride + 1), stride)


def slice_shape(
    start: Sequence[int], limit: Sequence[int], stride: Sequence[int]
) -> tuple[int, ...]:
    return tuple(max(0, (e - s + k - 1) // k) for s, e, k in zip(start, limit, stride, strict=True))


WHOLE_SYMBOLIC_DIM = (0, -1, 1)
"""A slice's `start:limit:stride` along a symbolic dim: the whole dim."""


def lowest_size(op: Operation, symbol: str) -> int:
    """The smallest size `symbol` takes at a call, by the table of the function `op` is in
    (`SizesAttr.lowest`; `MIN_SIZE` without one)."""
    table = size_table(op)
    return MIN_SIZE if table is None else table.lowest(symbol)


def slice_dims(
    dims: Sequence[Dim], start: Sequence[int], limit: Sequence[int], stride: Sequence[int]
) -> tuple[Dim, ...]:
    """A slice's result dims: a symbolic dim kept whole stays itself, one sliced from a start
    to its end otherwise is a dynamic dim without its symbol (-1, which `SliceOp` takes from
    its `dims`), others (a symbolic dim's first or last elements too) as `slice_shape`."""
    static = slice_shape(start, limit, stride)
    return tuple(
        (d if bounds == WHOLE_SYMBOLIC_DIM else -1)
        if isinstance(d, str) and bounds[1] < 0 <= bounds[0]
        else n
        for d, n, bounds in zip(dims, static, zip(start, limit, stride, strict=True), strict=True)
    )


@irdl_op_definition
class ConcatOp(IRDLOperation):
    """Concatenation along `dim`.
    `%y = graph.concat %a, %b dim = 0 : tensor<2x4xf32>, tensor<3x4xf32> -> tensor<5x4xf32>`"""

    name = "graph.concat"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.cat.default",),
        fuzz=Fuzz.drawn_by("concat"),
    )
    inputs = var_operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$inputs `dim` `=` $dim attr-dict `:` type($inputs) `->` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, inputs: Sequence[SSAValue | Operation], dim: int, size: Dim | None = None):
        """The concatenation along `dim`; `size`, the result's size there, where an operand's
        is symbolic (a symbol of the table whose polynomial is their sum). Without it that dim
        is `?` without its symbol, which the verifier refuses until it is named (the importer
        names it from torch's type)."""
        values = [SSAValue.get(v) for v in inputs]
        shape = list(dims_of(values[0]))
        sizes = [dims_of(v)[dim] for v in values]
        if size is None:
            symbolic = not all(isinstance(d, int) for d in sizes)
            size = -1 if symbolic else sum(d for d in sizes if isinstance(d, int))
        shape[dim] = size
        super().__init__(
            operands=[values],
            result_types=[tensor_of(dtype_of(values[0]), shape)],
            properties={"dim": IntegerAttr(dim, i64)},
        )

    @property
    def axis(self) -> int:
        return self.dim.value.data

    def verify_(self) -> None:
        if not self.inputs:
            raise VerifyException("expected at least one operand")
        types = [_check_tensor(v, f"operand {i}") for i, v in enumerate(self.inputs)]
        _check_tensor(self.result, "result")
        _check_same_dtype([*self.inputs, self.result], "operands and result")
        rank = len(types[0].get_shape())
        _check_dims([self.axis], rank, "dim")
        first = dims_of(self.inputs[0])
        for i, (v, t) in enumerate(zip(self.inputs, types, strict=True)):
            s = dims_of(v)
            if len(t.get_shape()) != rank or any(
                a != b for j, (a, b) in enumerate(zip(s, first, strict=True)) if j != self.axis
            ):
                raise VerifyException(
                    f"expected operand {i} of shape {fmt_shape(s)} to match "
                    f"{fmt_shape(first)} outside dim {self.axis}"
                )
        sizes = [dims_of(v)[self.axis] for v in self.inputs]
        shape = list(first)
        if all(isinstance(d, int) for d in sizes):
            shape[self.axis] = sum(d for d in sizes if isinstance(d, int))
            _check_result_shape(self, shape)
            return
        found = dims_of(self.result)
        shape[self.axis] = found[self.axis]
        _check_result_shape(self, shape)
        total = SizeExpr()
        for d in sizes:
            total = total + SizeExpr.dim(d)
        table = size_table(self)
        if table is None or table.expand(total) != table.expand(SizeExpr.dim(found[self.axis])):
            raise VerifyException(
                f"expected result dim {self.axis} of size {total}, found {found[self.axis]} "
                "(not equal for every size of their symbols)"
            )


# ---------------------------------------------------------------------------------------------
# Gather: indexing with computed indices
# ---------------------------------------------------------------------------------------------


INDEX_DTYPES = ("i32", "i64")
"""The element types of an index tensor (torch indexes with int32 and int64 tensors)."""


@irdl_op_definition
class GatherOp(IRDLOperation):
    """Indirect load: `k` index tensors pick table dims `dim .. dim+k-1`, and the result has
    one dim in their place: `result[p] = table[p[:dim], i0[p], .., ik-1[p], p[dim+1:]]`. Each
    index tensor broadcasts to the result (every dim of size 1 or the result's); so does the
    table outside the indexed dims (a dim of size 1 is read at 0, a larger one at `p`, as
    torch.gather reads an input larger than its index). An index must lie in `[0, n)` (`n`
    the size of the dim it indexes), or in `[-n, n)` with `wrap` (a negative one counts from
    the end, as `x[idx]` does); any other raises like eager (`index out of range in self`).
    embedding, index_select, gather and advanced indexing are this op between reshapes and
    broadcasts.
    `%y = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x1xi64> -> tensor<6x4xf32>`"""

    name = "graph.gather"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.gather.default",
            "aten.embedding.default",
            "aten.index_select.default",
            "aten.index.Tensor",
        ),
        fuzz=Fuzz.drawn_by("gather"),
        without={"torch": "OWN_IMPLS (checks every index like eager, then indexes)"},
    )
    table = operand_def(TensorType)
    indices = var_operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    wrap = opt_prop_def(UnitAttr)
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$table `[` $indices `]` `dim` `=` $dim (`wrap` $wrap^)? attr-dict `:` type($table) `,` "
        "type($indices) `->` type($result)"
    )
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(
        self,
        table: SSAValue | Operation,
        indices: Sequence[SSAValue | Operation],
        dim: int,
        shape: Sequence[Dim],
        wrap: bool = False,
    ):
        table = SSAValue.get(table)
        super().__init__(
            operands=[table, [SSAValue.get(i) for i in indices]],
            result_types=[tensor_of(dtype_of(table), shape)],
            properties={"dim": IntegerAttr(dim, i64), "wrap": UnitAttr() if wrap else None},
        )

    @property
    def axis(self) -> int:
        return self.dim.value.data

    @property
    def wraps(self) -> bool:
        return self.wrap is not None

    def table_dim(self, m: int) -> int:
        """The table dim that result dim `m` (not the indexed one) reads."""
        return m if m < self.axis else m + len(self.indices) - 1

    def verify_(self) -> None:
        table = _check_tensor(self.table, "table").get_shape()
        out = _check_tensor(self.result, "result").get_shape()
        _check_same_dtype([self.table, self.result], "table and result")
        k, rank = len(self.indices), len(out)
        if k == 0:
            raise VerifyException("expected at least one index tensor")
        if rank == 0 or len(table) != rank + k - 1:
            raise VerifyException(
                f"expected a table of rank {rank + k - 1} (the result's rank {rank} + "
                f"{k - 1}) and a result of rank >= 1, found {len(table)}"
            )
        _check_dims([self.axis], rank, "dim")
        result = dims_of(self.result)
        for j, v in enumerate(self.indices):
            _check_tensor(v, f"index {j}")
            shape = dims_of(v)
            if str(dtype_of(v)) not in INDEX_DTYPES:
                raise VerifyException(f"expected index {j} of type i32 or i64, found {dtype_of(v)}")
            if len(shape) != rank or any(
                a not in (1, b) for a, b in zip(shape, result, strict=True)
            ):
                raise VerifyException(
                    f"index {j} of shape {fmt_shape(shape)} does not broadcast to the result "
                    f"shape {fmt_shape(result)}"
                )
        for m in range(rank):
            self._check_table_dim(m, dims_of(self.table)[self.table_dim(m)], result[m])

    def _check_table_dim(self, m: int, size: Dim, out: Dim) -> None:
        """A table dim outside the indexed ones is 1, or at least as large as the result's
        (a symbolic one: the result's own symbol, or one the function's size table holds
        larger: `SizesAttr.at_most`)."""
        if m == self.axis or size == 1 or size == out:
            return
        if isinstance(size, int) and isinstance(out, int) and size >= out:
            return
        table = size_table(self)
        if table is not None and table.at_most(out, size):
            return
        raise VerifyException(
            f"table dim {self.table_dim(m)} of size {size} is smaller than result "
            f"dim {m} of size {out} (it must be 1 or at least as large)"
        )


# ---------------------------------------------------------------------------------------------
# Index arithmetic: arange, flip, roll
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class IotaOp(IRDLOperation):
    """Integers counting along `dim`: the element at index i is `start + i[dim] * step`, the
    same along the other dims (torch.arange, broadcast). No operands: a kernel computes it
    from the loop index. `%y = graph.iota dim = 0 start = 2 step = 3 : tensor<4xi64>`"""

    name = "graph.iota"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.arange.start_step", "aten.arange.start", "aten.arange.default"),
        fuzz=Fuzz.drawn_by("index_op"),
        without={"scalar": "lower-to-loops computes it from the loop index"},
    )
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    start = prop_def(IntegerAttr[I64])
    step = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), Elementwise())
    assembly_format = (
        "`dim` `=` $dim `start` `=` $start `step` `=` $step attr-dict `:` type($result)"
    )
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, result_type: Attribute, dim: int = 0, start: int = 0, step: int = 1):
        super().__init__(
            result_types=[result_type],
            properties={
                "dim": IntegerAttr(dim, i64),
                "start": IntegerAttr(start, i64),
                "step": IntegerAttr(step, i64),
            },
        )

    @property
    def axis(self) -> int:
        return self.dim.value.data

    @property
    def counting(self) -> tuple[int, int]:
        """(start, step)."""
        return self.start.value.data, self.step.value.data

    def verify_(self) -> None:
        t = _check_tensor(self.result, "result")
        if not isinstance(t.element_type, IntegerType) or t.element_type == i1:
            raise VerifyException(f"expected an i32 or i64 result, found {t.element_type}")
        rank = len(t.get_shape())
        _check_dims([self.axis], rank, "dim")
        if self.counting[1] == 0:
            raise VerifyException("expected a non-zero step")


def _draw_size_value(rng: Random, x: str, shape: tuple[int, ...]) -> str | None:
    """A size of the operand's in arithmetic or a comparison (`x >= x.shape[1] - 3`): a
    number in a static program, a `graph.size_value` where the dim is symbolic."""
    if not shape:
        return None
    d, k = rng.randrange(len(shape)), rng.randint(0, 3)
    if rng.random() < 0.5:
        return f"({x} + ({x}.shape[{d}] - {k}))"
    return f"({x} >= {x}.shape[{d}] - {k})"


@irdl_op_definition
class SizeValueOp(IRDLOperation):
    """A size of the call as a 0-d i64 tensor: a polynomial of the function's size symbols,
    read where an elementwise op takes a size as a number (`x >= h - 7`). No operands: a
    kernel computes it from its size arguments.
    `%n = graph.size_value #graph.size_expr<e1 - 7> : tensor<i64>`"""

    name = "graph.size_value"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_in("index_op", "size_value", _draw_size_value),
        without={
            "aten": "made by the importer where an op takes a size of the call as a number",
            "scalar": "lower-to-loops computes it from the kernel's size arguments",
        },
    )
    result = result_def(TensorType)
    value = prop_def(SizeExprAttr)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$value attr-dict `:` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, value: SizeExpr):
        super().__init__(
            result_types=[TensorType(i64, [])], properties={"value": SizeExprAttr(value)}
        )

    @property
    def expr(self) -> SizeExpr:
        return self.value.data

    def verify_(self) -> None:
        t = _check_tensor(self.result, "result")
        if t.element_type != i64 or t.get_shape():
            raise VerifyException(f"expected a 0-d i64 result, found {t}")
        table = size_table(self)
        if table is None:
            if self.parent_op() is not None:
                raise VerifyException("a size value outside a function with a size table")
            return
        missing = sorted(self.expr.symbols - set(table.by_name))
        if missing:
            raise VerifyException(
                f"size symbol '{missing[0]}' of {self.expr} is not in the function's table"
            )


@irdl_op_definition
class FlipOp(SameTypeOp):
    """Reverses the order of the elements along `dims` (torch.flip).
    `%y = graph.flip %x dims = [1] : tensor<4x8xf32>`"""

    name = "graph.flip"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.flip.default",),
        fuzz=Fuzz.drawn_by("index_op"),
    )
    dims = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `dims` `=` $dims attr-dict `:` type($input)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, dims: Sequence[int]):
        super().__init__(input, dims=_i64_array(dims))

    @property
    def flipped(self) -> tuple[int, ...]:
        return _ints(self.dims)

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_dims(self.flipped, len(t.get_shape()))


def _roll_from_aten(b: OpBuilder, a: Mapping[str, Any]) -> SSAValue | None:
    """aten.roll as a `graph.roll` over the dims whose shift moves something; with no dims, of
    the flattened tensor, reshaped back."""
    x = b.tensor(a["self"])
    shifts, dims = list(a["shifts"]), list(a.get("dims") or [])
    if not all(isinstance(v, int) for v in (*shifts, *dims)):
        return None
    shape = shape_of(x)
    rolled = dims if dims else range(len(shape))
    if any(shape[d % len(shape)] < 0 for d in rolled):  # a symbolic size: no `graph.roll` rule
        return None
    if not dims:
        if len(shifts) != 1:
            return None
        flat = b.reshape(x, [numel(shape)])
        return b.reshape(_roll_dims(b, flat, shifts, [0]), shape)
    if len(shifts) != len(dims):
        return None
    return _roll_dims(b, x, shifts, [d % len(shape) for d in dims])


def _roll_dims(b: OpBuilder, x: SSAValue, shifts: Sequence[int], dims: Sequence[int]) -> SSAValue:
    """One shift per dim (torch adds repeated dims' shifts up), reduced modulo its size."""
    total: dict[int, int] = {}
    for shift, dim in zip(shifts, dims, strict=True):
        total[dim] = total.get(dim, 0) + shift
    shape = shape_of(x)
    moved = {d: s % shape[d] for d, s in total.items() if shape[d] > 1 and s % shape[d]}
    if not moved:
        return x
    return b.emit(RollOp(x, list(moved.values()), list(moved)))


def _roll_torch_args(op: RollOp) -> tuple[Any, ...]:
    """torch.roll's shifts and dims after the operand; with no dims, a roll by 0 (a copy)."""
    if not op.rolled:
        return (0,)
    dims, shifts = zip(*op.rolled, strict=True)
    return (shifts, dims)


def _draw_roll(rng: Random, x: str, shape: tuple[int, ...]) -> str | None:
    """torch.roll of one or two dims by up to 40 either way; of a 0-d value, flattened."""
    rank = len(shape)
    if rank >= 1:
        dims = rng.sample(range(rank), rng.randint(1, min(2, rank)))
        shifts = tuple(rng.randint(-40, 40) for _ in dims)
        return f"torch.roll({x}, shifts={shifts}, dims={tuple(dims)})"
    if rng.random() < 0.5:
        return f"torch.roll({x}, {rng.randint(-5, 5)})"
    return None


@irdl_op_definition
class RollOp(SameTypeOp):
    """Rotates the elements along each of `dims` by its `shifts` (torch.roll with dims): the
    element at i comes from (i - shift) mod n.
    `%y = graph.roll %x shifts = [2] dims = [1] : tensor<4x8xf32>`"""

    name = "graph.roll"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.roll",
        torch_args=_roll_torch_args,
        aten=("aten.roll.default",),
        convert=_roll_from_aten,
        fuzz=Fuzz.drawn_in("index_op", "roll", _draw_roll),
    )
    shifts = prop_def(DenseArrayBase[I64])
    dims = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `shifts` `=` $shifts `dims` `=` $dims attr-dict `:` type($input)"

    def __init__(self, input: SSAValue | Operation, shifts: Sequence[int], dims: Sequence[int]):
        super().__init__(input, shifts=_i64_array(shifts), dims=_i64_array(dims))

    @property
    def rolled(self) -> tuple[tuple[int, int], ...]:
        """(dim, shift) pairs."""
        return tuple(zip(_ints(self.dims), _ints(self.shifts), strict=True))

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        dims, shifts = _ints(self.dims), _ints(self.shifts)
        if len(dims) != len(shifts):
            raise VerifyException(
                f"expected as many shifts as dims, found {len(shifts)} and {len(dims)}"
            )
        _check_dims(dims, len(t.get_shape()))


# ---------------------------------------------------------------------------------------------
# Views
# ---------------------------------------------------------------------------------------------


STRIDED_VIEWS: tuple[type[Operation], ...] = (ReshapeOp, PermuteOp, SliceOp)
"""Layout ops torch computes as a view of a strided tensor (`reshape` copies where the strides
allow no view). Outside groups, where only externs (and the return) read them, the runtime runs
them as torch views: no kernel, and an extern output's own strides (the CPU flash attention's
(B, S, H, D) layout) may make the view free."""


def read_only_by_externs(op: Operation, *, or_return: bool = False) -> bool:
    """Whether every reader of `op`'s results is an extern (or, with `or_return`, the return),
    looking through readers that are `STRIDED_VIEWS` themselves."""
    for result in op.results:
        for use in result.uses:
            user = use.operation
            extern = user.has_trait(Extern, value_if_unregistered=False)
            if extern or (or_return and user.name == "func.return"):
                continue
            if not isinstance(user, STRIDED_VIEWS) or not read_only_by_externs(
                user, or_return=or_return
            ):
                return False
    return True


def restores_torch_layout(op: Operation) -> bool:
    """Whether `op` is a `graph.permute` of a torch call's result in memory order back to the
    dims torch gave it (`TorchCallOp.orders`): as a torch view, it is torch's own tensor."""
    if not isinstance(op, PermuteOp):
        return False
    call = op.input.owner
    if not isinstance(call, TorchCallOp) or call.memory_orders is None:
        return False
    order = call.memory_orders[call.results.index(op.input)]
    return order is not None and [order[d] for d in op.permutation] == sorted(order)


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """The strides of a row-major (contiguous) tensor of `shape`, in elements."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _is_row_major(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether (`shape`, `strides`) is a row-major (contiguous) layout, as torch's
    `is_contiguous` says of a tensor with elements: a dim of size 1 may have any stride."""
    dense = row_major_strides(shape)
    return all(n == 1 or s == d for n, s, d in zip(shape, strides, dense, strict=True))


def memory_order(shape: Sequence[int], strides: Sequence[int]) -> tuple[int, ...] | None:
    """The dims of a tensor of `shape` and `strides` in memory order, outermost first, where
    its strides are a dense permutation of a row-major layout other than its own (the tensor's
    `permute(order)` is contiguous); None for anything else: a row-major or empty tensor, or
    one with zero strides or gaps (broadcast or sliced memory). A dim of size 1 has no place in
    memory: its stride orders it among the others, as any order would do."""
    if 0 in shape or _is_row_major(shape, strides):
        return None
    order = tuple(sorted(range(len(shape)), key=lambda d: (-strides[d], d)))
    dense = row_major_strides([shape[d] for d in order])
    if any(shape[d] != 1 and strides[d] != dense[k] for k, d in enumerate(order)):
        return None
    return order


def reshape_strides(
    shape: Sequence[int], strides: Sequence[int], new_shape: Sequence[int]
) -> tuple[int, ...] | None:
    """The strides of `new_shape` viewing memory laid out as (`shape`, `strides`), or None where
    no view exists and torch's reshape copies (ATen's `computeStride`: each run of dims that
    are contiguous with one another may be split or merged, never one dim across runs)."""
    if math.prod(shape) == 0 or not shape:
        return row_major_strides(new_shape)
    new_strides = [0] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_stride = strides[-1]
    tensor_numel = view_numel = 1
    for d in reversed(range(len(shape))):
        tensor_numel *= shape[d]
        if d == 0 or (shape[d - 1] != 1 and strides[d - 1] != tensor_numel * chunk_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_stride
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if d > 0:
                chunk_stride = strides[d - 1]
                tensor_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


def view_strides(op: Operation, strides: Sequence[int]) -> tuple[int, ...] | None:
    """The strides of the result of `op`, one of `STRIDED_VIEWS`, run as a torch view of an
    input with `strides`; None for a reshape that torch can only run as a copy."""
    if isinstance(op, PermuteOp):
        return tuple(strides[d] for d in op.permutation)
    if isinstance(op, SliceOp):
        return tuple(s * k for s, k in zip(strides, op.bounds[2], strict=True))
    assert isinstance(op, ReshapeOp)
    return reshape_strides(shape_of(op.input), strides, shape_of(op.result))


LAYOUT_OPS: tuple[type[IRDLOperation], ...] = (
    BroadcastInDimOp,
    ReshapeOp,
    PermuteOp,
    SliceOp,
    ConcatOp,
    GatherOp,
    IotaOp,
    SizeValueOp,
    FlipOp,
    RollOp,
)
"""The layout and indexing ops, in the `Graph` dialect's op list."""

INDEX_MAP_OPS: tuple[type[IRDLOperation], ...] = (
    BroadcastInDimOp,
    ReshapeOp,
    PermuteOp,
    SliceOp,
    FlipOp,
    RollOp,
)
"""Ops whose element is one element of their input, at an index computed from theirs (its
map is the op's lowering, `xfuse/passes/lowering/operand_index.py`)."""
