"""The bugs fusion compilers are known to ship, one named test each: every program runs
through `xfuse.compile` on the CPU and must agree with torch eager."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch

import xfuse

Tensor = torch.Tensor


def compiled_equals_eager(fn: Callable[..., Any], *inputs: Tensor, **close: Any) -> Any:
    """Compile `fn` for `inputs`, run it on fresh clones, and compare with eager (on clones
    too, since programs may mutate their inputs). Returns the compiled program."""
    expected = fn(*(t.clone() for t in inputs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = xfuse.compile(fn, tuple(t.clone() for t in inputs))
        got = compiled(*(t.clone() for t in inputs))
    torch.testing.assert_close(got, expected, **close)
    return compiled


def test_fusion_that_would_create_a_cycle_through_an_extern() -> None:
    """exp feeds the matmul and the add; the add also reads the matmul. Fusing exp with the
    add would put the matmul both before and after the group."""

    def diamond(x: Tensor, w: Tensor) -> Tensor:
        a = torch.exp(x)
        m = a @ w
        return torch.tanh(a) + m

    compiled = compiled_equals_eager(diamond, torch.randn(8, 8), torch.randn(8, 8))
    for group in compiled.groups:
        assert not {"graph.exp", "graph.add"} <= set(group.ops), group


def test_add_inplace_of_own_flip() -> None:
    """`x.add_(x.flip(0))` reads elements that the same op writes."""

    def add_own_flip(x: Tensor) -> Tensor:
        y = x * 1.0
        y.add_(y.flip(0))
        return y * 2

    compiled_equals_eager(add_own_flip, torch.randn(7, 5))


def test_add_inplace_of_own_flip_on_an_input_is_refused_clearly() -> None:
    """Programs that mutate their inputs are not supported: a one-line error, never a
    result that forgets the mutation."""
    from xfuse.errors import ExportError

    def add_own_flip(x: Tensor) -> Tensor:
        x.add_(x.flip(0))
        return x + 1

    with pytest.raises(ExportError, match="mutates") as info:
        xfuse.compile(add_own_flip, (torch.randn(7, 5),))
    assert "\n" not in str(info.value)


def test_inplace_op_on_a_view_of_a_tensor_read_by_the_same_group() -> None:
    def mutate_view(x: Tensor) -> tuple[Tensor, Tensor]:
        y = torch.exp(x)
        tail = y[1:]
        tail.mul_(2.0)
        return y.sum(0) + y[0], torch.relu(y)

    compiled_equals_eager(mutate_view, torch.randn(6, 4))


def test_view_consumer_scheduled_after_a_later_mutation_of_its_base() -> None:
    """`v` is read after its base changed: it must see the new values."""

    def late_reader(x: Tensor) -> tuple[Tensor, Tensor]:
        y = x + 1
        v = y[:, :2]
        w = v * 2  # before the mutation: old values
        y.mul_(3)
        return v + 1, w

    compiled_equals_eager(late_reader, torch.randn(4, 5))


@pytest.mark.parametrize("dim", [0, 1, 2])
@pytest.mark.parametrize("layout", ["size-1", "expanded"])
def test_broadcasting_along_each_dim(dim: int, layout: str) -> None:
    shape = [3, 4, 5]
    small = list(shape)
    small[dim] = 1
    b = torch.randn(small)
    if layout == "expanded":
        b = b.expand(shape)  # stride 0 along `dim`
        assert b.stride()[dim] == 0

    def bcast(a: Tensor, b: Tensor) -> Tensor:
        return torch.sigmoid(a * b + b).sum(dim=dim)

    compiled_equals_eager(bcast, torch.randn(shape), b)


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.randn(6, 4).t(),
        lambda: torch.randn(4, 12)[:, ::2],
        lambda: torch.randn(5, 6, 4).permute(2, 0, 1),
        lambda: torch.randn(8, 6)[2:6, 1:],
    ],
    ids=["transposed", "strided", "permuted", "offset-slice"],
)
def test_non_contiguous_inputs(make: Callable[[], Tensor]) -> None:
    x = make()
    assert not x.is_contiguous() or x.storage_offset() > 0

    def layered(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        z = torch.exp(x) - y
        return z.amax(dim=-1), z.transpose(0, 1) * 2

    compiled_equals_eager(layered, x, make())


def rmse(a: Tensor, b: Tensor) -> float:
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


def reductions_within_tolerance(fn: Callable[[Tensor], tuple[Tensor, ...]], x: Tensor) -> None:
    """RMSE against an f64 run no worse than 2x eager's, plus 4 f32 ulps of the result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xfuse.compile(fn, (x,))(x)
    eager, reference = fn(x), fn(x.double())
    for g, e, r in zip(got, eager, reference, strict=True):
        eps = 4 * float(torch.finfo(torch.float32).eps) * float(r.abs().mean())
        assert rmse(g, r) <= 2 * rmse(e, r) + eps, (rmse(g, r), rmse(e, r), eps)


def test_row_reductions_over_thirty_million_elements_within_tolerance() -> None:
    x = torch.rand(3 * 10**7) + 0.5  # all positive: no cancellation to hide the error

    def rows(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.reshape(3000, 10000).sum(1), x.reshape(3000, 10000).mean(1)

    reductions_within_tolerance(rows, x)


def test_reduction_over_thirty_million_elements_within_tolerance() -> None:
    """split-reductions accumulates 3e7 elements as 6000 rows of 5000, then the 6000 partial
    sums (one long f32 accumulation was 10-50x further from the f64 result than eager)."""
    x = torch.rand(3 * 10**7) + 0.5

    def whole(x: Tensor) -> tuple[Tensor, Tensor]:
        return x.sum(), x.mean()

    reductions_within_tolerance(whole, x)


@pytest.mark.slow
def test_index_arithmetic_beyond_two_to_the_31_elements() -> None:
    """A broadcast compare whose bool output has 2^31 + 2^16 elements (2.1 GB): the flat
    index of the last elements does not fit in 32 bits."""
    a = torch.arange(2**16, dtype=torch.float32)
    b = torch.arange(2**15 + 1, dtype=torch.float32) * 2.0

    def outer_less(a: Tensor, b: Tensor) -> Tensor:
        return a.reshape(-1, 1) < b.reshape(1, -1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xfuse.compile(outer_less, (a, b))(a, b)
    assert got.numel() > 2**31
    expected = outer_less(a, b)
    assert torch.equal(got, expected)
    del got, expected


def test_empty_tensors() -> None:
    def empty(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        z = torch.exp(x) + y
        return z, z.sum(0), (z * 2).reshape(4, 0)

    compiled_equals_eager(empty, torch.randn(0, 4), torch.randn(4))


def test_zero_dim_scalars() -> None:
    def scalars(x: Tensor, s: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        t = torch.tanh(s) * 3 + s
        return t, x * t, (x + s).sum()

    compiled_equals_eager(scalars, torch.randn(5, 3), torch.tensor(0.75))
