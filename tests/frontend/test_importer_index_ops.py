"""The index-arithmetic aten ops (arange, flip, roll, rot90, tril/triu, repeat/tile, diagonal,
diag_embed): imported without torch_call, interpreted exactly as eager computes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from frontend_util import check_against_eager, op_names

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


Case = tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]], str]

CASES: list[Case] = [
    ("arange_end", lambda x: torch.arange(7) + x, lambda: (rand(7),), "graph.iota"),
    ("arange_start", lambda x: torch.arange(-3, 4) * x, lambda: (rand(7),), "graph.iota"),
    ("arange_step", lambda x: torch.arange(2, 30, 4) + x, lambda: (rand(7),), "graph.iota"),
    ("arange_negative", lambda x: torch.arange(5, -9, -2) + x, lambda: (rand(7),), "graph.iota"),
    ("arange_empty", lambda x: torch.arange(5, 5) + x, lambda: (rand(1),), "graph.constant"),
    ("arange_alone", lambda x: torch.arange(3, 100, 7), lambda: (rand(1),), "graph.iota"),
    (
        "arange_int32",
        lambda x: torch.arange(-4, 12, 3, dtype=torch.int32),
        lambda: (rand(1),),
        "graph.iota",
    ),
    (
        "arange_int_from_float_args",  # eager truncates start and step for an integer dtype
        lambda x: torch.arange(-2.5, 5, 1.7, dtype=torch.int64),
        lambda: (rand(1),),
        "graph.iota",
    ),
    ("arange_float", lambda x: torch.arange(0.5, 3, 0.25) + x, lambda: (rand(10),), "graph.iota"),
    ("arange_float_step", lambda x: torch.arange(0, 1, 0.1), lambda: (rand(1),), "graph.iota"),
    (
        "arange_float_negative",
        lambda x: torch.arange(1.0, -2.0, -0.3),
        lambda: (rand(1),),
        "graph.iota",
    ),
    (
        "arange_f64",
        lambda x: torch.arange(0.1, 2.3, 0.07, dtype=torch.float64),
        lambda: (rand(1),),
        "graph.iota",
    ),
    (
        "arange_bf16",
        lambda x: torch.arange(0, 300, 1.5, dtype=torch.bfloat16),
        lambda: (rand(1),),
        "graph.iota",
    ),
    (
        "arange_f16",
        lambda x: torch.arange(-1, 1, 0.01, dtype=torch.float16),
        lambda: (rand(1),),
        "graph.iota",
    ),
    ("flip", lambda x: torch.flip(x, (0, 2)), lambda: (rand(2, 3, 4),), "graph.flip"),
    ("fliplr", torch.fliplr, lambda: (rand(3, 4),), "graph.flip"),
    ("flipud", torch.flipud, lambda: (rand(3, 4),), "graph.flip"),
    (
        "flip_int",
        lambda x: torch.flip(x, (-1,)),
        lambda: (rand(3, 5).to(torch.int64),),
        "graph.flip",
    ),
    ("rot90", lambda x: torch.rot90(x, 1, (1, 2)), lambda: (rand(2, 3, 4),), "graph.flip"),
    ("rot90_neg", lambda x: torch.rot90(x, -1), lambda: (rand(3, 4),), "graph.flip"),
    ("rot90_twice", lambda x: torch.rot90(x, 2), lambda: (rand(3, 4),), "graph.flip"),
    ("roll", lambda x: torch.roll(x, 2, 1), lambda: (rand(3, 5),), "graph.roll"),
    ("roll_negative", lambda x: torch.roll(x, -7, 0), lambda: (rand(3, 5),), "graph.roll"),
    ("roll_dims", lambda x: torch.roll(x, (1, -2), (0, 1)), lambda: (rand(3, 5),), "graph.roll"),
    ("roll_flat", lambda x: torch.roll(x, 4), lambda: (rand(3, 5),), "graph.roll"),
    (
        "roll_same_dim_twice",
        lambda x: torch.roll(x, (1, 3), (1, 1)),
        lambda: (rand(3, 5),),
        "graph.roll",
    ),
    ("tril", torch.tril, lambda: (rand(4, 6),), "graph.iota"),
    ("tril_offset", lambda x: torch.tril(x, -2), lambda: (rand(2, 5, 4),), "graph.iota"),
    ("triu", lambda x: torch.triu(x, 1), lambda: (rand(4, 6),), "graph.iota"),
    ("triu_int", lambda x: torch.triu(x, -1), lambda: (rand(5, 5).to(torch.int64),), "graph.iota"),
    ("repeat", lambda x: x.repeat(2, 1, 3), lambda: (rand(3, 4),), "graph.broadcast_in_dim"),
    ("repeat_same_rank", lambda x: x.repeat(1, 2), lambda: (rand(3, 4),), "graph.broadcast_in_dim"),
    ("repeat_zero", lambda x: x.repeat(0, 2) + 1, lambda: (rand(3, 4),), "graph.constant"),
    ("tile", lambda x: x.tile(2), lambda: (rand(3, 4),), "graph.broadcast_in_dim"),
    ("tile_more_dims", lambda x: x.tile(2, 1, 2), lambda: (rand(3, 4),), "graph.broadcast_in_dim"),
    ("diagonal", lambda x: torch.diagonal(x) + 1, lambda: (rand(4, 6),), "graph.slice"),
    ("diagonal_offset", lambda x: torch.diagonal(x, 2) * 2, lambda: (rand(4, 6),), "graph.slice"),
    (
        "diagonal_negative",
        lambda x: torch.diagonal(x, -3) * 2,
        lambda: (rand(4, 6),),
        "graph.slice",
    ),
    ("diagonal_empty", lambda x: torch.diagonal(x, 9) * 2, lambda: (rand(4, 6),), "graph.constant"),
    (
        "diagonal_dims",
        lambda x: torch.diagonal(x, 1, 2, 0) * 2,
        lambda: (rand(4, 3, 5),),
        "graph.slice",
    ),
    ("trace", torch.trace, lambda: (rand(5, 5),), "graph.slice"),
    ("diag_embed", torch.diag_embed, lambda: (rand(2, 4),), "graph.iota"),
    ("diag_1d", lambda x: torch.diag(x, 1), lambda: (rand(4),), "graph.iota"),
]


# Values computed with rounding, compared at torch's tolerances: a float arange is `start +
# step * i` in eager's accumulation type, rounded once (torch._refs.arange, eager's scalar
# and CUDA kernels); eager's vectorized CPU kernel rounds each vector's first element to the
# dtype before adding `k * step`, which differs by an ulp now and then. A sum (trace).
COMPUTED = {
    "arange_float",
    "arange_float_step",
    "arange_float_negative",
    "arange_f64",
    "arange_bf16",
    "arange_f16",
    "trace",
}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_index_op_imports_and_matches_eager(case: Case) -> None:
    case_id, fn, make_inputs, expected_op = case
    exact = {} if case_id in COMPUTED else {"rtol": 0, "atol": 0}
    imported = check_against_eager(fn, make_inputs(), **exact)
    names = op_names(imported)
    assert "graph.torch_call" not in names, names
    assert expected_op in names, names


def test_float_arange_computes_in_eager_accumulation_type() -> None:
    """f32 arange on the CPU: start + step * i in f64, rounded once (as eager's kernel)."""
    imported = check_against_eager(lambda x: torch.arange(0.1, 50, 0.3) + 0 * x, (rand(1),))
    assert "graph.iota" in op_names(imported)
    casts = [op for op in imported.module.walk() if op.name == "graph.cast"]
    assert any("f64" in str(op.results[0].type) for op in casts)
