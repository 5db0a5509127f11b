"""
Scalar ops of MLIR's `math` and `arith` dialects that xDSL 0.74 lacks, under their MLIR names,
for the scalar rules of `graph` ops (`xfuse.dialects.graph`):

- `math.erfc`: the complementary error function, accurate where 1 - erf(x) is not (large x);
- `arith.remf`: the floating-point remainder of C's `fmod` (the sign of the dividend, exact).

They are not part of xDSL's `Math` / `Arith` dialect objects: `xfuse.ir.context` loads them
into every context (`EXTRA_OPS`) next to those dialects, and the passes that read math and arith
ops by their dialect name (`op.dialect_name()`) see them as any other.
"""

from __future__ import annotations

from xdsl.dialects.arith import FloatingPointLikeBinaryOperation
from xdsl.dialects.math import FloatingPointLikeUnaryMathOperation
from xdsl.irdl import irdl_op_definition, traits_def
from xdsl.traits import Pure, SameOperandsAndResultType


@irdl_op_definition
class ErfcOp(FloatingPointLikeUnaryMathOperation):
    """erfc(x) = 1 - erf(x), computed without the cancellation. `%y = math.erfc %x : f32`"""

    name = "math.erfc"

    traits = traits_def(Pure(), SameOperandsAndResultType())


@irdl_op_definition
class RemFOp(FloatingPointLikeBinaryOperation):
    """C's fmod: lhs - trunc(lhs / rhs) * rhs, exactly (NaN for rhs = 0 or an infinite lhs).
    `%z = arith.remf %x, %y : f32`"""

    name = "arith.remf"

    traits = traits_def(Pure())


EXTRA_OPS = (ErfcOp, RemFOp)
"""The ops of this module, loaded into every xfuse context (`Context.load_op`)."""
