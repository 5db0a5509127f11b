"""The scatters with affine indices (slice_scatter, select_scatter, diagonal_scatter, and the
`copy` of a functionalised `x[...] = y`): imported as a `graph.where` of the region and the
source padded into place, without torch_call, interpreted exactly as eager computes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from frontend_util import check_against_eager, op_names

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


def _setitem(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[:, 1:3] = y
    x[0] = 5.0
    x.diagonal().copy_(torch.ones(4))
    return x * 2


def _strided_setitem(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[:, ::3] = y  # y broadcast along dim 0
    return x


Case = tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]]]

CASES: list[Case] = [
    ("slice", lambda x, y: torch.slice_scatter(x, y, 1, 2, 5), lambda: (rand(4, 8), rand(4, 3))),
    (
        "slice_step",
        lambda x, y: torch.slice_scatter(x, y, 1, 1, 7, 2) * 2,
        lambda: (rand(4, 8), rand(4, 3)),
    ),
    (
        "slice_step_past_end",  # the spread tail is cropped
        lambda x, y: torch.slice_scatter(x, y, 1, 6, 100, 4),
        lambda: (rand(4, 8), rand(4, 1)),
    ),
    (
        "slice_negative_start",
        lambda x, y: torch.slice_scatter(x, y, 0, -3),
        lambda: (rand(4, 8), rand(3, 8)),
    ),
    ("slice_whole", lambda x, y: torch.slice_scatter(x, y) + 1, lambda: (rand(4, 8), rand(4, 8))),
    (
        "slice_empty",
        lambda x, y: torch.slice_scatter(x, y, 1, 3, 3) + 1,
        lambda: (rand(4, 8), rand(4, 0)),
    ),
    (
        "slice_int64",
        lambda x, y: torch.slice_scatter(x, y, 2, 1, 3),
        lambda: (rand(3, 5, 4).to(torch.int64), rand(3, 5, 2).to(torch.int64)),
    ),
    (
        "slice_bool",
        lambda x, y: torch.slice_scatter(x, y, 2, 1, 3),
        lambda: (rand(3, 5, 4) > 0, rand(3, 5, 2) > 0),
    ),
    (
        "slice_f16",
        lambda x, y: torch.slice_scatter(x, y, 0, 0, 3, 2),
        lambda: (rand(3, 5, dtype=torch.float16), rand(2, 5, dtype=torch.float16)),
    ),
    (
        "slice_bf16",
        lambda x, y: torch.slice_scatter(x, y, 1, 1, None, 3),
        lambda: (rand(3, 5, dtype=torch.bfloat16), rand(3, 2, dtype=torch.bfloat16)),
    ),
    ("select", lambda x, y: torch.select_scatter(x, y, 1, -2), lambda: (rand(4, 8), rand(4))),
    ("diagonal", lambda x, y: torch.diagonal_scatter(x, y), lambda: (rand(4, 8), rand(4))),
    (
        "diagonal_offset",
        lambda x, y: torch.diagonal_scatter(x, y, 5),
        lambda: (rand(4, 8), rand(3)),
    ),
    (
        "diagonal_negative",
        lambda x, y: torch.diagonal_scatter(x, y, -3),
        lambda: (rand(4, 8), rand(1)),
    ),
    (
        "diagonal_empty",
        lambda x, y: torch.diagonal_scatter(x, y, 9) * 2,
        lambda: (rand(4, 8), rand(0)),
    ),
    (
        "diagonal_dims",
        lambda x, y: torch.diagonal_scatter(x, y, 1, 2, 0),
        lambda: (rand(3, 5, 4), rand(5, 2)),
    ),
    (
        "diagonal_int64",
        lambda x, y: torch.diagonal_scatter(x, y, -1, 0, 2),
        lambda: (rand(3, 5, 4).to(torch.int64), rand(5, 2).to(torch.int64)),
    ),
    ("setitem", _setitem, lambda: (rand(4, 8), rand(4, 2))),
    ("setitem_strided_broadcast", _strided_setitem, lambda: (rand(4, 8), rand(3))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_scatter_imports_and_matches_eager(case: Case) -> None:
    _, fn, make_inputs = case
    imported = check_against_eager(fn, make_inputs(), rtol=0, atol=0)
    assert "graph.torch_call" not in op_names(imported), op_names(imported)


def test_slice_scatter_is_a_select_of_padded_values() -> None:
    imported = check_against_eager(
        lambda x, y: torch.slice_scatter(x, y, 1, 1, 7, 2), (rand(4, 8), rand(4, 3))
    )
    names = op_names(imported)
    assert names.count("graph.where") == 1
    assert "graph.pad" in names
