"""The graph dialect's model of torch views: `reshape_strides` and `view_strides` agree with
torch on which reshapes are views and on the strides they give; `memory_order` finds the
permutation that makes a strided tensor contiguous."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch

from xfuse.dialects import graph


def _factorizations(n: int, rank: int) -> list[tuple[int, ...]]:
    """Every shape of `rank` dims whose sizes multiply to `n`."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    return [s for s in itertools.product(divisors, repeat=rank) if math.prod(s) == n]


def _strided(rng: random.Random) -> torch.Tensor:
    """A view of a row-major tensor: permuted, sliced, with dims of size 1."""
    shape = [rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4))]
    t = torch.empty(shape).permute(*rng.sample(range(len(shape)), len(shape)))
    index = tuple(
        slice(0, max(1, size - rng.randint(0, 1)), rng.choice([1, 1, 2])) for size in t.shape
    )
    return t[index]


def _torch_view_strides(t: torch.Tensor, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return tuple(t.view(shape).stride())
    except RuntimeError:
        return None


@pytest.mark.parametrize("seed", range(40))
def test_reshape_strides_agree_with_torch(seed: int) -> None:
    rng = random.Random(seed)
    t = _strided(rng)
    for rank in (1, 2, 3, 4):
        for shape in _factorizations(t.numel(), rank):
            expected = _torch_view_strides(t, shape)
            got = graph.reshape_strides(t.shape, t.stride(), shape)
            if expected is None or got is None:
                assert got == expected, (t.shape, t.stride(), shape)
            else:  # a dim of size 1 may take any stride
                assert all(
                    a == b for a, b, n in zip(got, expected, shape, strict=True) if n != 1
                ), (t.shape, t.stride(), shape, got, expected)


def test_row_major_strides() -> None:
    assert graph.row_major_strides((2, 3, 4)) == (12, 4, 1)
    assert graph.row_major_strides((2, 0, 4)) == (4, 4, 1)
    assert graph.row_major_strides(()) == ()


def _memory_order(t: torch.Tensor) -> tuple[int, ...] | None:
    return graph.memory_order(tuple(t.shape), tuple(t.stride()))


def test_memory_order_is_a_dense_permutation_of_row_major_strides() -> None:
    x = torch.empty(2, 16, 4, 8)
    assert _memory_order(x) is None  # contiguous
    assert _memory_order(x.transpose(1, 2)) == (0, 2, 1, 3)
    assert _memory_order(x.permute(3, 0, 2, 1)) == (1, 3, 2, 0)
    assert _memory_order(x[:, :, :2]) is None  # a gap
    assert _memory_order(torch.empty(4, 1).expand(4, 3)) is None  # a zero stride
    assert _memory_order(torch.empty(0, 3).t()) is None  # empty
    assert _memory_order(torch.empty(1, 3, 5).transpose(0, 2)) == (2, 1, 0)
    assert _memory_order(torch.empty(3, 1).t()) is None  # contiguous: a dim of size 1


@pytest.mark.parametrize("seed", range(40))
def test_memory_order_agrees_with_torch(seed: int) -> None:
    """Where torch's tensor is not contiguous and its permute by the order is, the order is
    found; otherwise none is."""
    t = _strided(random.Random(seed))
    order = _memory_order(t)
    if order is not None:
        assert not t.is_contiguous() and t.permute(order).is_contiguous(), (t.stride(), order)
    elif not t.is_contiguous() and t.numel():
        assert not any(t.permute(p).is_contiguous() for p in itertools.permutations(range(t.dim())))
