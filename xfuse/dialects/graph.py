"""
The `graph` dialect: tensor-level operations of a PyTorch program.

Values are builtin ranked tensors with static shapes and one of the dtypes in `DTYPES`.
Every op carries an op-kind trait (`Elementwise`, `Broadcast`, `Injective`, `Reduction`,
`Extern`, `Composite`) that the fusion passes read; TVM's pattern kinds are the model.

Broadcasting follows torch: shapes are aligned on the right and a dim of size 1 stretches.
Binary ops require equal element types (the importer inserts `graph.cast` where torch would
promote), comparisons yield `i1`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BFloat16Type,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    Signedness,
    StringAttr,
    TensorType,
    UnitAttr,
    i1,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, OpTrait, Pure
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import (
    Fuzz,
    OpFacts,
    ScalarBuilder,
    ScalarFn,
    ScalarRule,
    binary,
    cmpf,
    cmpi,
    unary,
)
from xfuse.dialects.mlir_ops import ErfcOp as MathErfcOp
from xfuse.dialects.mlir_ops import RemFOp
from xfuse.dialects.torch_args import tensor_ref
from xfuse.ir.names import TIES_KEEP_FIRST_ATTR

# ---------------------------------------------------------------------------------------------
# Op-kind traits, read by fusion (xfuse/passes/fusion/legality.py)
# ---------------------------------------------------------------------------------------------


class OpKind(OpTrait):
    """The fusion kind of an op; `kind` is the name used in reports and group attributes."""

    kind: ClassVar[str] = "opaque"


class Elementwise(OpKind):
    """Each output element depends on the input elements at the same (broadcast) index."""

    kind: ClassVar[str] = "elementwise"


class Broadcast(OpKind):
    """Replicates its input along new or size-1 dims: index arithmetic, no data movement."""

    kind: ClassVar[str] = "broadcast"


class Injective(OpKind):
    """A layout op (reshape, permute, slice, concat): each output element reads one input element."""

    kind: ClassVar[str] = "injective"


class Reduction(OpKind):
    """Combines the elements along some dims into one."""

    kind: ClassVar[str] = "reduction"


class Extern(OpKind):
    """Runs through a library or an eager torch call; a fusion boundary."""

    kind: ClassVar[str] = "extern"


class Composite(OpKind):
    """A composite op (softmax, layer_norm, ...) that `decompose` rewrites into primitives."""

    kind: ClassVar[str] = "composite"


KIND_TRAITS: tuple[type[OpKind], ...] = (
    Elementwise,
    Broadcast,
    Injective,
    Reduction,
    Extern,
    Composite,
)


def op_kind(op: Operation) -> str:
    """The kind name of a graph op ("elementwise", ...), or "opaque" for any other op."""
    for trait in KIND_TRAITS:
        if op.has_trait(trait):
            return trait.kind
    return OpKind.kind


# ---------------------------------------------------------------------------------------------
# Types and shape helpers
# ---------------------------------------------------------------------------------------------

FLOAT_TYPES = (Float32Type, Float16Type, BFloat16Type, Float64Type)
DTYPE_NAMES = "f32, f16, bf16, f64, i32, i64, i1"


def is_float(t: Attribute) -> bool:
    return isinstance(t, FLOAT_TYPES)


def is_supported_element_type(t: Attribute) -> bool:
    if is_float(t):
        return True
    return (
        isinstance(t, IntegerType)
        and t.width.data in (1, 32, 64)
        and t.signedness.data == Signedness.SIGNLESS
    )


def tensor_type(value: SSAValue | Attribute) -> TensorType[Attribute]:
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType)
    return t  # pyright: ignore[reportUnknownVariableType]


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    return tuple(tensor_type(value).get_shape())


def dtype_of(value: SSAValue | Attribute) -> Attribute:
    return tensor_type(value).element_type


def fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """Torch's broadcasting of shapes, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(rank):
        size = 1
        for s in shapes:
            d = s[i - rank + len(s)] if i - rank + len(s) >= 0 else 1
            if d == 1:
                continue
            if size not in (1, d):
                return None
            size = d
        out.append(size)
    return tuple(out)


def reduced_shape(shape: Sequence[int], dims: Sequence[int], keepdim: bool) -> tuple[int, ...]:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def _check_tensor(value: SSAValue, what: str) -> TensorType[Attribute]:
    t = value.type
    if not isinstance(t, TensorType):
        raise VerifyException(f"expected {what} to be a ranked tensor, found {t}")
    if any(d < 0 for d in t.get_shape()):
        raise VerifyException(f"expected {what} to have a static shape, found {t}")
    if not is_supported_element_type(t.element_type):
        raise VerifyException(
            f"expected {what} element type to be one of {DTYPE_NAMES}, found {t.element_type}"
        )
    return t  # pyright: ignore[reportUnknownVariableType]


def _check_same_dtype(values: Sequence[SSAValue], what: str) -> None:
    dtypes = [dtype_of(v) for v in values]
    if any(d != dtypes[0] for d in dtypes):
        raise VerifyException(
            f"expected {what} to have the same element type, found "
            + ", ".join(str(d) for d in dtypes)
        )


def _check_dims(dims: Sequence[int], rank: int, what: str = "dims") -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise VerifyException(f"expected {what} in [0, {rank}), found {d}")
    if len(set(dims)) != len(dims):
        raise VerifyException(f"expected {what} to be unique, found {list(dims)}")


def _check_result_shape(op: Operation, expected: Sequence[int]) -> None:
    found = shape_of(op.results[0])
    if tuple(expected) != found:
        raise VerifyException(
            f"expected result shape {fmt_shape(expected)}, found {fmt_shape(found)}"
        )


def _ints(attr: DenseArrayBase[IntegerType]) -> tuple[int, ...]:
    return tuple(int(x) for x in attr.get_values())


def _i64_array(values: Sequence[int]) -> DenseArrayBase:  # pyright: ignore[reportMissingTypeArgument]
    return DenseArrayBase.from_list(i64, list(values))


# ---------------------------------------------------------------------------------------------
# Scalar recipes of more than one arith/math op (the `scalar` facts below)
# ---------------------------------------------------------------------------------------------


def _ties_keep_first(op: Operation) -> Operation:
    op.attributes[TIES_KEEP_FIRST_ATTR] = UnitAttr()
    return op


def _relu_f(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """max(x, 0), keeping x where it ties 0 on the CPU (eager's `x < 0 ? 0 : x` keeps -0.0)."""
    return b.insert(_ties_keep_first(arith.MaximumfOp(xs[0], b.constant(0.0, t))))


def _max_min_f(op: type[arith.MaximumfOp] | type[arith.MinimumfOp]) -> ScalarFn:
    """IEEE maximum / minimum (NaN from either side propagates), whose tie of -0.0 and +0.0
    keeps the first operand on the CPU, as eager's scalar kernel and clamp do."""
    return lambda b, xs, t: b.insert(_ties_keep_first(op(xs[0], xs[1])))


def _relu_i(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(arith.MaxSIOp(xs[0], b.constant(0, t)))


def _neg_i(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(arith.SubiOp(b.constant(0, t), xs[0]))


def _reciprocal(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(arith.DivfOp(b.constant(1.0, t), xs[0]))


def _sigmoid(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    one = b.constant(1.0, t)
    e = b.insert(math.ExpOp(b.insert(arith.NegfOp(xs[0]))))
    return b.insert(arith.DivfOp(one, b.insert(arith.AddfOp(one, e))))


def _identity(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """floor/ceil/round/trunc of an integer: the integer."""
    return xs[0]


def _sign(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """(x > 0) - (x < 0): +0 for ±0 and NaN, as torch.sign."""
    one, zero = b.constant(1.0, t), b.constant(0.0, t)
    pos = b.insert(arith.SelectOp(b.insert(arith.CmpfOp(xs[0], zero, "ogt")), one, zero))
    neg = b.insert(arith.SelectOp(b.insert(arith.CmpfOp(xs[0], zero, "olt")), one, zero))
    return b.insert(arith.SubfOp(pos, neg))


def _sign_i(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    one, zero = b.constant(1, t), b.constant(0, t)
    pos = b.insert(arith.SelectOp(b.insert(arith.CmpiOp(xs[0], zero, "sgt")), one, zero))
    neg = b.insert(arith.SelectOp(b.insert(arith.CmpiOp(xs[0], zero, "slt")), one, zero))
    return b.insert(arith.SubiOp(pos, neg))


def _isnan(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(arith.CmpfOp(xs[0], xs[0], "uno"))


def _isinf(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    magnitude = b.insert(math.AbsFOp(xs[0]))
    return b.insert(arith.CmpfOp(magnitude, b.constant(float("inf"), t), "oeq"))


def _signbit(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """The sign bit (true for -0.0 and a negative NaN): copysign(1, x) < 0."""
    unit = b.insert(math.CopySignOp(b.constant(1.0, t), xs[0]))
    return b.insert(arith.CmpfOp(unit, b.constant(0.0, t), "olt"))


def _signbit_i(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(arith.CmpiOp(xs[0], b.constant(0, t), "slt"))


def _false(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.constant(0, i1)


def _hypot(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """sqrt(x^2 + y^2) without overflow or underflow: f32 is squared in f64 (exact enough, no
    overflow) and rounded once; f64 is scaled by the larger magnitude. An infinite operand
    gives inf, even with a NaN (C99)."""
    x, y = (b.insert(math.AbsFOp(v)) for v in xs)
    inf = b.constant(float("inf"), t)
    if isinstance(t, Float64Type):
        big = b.insert(arith.MaximumfOp(x, y))
        small = b.insert(arith.MinimumfOp(x, y))
        ratio = b.insert(arith.DivfOp(small, big))
        ratio = b.insert(
            arith.SelectOp(
                b.insert(arith.CmpfOp(big, b.constant(0.0, t), "oeq")), b.constant(0.0, t), ratio
            )
        )
        root = b.insert(
            math.SqrtOp(
                b.insert(arith.AddfOp(b.constant(1.0, t), b.insert(arith.MulfOp(ratio, ratio))))
            )
        )
        result = b.insert(arith.MulfOp(big, root))
    else:
        wide = [b.insert(arith.ExtFOp(v, Float64Type())) for v in (x, y)]
        squares = [b.insert(arith.MulfOp(v, v)) for v in wide]
        root = b.insert(math.SqrtOp(b.insert(arith.AddfOp(squares[0], squares[1]))))
        result = b.insert(arith.TruncFOp(root, t))
    either_inf = b.insert(
        arith.OrIOp(b.insert(arith.CmpfOp(x, inf, "oeq")), b.insert(arith.CmpfOp(y, inf, "oeq")))
    )
    return b.insert(arith.SelectOp(either_inf, inf, result))


# ---------------------------------------------------------------------------------------------
# Elementwise unary ops
# ---------------------------------------------------------------------------------------------


class UnaryOp(IRDLOperation):
    """Base of elementwise unary ops: result type equals operand type."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$input attr-dict `:` type($input)"

    FLOAT_ONLY: ClassVar[bool] = False

    def __init__(self, input: SSAValue | Operation):
        input = SSAValue.get(input)
        super().__init__(operands=[input], result_types=[input.type])

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        if self.FLOAT_ONLY and not is_float(t.element_type):
            raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
        if t.element_type == i1:
            raise VerifyException("expected a numeric operand, found i1")


class FloatUnaryOp(UnaryOp):
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class NegOp(UnaryOp):
    """Negation. `%y = graph.neg %x : tensor<4xf32>`"""

    name = "graph.neg"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.neg",
        aten=("aten.neg.default",),
        scalar=ScalarRule(unary(arith.NegfOp), _neg_i),
        fuzz=Fuzz.unary("torch.neg", exact=True, random_graph=True),
    )


@irdl_op_definition
class AbsOp(UnaryOp):
    """Absolute value. `%y = graph.abs %x : tensor<4xf32>`"""

    name = "graph.abs"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.abs",
        aten=("aten.abs.default",),
        scalar=ScalarRule(unary(math.AbsFOp), unary(math.AbsIOp)),
        fuzz=Fuzz.unary("torch.abs", exact=True, random_graph=True),
    )


@irdl_op_definition
class ReluOp(UnaryOp):
    """max(x, 0). `%y = graph.relu %x : tensor<4xf32>`"""

    name = "graph.relu"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.relu",
        aten=("aten.relu.default",),
        scalar=ScalarRule(_relu_f, _relu_i),
        fuzz=Fuzz.unary("torch.relu", exact=True, random_graph=True),
    )


@irdl_op_definition
class ExpOp(FloatUnaryOp):
    """e^x. `%y = graph.exp %x : tensor<4xf32>`"""

    name = "graph.exp"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.exp",
        aten=("aten.exp.default",),
        scalar=ScalarRule(unary(math.ExpOp)),
        fuzz=Fuzz.unary("torch.exp", random_graph=True),
    )


@irdl_op_definition
class LogOp(FloatUnaryOp):
    """Natural logarithm. `%y = graph.log %x : tensor<4xf32>`"""

    name = "graph.log"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.log",
        aten=("aten.log.default",),
        scalar=ScalarRule(unary(math.LogOp)),
        fuzz=Fuzz.unary("torch.log", positive=True),
    )


@irdl_op_definition
class SqrtOp(FloatUnaryOp):
    """Square root. `%y = graph.sqrt %x : tensor<4xf32>`"""

    name = "graph.sqrt"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sqrt",
        aten=("aten.sqrt.default",),
        scalar=ScalarRule(unary(math.SqrtOp)),
        fuzz=Fuzz.unary("torch.sqrt", positive=True),
    )


@irdl_op_definition
class RsqrtOp(FloatUnaryOp):
    """1/sqrt(x). `%y = graph.rsqrt %x : tensor<4xf32>`"""

    name = "graph.rsqrt"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.rsqrt",
        aten=("aten.rsqrt.default",),
        scalar=ScalarRule(unary(math.RsqrtOp)),
        fuzz=Fuzz.unary("torch.rsqrt", positive=True),
    )


@irdl_op_definition
class TanhOp(FloatUnaryOp):
    """Hyperbolic tangent. `%y = graph.tanh %x : tensor<4xf32>`"""

    name = "graph.tanh"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.tanh",
        aten=("aten.tanh.default",),
        scalar=ScalarRule(unary(math.TanhOp)),
        fuzz=Fuzz.unary("torch.tanh", random_graph=True),
    )


@irdl_op_definition
class SigmoidOp(FloatUnaryOp):
    """1/(1+e^-x). `%y = graph.sigmoid %x : tensor<4xf32>`"""

    name = "graph.sigmoid"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sigmoid",
        aten=("aten.sigmoid.default",),
        scalar=ScalarRule(_sigmoid),
        fuzz=Fuzz.unary("torch.sigmoid", random_graph=True),
    )


@irdl_op_definition
class ErfOp(FloatUnaryOp):
    """Gauss error function. `%y = graph.erf %x : tensor<4xf32>`"""

    name = "graph.erf"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.erf",
        aten=("aten.erf.default",),
        scalar=ScalarRule(unary(math.ErfOp)),
        fuzz=Fuzz.unary("torch.erf"),
    )


@irdl_op_definition
class SinOp(FloatUnaryOp):
    """Sine. `%y = graph.sin %x : tensor<4xf32>`"""

    name = "graph.sin"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sin",
        aten=("aten.sin.default",),
        scalar=ScalarRule(unary(math.SinOp)),
        fuzz=Fuzz.unary("torch.sin", random_graph=True),
    )


@irdl_op_definition
class CosOp(FloatUnaryOp):
    """Cosine. `%y = graph.cos %x : tensor<4xf32>`"""

    name = "graph.cos"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.cos",
        aten=("aten.cos.default",),
        scalar=ScalarRule(unary(math.CosOp)),
        fuzz=Fuzz.unary("torch.cos"),
    )


@irdl_op_definition
class ReciprocalOp(FloatUnaryOp):
    """1/x. `%y = graph.reciprocal %x : tensor<4xf32>`"""

    name = "graph.reciprocal"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.reciprocal",
        aten=("aten.reciprocal.default",),
        scalar=ScalarRule(_reciprocal),
        fuzz=Fuzz.unary("torch.reciprocal", positive=True),
    )


class UnaryPredicateOp(UnaryOp):
    """Base of elementwise unary tests: an i1 result of the operand's shape."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation):
        input = SSAValue.get(input)
        t = tensor_type(input)
        IRDLOperation.__init__(self, operands=[input], result_types=[TensorType(i1, t.get_shape())])

    def verify_(self) -> None:
        super().verify_()
        _check_result_shape(self, shape_of(self.input))
        if dtype_of(self.result) != i1:
            raise VerifyException(f"expected an i1 result, found {dtype_of(self.result)}")


@irdl_op_definition
class FloorOp(UnaryOp):
    """Round down. `%y = graph.floor %x : tensor<4xf32>`"""

    name = "graph.floor"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.floor",
        aten=("aten.floor.default",),
        scalar=ScalarRule(unary(math.FloorOp), _identity),
        fuzz=Fuzz.unary("torch.floor", exact=True),
    )


@irdl_op_definition
class CeilOp(UnaryOp):
    """Round up. `%y = graph.ceil %x : tensor<4xf32>`"""

    name = "graph.ceil"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.ceil",
        aten=("aten.ceil.default",),
        scalar=ScalarRule(unary(math.CeilOp), _identity),
        fuzz=Fuzz.unary("torch.ceil", exact=True),
    )


@irdl_op_definition
class RoundOp(UnaryOp):
    """Round half to even (torch.round). `%y = graph.round %x : tensor<4xf32>`"""

    name = "graph.round"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.round",
        aten=("aten.round.default",),
        scalar=ScalarRule(unary(math.RoundEvenOp), _identity),
        fuzz=Fuzz.unary("torch.round", exact=True),
    )


@irdl_op_definition
class TruncOp(UnaryOp):
    """Round toward zero. `%y = graph.trunc %x : tensor<4xf32>`"""

    name = "graph.trunc"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.trunc",
        aten=("aten.trunc.default",),
        scalar=ScalarRule(unary(math.TruncOp), _identity),
        fuzz=Fuzz.unary("torch.trunc", exact=True),
    )


@irdl_op_definition
class Log1pOp(FloatUnaryOp):
    """log(1 + x). `%y = graph.log1p %x : tensor<4xf32>`"""

    name = "graph.log1p"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.log1p",
        aten=("aten.log1p.default",),
        scalar=ScalarRule(unary(math.Log1pOp)),
        fuzz=Fuzz.unary("torch.log1p", positive=True),
    )


@irdl_op_definition
class Expm1Op(FloatUnaryOp):
    """exp(x) - 1. `%y = graph.expm1 %x : tensor<4xf32>`"""

    name = "graph.expm1"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.expm1",
        aten=("aten.expm1.default",),
        scalar=ScalarRule(unary(math.ExpM1Op)),
        fuzz=Fuzz.unary("torch.expm1"),
    )


@irdl_op_definition
class Log2Op(FloatUnaryOp):
    """Base-2 logarithm. `%y = graph.log2 %x : tensor<4xf32>`"""

    name = "graph.log2"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.log2",
        aten=("aten.log2.default",),
        scalar=ScalarRule(unary(math.Log2Op)),
        fuzz=Fuzz.unary("torch.log2", positive=True),
    )


@irdl_op_definition
class Log10Op(FloatUnaryOp):
    """Base-10 logarithm. `%y = graph.log10 %x : tensor<4xf32>`"""

    name = "graph.log10"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.log10",
        aten=("aten.log10.default",),
        scalar=ScalarRule(unary(math.Log10Op)),
        fuzz=Fuzz.unary("torch.log10", positive=True),
    )


@irdl_op_definition
class Exp2Op(FloatUnaryOp):
    """2^x. `%y = graph.exp2 %x : tensor<4xf32>`"""

    name = "graph.exp2"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.exp2",
        aten=("aten.exp2.default",),
        scalar=ScalarRule(unary(math.Exp2Op)),
        fuzz=Fuzz.unary("torch.exp2"),
    )


@irdl_op_definition
class AsinOp(FloatUnaryOp):
    """Arcsine. `%y = graph.asin %x : tensor<4xf32>`"""

    name = "graph.asin"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.asin",
        aten=("aten.asin.default",),
        scalar=ScalarRule(unary(math.AsinOp)),
        fuzz=Fuzz.unary("torch.asin"),
    )


@irdl_op_definition
class AcosOp(FloatUnaryOp):
    """Arccosine. `%y = graph.acos %x : tensor<4xf32>`"""

    name = "graph.acos"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.acos",
        aten=("aten.acos.default",),
        scalar=ScalarRule(unary(math.AcosOp)),
        fuzz=Fuzz.unary("torch.acos"),
    )


@irdl_op_definition
class AtanOp(FloatUnaryOp):
    """Arctangent. `%y = graph.atan %x : tensor<4xf32>`"""

    name = "graph.atan"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.atan",
        aten=("aten.atan.default",),
        scalar=ScalarRule(unary(math.AtanOp)),
        fuzz=Fuzz.unary("torch.atan"),
    )


@irdl_op_definition
class TanOp(FloatUnaryOp):
    """Tangent. `%y = graph.tan %x : tensor<4xf32>`"""

    name = "graph.tan"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.tan",
        aten=("aten.tan.default",),
        scalar=ScalarRule(unary(math.TanOp)),
        fuzz=Fuzz.unary("torch.tan"),
    )


@irdl_op_definition
class SinhOp(FloatUnaryOp):
    """Hyperbolic sine. `%y = graph.sinh %x : tensor<4xf32>`"""

    name = "graph.sinh"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sinh",
        aten=("aten.sinh.default",),
        scalar=ScalarRule(unary(math.SinhOp)),
        fuzz=Fuzz.unary("torch.sinh"),
    )


@irdl_op_definition
class CoshOp(FloatUnaryOp):
    """Hyperbolic cosine. `%y = graph.cosh %x : tensor<4xf32>`"""

    name = "graph.cosh"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.cosh",
        aten=("aten.cosh.default",),
        scalar=ScalarRule(unary(math.CoshOp)),
        fuzz=Fuzz.unary("torch.cosh"),
    )


@irdl_op_definition
class AsinhOp(FloatUnaryOp):
    """Inverse hyperbolic sine. `%y = graph.asinh %x : tensor<4xf32>`"""

    name = "graph.asinh"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.asinh",
        aten=("aten.asinh.default",),
        scalar=ScalarRule(unary(math.AsinhOp)),
        fuzz=Fuzz.unary("torch.asinh"),
    )


@irdl_op_definition
class AcoshOp(FloatUnaryOp):
    """Inverse hyperbolic cosine. `%y = graph.acosh %x : tensor<4xf32>`"""

    name = "graph.acosh"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.acosh",
        aten=("aten.acosh.default",),
        scalar=ScalarRule(unary(math.AcoshOp)),
        fuzz=Fuzz.unary("torch.acosh", positive=True),
    )


@irdl_op_definition
class AtanhOp(FloatUnaryOp):
    """Inverse hyperbolic tangent. `%y = graph.atanh %x : tensor<4xf32>`"""

    name = "graph.atanh"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.atanh",
        aten=("aten.atanh.default",),
        scalar=ScalarRule(unary(math.AtanhOp)),
        fuzz=Fuzz.unary("torch.atanh"),
    )


@irdl_op_definition
class SignOp(UnaryOp):
    """-1, 0 or 1 (0 for NaN). `%y = graph.sign %x : tensor<4xf32>`"""

    name = "graph.sign"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sign",
        aten=(
            "aten.sign.default",
            "aten.sgn.default",
        ),
        scalar=ScalarRule(_sign, _sign_i),
        fuzz=Fuzz.unary("torch.sign", exact=True),
    )


@irdl_op_definition
class IsNanOp(UnaryPredicateOp):
    """x != x. `%y = graph.isnan %x : tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.isnan"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.isnan",
        aten=("aten.isnan.default",),
        scalar=ScalarRule(_isnan, _false, compare=True),
        fuzz=Fuzz.unary("torch.isnan", exact=True),
    )


@irdl_op_definition
class IsInfOp(UnaryPredicateOp):
    """|x| == inf. `%y = graph.isinf %x : tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.isinf"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.isinf",
        aten=("aten.isinf.default",),
        scalar=ScalarRule(_isinf, _false, compare=True),
        fuzz=Fuzz.unary("torch.isinf", exact=True),
    )


@irdl_op_definition
class SignbitOp(UnaryPredicateOp):
    """The sign bit. `%y = graph.signbit %x : tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.signbit"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.signbit",
        aten=("aten.signbit.default",),
        scalar=ScalarRule(_signbit, _signbit_i, compare=True),
        fuzz=Fuzz.unary("torch.signbit", exact=True),
    )


@irdl_op_definition
class CastOp(IRDLOperation):
    """Element type conversion, as torch's `Tensor.to(dtype)`.
    `%y = graph.cast %x : tensor<4xf32> to tensor<4xf16>`"""

    name = "graph.cast"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten._to_copy.default",
            "aten.to.dtype",
            "aten.to.dtype_layout",
            "aten.type_as.default",
        ),
        fuzz=Fuzz.drawn_by("cast"),
        without={"scalar": "lower-to-loops emits it with scalar_ops.emit_cast"},
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$input attr-dict `:` type($input) `to` type($result)"

    def __init__(self, input: SSAValue | Operation, dtype: Attribute):
        input = SSAValue.get(input)
        super().__init__(operands=[input], result_types=[TensorType(dtype, shape_of(input))])

    def verify_(self) -> None:
        _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_result_shape(self, shape_of(self.input))


# ---------------------------------------------------------------------------------------------
# Elementwise binary and ternary ops (with torch broadcasting)
# ---------------------------------------------------------------------------------------------


class BinaryOp(IRDLOperation):
    """Base of elementwise binary ops with torch broadcasting."""

    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"

    FLOAT_ONLY: ClassVar[bool] = False
    IS_COMPARISON: ClassVar[bool] = False

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        shape = broadcast_shapes(shape_of(lhs), shape_of(rhs))
        if shape is None:
            raise ValueError(
                f"{self.name}: shapes {fmt_shape(shape_of(lhs))} and "
                f"{fmt_shape(shape_of(rhs))} do not broadcast"
            )
        dtype = i1 if self.IS_COMPARISON else dtype_of(lhs)
        super().__init__(operands=[lhs, rhs], result_types=[TensorType(dtype, shape)])

    def verify_(self) -> None:
        lt = _check_tensor(self.lhs, "lhs")
        rt = _check_tensor(self.rhs, "rhs")
        _check_tensor(self.result, "result")
        if lt.element_type != rt.element_type:
            raise VerifyException(
                f"expected operands of the same element type, found {lt.element_type} "
                f"and {rt.element_type}"
            )
        if self.FLOAT_ONLY and not is_float(lt.element_type):
            raise VerifyException(f"expected floating-point operands, found {lt.element_type}")
        shape = broadcast_shapes(lt.get_shape(), rt.get_shape())
        if shape is None:
            raise VerifyException(
                f"operand shapes {fmt_shape(lt.get_shape())} and {fmt_shape(rt.get_shape())} "
                "do not broadcast"
            )
        _check_result_shape(self, shape)
        want = i1 if self.IS_COMPARISON else lt.element_type
        if dtype_of(self.result) != want:
            raise VerifyException(
                f"expected result element type {want}, found {dtype_of(self.result)}"
            )


class ComparisonOp(BinaryOp):
    IS_COMPARISON: ClassVar[bool] = True


@irdl_op_definition
class AddOp(BinaryOp):
    """a + b. `%z = graph.add %a, %b : tensor<4x1xf32>, tensor<4xf32> -> tensor<4x4xf32>`"""

    name = "graph.add"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.add",
        aten=("aten.add.Tensor", "aten.add.Scalar"),
        scalar=ScalarRule(binary(arith.AddfOp), binary(arith.AddiOp), binary(arith.OrIOp)),
        fuzz=Fuzz.binary("+", random_graph=True),
    )


@irdl_op_definition
class SubOp(BinaryOp):
    """a - b. `%z = graph.sub %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.sub"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.sub",
        aten=("aten.sub.Tensor", "aten.sub.Scalar"),
        scalar=ScalarRule(binary(arith.SubfOp), binary(arith.SubiOp)),
        fuzz=Fuzz.binary("-", random_graph=True),
    )


@irdl_op_definition
class MulOp(BinaryOp):
    """a * b. `%z = graph.mul %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>`"""

    name = "graph.mul"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.mul",
        aten=("aten.mul.Tensor", "aten.mul.Scalar"),
        scalar=ScalarRule(binary(arith.MulfOp), binary(arith.MuliOp), binary(arith.AndIOp)),
        fuzz=Fuzz.binary("*", random_graph=True),
    )


@irdl_op_definition
class DivOp(BinaryOp):
    """a / b; true division for floats, truncating for integers.
    `%z = graph.div %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.div"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.div.Tensor", "aten.div.Scalar"),
        scalar=ScalarRule(binary(arith.DivfOp), binary(arith.DivSIOp)),
        fuzz=Fuzz.binary("/"),
    )


@irdl_op_definition
class PowOp(BinaryOp):
    """a ** b. `%z = graph.pow %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>`"""

    name = "graph.pow"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.pow",
        aten=("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor"),
        scalar=ScalarRule(binary(math.PowFOp)),
        fuzz=Fuzz.binary("torch.pow"),
    )
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class MaximumOp(BinaryOp):
    """Elementwise max (NaN propagates). `%z = graph.maximum %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.maximum"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.maximum",
        aten=("aten.maximum.default",),
        scalar=ScalarRule(_max_min_f(arith.MaximumfOp), binary(arith.MaxSIOp), binary(arith.OrIOp)),
        fuzz=Fuzz.binary("torch.maximum", exact=True, random_graph=True),
    )


@irdl_op_definition
class MinimumOp(BinaryOp):
    """Elementwise min (NaN propagates). `%z = graph.minimum %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.minimum"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.minimum",
        aten=("aten.minimum.default",),
        scalar=ScalarRule(
            _max_min_f(arith.MinimumfOp), binary(arith.MinSIOp), binary(arith.AndIOp)
        ),
        fuzz=Fuzz.binary("torch.minimum", exact=True),
    )


@irdl_op_definition
class Atan2Op(BinaryOp):
    """atan(lhs / rhs) in the right quadrant. `%z = graph.atan2 %y, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.atan2"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.atan2",
        aten=("aten.atan2.default",),
        scalar=ScalarRule(binary(math.Atan2Op)),
        fuzz=Fuzz.binary("torch.atan2"),
    )
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class CopysignOp(BinaryOp):
    """|lhs| with the sign of rhs. `%z = graph.copysign %x, %s : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.copysign"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.copysign",
        aten=(
            "aten.copysign.Tensor",
            "aten.copysign.Scalar",
        ),
        scalar=ScalarRule(binary(math.CopySignOp)),
        fuzz=Fuzz.binary("torch.copysign", exact=True),
    )
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class FmaxOp(BinaryOp):
    """The larger operand, ignoring NaN (IEEE maxNum). `%z = graph.fmax %x, %y : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.fmax"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.fmax",
        aten=("aten.fmax.default",),
        scalar=ScalarRule(binary(arith.MaxnumfOp), binary(arith.MaxSIOp), binary(arith.OrIOp)),
        fuzz=Fuzz.binary("torch.fmax", exact=True),
    )


@irdl_op_definition
class FminOp(BinaryOp):
    """The smaller operand, ignoring NaN (IEEE minNum). `%z = graph.fmin %x, %y : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.fmin"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.fmin",
        aten=("aten.fmin.default",),
        scalar=ScalarRule(binary(arith.MinnumfOp), binary(arith.MinSIOp), binary(arith.AndIOp)),
        fuzz=Fuzz.binary("torch.fmin", exact=True),
    )


@irdl_op_definition
class HypotOp(BinaryOp):
    """sqrt(lhs^2 + rhs^2) without overflow. `%z = graph.hypot %x, %y : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>`"""

    name = "graph.hypot"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.hypot",
        aten=("aten.hypot.default",),
        scalar=ScalarRule(_hypot),
        fuzz=Fuzz.binary("torch.hypot"),
    )
    FLOAT_ONLY: ClassVar[bool] = True


@irdl_op_definition
class EqOp(ComparisonOp):
    """a == b. `%z = graph.eq %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.eq"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.eq",
        aten=("aten.eq.Tensor", "aten.eq.Scalar"),
        scalar=ScalarRule(cmpf("oeq"), cmpi("eq"), cmpi("eq"), compare=True),
        fuzz=Fuzz.compare("=="),
    )


@irdl_op_definition
class NeOp(ComparisonOp):
    """a != b. `%z = graph.ne %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.ne"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.ne",
        aten=("aten.ne.Tensor", "aten.ne.Scalar"),
        scalar=ScalarRule(cmpf("une"), cmpi("ne"), cmpi("ne"), compare=True),
        fuzz=Fuzz.compare("!="),
    )


@irdl_op_definition
class LtOp(ComparisonOp):
    """a < b. `%z = graph.lt %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.lt"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.lt",
        aten=("aten.lt.Tensor", "aten.lt.Scalar"),
        scalar=ScalarRule(cmpf("olt"), cmpi("slt"), cmpi("ult"), compare=True),
        fuzz=Fuzz.compare("<"),
    )


@irdl_op_definition
class LeOp(ComparisonOp):
    """a <= b. `%z = graph.le %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.le"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.le",
        aten=("aten.le.Tensor", "aten.le.Scalar"),
        scalar=ScalarRule(cmpf("ole"), cmpi("sle"), cmpi("ule"), compare=True),
        fuzz=Fuzz.compare("<="),
    )


@irdl_op_definition
class GtOp(ComparisonOp):
    """a > b. `%z = graph.gt %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.gt"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.gt",
        aten=("aten.gt.Tensor", "aten.gt.Scalar"),
        scalar=ScalarRule(cmpf("ogt"), cmpi("sgt"), cmpi("ugt"), compare=True),
        fuzz=Fuzz.compare(">"),
    )


@irdl_op_definition
class GeOp(ComparisonOp):
    """a >= b. `%z = graph.ge %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>`"""

    name = "graph.ge"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.ge",
        aten=("aten.ge.Tensor", "aten.ge.Scalar"),
        scalar=ScalarRule(cmpf("oge"), cmpi("sge"), cmpi("uge"), compare=True),
        fuzz=Fuzz.compare(">="),
    )


@irdl_op_definition
class WhereOp(IRDLOperation):
    """cond ? a : b, broadcasting all three.
    `%z = graph.where %c, %a, %b : tensor<4xi1>, tensor<4xf32>, tensor<f32> -> tensor<4xf32>`"""

    name = "graph.where"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.where",
        aten=(
            "aten.where.self",
            "aten.where.ScalarSelf",
            "aten.where.ScalarOther",
            "aten.where.Scalar",
        ),
        fuzz=Fuzz.drawn_by("compare_where"),
        without={"scalar": "lower-to-loops emits it with scalar_ops.emit_select"},
    )
    cond = operand_def(TensorType)
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Elementwise())
    assembly_format = (
        "$cond `,` $lhs `,` $rhs attr-dict `:` type($cond) `,` type($lhs) `,` type($rhs) "
        "`->` type($result)"
    )

    def __init__(
        self,
        cond: SSAValue | Operation,
        lhs: SSAValue | Operation,
        rhs: SSAValue | Operation,
    ):
        cond, lhs, rhs = SSAValue.get(cond), SSAValue.get(lhs), SSAValue.get(rhs)
        shape = broadcast_shapes(shape_of(cond), shape_of(lhs), shape_of(rhs))
        if shape is None:
            raise ValueError("graph.where: operand shapes do not broadcast")
        super().__init__(operands=[cond, lhs, rhs], result_types=[TensorType(dtype_of(lhs), shape)])

    def verify_(self) -> None:
        ct = _check_tensor(self.cond, "condition")
        _check_tensor(self.lhs, "lhs")
        _check_tensor(self.rhs, "rhs")
        _check_tensor(self.result, "result")
        if ct.element_type != i1:
            raise VerifyException(f"expected an i1 condition, found {ct.element_type}")
        _check_same_dtype([self.lhs, self.rhs, self.result], "lhs, rhs and result")
        shape = broadcast_shapes(shape_of(self.cond), shape_of(self.lhs), shape_of(self.rhs))
        if shape is None:
            raise VerifyException(
                f"operand shapes {fmt_shape(shape_of(self.cond))}, {fmt_shape(shape_of(self.lhs))}"
                f" and {fmt_shape(shape_of(self.rhs))} do not broadcast"
            )
        _check_result_shape(self, shape)


# ---------------------------------------------------------------------------------------------
# Elementwise ops of issue 15 (elem): bitwise/logical ops, fmod, remainder, floor division, erfc
# ---------------------------------------------------------------------------------------------


def _bitwise_not_i(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """~x: x xor all ones (for bool: x xor true)."""
    return b.insert(arith.XOrIOp(xs[0], b.constant(1 if t == i1 else -1, t)))


def _remainder_adjust(
    b: ScalarBuilder, mod: SSAValue, divisor: SSAValue, nonzero: SSAValue, signs_differ: SSAValue
) -> SSAValue:
    """mod + divisor where mod is non-zero and its sign differs from the divisor's."""
    adjust = b.insert(arith.AndIOp(nonzero, signs_differ))
    add = arith.AddfOp if is_float(mod.type) else arith.AddiOp
    return b.insert(arith.SelectOp(adjust, b.insert(add(mod, divisor)), mod))


def _remainder_f(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """torch.remainder on floats (ATen's kernel): mod = fmod(a, b); mod + b where mod != 0 and
    (b < 0) != (mod < 0)."""
    a, d = xs
    mod = b.insert(RemFOp(a, d))
    zero = b.constant(0.0, t)
    nonzero = b.insert(arith.CmpfOp(mod, zero, "une"))
    differ = b.insert(
        arith.XOrIOp(
            b.insert(arith.CmpfOp(d, zero, "olt")), b.insert(arith.CmpfOp(mod, zero, "olt"))
        )
    )
    return _remainder_adjust(b, mod, d, nonzero, differ)


def _remainder_i(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """Python's a % b on integers: the truncated remainder, plus b where the signs differ."""
    a, d = xs
    mod = b.insert(arith.RemSIOp(a, d))
    zero = b.constant(0, t)
    nonzero = b.insert(arith.CmpiOp(mod, zero, "ne"))
    differ = b.insert(arith.CmpiOp(b.insert(arith.XOrIOp(mod, d)), zero, "slt"))
    return _remainder_adjust(b, mod, d, nonzero, differ)


def _floor_divide_f(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    """c10::div_floor_floating, step by step: a / b where b == 0; else div = (a - fmod(a, b)) / b,
    less 1 where the remainder's sign differs from b's, then floor(div) (+1 where div -
    floor(div) > 0.5), and a zero quotient gets the sign of a / b."""
    a, d = xs
    zero, one = b.constant(0.0, t), b.constant(1.0, t)
    mod = b.insert(RemFOp(a, d))
    div = b.insert(arith.DivfOp(b.insert(arith.SubfOp(a, mod)), d))
    nonzero = b.insert(arith.CmpfOp(mod, zero, "une"))
    differ = b.insert(
        arith.XOrIOp(
            b.insert(arith.CmpfOp(d, zero, "olt")), b.insert(arith.CmpfOp(mod, zero, "olt"))
        )
    )
    lower = b.insert(arith.AndIOp(nonzero, differ))
    div = b.insert(arith.SelectOp(lower, b.insert(arith.SubfOp(div, one)), div))
    floor = b.insert(math.FloorOp(div))
    above_half = b.insert(
        arith.CmpfOp(b.insert(arith.SubfOp(div, floor)), b.constant(0.5, t), "ogt")
    )
    floor = b.insert(arith.SelectOp(above_half, b.insert(arith.AddfOp(floor, one)), floor))
    quotient = b.insert(arith.DivfOp(a, d))
    signed_zero = b.insert(math.CopySignOp(zero, quotient))
    result = b.insert(arith.SelectOp(b.insert(arith.CmpfOp(div, zero, "une")), floor, signed_zero))
    return b.insert(arith.SelectOp(b.insert(arith.CmpfOp(d, zero, "oeq")), quotient, result))


class IntegerUnaryOp(UnaryOp):
    """Base of elementwise unary ops on integers and bools."""

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        if is_float(t.element_type):
            raise VerifyException(f"expected an integer or bool operand, found {t.element_type}")


class IntegerBinaryOp(BinaryOp):
    """Base of elementwise binary ops on integers and bools."""

    def verify_(self) -> None:
        super().verify_()
        if is_float(dtype_of(self.lhs)):
            raise VerifyException(f"expected integer or bool operands, found {dtype_of(self.lhs)}")


class NumericBinaryOp(BinaryOp):
    """Base of elementwise binary ops on numbers (not bools)."""

    def verify_(self) -> None:
        super().verify_()
        if dtype_of(self.lhs) == i1:
            raise VerifyException("expected numeric operands, found i1")


@irdl_op_definition
class BitwiseNotOp(IntegerUnaryOp):
    """~x (logical not on bools). `%y = graph.bitwise_not %x : tensor<4xi1>`"""

    name = "graph.bitwise_not"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_not",
        aten=("aten.bitwise_not.default",),
        scalar=ScalarRule(None, _bitwise_not_i, _bitwise_not_i),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class BitwiseAndOp(IntegerBinaryOp):
    """a & b (logical and on bools). `%z = graph.bitwise_and %a, %b : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>`"""

    name = "graph.bitwise_and"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_and",
        aten=("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar"),
        scalar=ScalarRule(None, binary(arith.AndIOp), binary(arith.AndIOp)),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class BitwiseOrOp(IntegerBinaryOp):
    """a | b (logical or on bools). `%z = graph.bitwise_or %a, %b : tensor<4xi64>, tensor<i64> -> tensor<4xi64>`"""

    name = "graph.bitwise_or"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_or",
        aten=("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar"),
        scalar=ScalarRule(None, binary(arith.OrIOp), binary(arith.OrIOp)),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class BitwiseXorOp(IntegerBinaryOp):
    """a ^ b (logical xor on bools). `%z = graph.bitwise_xor %a, %b : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>`"""

    name = "graph.bitwise_xor"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_xor",
        aten=("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar"),
        scalar=ScalarRule(None, binary(arith.XOrIOp), binary(arith.XOrIOp)),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class FmodOp(NumericBinaryOp):
    """C's fmod: the remainder with the sign of the dividend (integers: truncated division).
    `%z = graph.fmod %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>`"""

    name = "graph.fmod"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.fmod",
        aten=("aten.fmod.Tensor", "aten.fmod.Scalar"),
        scalar=ScalarRule(binary(RemFOp), binary(arith.RemSIOp)),
        fuzz=Fuzz.binary("torch.fmod", exact=True, exact_operands=True),
    )


@irdl_op_definition
class RemainderOp(NumericBinaryOp):
    """Python's modulo: the remainder with the sign of the divisor.
    `%z = graph.remainder %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>`"""

    name = "graph.remainder"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.remainder",
        aten=("aten.remainder.Tensor", "aten.remainder.Scalar", "aten.remainder.Scalar_Tensor"),
        scalar=ScalarRule(_remainder_f, _remainder_i),
        fuzz=Fuzz.binary("torch.remainder", exact_operands=True),
    )


@irdl_op_definition
class FloorDivideOp(NumericBinaryOp):
    """floor(a / b), as torch's floor_divide and div(rounding_mode="floor").
    `%z = graph.floor_divide %a, %b : tensor<4xf32>, tensor<f32> -> tensor<4xf32>`"""

    name = "graph.floor_divide"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.floor_divide",
        aten=("aten.floor_divide.default", "aten.floor_divide.Scalar"),
        scalar=ScalarRule(_floor_divide_f, binary(arith.FloorDivSIOp)),
        fuzz=Fuzz.binary("torch.floor_divide"),
    )


@irdl_op_definition
class ErfcOp(FloatUnaryOp):
    """Complementary error function, accurate for large x. `%y = graph.erfc %x : tensor<4xf32>`"""

    name = "graph.erfc"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.erfc",
        aten=("aten.erfc.default",),
        scalar=ScalarRule(unary(MathErfcOp)),
        fuzz=Fuzz.unary("torch.erfc"),
    )


# ---------------------------------------------------------------------------------------------
# Broadcast
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class BroadcastInDimOp(IRDLOperation):
    """Broadcast: operand dim i becomes result dim dims[i] (size 1 or equal); other result
    dims are new. `%y = graph.broadcast_in_dim %x dims = [1] : tensor<4xf32> -> tensor<3x4xf32>`"""

    name = "graph.broadcast_in_dim"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.expand.default",),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dims = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Broadcast())
    assembly_format = "$input `dims` `=` $dims attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, shape: Sequence[int], dims: Sequence[int]):
        input = SSAValue.get(input)
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype_of(input), shape)],
            properties={"dims": _i64_array(dims)},
        )

    @property
    def dim_map(self) -> tuple[int, ...]:
        return _ints(self.dims)

    def verify_(self) -> None:
        src = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        dims = self.dim_map
        in_shape, out_shape = src.get_shape(), shape_of(self.result)
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
# Reductions
# ---------------------------------------------------------------------------------------------


class ReduceOp(IRDLOperation):
    """Base of reductions over `dims`, keeping them as size 1 when `keepdim` is set."""

    input = operand_def(TensorType)
    result = result_def(TensorType)
    dims = prop_def(DenseArrayBase[I64])
    keepdim = opt_prop_def(UnitAttr)
    traits = traits_def(Pure(), Reduction())
    assembly_format = (
        "$input `dims` `=` $dims (`keepdim` $keepdim^)? attr-dict `:` type($input) "
        "`->` type($result)"
    )

    FLOAT_ONLY: ClassVar[bool] = False

    def __init__(self, input: SSAValue | Operation, dims: Sequence[int], keepdim: bool = False):
        input = SSAValue.get(input)
        dims = sorted(d % len(shape_of(input)) for d in dims) if shape_of(input) else []
        shape = reduced_shape(shape_of(input), dims, keepdim)
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype_of(input), shape)],
            properties={"dims": _i64_array(dims), "keepdim": UnitAttr() if keepdim else None},
        )

    @property
    def reduce_dims(self) -> tuple[int, ...]:
        return _ints(self.dims)

    @property
    def keeps_dims(self) -> bool:
        return self.keepdim is not None

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        if self.FLOAT_ONLY and not is_float(t.element_type):
            raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
        shape = t.get_shape()
        _check_dims(self.reduce_dims, len(shape))
        _check_result_shape(self, reduced_shape(shape, self.reduce_dims, self.keeps_dims))


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


# Index reductions of issue 15 (elem): argmax, argmin


class ArgReduceOp(ReduceOp):
    """Base of argmax/argmin: the i64 index, along one dim, of the first largest/smallest
    element (NaN counting as larger and smaller than any number, as torch)."""

    def __init__(self, input: SSAValue | Operation, dim: int, keepdim: bool = False):
        input = SSAValue.get(input)
        dims = [dim % len(shape_of(input))]
        IRDLOperation.__init__(
            self,
            operands=[input],
            result_types=[TensorType(i64, reduced_shape(shape_of(input), dims, keepdim))],
            properties={"dims": _i64_array(dims), "keepdim": UnitAttr() if keepdim else None},
        )

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        if t.element_type == i1:
            raise VerifyException("expected a numeric operand, found i1")
        if dtype_of(self.result) != i64:
            raise VerifyException(f"expected an i64 result, found {dtype_of(self.result)}")
        if len(self.reduce_dims) != 1:
            raise VerifyException(f"expected one dim, found {list(self.reduce_dims)}")
        _check_dims(self.reduce_dims, len(t.get_shape()))
        _check_result_shape(self, reduced_shape(t.get_shape(), self.reduce_dims, self.keeps_dims))


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
# Layout (injective) ops
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class ReshapeOp(IRDLOperation):
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
    input = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, shape: Sequence[int]):
        input = SSAValue.get(input)
        super().__init__(operands=[input], result_types=[TensorType(dtype_of(input), shape)])

    def verify_(self) -> None:
        _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        n_in, n_out = numel(shape_of(self.input)), numel(shape_of(self.result))
        if n_in != n_out:
            raise VerifyException(
                f"expected the result to have {n_in} elements like the operand, found {n_out}"
            )


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


@irdl_op_definition
class PermuteOp(IRDLOperation):
    """Dim permutation: result dim i is operand dim perm[i].
    `%y = graph.permute %x perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>`"""

    name = "graph.permute"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.permute.default",),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    perm = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `perm` `=` $perm attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation, perm: Sequence[int]):
        input = SSAValue.get(input)
        shape = [shape_of(input)[p] for p in perm]
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype_of(input), shape)],
            properties={"perm": _i64_array(perm)},
        )

    @property
    def permutation(self) -> tuple[int, ...]:
        return _ints(self.perm)

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        perm, shape = self.permutation, t.get_shape()
        if sorted(perm) != list(range(len(shape))):
            raise VerifyException(
                f"expected a permutation of [0, {len(shape)}), found {list(perm)}"
            )
        _check_result_shape(self, [shape[p] for p in perm])


@irdl_op_definition
class SliceOp(IRDLOperation):
    """Strided slice, per dim `start:limit:stride` (stride > 0).
    `%y = graph.slice %x start = [0, 2] limit = [4, 8] stride = [1, 2] : tensor<4x8xf32> -> tensor<4x3xf32>`"""

    name = "graph.slice"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.slice.Tensor",),
        fuzz=Fuzz.drawn_by("layout_op"),
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    start = prop_def(DenseArrayBase[I64])
    limit = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `start` `=` $start `limit` `=` $limit `stride` `=` $stride attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        start: Sequence[int],
        limit: Sequence[int],
        stride: Sequence[int],
    ):
        input = SSAValue.get(input)
        shape = slice_shape(start, limit, stride)
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype_of(input), shape)],
            properties={
                "start": _i64_array(start),
                "limit": _i64_array(limit),
                "stride": _i64_array(stride),
            },
        )

    @property
    def bounds(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return _ints(self.start), _ints(self.limit), _ints(self.stride)

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        shape = t.get_shape()
        start, limit, stride = self.bounds
        for name, arr in (("start", start), ("limit", limit), ("stride", stride)):
            if len(arr) != len(shape):
                raise VerifyException(
                    f"expected {len(shape)} {name} values (the operand's rank), found {len(arr)}"
                )
        for i, (s, e, k) in enumerate(zip(start, limit, stride, strict=True)):
            if k <= 0:
                raise VerifyException(f"expected a positive stride in dim {i}, found {k}")
            if not 0 <= s <= e <= shape[i]:
                raise VerifyException(
                    f"expected 0 <= start <= limit <= {shape[i]} in dim {i}, found {s}:{e}"
                )
        _check_result_shape(self, slice_shape(start, limit, stride))


def slice_shape(
    start: Sequence[int], limit: Sequence[int], stride: Sequence[int]
) -> tuple[int, ...]:
    return tuple(max(0, (e - s + k - 1) // k) for s, e, k in zip(start, limit, stride, strict=True))


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

    def __init__(self, inputs: Sequence[SSAValue | Operation], dim: int):
        values = [SSAValue.get(v) for v in inputs]
        shape = list(shape_of(values[0]))
        shape[dim] = sum(shape_of(v)[dim] for v in values)
        super().__init__(
            operands=[values],
            result_types=[TensorType(dtype_of(values[0]), shape)],
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
        if not 0 <= self.axis < rank:
            raise VerifyException(f"expected dim in [0, {rank}), found {self.axis}")
        first = types[0].get_shape()
        for i, t in enumerate(types):
            s = t.get_shape()
            if len(s) != rank or any(
                a != b for j, (a, b) in enumerate(zip(s, first, strict=True)) if j != self.axis
            ):
                raise VerifyException(
                    f"expected operand {i} of shape {fmt_shape(s)} to match "
                    f"{fmt_shape(first)} outside dim {self.axis}"
                )
        shape = list(first)
        shape[self.axis] = sum(t.get_shape()[self.axis] for t in types)
        _check_result_shape(self, shape)


# --- gather (task: indexing with computed indices) -------------------------------------------

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

    def __init__(
        self,
        table: SSAValue | Operation,
        indices: Sequence[SSAValue | Operation],
        dim: int,
        shape: Sequence[int],
        wrap: bool = False,
    ):
        table = SSAValue.get(table)
        super().__init__(
            operands=[table, [SSAValue.get(i) for i in indices]],
            result_types=[TensorType(dtype_of(table), shape)],
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
        if not 0 <= self.axis < rank:
            raise VerifyException(f"expected dim in [0, {rank}), found {self.axis}")
        for j, v in enumerate(self.indices):
            shape = _check_tensor(v, f"index {j}").get_shape()
            if str(dtype_of(v)) not in INDEX_DTYPES:
                raise VerifyException(f"expected index {j} of type i32 or i64, found {dtype_of(v)}")
            if len(shape) != rank or any(a not in (1, b) for a, b in zip(shape, out, strict=True)):
                raise VerifyException(
                    f"index {j} of shape {fmt_shape(shape)} does not broadcast to the result "
                    f"shape {fmt_shape(out)}"
                )
        for m in range(rank):
            size = table[self.table_dim(m)]
            if m != self.axis and size != 1 and size < out[m]:
                raise VerifyException(
                    f"table dim {self.table_dim(m)} of size {size} is smaller than result "
                    f"dim {m} of size {out[m]} (it must be 1 or at least as large)"
                )


# ---------------------------------------------------------------------------------------------
# Index arithmetic (task `index`: arange, flip, roll)
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
        if not 0 <= self.axis < rank:
            raise VerifyException(f"expected dim in [0, {rank}), found {self.axis}")
        if self.counting[1] == 0:
            raise VerifyException("expected a non-zero step")


@irdl_op_definition
class FlipOp(IRDLOperation):
    """Reverses the order of the elements along `dims` (torch.flip).
    `%y = graph.flip %x dims = [1] : tensor<4x8xf32>`"""

    name = "graph.flip"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.flip.default",),
        fuzz=Fuzz.drawn_by("index_op"),
    )
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    dims = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `dims` `=` $dims attr-dict `:` type($input)"

    def __init__(self, input: SSAValue | Operation, dims: Sequence[int]):
        input = SSAValue.get(input)
        super().__init__(
            operands=[input], result_types=[input.type], properties={"dims": _i64_array(dims)}
        )

    @property
    def flipped(self) -> tuple[int, ...]:
        return _ints(self.dims)

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_dims(self.flipped, len(t.get_shape()))


@irdl_op_definition
class RollOp(IRDLOperation):
    """Rotates the elements along each of `dims` by its `shifts` (torch.roll with dims): the
    element at i comes from (i - shift) mod n.
    `%y = graph.roll %x shifts = [2] dims = [1] : tensor<4x8xf32>`"""

    name = "graph.roll"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.roll.default",),
        fuzz=Fuzz.drawn_by("index_op"),
    )
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    shifts = prop_def(DenseArrayBase[I64])
    dims = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = "$input `shifts` `=` $shifts `dims` `=` $dims attr-dict `:` type($input)"

    def __init__(self, input: SSAValue | Operation, shifts: Sequence[int], dims: Sequence[int]):
        input = SSAValue.get(input)
        super().__init__(
            operands=[input],
            result_types=[input.type],
            properties={"shifts": _i64_array(shifts), "dims": _i64_array(dims)},
        )

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
# Padding and pooling (pool task: constant/reflect/replicate padding, windowed reductions)
# ---------------------------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "replicate")


@irdl_op_definition
class PadOp(IRDLOperation):
    """Padding by `low` / `high` elements per dim (negative: cropping): with the element
    `value` (`mode = "constant"`), the input mirrored without repeating the edge (`"reflect"`)
    or its edge repeated (`"replicate"`). Never reads outside the input.
    `%y = graph.pad %x low = [0, 1] high = [0, -1] mode = "constant" value = 0.0 : f64 : tensor<4x8xf32> -> tensor<4x8xf32>`"""

    name = "graph.pad"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.constant_pad_nd.default",
            "aten.reflection_pad1d.default",
            "aten.reflection_pad2d.default",
            "aten.reflection_pad3d.default",
            "aten.replication_pad1d.default",
            "aten.replication_pad2d.default",
            "aten.replication_pad3d.default",
        ),
        fuzz=Fuzz.drawn_by("pad"),
        without={"scalar": "lower-to-loops emits it: a clamped or reflected index, a select"},
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    low = prop_def(DenseArrayBase[I64])
    high = prop_def(DenseArrayBase[I64])
    mode = prop_def(StringAttr)
    value = prop_def(FloatAttr)
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `low` `=` $low `high` `=` $high `mode` `=` $mode `value` `=` $value attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        low: Sequence[int],
        high: Sequence[int],
        mode: str = "constant",
        value: float = 0.0,
    ):
        input = SSAValue.get(input)
        shape = pad_shape(shape_of(input), low, high)
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype_of(input), shape)],
            properties={
                "low": _i64_array(low),
                "high": _i64_array(high),
                "mode": StringAttr(mode),
                "value": FloatAttr(float(value), Float64Type()),
            },
        )

    @property
    def pads(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return _ints(self.low), _ints(self.high)

    @property
    def fill(self) -> float:
        return self.value.value.data

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        shape, (low, high) = t.get_shape(), self.pads
        for name, arr in (("low", low), ("high", high)):
            if len(arr) != len(shape):
                raise VerifyException(
                    f"expected {len(shape)} {name} values (the operand's rank), found {len(arr)}"
                )
        mode = self.mode.data
        if mode not in PAD_MODES:
            raise VerifyException(f'expected mode in {list(PAD_MODES)}, found "{mode}"')
        for i, (n, lo, hi) in enumerate(zip(shape, low, high, strict=True)):
            if n + lo + hi < 0:
                raise VerifyException(f"expected a size >= 0 in dim {i}, found {n + lo + hi}")
            if mode == "reflect" and (lo >= n or hi >= n) and (lo > 0 or hi > 0):
                raise VerifyException(
                    f"expected reflect padding below the size {n} of dim {i}, found {lo}, {hi}"
                )
            if mode == "replicate" and n == 0 and (lo > 0 or hi > 0):
                raise VerifyException(f"expected a non-empty dim {i} to replicate")
        if not isinstance(self.value.type, Float64Type):
            raise VerifyException(f"expected an f64 value, found {self.value.type}")
        fill = self.fill
        if not is_float(t.element_type) and fill == fill and fill != int(fill):
            raise VerifyException(f"expected an integral value for {t.element_type}, found {fill}")
        _check_result_shape(self, pad_shape(shape, low, high))


def pad_shape(shape: Sequence[int], low: Sequence[int], high: Sequence[int]) -> tuple[int, ...]:
    return tuple(n + lo + hi for n, lo, hi in zip(shape, low, high, strict=True))


POOL_KINDS = ("max", "avg", "argmax")


@irdl_op_definition
class PoolOp(IRDLOperation):
    """Max, average or argmax over windows of the trailing `len(kernel)` dims (1 to 3), torch's
    max_pool / avg_pool: window `o` of a dim starts at `o * stride - padding` and takes `kernel`
    elements `dilation` apart; elements outside the input are skipped (max propagates NaN). An
    output one longer than the floor formula is torch's ceil_mode. Average divides by
    `divisor`, else by the window's size clipped to the padded input (`count_include_pad`) or
    to the input. Argmax is max_pool's indices (i64): the row-major position in the window
    dims of the first maximum, or of the last NaN. With `adaptive` (torch's adaptive pools),
    window `o` of a dim of size `n` pooled to `m` is [floor(o * n / m), ceil((o + 1) * n / m)),
    `kernel` is the largest of them, the stride 1 and the padding 0.
    `%y = graph.pool %x kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<1x4x9x9xf32> -> tensor<1x4x5x5xf32>`"""

    name = "graph.pool"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=(
            "aten.max_pool2d_with_indices.default",
            "aten.max_pool3d_with_indices.default",
            "aten.avg_pool2d.default",
            "aten.avg_pool3d.default",
            "aten._adaptive_avg_pool2d.default",
            "aten._adaptive_avg_pool3d.default",
            "aten.adaptive_max_pool2d.default",
            "aten.adaptive_max_pool3d.default",
        ),
        fuzz=Fuzz.drawn_by("pool"),
        without={"scalar": "lower-to-loops emits it: the window unrolled or an scf.for nest"},
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kind = prop_def(StringAttr)
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    dilation = prop_def(DenseArrayBase[I64])
    count_include_pad = opt_prop_def(UnitAttr)
    divisor = opt_prop_def(IntegerAttr[I64])
    adaptive = opt_prop_def(UnitAttr)
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `kind` `=` $kind `kernel` `=` $kernel `stride` `=` $stride `padding` `=` "
        "$padding `dilation` `=` $dilation (`adaptive` $adaptive^)? "
        "(`count_include_pad` $count_include_pad^)? "
        "(`divisor` `=` $divisor^)? attr-dict `:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        kind: str,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor: int | None = None,
        adaptive: Sequence[int] | None = None,
    ):
        """`adaptive`: the output sizes of an adaptive pool (kernel and the rest follow)."""
        input = SSAValue.get(input)
        shape = shape_of(input)
        n = len(kernel) if adaptive is None else len(adaptive)
        if adaptive is None:
            spatial = pool_shape(shape[-n:], kernel, stride, padding, dilation, ceil_mode)
        else:
            spatial = tuple(adaptive)
            kernel = [adaptive_window(i, o) for i, o in zip(shape[-n:], adaptive, strict=True)]
            stride, padding, dilation = [1] * n, [0] * n, [1] * n
        super().__init__(
            operands=[input],
            result_types=[
                TensorType(
                    i64 if kind == "argmax" else dtype_of(input),
                    (*shape[: len(shape) - n], *spatial),
                )
            ],
            properties={
                "kind": StringAttr(kind),
                "kernel": _i64_array(kernel),
                "stride": _i64_array(stride),
                "padding": _i64_array(padding),
                "dilation": _i64_array(dilation),
                "count_include_pad": (
                    UnitAttr() if count_include_pad and kind == "avg" and adaptive is None else None
                ),
                "divisor": IntegerAttr(divisor, i64) if divisor is not None else None,
                "adaptive": UnitAttr() if adaptive is not None else None,
            },
        )

    @property
    def window(self) -> tuple[tuple[int, ...], ...]:
        """kernel, stride, padding, dilation."""
        return (_ints(self.kernel), _ints(self.stride), _ints(self.padding), _ints(self.dilation))

    @property
    def divisor_value(self) -> int | None:
        return self.divisor.value.data if self.divisor is not None else None

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        kind = self.kind.data
        if kind != "argmax":
            _check_same_dtype([self.input, self.result], "operand and result")
        elif dtype_of(self.result) != i64:
            raise VerifyException(
                f"expected an i64 result for argmax, found {dtype_of(self.result)}"
            )
        if kind not in POOL_KINDS:
            raise VerifyException(f'expected kind in {list(POOL_KINDS)}, found "{kind}"')
        kernel, stride, padding, dilation = self.window
        n, shape = len(kernel), t.get_shape()
        if not 1 <= n <= min(3, len(shape)):
            raise VerifyException(
                f"expected 1 to {min(3, len(shape))} window dims (the operand's rank), found {n}"
            )
        for name, arr in (("stride", stride), ("padding", padding), ("dilation", dilation)):
            if len(arr) != n:
                raise VerifyException(
                    f"expected {n} {name} values (the kernel's), found {len(arr)}"
                )
        for i, (k, s, p, d) in enumerate(zip(kernel, stride, padding, dilation, strict=True)):
            if min(k, s, d) <= 0 or not 0 <= p <= k // 2:
                raise VerifyException(
                    f"expected kernel, stride, dilation > 0 and 0 <= padding <= kernel / 2 in "
                    f"window dim {i}, found {k}, {s}, {d}, {p}"
                )
        if kind == "avg":
            if any(d != 1 for d in dilation):
                raise VerifyException(f"expected no dilation for avg, found {list(dilation)}")
            if not is_float(t.element_type):
                raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
            if self.divisor_value == 0:
                raise VerifyException("expected a non-zero divisor")
        elif self.divisor is not None or self.count_include_pad is not None:  # max, argmax
            raise VerifyException(f"expected no divisor or count_include_pad for {kind}")
        if t.element_type == i1:
            raise VerifyException("expected a numeric operand, found i1")
        lead, out = shape[: len(shape) - n], shape_of(self.result)
        spatial = shape[len(shape) - n :]
        if self.adaptive is not None:
            self._verify_adaptive(spatial, out[len(out) - n :])
            _check_result_shape(self, (*lead, *out[len(out) - n :]))
            return
        allowed = {
            (*lead, *pool_shape(spatial, kernel, stride, padding, dilation, ceil))
            for ceil in (False, True)
        }
        if out not in allowed:
            raise VerifyException(
                f"expected result shape {' or '.join(fmt_shape(s) for s in sorted(allowed))}, "
                f"found {fmt_shape(out)}"
            )

    def _verify_adaptive(self, spatial: Sequence[int], out: Sequence[int]) -> None:
        kernel, stride, padding, dilation = self.window
        if any(s != 1 for s in stride) or any(padding) or any(d != 1 for d in dilation):
            raise VerifyException("expected stride 1, padding 0, dilation 1 for an adaptive pool")
        if self.divisor is not None or self.count_include_pad is not None:
            raise VerifyException("expected no divisor or count_include_pad for an adaptive pool")
        if 0 in spatial or 0 in out:
            raise VerifyException("expected non-empty window dims for an adaptive pool")
        want = [adaptive_window(i, o) for i, o in zip(spatial, out, strict=True)]
        if list(kernel) != want:
            raise VerifyException(
                f"expected kernel {want} (the largest adaptive window), found {list(kernel)}"
            )


@irdl_op_definition
class PatchesOp(IRDLOperation):
    """The windows a 2-D convolution multiplies (im2col), one per output position, of a
    `[C, H, W]` input: element `[oh, ow, c, i, j]` is `x[c, oh * sh + i - ph, ow * sw + j - pw]`,
    0 outside the input. Seen as `[OH * OW, C * KH * KW]` (a reshape, no copy), it is the
    matrix that the convolution's weight, seen as `[O, C * KH * KW]`, multiplies.
    `%p = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<8x4x4xf32> -> tensor<2x2x8x3x3xf32>`"""

    name = "graph.patches"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_by("convolution"),
        without={
            "aten": "made by convolution-matmul from a batch-1 convolution with small patches",
            "scalar": "lower-to-loops emits it: the input read at the window position, guarded",
        },
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    kernel = prop_def(DenseArrayBase[I64])
    stride = prop_def(DenseArrayBase[I64])
    padding = prop_def(DenseArrayBase[I64])
    traits = traits_def(Pure(), Injective())
    assembly_format = (
        "$input `kernel` `=` $kernel `stride` `=` $stride `padding` `=` $padding attr-dict "
        "`:` type($input) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
    ):
        input = SSAValue.get(input)
        channels, *spatial = shape_of(input)
        out = pool_shape(spatial, kernel, stride, padding, (1, 1), False)
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype_of(input), (*out, channels, *kernel))],
            properties={
                "kernel": _i64_array(kernel),
                "stride": _i64_array(stride),
                "padding": _i64_array(padding),
            },
        )

    @property
    def window(self) -> tuple[tuple[int, ...], ...]:
        """kernel, stride, padding."""
        return (_ints(self.kernel), _ints(self.stride), _ints(self.padding))

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        kernel, stride, padding = self.window
        shape = t.get_shape()
        if len(shape) != 3 or not len(kernel) == len(stride) == len(padding) == 2:
            raise VerifyException(
                f"expected a [C, H, W] operand and 2 kernel, stride and padding values, found "
                f"{fmt_shape(shape)}, {list(kernel)}, {list(stride)}, {list(padding)}"
            )
        for i, (k, st, pd) in enumerate(zip(kernel, stride, padding, strict=True)):
            if min(k, st) <= 0 or not 0 <= pd <= k // 2:
                raise VerifyException(
                    f"expected kernel, stride > 0 and 0 <= padding <= kernel / 2 in window dim "
                    f"{i}, found {k}, {st}, {pd}"
                )
        out = pool_shape(shape[1:], kernel, stride, padding, (1, 1), False)
        _check_result_shape(self, (*out, shape[0], *kernel))


def adaptive_window(size: int, out: int) -> int:
    """The largest window of an adaptive pool of `size` elements into `out`."""
    return max(-(-(o + 1) * size // out) - o * size // out for o in range(out)) if out else 0


def adaptive_bounds(o: int, size: int, out: int) -> tuple[int, int]:
    """Window `o`'s [start, end) in an adaptive pool (torch's start_index / end_index)."""
    return o * size // out, -(-(o + 1) * size // out)


def pool_shape(
    shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool,
) -> tuple[int, ...]:
    """torch's pooling output size per window dim (at least 0): a last window that would
    start in the right padding is dropped in ceil mode."""
    out: list[int] = []
    for n, k, s, p, d in zip(shape, kernel, stride, padding, dilation, strict=True):
        span = n + 2 * p - d * (k - 1) - 1
        size = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (size - 1) * s >= n + p:
            size -= 1
        out.append(max(0, size))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Scans (task `scan`: cumsum, cumprod, logcumsumexp, cummax, cummin)
# ---------------------------------------------------------------------------------------------

SCAN_KINDS = ("sum", "prod", "logsumexp", "max", "min", "argmax", "argmin")
"""What a scan combines: `argmax` / `argmin` are cummax's / cummin's indices (i64)."""

SCAN_ARG_KINDS = ("argmax", "argmin")


@irdl_op_definition
class ScanOp(IRDLOperation):
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
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dim = prop_def(IntegerAttr[I64])
    kind = prop_def(StringAttr)
    traits = traits_def(Pure(), Reduction())
    assembly_format = (
        "$input `dim` `=` $dim `kind` `=` $kind attr-dict `:` type($input) `->` type($result)"
    )

    def __init__(self, input: SSAValue | Operation, dim: int, kind: str):
        input = SSAValue.get(input)
        rank = len(shape_of(input))
        dtype = i64 if kind in SCAN_ARG_KINDS else dtype_of(input)
        super().__init__(
            operands=[input],
            result_types=[TensorType(dtype, shape_of(input))],
            properties={
                "dim": IntegerAttr(dim % rank if rank else dim, i64),
                "kind": StringAttr(kind),
            },
        )

    @property
    def axis(self) -> int:
        return self.dim.value.data

    @property
    def combines(self) -> str:
        """The kind: one of `SCAN_KINDS`."""
        return self.kind.data

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
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
        _check_result_shape(self, t.get_shape())


# ---------------------------------------------------------------------------------------------
# Extern ops
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """torch.matmul of operands of rank >= 2, batch dims broadcast.
    `%y = graph.matmul %a, %b : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>`"""

    name = "graph.matmul"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.matmul",
        aten=("aten.mm.default", "aten.bmm.default", "aten.matmul.default"),
        fuzz=Fuzz.drawn_by("matmul"),
    )
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Extern())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        shape = matmul_shape(shape_of(lhs), shape_of(rhs))
        if shape is None:
            raise ValueError("graph.matmul: operand shapes do not match")
        super().__init__(operands=[lhs, rhs], result_types=[TensorType(dtype_of(lhs), shape)])

    def verify_(self) -> None:
        lt = _check_tensor(self.lhs, "lhs")
        rt = _check_tensor(self.rhs, "rhs")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.lhs, self.rhs, self.result], "operands and result")
        if lt.get_shape().__len__() < 2 or len(rt.get_shape()) < 2:
            raise VerifyException(
                f"expected operands of rank >= 2, found ranks {len(lt.get_shape())} "
                f"and {len(rt.get_shape())}"
            )
        shape = matmul_shape(lt.get_shape(), rt.get_shape())
        if shape is None:
            raise VerifyException(
                f"operand shapes {fmt_shape(lt.get_shape())} and {fmt_shape(rt.get_shape())} "
                "do not match for matmul"
            )
        _check_result_shape(self, shape)


def matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = broadcast_shapes(a[:-2], b[:-2])
    if batch is None:
        return None
    return (*batch, a[-2], b[-1])


@irdl_op_definition
class LinearOp(IRDLOperation):
    """torch.nn.functional.linear: x @ weight^T (+ bias); `decompose` splits it into matmul + add.
    `%y = graph.linear %x, %w bias(%b : tensor<4xf32>) : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>`"""

    name = "graph.linear"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.linear.default",),
        fuzz=Fuzz.drawn_by("matmul"),
    )
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Extern())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    assembly_format = (
        "$input `,` $weight (`bias` `(` $bias^ `:` type($bias) `)`)? attr-dict `:` "
        "type($input) `,` type($weight) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        weight: SSAValue | Operation,
        bias: SSAValue | Operation | None = None,
    ):
        input, weight = SSAValue.get(input), SSAValue.get(weight)
        shape = (*shape_of(input)[:-1], shape_of(weight)[0])
        super().__init__(
            operands=[input, weight, [SSAValue.get(bias)] if bias is not None else []],
            result_types=[TensorType(dtype_of(input), shape)],
        )

    def verify_(self) -> None:
        xt = _check_tensor(self.input, "input")
        wt = _check_tensor(self.weight, "weight")
        _check_tensor(self.result, "result")
        values = [self.input, self.weight, self.result]
        if self.bias is not None:
            bt = _check_tensor(self.bias, "bias")
            values.append(self.bias)
            if tuple(bt.get_shape()) not in ((wt.get_shape()[0],), ()):
                raise VerifyException(
                    f"expected bias of shape [{wt.get_shape()[0]}], found {fmt_shape(bt.get_shape())}"
                )
        _check_same_dtype(values, "operands and result")
        xs, ws = xt.get_shape(), wt.get_shape()
        if len(xs) < 1 or len(ws) != 2 or xs[-1] != ws[1]:
            raise VerifyException(
                f"expected input [..., K] and weight [N, K], found {fmt_shape(xs)} and {fmt_shape(ws)}"
            )
        _check_result_shape(self, (*xs[:-1], ws[0]))


@irdl_op_definition
class TorchCallOp(IRDLOperation):
    """An opaque torch operator, run eagerly: the way any op xfuse does not know still compiles.
    `target` names the operator in `torch.ops` (`aten.cumsum.default`); `args` and `kwargs` hold
    its other arguments as attributes (xfuse/dialects/torch_args.py): `"%t0"` is operand 0,
    `"dtype:float32"` a dtype, ints, floats, bools, strings and lists as builtin attributes.
    `%y = graph.torch_call "aten.cumsum.default"(%x) args = ["%t0", 1] kwargs = {} : (tensor<4x8xf32>) -> tensor<4x8xf32>`"""

    name = "graph.torch_call"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_by("unsupported"),
        without={"aten": "the importer's fallback for every aten op without a converter"},
    )
    target = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    args = prop_def(ArrayAttr)
    kwargs = prop_def(DictionaryAttr)
    traits = traits_def(Extern())
    assembly_format = (
        "$target `(` $inputs `)` `args` `=` $args `kwargs` `=` $kwargs attr-dict `:` "
        "functional-type($inputs, $outputs)"
    )

    def __init__(
        self,
        target: str,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        args: ArrayAttr[Attribute] | None = None,
        kwargs: DictionaryAttr | None = None,
    ):
        super().__init__(
            operands=[[SSAValue.get(v) for v in inputs]],
            result_types=[list(result_types)],
            properties={
                "target": StringAttr(target),
                "args": args if args is not None else ArrayAttr([]),
                "kwargs": kwargs if kwargs is not None else DictionaryAttr({}),
            },
        )

    def verify_(self) -> None:
        for i, v in enumerate(self.inputs):
            _check_tensor(v, f"operand {i}")
        for i, v in enumerate(self.outputs):
            _check_tensor(v, f"result {i}")
        if not self.target.data:
            raise VerifyException("expected a non-empty target")
        used = _tensor_refs(self.args) | _tensor_refs(self.kwargs)
        bad = sorted(i for i in used if i >= len(self.inputs))
        if bad:
            raise VerifyException(
                f"expected tensor references below {len(self.inputs)}, found %t{bad[0]}"
            )


def _tensor_refs(attr: Attribute) -> set[int]:
    """Operand indices named by `"%tN"` strings anywhere inside an attribute."""
    index = tensor_ref(attr)
    if index is not None:
        return {index}
    if isinstance(attr, ArrayAttr):
        return set().union(*(_tensor_refs(a) for a in attr.data))
    if isinstance(attr, DictionaryAttr):
        return set().union(*(_tensor_refs(a) for a in attr.data.values()))
    return set()


# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A dense tensor constant. `%c = graph.constant dense<2.0> : tensor<f32>`"""

    name = "graph.constant"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_by("binary"),
        without={
            "aten": "made by the importer's constant rows (full, zeros, ones, scalar_tensor)",
            "scalar": "lower-to-loops reads its elements (a splat becomes one arith.constant)",
        },
    )
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike(), Elementwise())

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        pos = parser.pos
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error("expected a dense tensor attribute", pos, parser.pos)
        attrs = parser.parse_optional_attr_dict()
        op = cls(value)  # pyright: ignore[reportUnknownArgumentType]
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        printer.print_op_attributes(self.attributes)

    def __init__(self, value: DenseIntOrFPElementsAttr):  # pyright: ignore[reportMissingTypeArgument]
        super().__init__(properties={"value": value}, result_types=[value.type])

    @staticmethod
    def scalar(
        value: float | int | bool, dtype: Attribute, shape: Sequence[int] = ()
    ) -> ConstantOp:
        if isinstance(dtype, FLOAT_TYPES):  # is_float(dtype), narrowed for the checker
            return ConstantOp(
                DenseIntOrFPElementsAttr.from_list(TensorType(dtype, shape), [float(value)])
            )
        # Every other graph element type is a signless integer (i1, i32, i64).
        int_type = cast(IntegerType, dtype)
        return ConstantOp(
            DenseIntOrFPElementsAttr.from_list(TensorType(int_type, shape), [int(value)])
        )

    def verify_(self) -> None:
        _check_tensor(self.result, "result")
        if self.value.type != self.result.type:
            raise VerifyException(
                f"expected result type {self.value.type}, found {self.result.type}"
            )


# ---------------------------------------------------------------------------------------------
# Composite ops (`decompose` rewrites them into the primitives above)
# ---------------------------------------------------------------------------------------------


class _DimCompositeOp(IRDLOperation):
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    dim = prop_def(IntegerAttr[I64])
    traits = traits_def(Pure(), Composite())
    assembly_format = "$input `dim` `=` $dim attr-dict `:` type($input)"

    def __init__(self, input: SSAValue | Operation, dim: int):
        input = SSAValue.get(input)
        rank = len(shape_of(input))
        super().__init__(
            operands=[input],
            result_types=[input.type],
            properties={"dim": IntegerAttr(dim % rank if rank else 0, i64)},
        )

    @property
    def axis(self) -> int:
        return self.dim.value.data

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        if not is_float(t.element_type):
            raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
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

    @property
    def normalized_rank(self) -> int:
        rank = self.properties["rank"]
        assert isinstance(rank, IntegerAttr)
        return rank.value.data

    @property
    def epsilon(self) -> float:
        eps = self.properties["eps"]
        assert isinstance(eps, FloatAttr)
        return eps.value.data

    def _check_norm(self, affine: Sequence[SSAValue | None]) -> None:
        t = _check_tensor(self.operands[0], "operand")
        if not is_float(t.element_type):
            raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
        shape, r = t.get_shape(), self.normalized_rank

        if not 1 <= r <= len(shape):
            raise VerifyException(f"expected rank in [1, {len(shape)}], found {r}")
        normalized = tuple(shape[len(shape) - r :])
        for name, v in zip(("weight", "bias"), affine, strict=False):
            if v is None:
                continue
            _check_tensor(v, name)
            if shape_of(v) != normalized:
                raise VerifyException(
                    f"expected {name} of shape {fmt_shape(normalized)}, found {fmt_shape(shape_of(v))}"
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
    rank = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float64Type])
    traits = traits_def(Pure(), Composite())
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
        input = SSAValue.get(input)
        super().__init__(
            operands=[
                input,
                [SSAValue.get(weight)] if weight is not None else [],
                [SSAValue.get(bias)] if bias is not None else [],
            ],
            result_types=[input.type],
            properties={"rank": IntegerAttr(rank, i64), "eps": FloatAttr(eps, Float64Type())},
        )

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
    rank = prop_def(IntegerAttr[I64])
    eps = prop_def(FloatAttr[Float64Type])
    traits = traits_def(Pure(), Composite())
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
        input = SSAValue.get(input)
        super().__init__(
            operands=[input, [SSAValue.get(weight)] if weight is not None else []],
            result_types=[input.type],
            properties={"rank": IntegerAttr(rank, i64), "eps": FloatAttr(eps, Float64Type())},
        )

    def verify_(self) -> None:
        self._check_norm([self.weight])


@irdl_op_definition
class GeluOp(IRDLOperation):
    """GELU, exact (erf) or `approximate = "tanh"`.
    `%y = graph.gelu %x approximate = "tanh" : tensor<4xf32>`"""

    name = "graph.gelu"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.gelu.default",),
        fuzz=Fuzz.unary("F.gelu"),
    )
    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)
    approximate = prop_def(StringAttr)
    traits = traits_def(Pure(), Composite())
    assembly_format = "$input `approximate` `=` $approximate attr-dict `:` type($input)"

    def __init__(self, input: SSAValue | Operation, approximate: str = "none"):
        input = SSAValue.get(input)
        super().__init__(
            operands=[input],
            result_types=[input.type],
            properties={"approximate": StringAttr(approximate)},
        )

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        if not is_float(t.element_type):
            raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
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
class VarOp(IRDLOperation):
    """Variance over `dims` with Bessel's `correction` (torch.var).
    `%y = graph.var %x dims = [1] correction = 1 keepdim : tensor<4x8xf32> -> tensor<4x1xf32>`"""

    name = "graph.var"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.var.dim", "aten.var.correction", "aten.var.default"),
        fuzz=Fuzz.reduction("var"),
    )
    input = operand_def(TensorType)
    result = result_def(TensorType)
    dims = prop_def(DenseArrayBase[I64])
    correction = prop_def(IntegerAttr[I64])
    keepdim = opt_prop_def(UnitAttr)
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
        input = SSAValue.get(input)
        rank = len(shape_of(input))
        dims = sorted(d % rank for d in dims) if rank else []
        super().__init__(
            operands=[input],
            result_types=[
                TensorType(dtype_of(input), reduced_shape(shape_of(input), dims, keepdim))
            ],
            properties={
                "dims": _i64_array(dims),
                "correction": IntegerAttr(correction, i64),
                "keepdim": UnitAttr() if keepdim else None,
            },
        )

    @property
    def reduce_dims(self) -> tuple[int, ...]:
        return _ints(self.dims)

    @property
    def keeps_dims(self) -> bool:
        return self.keepdim is not None

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.input, self.result], "operand and result")
        if not is_float(t.element_type):
            raise VerifyException(f"expected a floating-point operand, found {t.element_type}")
        _check_dims(self.reduce_dims, len(t.get_shape()))
        _check_result_shape(self, reduced_shape(t.get_shape(), self.reduce_dims, self.keeps_dims))


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
            if op_kind(user) == "extern" or (or_return and user.name == "func.return"):
                continue
            if not isinstance(user, STRIDED_VIEWS) or not read_only_by_externs(
                user, or_return=or_return
            ):
                return False
    return True


def op_facts(op: type[Operation] | Operation) -> OpFacts:
    """The facts a graph op class declares (see `xfuse.dialects.facts`); none for other ops."""
    cls = op if isinstance(op, type) else type(op)
    facts = getattr(cls, "FACTS", None)
    return facts if isinstance(facts, OpFacts) else OpFacts()


# The op list's order is the order the random program generators draw each pool in.
Graph = Dialect(
    "graph",
    [
        NegOp,
        AbsOp,
        ReluOp,
        ExpOp,
        LogOp,
        SqrtOp,
        RsqrtOp,
        TanhOp,
        SigmoidOp,
        ErfOp,
        SinOp,
        CosOp,
        ReciprocalOp,
        FloorOp,
        CeilOp,
        RoundOp,
        TruncOp,
        Log1pOp,
        Expm1Op,
        Log2Op,
        Log10Op,
        Exp2Op,
        AsinOp,
        AcosOp,
        AtanOp,
        TanOp,
        SinhOp,
        CoshOp,
        AsinhOp,
        AcoshOp,
        AtanhOp,
        SignOp,
        IsNanOp,
        IsInfOp,
        SignbitOp,
        CastOp,
        AddOp,
        SubOp,
        MulOp,
        DivOp,
        MaximumOp,
        MinimumOp,
        PowOp,
        Atan2Op,
        CopysignOp,
        FmaxOp,
        FminOp,
        HypotOp,
        LtOp,
        LeOp,
        GtOp,
        GeOp,
        EqOp,
        NeOp,
        WhereOp,
        BroadcastInDimOp,
        ReduceSumOp,
        ReduceMeanOp,
        ReduceMaxOp,
        ReduceMinOp,
        ReduceProdOp,
        ReshapeOp,
        PermuteOp,
        SliceOp,
        ConcatOp,
        GatherOp,
        MatmulOp,
        LinearOp,
        TorchCallOp,
        ConstantOp,
        SoftmaxOp,
        LogSoftmaxOp,
        LayerNormOp,
        RMSNormOp,
        SiluOp,
        GeluOp,
        VarOp,
        # issue 15 (elem)
        BitwiseNotOp,
        BitwiseAndOp,
        BitwiseOrOp,
        BitwiseXorOp,
        FmodOp,
        RemainderOp,
        FloorDivideOp,
        ErfcOp,
        # task `index`
        IotaOp,
        FlipOp,
        RollOp,
        # pool task: padding and pooling
        PadOp,
        PoolOp,
        PatchesOp,
        ArgMaxOp,
        ArgMinOp,
        # task `scan`
        ScanOp,
    ],
    [],
)
