"""
`expand-math`: f32 `math` functions as straight-line `arith` (polynomials and bit tricks), so
that the loop vectorizer can vectorize loops that use them (LLVM would otherwise call scalar
libm functions). Accuracy is within a few ulp of the correctly rounded result over the whole
f32 range, with IEEE behaviour at infinities, NaN and denormals.

- exp, exp2: Cody-Waite reduction x = k ln2 + r, a degree-6 polynomial (Cephes expf), and 2^k
  applied as two exponent-field scalings so that results in the denormal range stay right.
- log, log2: frexp by bit operations (denormals rescaled first), Cephes logf polynomial.
- log1p, expm1: Kahan's forms on top of log and exp (exact for tiny arguments).
- tanh: Eigen's rational approximation on |x| < 0.625, 1 - 2 / (exp(2|x|) + 1) above.
- erf: Norbert Juffa's two-interval erff (max error about 1 ulp with an accurate exp).
- erfc: Norbert Juffa's erfcf (exp(-x^2) times a polynomial, no cancellation for large x).
- sin, cos: reduction by pi/2 over the whole f32 range (Payne-Hanek in f64 arithmetic: x times
  26-bit chunks of 2/pi, each product exact, taken mod 4), Cephes sinf/cosf polynomials in f64.

f64 functions are left to LLVM's intrinsics (scalar libm calls); f16/bf16 ones are promoted to
f32 by `lower-to-llvm` before this pass runs.

    %y = math.exp %x : f32   ->   ~40 arith ops (mulf, addf, select, bitcast, shli, ...)
"""

from __future__ import annotations

import math as pymath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import (
    Float32Type,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    f32,
    f64,
    i32,
    i64,
)
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern

from xfuse.dialects.mlir_ops import ErfcOp

_CONTRACT = arith.FastMathFlagsAttr([FastMathFlag.ALLOW_CONTRACT])


@dataclass
class _Builder:
    """Inserts arith ops before the op being expanded; floats are f32 unless told otherwise."""

    rewriter: PatternRewriter
    t: Float32Type | Float64Type = f32

    def _emit(self, op: Operation) -> SSAValue:
        return self.rewriter.insert(op).results[0]

    def at(self, t: Float32Type | Float64Type) -> _Builder:
        return _Builder(self.rewriter, t)

    def c(self, value: float) -> SSAValue:
        return self._emit(arith.ConstantOp(FloatAttr(value, self.t)))

    def ci(self, value: int, t: IntegerType = i32) -> SSAValue:
        return self._emit(arith.ConstantOp(IntegerAttr(value, t)))

    def add(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.AddfOp(a, b, _CONTRACT))

    def sub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.SubfOp(a, b, _CONTRACT))

    def mul(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.MulfOp(a, b, _CONTRACT))

    def div(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.DivfOp(a, b))

    def madd(self, a: SSAValue, b: SSAValue, c: SSAValue) -> SSAValue:
        """a * b + c (an FMA where the target has one)."""
        return self.add(self.mul(a, b), c)

    def poly(self, x: SSAValue, coefficients: Sequence[float]) -> SSAValue:
        """Horner: coefficients from the highest degree down."""
        r = self.c(coefficients[0])
        for coefficient in coefficients[1:]:
            r = self.madd(r, x, self.c(coefficient))
        return r

    def cmp(self, predicate: str, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.CmpfOp(a, b, predicate))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.SelectOp(cond, a, b))

    def abs(self, x: SSAValue) -> SSAValue:
        return self._emit(math.AbsFOp(x))

    def copysign(self, magnitude: SSAValue, sign: SSAValue) -> SSAValue:
        return self._emit(math.CopySignOp(magnitude, sign))

    def floor(self, x: SSAValue) -> SSAValue:
        return self._emit(math.FloorOp(x))

    def round_even(self, x: SSAValue) -> SSAValue:
        return self._emit(math.RoundEvenOp(x))

    def clamp(self, x: SSAValue, lo: float, hi: float) -> SSAValue:
        """min(max(x, lo), hi) that keeps NaN (comparisons with NaN are false)."""
        below = self.cmp("olt", x, self.c(lo))
        x = self.select(below, self.c(lo), x)
        above = self.cmp("ogt", x, self.c(hi))
        return self.select(above, self.c(hi), x)

    def integral_bits(self, k: SSAValue) -> SSAValue:
        """The low bits of integral k as an integer (two's complement), for |k| < 2^22 (f32) or
        2^51 (f64): k + 1.5 * 2^mantissa_bits keeps k in the low mantissa bits. Unlike fptosi
        (saturating in xDSL's llvm dialect), this vectorizes to one add and no conversion."""
        if self.t == f64:
            return self._emit(arith.BitcastOp(self.add(k, self.c(6755399441055744.0)), i64))
        return self._emit(arith.BitcastOp(self.add(k, self.c(12582912.0)), i32))

    def to_float(self, n: SSAValue) -> SSAValue:
        return self._emit(arith.SIToFPOp(n, self.t))

    def bits(self, x: SSAValue) -> SSAValue:
        return self._emit(arith.BitcastOp(x, i32))

    def from_bits(self, n: SSAValue) -> SSAValue:
        return self._emit(arith.BitcastOp(n, f32))

    def iadd(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.AddiOp(a, b))

    def isub(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.SubiOp(a, b))

    def iand(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.AndIOp(a, b))

    def ior(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.OrIOp(a, b))

    def shl(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.ShLIOp(a, b))

    def ashr(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.ShRSIOp(a, b))

    def lshr(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.ShRUIOp(a, b))

    def ieq(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self._emit(arith.CmpiOp(a, b, "eq"))

    def extend(self, x: SSAValue) -> SSAValue:
        return self._emit(arith.ExtFOp(x, f64))

    def truncate(self, x: SSAValue) -> SSAValue:
        return self._emit(arith.TruncFOp(x, f32))


# ---------------------------------------------------------------------------------------------
# exp family
# ---------------------------------------------------------------------------------------------

_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375  # few mantissa bits: k * _LN2_HI is exact
_LN2_LO = -2.12194440e-4
_EXP_POLY = (
    1.9875691500e-4,
    1.3981999507e-3,
    8.3334519073e-3,
    4.1665795894e-2,
    1.6666665459e-1,
    5.0000001201e-1,
)


def _scale_by_power_of_two(b: _Builder, y: SSAValue, k: SSAValue) -> SSAValue:
    """y * 2^k for integral f32 k in [-150, 128], as two exponent-field scalings."""
    n = b.isub(b.integral_bits(k), b.ci(0x4B400000))
    half = b.ashr(n, b.ci(1))
    rest = b.isub(n, half)
    bias, shift = b.ci(127), b.ci(23)
    s1 = b.from_bits(b.shl(b.iadd(half, bias), shift))
    s2 = b.from_bits(b.shl(b.iadd(rest, bias), shift))
    return b.mul(b.mul(y, s1), s2)


def _exp_of_reduced(b: _Builder, r: SSAValue) -> SSAValue:
    """exp(r) for |r| <= ln2/2."""
    p = b.poly(r, _EXP_POLY)
    return b.add(b.madd(p, b.mul(r, r), r), b.c(1.0))


def expand_exp(b: _Builder, x: SSAValue) -> SSAValue:
    x = b.clamp(x, -104.0, 88.8)  # beyond: 0 and inf come out of the scaling
    k = b.floor(b.madd(x, b.c(_LOG2E), b.c(0.5)))
    r = b.sub(x, b.mul(k, b.c(_LN2_HI)))
    r = b.sub(r, b.mul(k, b.c(_LN2_LO)))
    return _scale_by_power_of_two(b, _exp_of_reduced(b, r), k)


def expand_exp2(b: _Builder, x: SSAValue) -> SSAValue:
    x = b.clamp(x, -151.0, 128.5)
    k = b.floor(b.add(x, b.c(0.5)))
    r = b.mul(b.sub(x, k), b.c(pymath.log(2.0)))
    return _scale_by_power_of_two(b, _exp_of_reduced(b, r), k)


def expand_expm1(b: _Builder, x: SSAValue) -> SSAValue:
    """Kahan: u = exp(x); (u - 1) * x / log(u), exact where u rounds to 1 or to 0."""
    u = expand_exp(b, x)
    one = b.c(1.0)
    um1 = b.sub(u, one)
    log_u = expand_log(b, u)
    precise = b.mul(um1, b.div(x, log_u))
    precise = b.select(b.cmp("oeq", log_u, u), u, precise)  # u = inf
    precise = b.select(b.cmp("oeq", um1, b.c(-1.0)), um1, precise)
    return b.select(b.cmp("oeq", u, one), x, precise)


# ---------------------------------------------------------------------------------------------
# log family
# ---------------------------------------------------------------------------------------------

_LOG_POLY = (
    7.0376836292e-2,
    -1.1514610310e-1,
    1.1676998740e-1,
    -1.2420140846e-1,
    1.4249322787e-1,
    -1.6668057665e-1,
    2.0000714765e-1,
    -2.4999993993e-1,
    3.3333331174e-1,
)
_SQRT_HALF = 0.707106781186547524
_SMALLEST_NORMAL = 1.17549435e-38


def _log_parts(b: _Builder, x: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(e, l) with log(x) = e ln2 + l for finite x > 0, l = log(m), m in [sqrt(1/2), sqrt(2))."""
    denormal = b.cmp("olt", x, b.c(_SMALLEST_NORMAL))
    x = b.select(denormal, b.mul(x, b.c(8388608.0)), x)  # * 2^23
    bits = b.bits(x)
    exponent = b.isub(b.iand(b.lshr(bits, b.ci(23)), b.ci(0xFF)), b.ci(126))
    exponent = b.select(denormal, b.isub(exponent, b.ci(23)), exponent)
    m = b.from_bits(b.ior(b.iand(bits, b.ci(0x807FFFFF)), b.ci(0x3F000000)))  # [0.5, 1)
    e = b.to_float(exponent)
    small = b.cmp("olt", m, b.c(_SQRT_HALF))
    one = b.c(1.0)
    e = b.select(small, b.sub(e, one), e)
    m = b.select(small, b.sub(b.add(m, m), one), b.sub(m, one))
    z = b.mul(m, m)
    y = b.mul(b.mul(b.poly(m, _LOG_POLY), m), z)
    y = b.sub(y, b.mul(b.c(0.5), z))
    return e, b.add(m, y)


def _log_special_cases(b: _Builder, x: SSAValue, result: SSAValue) -> SSAValue:
    zero = b.c(0.0)
    result = b.select(b.cmp("oeq", x, b.c(pymath.inf)), x, result)
    result = b.select(b.cmp("oeq", x, zero), b.c(-pymath.inf), result)
    return b.select(b.cmp("ult", x, zero), b.c(pymath.nan), result)  # x < 0 or NaN


def expand_log(b: _Builder, x: SSAValue) -> SSAValue:
    e, log_m = _log_parts(b, x)
    result = b.madd(e, b.c(_LN2_HI), b.madd(e, b.c(_LN2_LO), log_m))
    return _log_special_cases(b, x, result)


def expand_log2(b: _Builder, x: SSAValue) -> SSAValue:
    e, log_m = _log_parts(b, x)
    return _log_special_cases(b, x, b.madd(log_m, b.c(_LOG2E), e))


def expand_log1p(b: _Builder, x: SSAValue) -> SSAValue:
    """log(u) * x / (u - 1) with u = 1 + x: exact for tiny x, right at inf."""
    u = b.add(x, b.c(1.0))
    d = b.sub(u, b.c(1.0))
    log_u = expand_log(b, u)
    precise = b.mul(log_u, b.div(x, d))
    precise = b.select(b.cmp("oeq", u, b.c(pymath.inf)), u, precise)
    return b.select(b.cmp("oeq", d, b.c(0.0)), x, precise)


# ---------------------------------------------------------------------------------------------
# tanh, erf
# ---------------------------------------------------------------------------------------------

_TANH_P = (
    -2.76076847742355e-16,
    2.00018790482477e-13,
    -8.60467152213735e-11,
    5.12229709037114e-08,
    1.48572235717979e-05,
    6.37261928875436e-04,
    4.89352455891786e-03,
)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)


def expand_tanh(b: _Builder, x: SSAValue) -> SSAValue:
    small_x = b.clamp(x, -0.625, 0.625)
    x2 = b.mul(small_x, small_x)
    rational = b.div(b.mul(small_x, b.poly(x2, _TANH_P)), b.poly(x2, _TANH_Q))
    rational = b.select(b.cmp("olt", b.abs(x), b.c(2.4e-4)), x, rational)  # x p(x^2) underflows
    ax = b.clamp(b.abs(x), 0.0, 10.0)  # tanh(10) rounds to 1
    two = b.c(2.0)
    large = b.sub(b.c(1.0), b.div(two, b.add(expand_exp(b, b.mul(two, ax)), b.c(1.0))))
    large = b.copysign(large, x)
    return b.select(b.cmp("olt", b.abs(x), b.c(0.625)), rational, large)


_ERF_SMALL = (
    -5.96761703e-4,
    4.99119423e-3,
    -2.67681349e-2,
    1.12819925e-1,
    -3.76125336e-1,
    1.28379166e-1,
)


def expand_erf(b: _Builder, x: SSAValue) -> SSAValue:
    t = b.clamp(b.abs(x), 0.0, 10.0)  # erf(10) rounds to 1
    s = b.mul(t, t)
    # |x| > 0.927734375: 1 - exp(t p(t) - t)
    r = b.madd(b.c(-1.72853470e-5), t, b.c(3.83197126e-4))
    u = b.madd(b.c(-3.88396438e-3), t, b.c(2.42546219e-2))
    r = b.madd(r, s, u)
    for coefficient in (-1.06777877e-1, -6.34846687e-1, -1.28717512e-1):
        r = b.madd(r, t, b.c(coefficient))
    r = b.madd(r, t, b.sub(b.c(0.0), t))
    large = b.copysign(b.sub(b.c(1.0), expand_exp(b, r)), x)
    small_s = b.mul(x, x)
    small = b.madd(b.poly(small_s, _ERF_SMALL), x, x)
    return b.select(b.cmp("ogt", t, b.c(0.927734375)), large, small)


# ---------------------------------------------------------------------------------------------
# sin, cos
# ---------------------------------------------------------------------------------------------

_TWO_OVER_PI_CHUNKS = tuple(
    float.fromhex(h)
    for h in (
        "0x1.45f3068000000p-1",
        "0x1.7272208000000p-27",
        "0x1.4a7f098000000p-54",
        "0x1.57d1f50000000p-80",
        "0x1.a6ee068000000p-107",
        "0x1.6c52b30000000p-133",
        "0x1.3c43900000000p-160",
        "0x1.07f9458000000p-186",
        "0x1.d5ef5d8000000p-215",
    )
)
"""2/pi in chunks of at most 26 bits: an f32 (24 bits) times a chunk is exact in f64."""
_SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)


def _reduce_by_half_pi(d: _Builder, xd: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(r, q) with x = (4n + q) pi/2 + r, |r| <= pi/4, for any f32 x (in f64): Payne-Hanek
    without a table walk. Each x * chunk of 2/pi is exact; only its value mod 4 matters, split
    into an integer part (mod 4, exact) and a fraction in [-1/2, 1/2] (exact)."""
    quadrants = d.c(0.0)
    fraction = d.c(0.0)
    for chunk in _TWO_OVER_PI_CHUNKS:
        p = d.mul(xd, d.c(chunk))
        n = d.round_even(p)
        fraction = d.add(fraction, d.sub(p, n))
        n_mod_4 = d.sub(n, d.mul(d.c(4.0), d.floor(d.mul(n, d.c(0.25)))))
        quadrants = d.add(quadrants, n_mod_4)
    k = d.round_even(fraction)
    r = d.mul(d.sub(fraction, k), d.c(pymath.pi / 2))
    return r, d.integral_bits(d.add(quadrants, k))


def _sin_cos(b: _Builder, x: SSAValue, quadrant_shift: int) -> SSAValue:
    d = b.at(f64)
    r, quadrant = _reduce_by_half_pi(d, d.extend(x))
    z = d.mul(r, r)
    sin_r = d.madd(d.mul(d.poly(z, _SIN_POLY), z), r, r)
    cos_r = d.add(d.sub(d.c(1.0), d.mul(d.c(0.5), z)), d.mul(d.mul(z, z), d.poly(z, _COS_POLY)))
    quadrant = d.iadd(quadrant, d.ci(quadrant_shift, i64))
    use_cos = d.ieq(d.iand(quadrant, d.ci(1, i64)), d.ci(1, i64))
    negate = d.ieq(d.iand(quadrant, d.ci(2, i64)), d.ci(2, i64))
    value = d.select(use_cos, cos_r, sin_r)
    value = d.select(negate, d.sub(d.c(0.0), value), value)
    return b.truncate(value)


def expand_sin(b: _Builder, x: SSAValue) -> SSAValue:
    return _sin_cos(b, x, 0)


def expand_cos(b: _Builder, x: SSAValue) -> SSAValue:
    return _sin_cos(b, x, 1)


# ---------------------------------------------------------------------------------------------
# erfc
# ---------------------------------------------------------------------------------------------

_ERFC_POLY = tuple(
    float.fromhex(h)
    for h in (
        "-0x1.a4a000p-12",
        "-0x1.42a260p-10",
        "0x1.585714p-10",
        "0x1.1adcc4p-07",
        "-0x1.081b82p-07",
        "-0x1.bc0b6ap-05",
        "0x1.4ffc46p-03",
        "-0x1.540840p-03",
        "-0x1.7bf616p-04",
        "0x1.1ba03ap-02",
    )
)
"""(1 + 2a) exp(a^2) erfc(a) - 1 as a polynomial in q = (a - 2) / (a + 2), a in [0, 10.05]."""


def _square_error(b: _Builder, a: SSAValue, square: SSAValue) -> SSAValue:
    """square - a * a exactly, without an FMA (Dekker): a = hi + lo with 12-bit halves, whose
    products are exact."""
    hi = b.from_bits(b.iand(b.bits(a), b.ci(-4096)))  # 0xFFFFF000: the top 12 mantissa bits
    lo = b.sub(a, hi)
    t = b.sub(square, b.mul(hi, hi))
    t = b.sub(t, b.mul(b.c(2.0), b.mul(hi, lo)))
    return b.sub(t, b.mul(lo, lo))


def expand_erfc(b: _Builder, x: SSAValue) -> SSAValue:
    """Norbert Juffa's erfcf (max error about 3 ulp here): erfc(|x|) = exp(-x^2) (1 + p(q)) /
    (1 + 2|x|), exp(-x^2) corrected by the rounding error of x^2; 0 beyond 10.0546875, where
    it underflows; 2 - erfc(|x|) for x < 0. Accurate where 1 - erf(x) cancels."""
    one, two = b.c(1.0), b.c(2.0)
    a = b.abs(x)
    # q = (a - 2) / (a + 2), with its rounding error corrected
    r = b.div(one, b.add(a, two))
    q = b.madd(b.c(-4.0), r, one)
    t = b.madd(b.add(q, one), b.c(-2.0), a)
    q = b.madd(r, b.madd(b.sub(b.c(0.0), a), q, t), q)
    p = b.poly(q, _ERFC_POLY)
    # (1 + p) / (1 + 2a), with its residual corrected
    r = b.mul(b.div(one, b.add(a, b.c(0.5))), b.c(0.5))
    q = b.madd(p, r, r)
    residual = b.add(b.sub(p, q), b.madd(b.add(q, q), b.sub(b.c(0.0), a), one))
    r = b.madd(residual, r, q)
    # times exp(-a^2)
    square = b.mul(a, a)
    e = expand_exp(b, b.sub(b.c(0.0), square))
    re = b.mul(r, e)
    result = b.madd(re, _square_error(b, a, square), re)
    result = b.select(b.cmp("ogt", a, b.c(10.0546875)), b.c(0.0), result)
    result = b.select(b.cmp("uno", x, x), x, result)
    return b.select(b.cmp("olt", x, b.c(0.0)), b.sub(two, result), result)


EXPANSIONS: dict[type[Operation], Callable[[_Builder, SSAValue], SSAValue]] = {
    math.ExpOp: expand_exp,
    math.Exp2Op: expand_exp2,
    math.ExpM1Op: expand_expm1,
    math.LogOp: expand_log,
    math.Log2Op: expand_log2,
    math.Log1pOp: expand_log1p,
    math.TanhOp: expand_tanh,
    math.ErfOp: expand_erf,
    math.SinOp: expand_sin,
    math.CosOp: expand_cos,
    ErfcOp: expand_erfc,
}


class ExpandF32MathOp(RewritePattern):
    """An f32 math op listed in `EXPANSIONS` -> its arith expansion."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        expansion = EXPANSIONS.get(type(op))
        if expansion is None or not isinstance(op.results[0].type, Float32Type):
            return
        result = expansion(_Builder(rewriter), op.operands[0])
        rewriter.replace(op, (), (result,))


def expand_math(root: Operation) -> None:
    walker = PatternRewriteWalker(ExpandF32MathOp(), apply_recursively=False)
    if isinstance(root, ModuleOp):
        walker.rewrite_module(root)
    else:
        for region in root.regions:
            walker.rewrite_region(region)


@dataclass(frozen=True)
class ExpandMathPass(ModulePass):
    """f32 exp, exp2, expm1, log, log2, log1p, tanh, erf, erfc, sin, cos -> vectorizable arith."""

    name = "expand-math"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        expand_math(op)
