"""Eager's strides where torch's trace lays a result out otherwise (`xfuse.frontend.meta_strides`):
`copysign`'s meta function takes its second operand's layout, eager's kernel its first's."""

from __future__ import annotations

import warnings

import pytest
import torch

import xfuse
from xfuse.frontend import meta_strides

Tensor = torch.Tensor


def sign_then_angle(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    s = torch.copysign(a, b)
    return s, torch.atan2(s, b)


def sign_of_a_permuted_input(x: Tensor) -> tuple[Tensor, Tensor]:
    s = torch.copysign(x, torch.tensor(3.0))
    return s.to(torch.float64), s.t()


def _operands() -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 8, 1, generator=g)
    b = (torch.rand(1, 8, 8, generator=g) + 0.5).permute(2, 1, 0)
    return a, b


def _traced_strides(fn: object, inputs: tuple[Tensor, ...]) -> list[tuple[int, ...]]:
    program = torch.export.export(_Wrap(fn), inputs)
    (output,) = [n for n in program.graph.nodes if n.op == "output"]
    return [tuple(n.meta["val"].stride()) for n in output.args[0]]


class _Wrap(torch.nn.Module):
    def __init__(self, fn: object) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *inputs: Tensor) -> object:
        return self.fn(*inputs)  # type: ignore[operator]


@pytest.mark.parametrize(
    ("fn", "inputs"),
    [
        (sign_then_angle, _operands()),
        (sign_of_a_permuted_input, (torch.randn(6, 5).t(),)),
    ],
    ids=["copysign_then_atan2", "copysign_of_a_transposed_input"],
)
def test_outputs_after_copysign_have_eagers_strides(fn: object, inputs: tuple[Tensor, ...]) -> None:
    want = fn(*inputs)  # type: ignore[operator]
    # torch's trace differs from eager here; were it fixed, this module could go.
    assert _traced_strides(fn, inputs) != [t.stride() for t in want]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = xfuse.compile(fn, inputs, quiet=True)
        got = compiled(*inputs)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()


def test_without_the_correction_the_strides_are_the_traces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(meta_strides, "MISLAID_ELEMENTWISE", frozenset())
    a, b = _operands()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = xfuse.compile(sign_then_angle, (a, b), quiet=True)(a, b)
    assert [t.stride() for t in got] != [t.stride() for t in sign_then_angle(a, b)]


def test_a_graph_without_mislaid_ops_has_nothing_to_correct() -> None:
    def chain(x: Tensor, y: Tensor) -> Tensor:
        return torch.atan2(x.t() * 2, y)

    program = torch.export.export(_Wrap(chain), (torch.randn(4, 6), torch.randn(6, 4)))
    assert meta_strides.eager_strides(program.graph) == {}
