"""Inputs and outputs like torch.export's: keyword arguments, Python scalars
(specialised), nested containers of tensors, non-tensor outputs, one tensor passed twice."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.export import Dim

import xfuse
from xfuse.errors import UnsupportedInputError
from xfuse.report.counts import kernel_count
from xfuse.runtime.dynamic import DynamicProgram

Tensor = torch.Tensor


def scaled(x: Tensor, *, scale: float = 1.0, bias: Tensor | None = None) -> Tensor:
    y = x * scale
    return y if bias is None else y + bias


def test_keyword_arguments() -> None:
    x, b = torch.randn(4), torch.randn(4)
    c = xfuse.compile(scaled, (x,), example_kwargs={"scale": 2.0, "bias": b}, quiet=True)
    other = torch.randn(4)
    torch.testing.assert_close(c(other, scale=2.0, bias=b), scaled(other, scale=2.0, bias=b))
    torch.testing.assert_close(c(x, bias=other, scale=2.0), scaled(x, scale=2.0, bias=other))
    assert len(c.specialisations) == 1  # the keywords' order makes no new program


def test_a_new_scalar_value_compiles_a_new_program() -> None:
    x = torch.randn(4)
    c = xfuse.compile(scaled, (x,), example_kwargs={"scale": 2.0}, quiet=True)
    torch.testing.assert_close(c(x, scale=3.0), x * 3.0)
    torch.testing.assert_close(c(x, scale=2.0), x * 2.0)
    torch.testing.assert_close(c(x), x)
    assert len(c.specialisations) == 3


def test_scalars_of_another_type_or_sign_are_other_programs() -> None:
    def f(x: Tensor, s: Any) -> Tensor:
        return x / s if s else x + 1

    x = torch.randn(4)
    c = xfuse.compile(f, (x, 0.0), quiet=True)
    for s in (0.0, -0.0, False, 2, 2.0, True):
        torch.testing.assert_close(c(x, s), f(x, s))


def test_nested_containers_in_and_out() -> None:
    def f(pair: tuple[Tensor, Tensor], named: dict[str, list[Tensor]]) -> dict[str, Any]:
        a, b = pair
        return {"sum": a + b, "parts": [named["xs"][0] * 2, (named["xs"][1], a - b)]}

    a, b, c0, c1 = (torch.randn(3) for _ in range(4))
    c = xfuse.compile(f, ((a, b), {"xs": [c0, c1]}), quiet=True)
    args = ((torch.randn(3), torch.randn(3)), {"xs": [torch.randn(3), torch.randn(3)]})
    got, expected = c(*args), f(*args)
    torch.testing.assert_close(got, expected)
    assert got["parts"][1][0] is args[1]["xs"][1]  # an input returned is the input, as in eager


def test_non_tensor_outputs() -> None:
    def f(x: Tensor) -> tuple[Tensor, None, int, float, bool, str]:
        return x + 1, None, x.shape[0], 0.5, True, "done"

    x = torch.randn(5)
    got = xfuse.compile(f, (x,), quiet=True)(x)
    assert got[1:] == (None, 5, 0.5, True, "done")
    torch.testing.assert_close(got[0], x + 1)


def test_one_tensor_passed_twice_is_not_two_inputs_forever() -> None:
    """torch.export reads a tensor passed twice as one input: the program for (x, x) must not
    serve (a, b)."""

    def f(a: Tensor, b: Tensor) -> Tensor:
        return a + 2 * b

    x = torch.ones(3)
    c = xfuse.compile(f, (x, x), quiet=True)
    a, b = torch.ones(3), torch.zeros(3)
    torch.testing.assert_close(c(a, b), f(a, b))
    torch.testing.assert_close(c(b, b), f(b, b))


def test_an_input_it_cannot_take_is_one_clear_error() -> None:
    c = xfuse.compile(scaled, (torch.randn(4),), quiet=True)
    with pytest.raises(UnsupportedInputError, match=r"keyword input 'scale' is a object;"):
        c(torch.randn(4), scale=object())
    with pytest.raises(UnsupportedInputError, match=r"keyword input 'bias' is a torch.sparse_coo"):
        c(torch.randn(4), bias=torch.randn(4).to_sparse())


@pytest.mark.parametrize("value", [3, None, (None, 2.5)])
def test_a_program_with_no_tensor_output(value: Any) -> None:
    x = torch.randn(4)
    assert xfuse.compile(lambda x: value, (x,), quiet=True)(x) == value


@pytest.mark.parametrize("kind", [tuple, list])
def test_flat_outputs_with_constants_are_built_without_pytree(
    kind: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flat tuple or list of outputs with a constant among them (a backward's None
    gradient) is built at once from the results and the constants, not by `tree_unflatten`."""
    from torch.utils import _pytree

    def f(x: torch.Tensor) -> Any:
        return kind([x * 2, None, x + 1])

    x = torch.randn(3)
    compiled = xfuse.compile(f, (x,), quiet=True, fallback="error")

    def refused(*args: object) -> None:
        raise AssertionError("tree_unflatten called")

    monkeypatch.setattr(_pytree, "tree_unflatten", refused)
    got = compiled(x)
    assert type(got) is kind and got[1] is None
    torch.testing.assert_close(got[0], x * 2)
    torch.testing.assert_close(got[2], x + 1)


class _Views(torch.nn.Module):
    """A product returned with views of it (a row, its transpose) and a slice of the input:
    views eager returns sharing memory with another output or the input."""

    def forward(self, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = torch.sigmoid(t) * 3
        return y, y[1], y.t(), t[1:3]


@pytest.mark.parametrize("dynamic", [False, True])
def test_returned_views_are_replayed_not_computed(dynamic: bool) -> None:
    """`@forward` returns each view's base in its place (`return_view_bases`), in a static
    program and in a dynamic one: one kernel, the views replayed on the product and the input
    at the call (at every size), sharing their memory as in eager."""
    model = _Views()
    if dynamic:
        dims = {"t": {0: Dim("n", min=3)}}
        compiled: Any = xfuse.compile(model, (torch.randn(5, 4),), dynamic_shapes=dims)
        assert isinstance(compiled, DynamicProgram)
    else:
        compiled = xfuse.compile(model, (torch.randn(4, 4),), quiet=True)
    for n in (3, 5, 8) if dynamic else (4,):
        x = torch.randn(n, 4)
        got, want = compiled(x), model(x)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
            assert g.stride() == w.stride()
        assert got[1].data_ptr() == got[0].data_ptr() + 4 * 4
        assert got[2].data_ptr() == got[0].data_ptr() and got[3].data_ptr() == x[1:3].data_ptr()
    kernels = compiled.kernel_count if dynamic else kernel_count(compiled.default.program)
    assert kernels == 1
