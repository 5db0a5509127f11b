"""cumsum, cumprod, logcumsumexp, cummax and cummin: imported as graph.scan with
eager's dtype rules, interpreted equal to eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from frontend_util import check_against_eager, op_names

from xfuse.dialects import graph

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(shape, generator=_gen).to(dtype)


def ints(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(-3, 4, shape, generator=_gen).to(dtype)


# (id, function, input, the scan kinds the import holds)
CASES: list[tuple[str, Callable[..., Any], Callable[[], torch.Tensor], list[str]]] = [
    ("cumsum", lambda x: torch.cumsum(x, 1), lambda: rand(3, 5), ["sum"]),
    ("cumsum_negative_dim", lambda x: torch.cumsum(x, -2), lambda: rand(3, 5, 2), ["sum"]),
    ("cumsum_method", lambda x: x.cumsum(0) * 2, lambda: rand(4), ["sum"]),
    ("cumsum_f16", lambda x: torch.cumsum(x, 1), lambda: rand(2, 40, dtype=torch.float16), ["sum"]),
    ("cumsum_int32", lambda x: torch.cumsum(x, 0), lambda: ints(6, dtype=torch.int32), ["sum"]),
    ("cumsum_bool", lambda x: torch.cumsum(x > 0, 1), lambda: rand(3, 5), ["sum"]),
    (
        "cumsum_dtype",
        lambda x: torch.cumsum(x, 1, dtype=torch.float64),
        lambda: rand(3, 5),
        ["sum"],
    ),
    # a 0-d tensor's values are the tensor itself (eager's), its indices a scan of one element
    ("cumsum_0d", lambda x: torch.cumsum(x, 0), lambda: rand(), []),
    ("cumprod", lambda x: torch.cumprod(x, 1), lambda: rand(3, 5), ["prod"]),
    ("cumprod_int", lambda x: torch.cumprod(x, 1), lambda: ints(3, 5), ["prod"]),
    ("logcumsumexp", lambda x: torch.logcumsumexp(x, 0), lambda: rand(6, 2), ["logsumexp"]),
    ("cummax", lambda x: torch.cummax(x, 1), lambda: rand(3, 5), ["max", "argmax"]),
    ("cummin_values", lambda x: torch.cummin(x, 0).values, lambda: rand(3, 5), ["min"]),
    ("cummin_indices", lambda x: torch.cummin(x, 0).indices, lambda: ints(9, 2), ["argmin"]),
    ("cummax_bool", lambda x: torch.cummax(x > 0, 1), lambda: rand(3, 5), ["max", "argmax"]),
    ("cummax_0d", lambda x: torch.cummax(x, -1), lambda: rand(), ["argmax"]),
]


@pytest.mark.parametrize(("fn", "make", "kinds"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_imports_as_a_scan(
    fn: Callable[..., Any], make: Callable[[], torch.Tensor], kinds: list[str]
) -> None:
    imported = check_against_eager(fn, (make(),))
    names = op_names(imported)
    assert "graph.torch_call" not in names
    scans = [op for op in imported.module.walk() if isinstance(op, graph.ScanOp)]
    assert [op.combines for op in scans] == kinds


def test_integers_and_bool_are_cast_to_i64_first() -> None:
    imported = check_against_eager(lambda x: torch.cumsum(x, 0), (ints(5, dtype=torch.int32),))
    (scan,) = [op for op in imported.module.walk() if isinstance(op, graph.ScanOp)]
    assert isinstance(scan.input.owner, graph.CastOp)
    assert str(graph.dtype_of(scan.result)) == "i64"


def test_nan_and_infinities_as_eager() -> None:
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 3.0, 3.0, nan], [-inf, -inf, inf, inf, 0.0]])
    for fn in (
        lambda a: torch.cummax(a, 1),
        lambda a: torch.cummin(a, 1),
        lambda a: torch.logcumsumexp(a, 1),
        lambda a: torch.cumsum(a, 1),
    ):
        check_against_eager(fn, (x,))
