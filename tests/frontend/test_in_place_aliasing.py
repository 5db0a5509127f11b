"""An in-place op on the result of an op that eager may return as its input itself (dropout in
eval mode, a `contiguous` or `to` that changes nothing) writes into that input in eager.
torch.export's functionalisation does not know the two are one tensor, so where the input is
read after the write (or is a program input or output) the program is refused in one line;
where nothing sees the difference, or the op made a copy, it compiles and matches eager."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.frontend.builder import UnsupportedProgram
from xfuse.frontend.importer import import_module


def _dropout_then_read(x: torch.Tensor) -> torch.Tensor:
    t = x * 2
    d = F.dropout(t, 0.5, training=False)  # t itself
    d.add_(1)  # writes into t
    return t + d


def _to_same_dtype_then_read(x: torch.Tensor) -> torch.Tensor:
    t = x * 2
    d = t.to(torch.float32)  # t itself, which torch.export knows: it reads t as the write
    d.mul_(3)
    return t - d


def _feature_dropout_then_read(x: torch.Tensor) -> torch.Tensor:
    t = x * 2
    d = F.dropout2d(t, 0.5, training=False)  # t itself, which torch.export knows here
    d.add_(1)
    return t * d


def _dropout_of_input(x: torch.Tensor) -> torch.Tensor:
    d = F.dropout(x, 0.5, training=False)  # the caller's tensor itself
    return d.add_(1)  # eager writes into the caller's tensor


def _dropout_not_read_again(x: torch.Tensor) -> torch.Tensor:
    t = x * 2
    d = F.dropout(t, 0.5, training=False)
    return d.add_(1)  # t is not read after the write: nothing sees it


def _contiguous_copy_then_read(x: torch.Tensor) -> torch.Tensor:
    t = (x * 2).transpose(-1, -2)
    d = t.contiguous()  # a copy: t is not contiguous
    d.add_(1)
    return t + d


REFUSED = [_dropout_then_read, _dropout_of_input]
COMPILED = [
    _dropout_not_read_again,
    _contiguous_copy_then_read,
    _to_same_dtype_then_read,
    _feature_dropout_then_read,
]


@pytest.mark.parametrize("fn", REFUSED, ids=[f.__name__ for f in REFUSED])
def test_a_write_through_a_returned_input_that_is_read_again_is_refused(
    fn: Callable[..., Any],
) -> None:
    with pytest.raises(UnsupportedProgram, match="eager may return as its input"):
        import_module(fn, (torch.randn(3, 4),))


@pytest.mark.parametrize("fn", COMPILED, ids=[f.__name__ for f in COMPILED])
def test_a_write_nothing_else_sees_compiles_like_eager(fn: Callable[..., Any]) -> None:
    x = torch.randn(2, 3, 4)
    assert xfuse.compile(fn, (x,), quiet=True, fallback="error").fallbacks == []
    got = xfuse.compile(fn, (x,), quiet=True, fallback="error")(x.clone())
    torch.testing.assert_close(got, fn(x.clone()))


def test_torch_compile_runs_a_refused_graph_like_eager() -> None:
    x = torch.randn(3, 4)
    torch._dynamo.reset()
    with pytest.warns(UserWarning):
        got = torch.compile(_dropout_then_read, backend="xfuse")(x)
    torch.testing.assert_close(got, _dropout_then_read(x))
