"""Elementwise ops: unary, binary (with torch broadcasting), comparisons, `cast` and `where`.

Binary ops require equal element types (the importer inserts `graph.cast` where torch would
promote); comparisons yield `i1`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import Float64Type, TensorType, UnitAttr, i1
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    VarConstraint,
    base,
    irdl_op_definition,
    operand_def,
    result_def,
    traits_def,
)
from xdsl.traits import Pure
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
from xfuse.dialects.graph.base import (
    Elementwise,
    OneTensorOp,
    SameTypeOp,
    _check_float,
    _check_numeric,
    _check_result_shape,
    _check_same_dtype,
    _check_shape_rule,
    _check_tensor,
    broadcast_shapes,
    dims_of,
    dtype_of,
    fmt_shape,
    is_float,
    tensor_of,
)
from xfuse.dialects.mlir_ops import ErfcOp as MathErfcOp
from xfuse.dialects.mlir_ops import RemFOp
from xfuse.ir.names import TIES_KEEP_FIRST_ATTR

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


# ---------------------------------------------------------------------------------------------
# Unary ops
# ---------------------------------------------------------------------------------------------


class UnaryOp(SameTypeOp):
    """Base of elementwise unary ops: result type equals operand type."""

    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$input attr-dict `:` type($input)"

    FLOAT_ONLY: ClassVar[bool] = False
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        if self.FLOAT_ONLY:
            _check_float(t)
        _check_numeric(t)


class FloatUnaryOp(UnaryOp):
    FLOAT_ONLY: ClassVar[bool] = True


class IntegerUnaryOp(UnaryOp):
    """Base of elementwise unary ops on integers and bools."""

    def verify_(self) -> None:
        t = _check_tensor(self.input, "operand")
        if is_float(t.element_type):
            raise VerifyException(f"expected an integer or bool operand, found {t.element_type}")


class UnaryPredicateOp(UnaryOp):
    """Base of elementwise unary tests: an i1 result of the operand's shape."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(TensorType)
    assembly_format = "$input attr-dict `:` type($input) `->` type($result)"

    def __init__(self, input: SSAValue | Operation):
        input = SSAValue.get(input)
        IRDLOperation.__init__(self, operands=[input], result_types=[tensor_of(i1, dims_of(input))])

    def verify_(self) -> None:
        super().verify_()
        _check_result_shape(self, dims_of(self.input))
        if dtype_of(self.result) != i1:
            raise VerifyException(f"expected an i1 result, found {dtype_of(self.result)}")


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
class ErfcOp(FloatUnaryOp):
    """Complementary error function, accurate for large x. `%y = graph.erfc %x : tensor<4xf32>`"""

    name = "graph.erfc"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.erfc",
        aten=("aten.erfc.default",),
        scalar=ScalarRule(unary(MathErfcOp)),
        fuzz=Fuzz.unary("torch.erfc"),
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


# ---------------------------------------------------------------------------------------------
# Casts
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class CastOp(OneTensorOp):
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
    traits = traits_def(Pure(), Elementwise())
    assembly_format = "$input attr-dict `:` type($input) `to` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, input: SSAValue | Operation, dtype: Attribute):
        input = SSAValue.get(input)
        super().__init__(input, dims_of(input), dtype)

    def verify_(self) -> None:
        self._check_tensors(same_dtype=False)
        _check_result_shape(self, dims_of(self.input))


# ---------------------------------------------------------------------------------------------
# Binary ops (with torch broadcasting)
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
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        shape = broadcast_shapes(dims_of(lhs), dims_of(rhs))
        if shape is None:
            raise ValueError(
                f"{self.name}: shapes {fmt_shape(dims_of(lhs))} and "
                f"{fmt_shape(dims_of(rhs))} do not broadcast"
            )
        dtype = i1 if self.IS_COMPARISON else dtype_of(lhs)
        super().__init__(operands=[lhs, rhs], result_types=[tensor_of(dtype, shape)])

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
        _check_shape_rule(self, broadcast_shapes, [self.lhs, self.rhs], "do not broadcast")
        want = i1 if self.IS_COMPARISON else lt.element_type
        if dtype_of(self.result) != want:
            raise VerifyException(
                f"expected result element type {want}, found {dtype_of(self.result)}"
            )


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
class BitwiseAndOp(IntegerBinaryOp):
    """a & b (logical and on bools). `%z = graph.bitwise_and %a, %b : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>`"""

    name = "graph.bitwise_and"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_and",
        aten=("aten.bitwise_and.Tensor", "aten.bitwise_and.Scalar", "aten.__and__.Tensor"),
        scalar=ScalarRule(None, binary(arith.AndIOp), binary(arith.AndIOp)),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class BitwiseOrOp(IntegerBinaryOp):
    """a | b (logical or on bools). `%z = graph.bitwise_or %a, %b : tensor<4xi64>, tensor<i64> -> tensor<4xi64>`"""

    name = "graph.bitwise_or"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_or",
        aten=("aten.bitwise_or.Tensor", "aten.bitwise_or.Scalar", "aten.__or__.Tensor"),
        scalar=ScalarRule(None, binary(arith.OrIOp), binary(arith.OrIOp)),
        fuzz=Fuzz.drawn_by("integer_or_logical"),
    )


@irdl_op_definition
class BitwiseXorOp(IntegerBinaryOp):
    """a ^ b (logical xor on bools). `%z = graph.bitwise_xor %a, %b : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>`"""

    name = "graph.bitwise_xor"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.bitwise_xor",
        aten=("aten.bitwise_xor.Tensor", "aten.bitwise_xor.Scalar", "aten.__xor__.Tensor"),
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


# ---------------------------------------------------------------------------------------------
# Comparisons and select
# ---------------------------------------------------------------------------------------------


class ComparisonOp(BinaryOp):
    IS_COMPARISON: ClassVar[bool] = True


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
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(
        self,
        cond: SSAValue | Operation,
        lhs: SSAValue | Operation,
        rhs: SSAValue | Operation,
    ):
        cond, lhs, rhs = SSAValue.get(cond), SSAValue.get(lhs), SSAValue.get(rhs)
        shape = broadcast_shapes(dims_of(cond), dims_of(lhs), dims_of(rhs))
        if shape is None:
            raise ValueError("graph.where: operand shapes do not broadcast")
        super().__init__(operands=[cond, lhs, rhs], result_types=[tensor_of(dtype_of(lhs), shape)])

    def verify_(self) -> None:
        ct = _check_tensor(self.cond, "condition")
        _check_tensor(self.lhs, "lhs")
        _check_tensor(self.rhs, "rhs")
        _check_tensor(self.result, "result")
        if ct.element_type != i1:
            raise VerifyException(f"expected an i1 condition, found {ct.element_type}")
        _check_same_dtype([self.lhs, self.rhs, self.result], "lhs, rhs and result")
        operands = [self.cond, self.lhs, self.rhs]
        _check_shape_rule(self, broadcast_shapes, operands, "do not broadcast")


ELEMENTWISE_OPS: tuple[type[IRDLOperation], ...] = (
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
    ErfcOp,
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
    BitwiseNotOp,
    IsNanOp,
    IsInfOp,
    SignbitOp,
    CastOp,
    AddOp,
    SubOp,
    MulOp,
    DivOp,
    PowOp,
    MaximumOp,
    MinimumOp,
    Atan2Op,
    CopysignOp,
    FmaxOp,
    FminOp,
    HypotOp,
    BitwiseAndOp,
    BitwiseOrOp,
    BitwiseXorOp,
    FmodOp,
    RemainderOp,
    FloorDivideOp,
    EqOp,
    NeOp,
    LtOp,
    LeOp,
    GtOp,
    GeOp,
    WhereOp,
)
"""The elementwise ops, in the `Graph` dialect's op list."""
