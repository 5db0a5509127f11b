"""graph.scan in the graph interpreter: eager's cumsum, cumprod, logcumsumexp,
cummax and cummin, the operand's dtype kept (the importer casts integers to i64 first)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import xfuse
from xfuse.interpreters.graph import interpret

EAGER: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "sum": lambda x, d: torch.cumsum(x, d),
    "prod": lambda x, d: torch.cumprod(x, d),
    "logsumexp": torch.logcumsumexp,
    "max": lambda x, d: torch.cummax(x, d).values,
    "min": lambda x, d: torch.cummin(x, d).values,
    "argmax": lambda x, d: torch.cummax(x, d).indices,
    "argmin": lambda x, d: torch.cummin(x, d).indices,
}


def scan(kind: str, dim: int, element: str) -> str:
    result = "i64" if kind.startswith("arg") else element
    return f"""func.func @forward(%x: tensor<3x5x{element}>) -> tensor<3x5x{result}> {{
  %y = graph.scan %x dim = {dim} kind = "{kind}" : tensor<3x5x{element}> -> tensor<3x5x{result}>
  func.return %y : tensor<3x5x{result}>
}}"""


@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("kind", list(EAGER))
def test_each_kind_is_eager(kind: str, dim: int) -> None:
    x = torch.randn(3, 5)
    x[1, 2] = float("nan")
    (got,) = interpret(xfuse.parse(scan(kind, dim, "f32")), [x])
    torch.testing.assert_close(got, EAGER[kind](x, dim), equal_nan=True)


def test_an_i32_sum_stays_i32() -> None:
    x = torch.randint(-5, 5, (3, 5), dtype=torch.int32)
    (got,) = interpret(xfuse.parse(scan("sum", 1, "i32")), [x])
    assert got.dtype == torch.int32
    torch.testing.assert_close(got, torch.cumsum(x, 1, dtype=torch.int32))
