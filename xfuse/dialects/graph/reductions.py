"""Reductions along dims (sum, mean, max, min, prod, argmax, argmin) and scans along one dim
(cumsum, cumprod, logcumsumexp, cummax, cummin)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import I64, DenseArrayBase, IntegerAttr, StringAttr, UnitAttr, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, opt_prop_def, prop_def, traits_def
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import Fuzz, OpFacts
from xfuse.dialects.graph.base import (
    Dim,
    OneTensorOp,
    Reduction,
    _check_dims,
    _check_float,
    _check_numeric,
    _check_result_shape,
    _check_same_dtype,
    _i64_array,
    _ints,
    dims_of,
    dtype_of,
    is_float,
    reduced_shape,
    shape_of,
)

# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------


class ReducingOp(OneTensorOp):
    """Base of ops that reduce their operand over `dims`, keeping them as size 1 where
    `keepdim` is set: the reductions and `var`."""

    dims = prop_def(DenseArrayBase[I64])
    keepdim = opt_prop_def(UnitAttr)
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(
        self,
        input: SSAValue | Operation,
        dims: Sequence[int],
        keepdim: bool = False,
        dtype: Attribute | None = None,
        **properties: Attribute | None,
    ):
        """`dims` may count from the end; a rank-0 operand has none."""
        input = SSAValue.get(input)
        rank = len(shape_of(input))
        dims = sorted(d % rank for d in dims) if rank else []
        super().__init__(
            input,
            reduced_shape(dims_of(input), dims, keepdim),
            dtype,
            dims=_i64_array(dims),
            keepdim=UnitAttr() if keepdim else None,
            **properties,
        )

    @property
    def reduce_dims(self) -> tuple[int, ...]:
        return _ints(self.dims)

    @property
    def keeps_dims(self) -> bool:
        return self.keepdim is not None

    def _check_reduced(self, shape: Sequence[Dim]) -> None:
        """Check that `dims` are dims of `shape` and the result has its reduced shape."""
        _check_dims(self.reduce_dims, len(shape))
        _check_result_shape(self, reduced_shape(shape, self.reduce_dims, self.keeps_dims))


class ReduceOp(ReducingOp):
    """Base of reductions over `dims`, keeping them as size 1 when `keepdim` is set."""

    traits = traits_def(Pure(), Reduction())
    assembly_format = (
        "$input `dims` `=` $dims (`keepdim` $keepdim^)? attr-dict `:` type($input) "
        "`->` type($result)"
    )

    FLOAT_ONLY: ClassVar[bool] = False

    def verify_(self) -> None:
        t = self._check_tensors()
        if self.FLOAT_ONLY:
            _check_float(t)
        self._check_reduced(dims_of(self.input))


@irdl_op_definition
class ReduceSumOp(ReduceOp):
    """Sum. `%y = graph.reduce_sum %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>`"""

    name = "graph.reduce_sum"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sum",
        aten=("aten.sum.dim_IntList", "aten.sum.default"),
        fuzz=Fuzz.reduction("sum", weight=2, random_graph=True),
    )


@irdl_op_definition
class ReduceMeanOp(ReduceOp):
    """Mean. `%y = graph.reduce_mean %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>`"""

    name = "graph.reduce_mean"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.mean",
        aten=("aten.mean.dim", "aten.mean.default"),
        fuzz=Fuzz.reduction("mean", random_graph=True),
    )
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class ReduceMaxOp(ReduceOp):
    """Max. `%y = graph.reduce_max %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>`"""

    name = "graph.reduce_max"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.amax",
        aten=("aten.amax.default", "aten.max.default"),
        fuzz=Fuzz.reduction("amax", exact=True, random_graph=True),
    )


@irdl_op_definition
class ReduceMinOp(ReduceOp):
    """Min. `%y = graph.reduce_min %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>`"""

    name = "graph.reduce_min"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.amin",
        aten=("aten.amin.default", "aten.min.default"),
        fuzz=Fuzz.reduction("amin", exact=True),
    )


@irdl_op_definition
class ReduceProdOp(ReduceOp):
    """Product. `%y = graph.reduce_prod %x dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>`"""

    name = "graph.reduce_prod"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.prod.dim_int", "aten.prod.default"),
        fuzz=Fuzz.reduction("prod", exact_operands=True),
    )


class ArgReduceOp(ReduceOp):
    """Base of argmax/argmin: the i64 index, along one dim, of the first largest/smallest
    element (NaN counting as larger and smaller than any number, as torch)."""

    def __init__(self, input: SSAValue | Operation, dim: int, keepdim: bool = False):
        input = SSAValue.get(input)
        ReducingOp.__init__(self, input, [dim % len(shape_of(input))], keepdim, i64)

    def verify_(self) -> None:
        t = self._check_tensors(same_dtype=False)
        _check_numeric(t)
        if dtype_of(self.result) != i64:
            raise VerifyException(f"expected an i64 result, found {dtype_of(self.result)}")
        if len(self.reduce_dims) != 1:
            raise VerifyException(f"expected one dim, found {list(self.reduce_dims)}")
        self._check_reduced(dims_of(self.input))


@irdl_op_definition
class ArgMaxOp(ArgReduceOp):
    """Index of the first maximum along a dim. `%i = graph.argmax %x dims = [1] : tensor<4x8xf32> -> tensor<4xi64>`"""

    name = "graph.argmax"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.argmax.default",),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class ArgMinOp(ArgReduceOp):
    """Index of the first minimum along a dim. `%i = graph.argmin %x dims = [0] keepdim : tensor<4x8xf32> -> tensor<1x8xi64>`"""

    name = "graph.argmin"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.argmin.default",),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


# ---------------------------------------------------------------------------------------------
# Scans
# ---------------------------------------------------------------------------------------------


SCAN_KINDS = ("sum", "prod", "logsumexp", "max", "min", "argmax", "argmin")
"""What a scan combines: `argmax` / `argmin` are cummax's / cummin's indices (i64)."""


SCAN_ARG_KINDS = ("argmax", "argmin")


@irdl_op_definition
class ScanOp(OneTensorOp):
    """Inclusive scan along `dim`: element i combines elements 0..i of its row, as eager's CPU
    kernels do, one after the other (torch's cumsum, cumprod, logcumsumexp, and cummax's /
    cummin's values). f16/bf16 accumulate in f32 and round each result. `max` / `min` take
    the element when it is NaN or >= (<=) the value so far, unless that is NaN: ties and NaNs
    take the later element; `argmax` / `argmin` are its position (i64, cummax's / cummin's
    indices). `logsumexp` combines as eager: log1p(exp(min - max)) + max, or the element
    when both are the same infinity.
    `%y = graph.scan %x dim = 1 kind = "sum" : tensor<4x8xf32> -> tensor<4x8xf32>`"""

    name = "graph.scan"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.cumsum.default",
            "aten.cumprod.default",
            "aten.logcumsumexp.default",
            "aten.cummax.default",
            "aten.cummin.default",
        ),
        fuzz=Fuzz.drawn_by("scan"),
        without={"scalar": "lower-to-loops emits it: an scf.for along dim carrying the value"},
    )
    dim = prop_def(IntegerAttr[I64])
    kind = prop_def(StringAttr)
    traits = traits_def(Pure(), Reduction())
    assembly_format = (
        "$input `dim` `=` $dim `kind` `=` $kind attr-dict `:` type($input) `->` type($result)"
    )
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, dim: int, kind: str):
        input = SSAValue.get(input)
        rank = len(shape_of(input))
        super().__init__(
            input,
            dims_of(input),
            i64 if kind in SCAN_ARG_KINDS else None,
            dim=IntegerAttr(dim % rank if rank else dim, i64),
            kind=StringAttr(kind),
        )

    @property
    def axis(self) -> int:
        return self.dim.value.data

    @property
    def combines(self) -> str:
        """The kind: one of `SCAN_KINDS`."""
        return self.kind.data

    def verify_(self) -> None:
        t = self._check_tensors(same_dtype=False)
        kind = self.combines
        if kind not in SCAN_KINDS:
            raise VerifyException(f'expected kind in {list(SCAN_KINDS)}, found "{kind}"')
        _check_dims([self.axis], len(t.get_shape()), "dim")
        if kind in SCAN_ARG_KINDS:
            if dtype_of(self.result) != i64:
                raise VerifyException(
                    f"expected an i64 result for {kind}, found {dtype_of(self.result)}"
                )
        else:
            _check_same_dtype([self.input, self.result], "operand and result")
        if kind in ("sum", "prod") and t.element_type == i1:
            raise VerifyException(f"expected a numeric operand for {kind}, found i1")
        if kind == "logsumexp" and not is_float(t.element_type):
            raise VerifyException(
                f"expected a floating-point operand for logsumexp, found {t.element_type}"
            )
        _check_result_shape(self, dims_of(self.input))


REDUCTION_OPS: tuple[type[IRDLOperation], ...] = (
    ReduceSumOp,
    ReduceMeanOp,
    ReduceMaxOp,
    ReduceMinOp,
    ReduceProdOp,
    ArgMaxOp,
    ArgMinOp,
    ScanOp,
)
"""The reduction and scan ops, in the `Graph` dialect's op list."""
