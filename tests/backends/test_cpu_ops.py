"""Every supported op and dtype through the whole CPU path (import, fusion, lower-to-loops,
lower-to-llvm, LLVM, the runtime) equals torch eager. Each case must compile to kernels: a
fallback to eager fails the test. Float reductions are judged by RMSE against an f64
reference, no worse than twice eager's."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.errors import FallbackWarning

Fn = Callable[..., torch.Tensor]
FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTS = (torch.int32, torch.int64)
SHAPE = (37, 53)  # odd sizes: vector loops have remainders

_gen = torch.Generator().manual_seed(0)


def rand(
    dtype: torch.dtype, shape: tuple[int, ...] = SHAPE, low: float = -3, high: float = 3
) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.rand(shape, generator=_gen) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low) * 10, int(high) * 10 + 1, shape, generator=_gen).to(dtype)
    return (torch.rand(shape, generator=_gen, dtype=torch.float64) * (high - low) + low).to(dtype)


def positive(dtype: torch.dtype) -> torch.Tensor:
    return rand(dtype, low=0.1, high=4)


def compile_and_run(fn: Fn, inputs: tuple[torch.Tensor, ...]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        compiled = xfuse.compile(fn, inputs)
    assert compiled.kernels, "no kernel was compiled"
    return compiled(*inputs)


def check(fn: Fn, inputs: tuple[torch.Tensor, ...]) -> None:
    got = compile_and_run(fn, inputs)
    want = fn(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True)


UNARY_FLOAT: dict[str, tuple[Fn, Callable[[torch.dtype], torch.Tensor]]] = {
    "neg": (torch.neg, rand),
    "abs": (torch.abs, rand),
    "relu": (torch.relu, rand),
    "exp": (torch.exp, rand),
    "log": (torch.log, positive),
    "sqrt": (torch.sqrt, positive),
    "rsqrt": (torch.rsqrt, positive),
    "tanh": (torch.tanh, rand),
    "sigmoid": (torch.sigmoid, rand),
    "erf": (torch.erf, rand),
    "sin": (torch.sin, rand),
    "cos": (torch.cos, rand),
    "reciprocal": (torch.reciprocal, positive),
    "silu": (F.silu, rand),
    "gelu": (F.gelu, rand),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), rand),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(UNARY_FLOAT))
def test_unary_float(name: str, dtype: torch.dtype) -> None:
    fn, make = UNARY_FLOAT[name]
    check(fn, (make(dtype),))


UNARY_INT: dict[str, Fn] = {"neg": torch.neg, "abs": torch.abs, "relu": torch.relu}


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("name", list(UNARY_INT))
def test_unary_int(name: str, dtype: torch.dtype) -> None:
    check(UNARY_INT[name], (rand(dtype),))


BINARY: dict[str, Fn] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "eq": torch.eq,
    "ne": torch.ne,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
}


@pytest.mark.parametrize("dtype", (*FLOATS, *INTS), ids=str)
@pytest.mark.parametrize("name", list(BINARY))
def test_binary(name: str, dtype: torch.dtype) -> None:
    a, b = rand(dtype), rand(dtype)
    b[::3] = a[::3]  # comparisons see equal elements too
    check(BINARY[name], (a, b))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_div_and_pow(dtype: torch.dtype) -> None:
    check(torch.div, (rand(dtype), positive(dtype)))
    check(torch.pow, (positive(dtype), rand(dtype, low=-2, high=2)))


@pytest.mark.parametrize("dtype", (*FLOATS, *INTS), ids=str)
def test_broadcasting_and_scalars(dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor, row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
        return (x * row + col) * 2 - 1

    check(fn, (rand(dtype), rand(dtype, (SHAPE[1],)), rand(dtype, (SHAPE[0], 1))))


@pytest.mark.parametrize("dtype", (torch.float32, torch.int64, torch.bool), ids=str)
def test_where(dtype: torch.dtype) -> None:
    def fn(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(c, a, b)

    check(fn, (rand(torch.bool), rand(dtype), rand(dtype)))


CASTS = [
    (torch.float32, torch.float16),
    (torch.float32, torch.bfloat16),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float64),
    (torch.float32, torch.int32),
    (torch.int64, torch.float32),
    (torch.int32, torch.int64),
    (torch.bool, torch.float32),
    (torch.float32, torch.bool),
    (torch.bool, torch.int32),
]


@pytest.mark.parametrize(("src", "dst"), CASTS, ids=str)
def test_casts(src: torch.dtype, dst: torch.dtype) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.to(dst)

    x = rand(src)
    if src.is_floating_point and dst == torch.bool:
        x[::4] = 0
    check(fn, (x,))


@pytest.mark.parametrize("dtype", (torch.float32, torch.int32), ids=str)
def test_bool_logic(dtype: torch.dtype) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return ((a > 0) == (b > 0)).to(a.dtype) * a

    check(fn, (rand(dtype), rand(dtype)))


REDUCTIONS: dict[str, Callable[[torch.Tensor, Any], torch.Tensor]] = {
    "sum": lambda x, d: torch.sum(x, dim=d),
    "mean": lambda x, d: torch.mean(x, dim=d),
    "amax": lambda x, d: torch.amax(x, dim=d),
    "amin": lambda x, d: torch.amin(x, dim=d),
    "sum_keepdim": lambda x, d: torch.sum(x, dim=d, keepdim=True),
}
DIMS = {"last": -1, "first": 0, "all": (0, 1)}


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2)))


def check_reduction(fn: Fn, inputs: tuple[torch.Tensor, ...]) -> None:
    """RMSE against an f64 reference no worse than twice eager's (plus an ulp-sized slack);
    f64 itself, which has no more precise reference, by assert_close."""
    got = compile_and_run(fn, inputs)
    want = fn(*inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == torch.float64:
        torch.testing.assert_close(got, want)
        return
    reference = fn(*(x.double() for x in inputs))
    slack = torch.finfo(want.dtype).eps * float(reference.abs().mean())
    assert rmse(got, reference) <= 2 * rmse(want, reference) + slack


@pytest.mark.parametrize("dims", list(DIMS))
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_float_reductions(name: str, dtype: torch.dtype, dims: str) -> None:
    reduce = REDUCTIONS[name]
    d = DIMS[dims]
    check_reduction(lambda x: reduce(x, d), (rand(dtype),))


@pytest.mark.parametrize("dtype", INTS, ids=str)
@pytest.mark.parametrize("name", ["sum", "amax", "amin"])
def test_int_reductions(name: str, dtype: torch.dtype) -> None:
    reduce = REDUCTIONS[name]
    check(lambda x: reduce(x, -1), (rand(dtype),))


def test_prod() -> None:
    x = rand(torch.float32, low=0.9, high=1.1)
    check_reduction(lambda x: torch.prod(x, dim=-1), (x,))


COMPOSITES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda x: torch.softmax(x, dim=-1),
    "log_softmax": lambda x: torch.log_softmax(x, dim=-1),
    "layer_norm": lambda x: F.layer_norm(x, (SHAPE[1],)),
    "rms_norm": lambda x: F.rms_norm(x, (SHAPE[1],), eps=1e-6),
    "var": lambda x: torch.var(x, dim=-1),
}


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
@pytest.mark.parametrize("name", list(COMPOSITES))
def test_composites(name: str, dtype: torch.dtype) -> None:
    check_reduction(COMPOSITES[name], (rand(dtype),))


def test_norms_with_weight_and_bias() -> None:
    w, b = rand(torch.float32, (SHAPE[1],)), rand(torch.float32, (SHAPE[1],))

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (SHAPE[1],), w, b) + F.rms_norm(x, (SHAPE[1],), w)

    check_reduction(fn, (rand(torch.float32), w, b))


LAYOUT: dict[str, Fn] = {
    "permute": lambda x: x.t() * 2,
    "reshape": lambda x: x.reshape(SHAPE[1], SHAPE[0]) + 1,
    "slice": lambda x: x[1:-2:2, 3:] + 1,
    "cat": lambda x: torch.cat([x, x * 2], dim=1),
    "expand": lambda x: x[:, :1].expand(SHAPE) + x,
}


@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.int64), ids=str)
@pytest.mark.parametrize("name", list(LAYOUT))
def test_layout(name: str, dtype: torch.dtype) -> None:
    check(LAYOUT[name], (rand(dtype),))


def test_zero_dim_and_scalar_inputs() -> None:
    def fn(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return torch.exp(x) * s

    check(fn, (rand(torch.float32), torch.tensor(1.5)))
