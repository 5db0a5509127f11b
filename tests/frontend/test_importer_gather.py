"""embedding, index_select, gather, take_along_dim and advanced indexing import as
`graph.gather` (between reshapes and broadcasts, no torch_call) and interpret equal to eager;
a bad index raises in the interpreter as eager raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from frontend_util import check_against_eager, op_names

from xfuse import interpret
from xfuse.frontend import import_module

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


def idx(values: Any, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


Case = tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]]]

CASES: list[Case] = [
    ("embedding", F.embedding, lambda: (idx([[1, 3, 3], [0, 9, 1]]), rand(10, 4))),
    ("embedding_i32", F.embedding, lambda: (idx([4, 4, 2], torch.int32), rand(10, 4))),
    ("embedding_0d", F.embedding, lambda: (idx(7), rand(10, 4))),
    ("embedding_bf16", F.embedding, lambda: (idx([[2], [5]]), rand(6, 8, dtype=torch.bfloat16))),
    (
        "index_select",
        lambda x, i: torch.index_select(x, 1, i),
        lambda: (rand(3, 5, 2), idx([4, 0, 0, 2])),
    ),
    ("index_select_0d", lambda x, i: torch.index_select(x, 0, i), lambda: (rand(5), idx(3))),
    (
        "gather",
        lambda x, i: torch.gather(x, 1, i),
        lambda: (rand(4, 5), idx([[0, 4], [1, 1], [3, 2]])),
    ),
    (
        "gather_dim0",
        lambda x, i: torch.gather(x, 0, i),
        lambda: (rand(4, 5), idx([[3, 0, 1, 2, 3]])),
    ),
    (
        "take_along_dim",
        lambda x, i: torch.take_along_dim(x, i, 1),
        lambda: (rand(4, 5), idx([[0], [-1], [4], [2]])),
    ),
    ("index_first", lambda x, i: x[i], lambda: (rand(5, 3), idx([[0, -1], [4, 4]]))),
    ("index_middle", lambda x, i: x[:, i], lambda: (rand(2, 5, 3), idx([-5, 2, 2]))),
    ("index_i32", lambda x, i: x[:, i], lambda: (rand(2, 5), idx([1, -2], torch.int32))),
    (
        "index_two_broadcast",
        lambda x, i, j: x[i, j],
        lambda: (rand(5, 6, 7), idx([[1], [-2]]), idx([0, 5, -6])),
    ),
    (
        "index_two_adjacent_after_slice",
        lambda x, i, j: x[:, i, j],
        lambda: (rand(3, 5, 6, 2), idx([1, 4]), idx([0, -1])),
    ),
    (
        "index_split_by_slice",
        lambda x, i, j: x[i, :, j],
        lambda: (rand(5, 6, 7), idx([[1], [2]]), idx([0, 6, -7])),
    ),
]


@pytest.mark.parametrize(("fn", "make_inputs"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_indexing_imports_as_gather(fn: Callable[..., Any], make_inputs: Callable[[], Any]) -> None:
    imported = check_against_eager(fn, make_inputs())
    names = op_names(imported)
    assert "graph.torch_call" not in names or "aten.remainder" in str(imported.module), names
    assert "graph.gather" in names, names


@pytest.mark.parametrize(
    "fn",
    [lambda x, i: torch.index_select(x, 0, i) + 1, lambda x, i: x[i] * 2],
    ids=["index_select", "index"],
)
def test_an_index_of_nothing_is_an_empty_constant(fn: Callable[..., Any]) -> None:
    """Results that hold no element are constants (`fold_empty_results`): no gather reads the
    source."""
    imported = check_against_eager(fn, (rand(5, 2), idx([], torch.int64)))
    names = op_names(imported)
    assert "graph.gather" not in names and "graph.constant" in names, names


BAD: list[tuple[str, Callable[..., Any], tuple[Any, ...], tuple[Any, ...], type[Exception]]] = [
    ("embedding", F.embedding, (idx([1]), rand(4, 2)), (idx([4]), rand(4, 2)), IndexError),
    ("embedding_neg", F.embedding, (idx([1]), rand(4, 2)), (idx([-1]), rand(4, 2)), IndexError),
    (
        "index_select",
        lambda x, i: torch.index_select(x, 0, i),
        (rand(4), idx([1])),
        (rand(4), idx([-1])),
        IndexError,
    ),
    (
        "gather",
        lambda x, i: torch.gather(x, 0, i),
        (rand(4), idx([1])),
        (rand(4), idx([4])),
        RuntimeError,
    ),
    ("index", lambda x, i: x[i], (rand(4), idx([1])), (rand(4), idx([-5])), IndexError),
]


@pytest.mark.parametrize(
    ("fn", "good", "bad", "error"), [c[1:] for c in BAD], ids=[c[0] for c in BAD]
)
def test_bad_index_raises_like_eager(
    fn: Callable[..., Any], good: tuple[Any, ...], bad: tuple[Any, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        fn(*bad)
    imported = import_module(fn, good)
    with pytest.raises(error, match="index out of range in self"):
        interpret(imported.module, imported.arguments(*bad))


@pytest.mark.parametrize(
    "fn",
    [lambda x, i: torch.gather(x, 0, i), lambda x, i: torch.index_select(x, 0, i)],
    ids=["gather", "index_select"],
)
@pytest.mark.parametrize("index_shape", [(), (1,)], ids=["0d_index", "1d_index"])
def test_zero_dim_inputs(fn: Callable[..., Any], index_shape: tuple[int, ...]) -> None:
    x, i = torch.tensor(1.5), torch.zeros(index_shape, dtype=torch.int64)
    imported = check_against_eager(fn, (x, i))
    assert "graph.gather" in op_names(imported)
