"""Elementwise math ops through the whole CPU path, at the edges of their
ranges (±0, ±inf, NaN, subnormals, huge arguments, the ends of each function's domain) and
over a wide sweep of magnitudes, in f32, f16, bf16 and f64, against eager at torch's
tolerances. Each must compile to kernels with no eager part."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.dialects import graph
from xfuse.errors import FallbackWarning

Fn = Callable[..., torch.Tensor]
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)

EDGES = [
    0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-45, -1e-45, 1e-40, -1e-40,
    1.17549435e-38, 3.4028235e38, -3.4028235e38, 1e-7, -1e-7, 1e-4, 0.5, -0.5, 1.0, -1.0,
    0.999, -0.999, 1.001, 1.5, -1.5, 2.5, -2.5, 3.5, 0.49999997, 88.7, -88.7, 89.5, -104.0,
    127.9, 128.5, -150.0, 1e10, -1e10, 16777217.0, 1e30, -1e30, 3.14159265, 1.57079632,
]  # fmt: skip


def check(fn: Fn, inputs: tuple[torch.Tensor, ...]) -> None:
    """Compiled with no eager part (no torch_call, no fallback), equal to eager."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = xfuse.compile(fn, inputs)
    module = compiled.default.program.module
    eager = {op.target.data for op in module.walk() if isinstance(op, graph.TorchCallOp)}
    assert not eager, f"runs eagerly: {sorted(eager)}"
    assert compiled.kernels, "no kernel was compiled"
    got, want = compiled(*inputs), fn(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True)


def edge_inputs(dtype: torch.dtype) -> torch.Tensor:
    """Every edge value, then magnitudes from 2^-149 to 2^127 of both signs."""
    g = torch.Generator().manual_seed(0)
    magnitudes = torch.exp2(torch.rand(4000, generator=g, dtype=torch.float64) * 276 - 149)
    signs = torch.where(torch.rand(4000, generator=g) < 0.5, -1.0, 1.0).double()
    sweep = torch.cat([torch.linspace(-12, 12, 2001, dtype=torch.float64), magnitudes * signs])
    return torch.cat([torch.tensor(EDGES, dtype=torch.float64), sweep]).to(dtype)


def rows(x: torch.Tensor, n: int) -> torch.Tensor:
    """x as rows of n (its tail dropped)."""
    return x.flatten()[: x.numel() // n * n].reshape(-1, n)


def finite_quotient(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """b, but 1 where a finite a / b overflows: eager's vectorized CPU fmod then gives NaN (its
    scalar path, CUDA and C give the exact remainder, as xfuse does)."""
    return torch.where((a / b).isinf() & a.isfinite() & (b != 0), 1.0, b)


UNARY: dict[str, Fn] = {
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "round_decimals": lambda x: torch.round(x, decimals=2),
    "round_negative_decimals": lambda x: torch.round(x, decimals=-1),
    "trunc": torch.trunc,
    "frac": torch.frac,
    "log1p": torch.log1p,
    "expm1": torch.expm1,
    "log2": torch.log2,
    "log10": torch.log10,
    "exp2": torch.exp2,
    "isnan": torch.isnan,
    "isinf": torch.isinf,
    "isfinite": torch.isfinite,
    "nan_to_num": torch.nan_to_num,
    "sign": torch.sign,
    "sgn": torch.sgn,
    "signbit": torch.signbit,
    "asin": torch.asin,
    "acos": torch.acos,
    "atan": torch.atan,
    "tan": torch.tan,
    "sinh": torch.sinh,
    "cosh": torch.cosh,
    "asinh": torch.asinh,
    "acosh": torch.acosh,
    "atanh": torch.atanh,
    "elu": F.elu,
    "elu_alpha": lambda x: F.elu(x, alpha=0.3),
    "celu": lambda x: F.celu(x, alpha=1.7),
    "selu": F.selu,
    "softplus": F.softplus,
    "logsigmoid": F.logsigmoid,
    "mish": F.mish,
    "hardtanh": F.hardtanh,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "leaky_relu": F.leaky_relu,
    # erfc, logical_not, and reductions of the edge values (any/all, var_mean, vector norms)
    "erfc": torch.erfc,
    "logical_not": torch.logical_not,
    "any": lambda x: x.any(),
    "all_dim": lambda x: rows(x, 2).all(dim=1),
    "var_mean": lambda x: torch.stack(torch.var_mean(rows(x, 3).clamp(-1e3, 1e3), dim=1)),
    "vector_norm_2": lambda x: torch.linalg.vector_norm(rows(x, 3).clamp(-1e3, 1e3), dim=1),
    "vector_norm_1": lambda x: torch.linalg.vector_norm(rows(x, 3).clamp(-1e3, 1e3), 1, dim=1),
    "vector_norm_3": lambda x: torch.linalg.vector_norm(rows(x, 3).clamp(-1e3, 1e3), 3, dim=1),
    "vector_norm_inf": lambda x: torch.linalg.vector_norm(rows(x, 3), float("inf"), dim=1),
    "vector_norm_-inf": lambda x: torch.linalg.vector_norm(rows(x, 3), -float("inf"), dim=1),
    "vector_norm_0": lambda x: torch.linalg.vector_norm(rows(x, 3), 0, dim=1),
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_edges(name: str, dtype: torch.dtype) -> None:
    check(UNARY[name], (edge_inputs(dtype),))


BINARY: dict[str, Fn] = {
    "atan2": torch.atan2,
    "copysign": torch.copysign,
    "fmax": torch.fmax,
    "fmin": torch.fmin,
    "hypot": torch.hypot,
    # division and remainder (by a finite quotient), logical ops, logaddexp, heaviside
    "fmod": lambda a, b: torch.fmod(a, finite_quotient(a, b)),
    "remainder": lambda a, b: torch.remainder(a, finite_quotient(a, b)),
    "floor_divide": torch.floor_divide,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "logaddexp": torch.logaddexp,
    "heaviside": torch.heaviside,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary_edges(name: str, dtype: torch.dtype) -> None:
    """Every pair of edge values, and the sweep against a shuffle of itself."""
    edges = torch.tensor(EDGES, dtype=torch.float64).to(dtype)
    sweep = edge_inputs(dtype)
    g = torch.Generator().manual_seed(1)
    a = torch.cat([edges.repeat_interleave(len(edges)), sweep])
    b = torch.cat([edges.repeat(len(edges)), sweep[torch.randperm(len(sweep), generator=g)]])
    check(BINARY[name], (a, b))


INT_UNARY: dict[str, Fn] = {
    "floor": torch.floor,
    "round": torch.round,
    "sign": torch.sign,
    "signbit": torch.signbit,
    "isnan": torch.isnan,
}


@pytest.mark.parametrize("dtype", (torch.int32, torch.int64), ids=str)
@pytest.mark.parametrize("name", list(INT_UNARY))
def test_int_unary(name: str, dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, -1, 7, -7, 2**31 - 1, -(2**31)], dtype=dtype)
    check(INT_UNARY[name], (x,))


@pytest.mark.parametrize("dtype", (torch.int64, torch.float32), ids=str)
def test_int_operands_of_float_ops(dtype: torch.dtype) -> None:
    """Integer operands are promoted as eager does (atan2 of ints is float; fmax stays int)."""
    a = torch.tensor([0, 3, -4, 5, -9]).to(dtype)
    b = torch.tensor([1, -3, 0, 5, 2]).to(dtype)
    check(lambda x, y: torch.atan2(x, y) + torch.fmax(x, y) + torch.copysign(x, y), (a, b))


# ---------------------------------------------------------------------------------------------
# Integer and bool ops: bitwise/logical ops, any/all, division by numbers
# ---------------------------------------------------------------------------------------------

INT_EDGES = [0, 1, -1, 2, -2, 7, -7, 100, -100]


def int_inputs(dtype: torch.dtype) -> torch.Tensor:
    info = torch.iinfo(dtype)
    return torch.tensor([*INT_EDGES, info.min, info.max, info.min + 1, info.max - 1], dtype=dtype)


INT_BINARY: dict[str, Fn] = {
    "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or,
    "bitwise_xor": torch.bitwise_xor,
    "bitwise_not": lambda a, b: ~a,
    "logical_not": lambda a, b: torch.logical_not(a),
    "logical_and": torch.logical_and,
    "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor,
    "any_all": lambda a, b: torch.stack([a.any(), b.all(), (a & b).any()]),
}

INT_BY_NUMBER: dict[str, Fn] = {
    "remainder": lambda a: torch.remainder(a, 3) + torch.remainder(a, -7),
    "fmod": lambda a: torch.fmod(a, 3) + torch.fmod(a, -7),
    "floor_divide": lambda a: a // 4 + a // -3,
    "div_floor": lambda a: torch.div(a, 5, rounding_mode="floor"),
    "div_trunc": lambda a: torch.div(a, -7, rounding_mode="trunc"),
}


@pytest.mark.parametrize("dtype", (torch.int32, torch.int64, torch.bool), ids=str)
@pytest.mark.parametrize("name", list(INT_BINARY))
def test_int_and_bool_edges(name: str, dtype: torch.dtype) -> None:
    """Every pair of integer edges (int min and max included), and bools."""
    x = torch.tensor([False, True]) if dtype == torch.bool else int_inputs(dtype)
    check(INT_BINARY[name], (x.repeat_interleave(len(x)), x.repeat(len(x))))


@pytest.mark.parametrize("dtype", (torch.int32, torch.int64), ids=str)
@pytest.mark.parametrize("name", list(INT_BY_NUMBER))
def test_int_division_by_a_number(name: str, dtype: torch.dtype) -> None:
    check(INT_BY_NUMBER[name], (int_inputs(dtype),))


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: torch.remainder(a, b),
        lambda a, b: torch.fmod(a, b),
        lambda a, b: a // b,
        lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    ],
)
def test_int_division_by_a_tensor_raises_like_eager(fn: Fn) -> None:
    """A divisor that may be 0 (or -1 with int min) stays in torch: division by zero raises
    as in eager, where a kernel would trap."""
    a, b = torch.tensor([7, -7, 5]), torch.tensor([2, -3, 4])
    compiled = xfuse.compile(fn, (a, b))
    torch.testing.assert_close(compiled(a, b), fn(a, b))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        fn(a, torch.tensor([2, 0, 4]))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        compiled(a, torch.tensor([2, 0, 4]))


def test_int_division_by_zero_or_minus_one_stays_in_torch() -> None:
    a = torch.tensor([7, -(2**63), 5])
    compiled = xfuse.compile(lambda x: torch.remainder(x, -1) + x // -1, (a,))
    module = compiled.default.program.module
    assert any(isinstance(op, graph.TorchCallOp) for op in module.walk())
    torch.testing.assert_close(compiled(a), torch.remainder(a, -1) + a // -1)


def test_any_all_of_floats_count_nan_and_negative_zero_as_eager() -> None:
    x = torch.tensor([[0.0, -0.0], [float("nan"), 0.0], [1e-45, 0.0], [-0.0, -0.0]])
    check(lambda t: torch.stack([t.any(dim=1), t.all(dim=1), torch.logical_not(t).any(1)]), (x,))
    check(lambda t: torch.ops.aten.any.dims(t, []), (x,))  # dim=[]: no reduction


ARG_REDUCTIONS: dict[str, Fn] = {
    "argmax_dim": lambda x: rows(x, 7).argmax(dim=1),
    "argmin_dim": lambda x: rows(x, 7).argmin(dim=1),
    "argmax_columns_keepdim": lambda x: rows(x, 5).argmax(dim=0, keepdim=True),
    "argmin_all": lambda x: x.argmin(),
    "argmax_of_softmax": lambda x: torch.softmax(rows(x, 4).clamp(-80, 80), dim=1).argmax(1),
}


@pytest.mark.parametrize("dtype", (*DTYPES, torch.int64), ids=str)
@pytest.mark.parametrize("name", list(ARG_REDUCTIONS))
def test_arg_reductions(name: str, dtype: torch.dtype) -> None:
    """The first index of the max/min, NaN counting as both; ties (±0, repeated infinities
    and integers) keep the first."""
    if dtype == torch.int64:
        if name == "argmax_of_softmax":
            return
        x = int_inputs(dtype).repeat(8)[:-3]
    else:
        x = edge_inputs(dtype)
    check(ARG_REDUCTIONS[name], (x,))
    ties = torch.tensor([[-0.0, 0.0, 0.0], [-float("inf")] * 3, [float("nan"), 1.0, float("nan")]])
    ties = ties.to(dtype) if dtype.is_floating_point else ties[:1].to(dtype)
    check(lambda t: torch.stack([t.argmax(1), t.argmin(1)]), (ties,))


# x ** c for the exponents eager's pow(Tensor, Scalar) special-cases (SmallPowerAsProducts)
POWERS = (0.0, 1.0, 2.0, 3.0, -2.0, 0.5, -0.5, -1.0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("exponent", POWERS, ids=str)
def test_small_powers_are_eager_bit_for_bit(exponent: float, dtype: torch.dtype) -> None:
    """`x ** c` as eager's kernel computes it: products rounded as eager rounds them (bf16 after
    each, f16 once), the roots through sqrt/rsqrt. Bit for bit (NaN where eager has NaN), but
    for roots, equal to xfuse's own sqrt and rsqrt, which are within tolerance of eager's (its
    vectorized sqrt and rsqrt are not always correctly rounded here)."""
    x = edge_inputs(dtype)
    fn: Fn = lambda x: torch.pow(x * 3, exponent)  # noqa: E731
    check(fn, (x,))
    got, want = xfuse.compile(fn, (x,))(x), fn(x)
    if exponent in (0.5, -0.5) and dtype != torch.float16:
        want = xfuse.compile(torch.sqrt if exponent > 0 else torch.rsqrt, (x * 3,))(x * 3)
    same = (got == want) | (got.isnan() & want.isnan())
    assert bool(same.all()), f"{int((~same).sum())} elements differ from eager"


def test_cube_is_products_not_a_pow_call() -> None:
    """GPT-2's `gelu_new` cubes its input: the kernel's LLVM IR has no call of libm's scalar
    `powf`, so that its loop vectorizes (30 -> 7 us for GPT-2's 16x256 MLP activation on the
    2-core CPU), and its x * x * x is eager's."""
    from xfuse.backends.cpu import CPUBackend
    from xfuse.ir.context import parse

    x = torch.randn(16, 256)
    fn: Fn = lambda x: 0.5 * x * (1 + torch.tanh(0.8 * (x + 0.04 * torch.pow(x, 3.0))))  # noqa: E731
    compiled = xfuse.compile(fn, (x,))
    (kernel,) = compiled.kernels
    ir = CPUBackend().llvm_ir(parse(kernel.loop_ir), "xfuse_kernel")
    assert "pow" not in ir
    assert "fmul" in ir
    torch.testing.assert_close(compiled(x), fn(x))


SIGNED_ZERO_FNS: dict[str, Fn] = {
    "relu": torch.relu,
    "relu6": F.relu6,
    "clamp": lambda x: torch.clamp(x, 0, 6),
    "clamp_max": lambda x: torch.clamp_max(x, 0),
    "hardtanh": lambda x: F.hardtanh(x, -1, 0),
    "atan2_of_relu": lambda x: torch.atan2(torch.relu(x), torch.full_like(x, -1.0)),
}


def signed_zero_inputs(dtype: torch.dtype) -> torch.Tensor:
    """-0.0 and +0.0 among NaN and values each side of the bounds, in a tensor long enough for
    the vectorized loop and its remainder."""
    return torch.tensor([-0.0, 0.0, float("nan"), -1.5, 7.0, -0.0]).repeat(11).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", sorted(SIGNED_ZERO_FNS))
def test_clamps_keep_the_sign_of_zero(name: str, dtype: torch.dtype) -> None:
    """relu, clamp, hardtanh and relu6 return their input where it ties a bound, as eager's
    kernels do (`x < 0 ? 0 : x`): -0.0 stays -0.0, which `atan2` turns into -pi where +0.0
    gives pi (found by xfuse-fuzz: IEEE `maximum(-0.0, 0.0)` is +0.0)."""
    x = signed_zero_inputs(dtype)
    fn = SIGNED_ZERO_FNS[name]
    got, want = xfuse.compile(fn, (x,), quiet=True, fallback="error")(x), fn(x)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
    assert same_signs(got, want)


def same_signs(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal sign bits wherever the value is a number (a NaN's sign is not one)."""
    number = ~want.isnan()
    return torch.equal(torch.signbit(got[number]), torch.signbit(want[number]))


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_ties_and_nan_as_eager_scalar_kernel(name: str) -> None:
    """A tie of -0.0 and +0.0 gives the first operand (eager's scalar kernel; its vectorized
    loop gives the second, so a tensor of one element is compared) and NaN on either side
    propagates."""
    fn = getattr(torch, name)
    for a, b in [(-0.0, 0.0), (0.0, -0.0), (float("nan"), 1.0), (1.0, float("nan"))]:
        x, y = torch.tensor([a]), torch.tensor([b])
        got, want = xfuse.compile(fn, (x, y), quiet=True, fallback="error")(x, y), fn(x, y)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0)
        assert same_signs(got, want), (a, b)
