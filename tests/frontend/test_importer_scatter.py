"""The scatters with affine indices (slice_scatter, select_scatter, diagonal_scatter, and the
`copy` of a functionalised `x[...] = y`): imported as a `graph.where` of the region and the
source padded into place, without torch_call, interpreted exactly as eager computes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from frontend_util import check_against_eager, op_names

import xfuse

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


@pytest.mark.parametrize(
    ("offset", "src"),
    [(-2, rand(3)), (0, rand(7)), (3, rand(6)), (9, rand(1)), (1, rand(2, 5))],
    ids=["short", "long", "past_the_corner", "empty_diagonal", "extra_dim"],
)
def test_diagonal_scatter_of_a_source_not_the_diagonals_shape_raises_eagers_error(
    offset: int, src: torch.Tensor
) -> None:
    """torch's meta function of diagonal_scatter does not compare `src` with the diagonal (a
    6x8 matrix's diagonal at -2 has 4 elements): the compiled program must raise as eager does,
    not write 3 of them."""

    def scatter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.diagonal_scatter(x, y, offset) * 2

    x = rand(6, 8)
    with pytest.raises(RuntimeError) as eager:
        scatter(x, src)
    with pytest.raises(RuntimeError) as compiled:
        xfuse.compile(scatter, (x, src), quiet=True)(x, src)
    assert str(compiled.value).splitlines()[0] == str(eager.value).splitlines()[0]


def test_a_symbolic_slice_scatter_raises_where_the_source_stops_fitting() -> None:
    """x[4:-2:3] has no element at length 6 and one from 7: one symbolic program serves
    both, and raises eager's error where the empty source no longer fits."""
    from xfuse import dynamo

    def scatter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.slice_scatter(x, y, 0, 4, -2, 3) * 2

    compiled = torch.compile(scatter, backend="xfuse", dynamic=True)
    before = dynamo.COMPILES["symbolic"]
    empty, six = rand(0), rand(6)
    torch.testing.assert_close(compiled(six, empty), scatter(six, empty))
    for n in (7, 9):
        x = rand(n)
        with pytest.raises(RuntimeError) as eager:
            scatter(x, empty)
        with pytest.raises(RuntimeError) as got:
            compiled(x, empty)
        assert str(got.value).splitlines()[0] == str(eager.value).splitlines()[0]
    assert dynamo.COMPILES["symbolic"] == before + 1


# --- scatters with computed indices ------------------------------------------------------------


def _ints(*values: int) -> torch.Tensor:
    return torch.tensor(values)


def _put(x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[i, j] = 7.0
    return y


def _put_apart(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[i, :, i] = v  # index dims apart: the index dims lead the values
    return y


def _put_mask(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[x > 0] = 3.0
    return y


def _put_mask_rows(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[x.sum(1) > 0] = v  # a mask on dim 0, values broadcast along dim 1
    return y


COMPUTED: list[Case] = [
    (
        "scatter",
        lambda x, i, v: torch.scatter(x, 0, i, v),
        lambda: (rand(4, 5), _ints(0, 3, 3, 1).reshape(2, 2), rand(2, 3)),
    ),
    (
        "scatter_dup_last_wins",
        lambda x, i, v: torch.scatter(x, 1, i, v),
        lambda: (rand(2, 5), _ints(1, 1, 1, 4, 0, 0).reshape(2, 3), rand(2, 3)),
    ),
    (
        "scatter_value",
        lambda x, i: torch.scatter(x, 1, i, -2.5),
        lambda: (rand(3, 4), _ints(3, 0, 1).reshape(3, 1)),
    ),
    (
        "scatter_add",
        lambda x, i, v: torch.scatter_add(x, 1, i, v),
        lambda: (rand(3, 4), torch.randint(0, 4, (3, 6), generator=_gen), rand(3, 6)),
    ),
    (
        "scatter_add_int64",
        lambda x, i, v: torch.scatter_add(x, 0, i, v),
        lambda: (
            rand(4, 3).to(torch.int64),
            torch.randint(0, 4, (5, 2), generator=_gen),
            rand(5, 3).mul(9).to(torch.int64),
        ),
    ),
    (
        "scatter_add_f16",
        lambda x, i, v: torch.scatter_add(x, 1, i, v),
        lambda: (
            rand(3, 4, dtype=torch.float16),
            torch.randint(0, 4, (3, 1), generator=_gen),  # one source each: one rounding
            rand(3, 6, dtype=torch.float16),
        ),
    ),
    (
        "scatter_bool",
        lambda x, i, v: torch.scatter(x, 0, i, v),
        lambda: (rand(4, 3) > 0, torch.randint(0, 4, (2, 3), generator=_gen), rand(2, 3) > 0),
    ),
    (
        "index_add",
        lambda x, i, v: torch.index_add(x, 0, i, v, alpha=2),
        lambda: (rand(4, 3), _ints(0, 2, 0, 3), rand(4, 3)),
    ),
    (
        "index_add_bf16",
        lambda x, i, v: torch.index_add(x, 1, i, v),
        lambda: (rand(2, 4, dtype=torch.bfloat16), _ints(3), rand(2, 1, dtype=torch.bfloat16)),
    ),
    (
        "index_copy",
        lambda x, i, v: torch.index_copy(x, 1, i, v),
        lambda: (rand(4, 5), _ints(4, 2, 0), rand(4, 3)),
    ),
    (
        "index_fill",
        lambda x, i: torch.index_fill(x, 1, i, -1.0),
        lambda: (rand(4, 5), _ints(-1, 2, 0)),
    ),
    (
        "index_fill_tensor_int64",
        lambda x, i, v: torch.index_fill(x, 0, i, v),
        lambda: (rand(4, 5).to(torch.int64), _ints(2, -4, 2), torch.tensor(9)),
    ),
    ("index_put", _put, lambda: (rand(4, 5), _ints(0, -1, 3, 0), _ints(1, 2, 2, 1))),
    (
        "index_put_accumulate_duplicates",
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (rand(4, 5), _ints(1, 1, -3, 1), rand(4, 5)),
    ),
    (
        "index_put_duplicates_last_wins",
        lambda x, i, v: x.index_put((i,), v),
        lambda: (rand(4, 5), _ints(1, 1, 3, 1), rand(4, 5)),
    ),
    (
        "index_put_broadcast_values",
        lambda x, i, v: x.index_put((i,), v),
        lambda: (rand(4, 5), _ints(2, 0), rand(5)),
    ),
    ("index_put_apart", _put_apart, lambda: (rand(3, 4, 5), _ints(0, 2), rand(2, 4))),
    (
        "index_put_int64",
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        lambda: (rand(4, 2).to(torch.int64), _ints(3, 3), _ints(5, -7)),
    ),
    ("index_put_mask", _put_mask, lambda: (rand(4, 5),)),
    ("index_put_mask_rows", _put_mask_rows, lambda: (rand(4, 5), rand(5))),
]
COMPUTED += [
    (
        f"scatter_reduce_{how}_{'self' if include else 'no_self'}",
        lambda x, i, v, how=how, include=include: torch.scatter_reduce(
            x, 0, i, v, how, include_self=include
        ),
        lambda: (rand(4, 3), _ints(0, 3, 3, 0, 1, 0).reshape(3, 2), rand(3, 3)),
    )
    for how in ("sum", "prod", "mean", "amax", "amin")
    for include in (True, False)
]


@pytest.mark.parametrize("case", COMPUTED, ids=[c[0] for c in COMPUTED])
def test_computed_scatter_imports_and_matches_eager(case: Case) -> None:
    """Sums are in another order than eager's (a reduction over the matches): torch's
    tolerances; everything else is exact."""
    case_id, fn, make_inputs = case
    inexact = any(w in case_id for w in ("add", "accumulate", "sum", "mean", "prod"))
    imported = check_against_eager(fn, make_inputs(), **({} if inexact else {"rtol": 0, "atol": 0}))
    assert "graph.torch_call" not in op_names(imported), op_names(imported)


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (
            lambda x, i, v: torch.scatter(x, 0, i, v),
            (rand(4, 2), _ints(4, 0).reshape(1, 2), rand(1, 2)),
        ),
        (
            lambda x, i, v: torch.scatter_add(x, 0, i, v),
            (rand(4, 2), _ints(-1, 0).reshape(1, 2), rand(1, 2)),
        ),
        (lambda x, i, v: x.index_put((i,), v), (rand(4, 2), _ints(1, -5), rand(2, 2))),
        (lambda x, i, v: torch.index_add(x, 0, i, v), (rand(4, 2), _ints(1, -1), rand(2, 2))),
        (lambda x, i, v: torch.index_copy(x, 0, i, v), (rand(4, 2), _ints(-1, 1), rand(2, 2))),
        (lambda x, i, v: torch.index_fill(x, 0, i, v), (rand(4, 2), _ints(-5), torch.tensor(1.0))),
    ],
)
def test_out_of_range_scatter_index_raises(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> None:
    with pytest.raises((IndexError, RuntimeError)):
        fn(*inputs)  # eager raises
    with pytest.raises(IndexError):
        check_against_eager(fn, inputs)


def test_long_searches_stay_eager() -> None:
    """More than SEARCH_LIMIT source positions per output element: left to torch."""
    imported = check_against_eager(
        lambda x, i, v: torch.scatter_add(x, 0, i, v),
        (rand(4, 2), torch.randint(0, 4, (100, 2), generator=_gen), rand(100, 2)),
    )
    assert "graph.torch_call" in op_names(imported)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_accumulation_of_several_sources_stays_eager(dtype: torch.dtype) -> None:
    """Eager rounds after every added source element: a fused sum rounds once."""
    imported = check_against_eager(
        lambda x, i, v: torch.scatter_add(x, 1, i, v),
        (rand(3, 4, dtype=dtype), _ints(0, 0, 1, 0, 2, 2).reshape(3, 2), rand(3, 2, dtype=dtype)),
    )
    assert "graph.torch_call" in op_names(imported)


@pytest.mark.parametrize("how", ["add", "multiply"])
def test_deprecated_scatter_reduce_argument(how: str) -> None:
    x, i = rand(3, 4), _ints(1, 1, 0, 3, 2, 2).reshape(3, 2)
    for fn in (
        lambda x, i, v: torch.scatter(x, 1, i, v, reduce=how),
        lambda x, i: torch.scatter(x, 1, i, 1.5, reduce=how),
    ):
        inputs = (x, i, rand(3, 2)) if fn.__code__.co_argcount == 3 else (x, i)
        imported = check_against_eager(fn, inputs)
        assert "graph.torch_call" not in op_names(imported), op_names(imported)


@pytest.mark.parametrize("how", ["sum", "amax"])
def test_scatter_of_0d_tensors(how: str) -> None:
    fn = lambda x, i, v: torch.scatter_reduce(x, 0, i, v, how)  # noqa: E731
    imported = check_against_eager(fn, (rand(1)[0], torch.tensor(0), rand(1)[0]))
    assert "graph.torch_call" not in op_names(imported), op_names(imported)


def test_scatter_of_a_number_into_bools() -> None:
    """The value is cast to the tensor's dtype (any non-zero number is True)."""
    fn = lambda x, i: torch.scatter(x, 0, i, 2) | torch.index_fill(x, 1, i[0], 3)  # noqa: E731
    imported = check_against_eager(fn, (rand(4, 4) > 0, _ints(1, 0, 3).reshape(1, 3)))
    assert "graph.torch_call" not in op_names(imported), op_names(imported)
