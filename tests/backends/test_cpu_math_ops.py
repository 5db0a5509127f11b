"""The elementwise math ops of issue 15 through the whole CPU path, at the edges of their
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
