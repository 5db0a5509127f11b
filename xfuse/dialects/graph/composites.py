"""Composite ops: softmax, log-softmax, layer and RMS norm, GELU, SiLU and variance, kept whole
by the importer; `decompose` rewrites them into the primitives of the other families."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    I64,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import Fuzz, OpFacts
from xfuse.dialects.graph.base import (
    Composite,
    SameTypeOp,
    _check_dims,
    _check_float,
    _check_tensor,
    dims_of,
    dtype_of,
    fmt_shape,
    shape_of,
)
from xfuse.dialects.graph.elementwise import FloatUnaryOp
from xfuse.dialects.graph.reductions import ReducingOp


class _DimCompositeOp(SameTypeOp):
    dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), Composite())
    assembly_format = "$input `dim` `=` $dim attr-dict `:` type($input)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, dim: int):
        rank = len(shape_of(SSAValue.get(input)))
        super().__init__(input, dim=IntegerAttr(dim % rank if rank else 0, i64))

    @property
    def axis(self) -> int:
        return self.dim.value.data

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_float(t)
        _check_dims([self.axis], max(1, len(t.get_shape())), "dim")


@irdl_op_definition
class SoftmaxOp(_DimCompositeOp):
    """Softmax along `dim`. `%y = graph.softmax %x dim = 1 : tensor<4x8xf32>`"""

    name = "graph.softmax"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.softmax.int", "aten._softmax.default"),
        fuzz=Fuzz.drawn_by("normalization"),
    )


@irdl_op_definition
class LogSoftmaxOp(_DimCompositeOp):
    """Log-softmax along `dim`. `%y = graph.log_softmax %x dim = 1 : tensor<4x8xf32>`"""

    name = "graph.log_softmax"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.log_softmax.int", "aten._log_softmax.default"),
        fuzz=Fuzz.drawn_by("normalization"),
    )


class _NormOp(IRDLOperation):
    """Normalisation over the last `rank` dims with optional affine weight (and bias)."""

    rank = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float64Type])
    traits = traits_def(Pure(), Composite())
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(
        self,
        input: SSAValue | Operation,
        rank: int,
        eps: float,
        affine: Sequence[SSAValue | Operation | None],
    ):
        """The op of `input` and its optional `affine` operands (weight, and bias)."""
        input = SSAValue.get(input)
        super().__init__(
            operands=[input, *([SSAValue.get(v)] if v is not None else [] for v in affine)],
            result_types=[input.type],
            properties={"rank": IntegerAttr(rank, i64), "eps": FloatAttr(eps, Float64Type())},
        )

    @property
    def normalized_rank(self) -> int:
        return self.rank.value.data

    @property
    def epsilon(self) -> float:
        return self.eps.value.data

    def _check_norm(self, affine: Sequence[SSAValue | None]) -> None:
        t = _check_tensor(self.operands[0], "operand")
        _check_float(t)
        shape, r = dims_of(self.operands[0]), self.normalized_rank

        if not 1 <= r <= len(shape):
            raise VerifyException(f"expected rank in [1, {len(shape)}], found {r}")
        normalized = tuple(shape[len(shape) - r :])
        for name, v in zip(("weight", "bias"), affine, strict=False):
            if v is None:
                continue
            _check_tensor(v, name)
            if dims_of(v) != normalized:
                raise VerifyException(
                    f"expected {name} of shape {fmt_shape(normalized)}, found {fmt_shape(dims_of(v))}"
                )
            if dtype_of(v) != t.element_type:
                raise VerifyException(
                    f"expected {name} of element type {t.element_type}, found {dtype_of(v)}"
                )


@irdl_op_definition
class LayerNormOp(_NormOp):
    """Layer normalisation over the last `rank` dims.
    `%y = graph.layer_norm %x weight(%w : tensor<8xf32>) bias(%b : tensor<8xf32>) rank = 1 eps = 1.0e-05 : tensor<4x8xf32>`"""

    name = "graph.layer_norm"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.layer_norm.default", "aten.native_layer_norm.default"),
        fuzz=Fuzz.drawn_by("normalization"),
    )
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    weight = opt_operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(T)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$input (`weight` `(` $weight^ `:` type($weight) `)`)? "
        "(`bias` `(` $bias^ `:` type($bias) `)`)? `rank` `=` $rank `eps` `=` $eps "
        "attr-dict `:` type($input)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        rank: int,
        eps: float,
        weight: SSAValue | Operation | None = None,
        bias: SSAValue | Operation | None = None,
    ):
        super().__init__(input, rank, eps, [weight, bias])

    def verify_(self) -> None:
        self._check_norm([self.weight, self.bias])


@irdl_op_definition
class RMSNormOp(_NormOp):
    """RMS normalisation over the last `rank` dims.
    `%y = graph.rms_norm %x weight(%w : tensor<8xf32>) rank = 1 eps = 1.0e-06 : tensor<4x8xf32>`"""

    name = "graph.rms_norm"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.rms_norm.default",),
        fuzz=Fuzz.drawn_by("normalization"),
    )
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    weight = opt_operand_def(TensorType)
    result = result_def(T)
    assembly_format = (
        "$input (`weight` `(` $weight^ `:` type($weight) `)`)? `rank` `=` $rank `eps` `=` $eps "
        "attr-dict `:` type($input)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        rank: int,
        eps: float,
        weight: SSAValue | Operation | None = None,
    ):
        super().__init__(input, rank, eps, [weight])

    def verify_(self) -> None:
        self._check_norm([self.weight])


@irdl_op_definition
class GeluOp(SameTypeOp):
    """GELU, exact (erf) or `approximate = "tanh"`.
    `%y = graph.gelu %x approximate = "tanh" : tensor<4xf32>`"""

    name = "graph.gelu"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.gelu.default",),
        fuzz=Fuzz.unary("F.gelu"),
    )
    approximate = prop_def(StringAttr)
    traits = traits_def(Pure(), Composite())
    assembly_format = "$input `approximate` `=` $approximate attr-dict `:` type($input)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, approximate: str = "none"):
        super().__init__(input, approximate=StringAttr(approximate))

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_float(t)
        if self.approximate.data not in ("none", "tanh"):
            raise VerifyException(
                f'expected approximate to be "none" or "tanh", found "{self.approximate.data}"'
            )


@irdl_op_definition
class SiluOp(FloatUnaryOp):
    """x * sigmoid(x). `%y = graph.silu %x : tensor<4xf32>`"""

    name = "graph.silu"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.nn.functional.silu",
        aten=("aten.silu.default",),
        fuzz=Fuzz.unary("F.silu"),
    )
    traits = traits_def(Pure(), Composite())


@irdl_op_definition
class VarOp(ReducingOp):
    """Variance over `dims` with Bessel's `correction` (torch.var).
    `%y = graph.var %x dims = [1] correction = 1 keepdim : tensor<4x8xf32> -> tensor<4x1xf32>`"""

    name = "graph.var"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.var.dim", "aten.var.correction", "aten.var.default"),
        fuzz=Fuzz.reduction("var"),
    )
    correction = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), Composite())
    assembly_format = (
        "$input `dims` `=` $dims `correction` `=` $correction (`keepdim` $keepdim^)? attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        dims: Sequence[int],
        correction: int = 1,
        keepdim: bool = False,
    ):
        super().__init__(input, dims, keepdim, correction=IntegerAttr(correction, i64))

    def verify_(self) -> None:
        t = self._check_tensors()
        _check_float(t)
        dims = dims_of(self.input)
        self._check_reduced(dims)


COMPOSITE_OPS: tuple[type[IRDLOperation], ...] = (
    SoftmaxOp,
    LogSoftmaxOp,
    LayerNormOp,
    RMSNormOp,
    GeluOp,
    SiluOp,
    VarOp,
)
"""The composite ops, in the `Graph` dialect's op list."""
