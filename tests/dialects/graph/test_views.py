"""The graph dialect's model of torch views: `reshape_strides` and `view_strides` agree with
torch on which reshapes are views and on the strides they give."""

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
