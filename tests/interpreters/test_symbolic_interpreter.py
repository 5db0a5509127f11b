"""The graph interpreter on symbolic programs (docs/dynamic-shapes.md): sizes bound from the
inputs per call, checked against each other and the symbols' ranges, derived sizes computed."""

from __future__ import annotations

import pytest
import torch

from tests.runtime.test_symbolic_program import POOLED
from xfuse.errors import InterpretError
from xfuse.interpreters.graph import interpret
from xfuse.ir.context import parse

PROGRAM = """
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<?x8xf32, #graph.syms<s0>>, %v: tensor<8xf32>) -> (tensor<?xf32, #graph.syms<s1>>, tensor<2x?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 64], s1 = 8 * s0>} {
  %0 = graph.mul %x, %y : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.reshape %0 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
  %2 = graph.broadcast_in_dim %v dims = [2] : tensor<8xf32> -> tensor<2x?x8xf32, #graph.syms<s0>>
  func.return %1, %2 : tensor<?xf32, #graph.syms<s1>>, tensor<2x?x8xf32, #graph.syms<s0>>
}"""


@pytest.mark.parametrize("n", [2, 5, 64])
def test_one_program_runs_at_every_size(n: int) -> None:
    x, y, v = torch.randn(n, 8), torch.randn(n, 8), torch.randn(8)
    flat, spread = interpret(parse(PROGRAM), [x, y, v])
    torch.testing.assert_close(flat, (x * y).reshape(-1))
    torch.testing.assert_close(spread, v.expand(2, n, 8))


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((1, 8), (1, 8)), r"'s0' is 1, outside its range \[2, 64\]"),
        (((65, 8), (65, 8)), r"'s0' is 65, outside its range \[2, 64\]"),
        (((4, 8), (5, 8)), r"'s0' is 4 in one argument and 5 in argument 1 \(dim 0\)"),
        (((4, 8), (4, 7)), r"argument 1 of @forward expects"),
    ],
)
def test_sizes_that_do_not_fit_are_refused(
    shapes: tuple[tuple[int, int], tuple[int, int]], message: str
) -> None:
    inputs = [torch.randn(*shapes[0]), torch.randn(*shapes[1]), torch.randn(8)]
    with pytest.raises(InterpretError, match=message):
        interpret(parse(PROGRAM), inputs)


@pytest.mark.parametrize("n", [3, 4, 9, 64])
def test_a_floor_division_symbol_runs_at_every_size(n: int) -> None:
    x = torch.randn(2, n)
    (got,) = interpret(parse(POOLED), [x])
    torch.testing.assert_close(got, torch.nn.functional.max_pool1d(x, 3, 2, 1).exp())


def test_a_floor_division_of_1_is_refused() -> None:
    with pytest.raises(InterpretError, match=r"'e0' = \(s0 \+ 1\) floordiv 2 is 1: a symbol's"):
        interpret(parse(POOLED), [torch.randn(2, 2)])


RELATED = """
func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %y: tensor<?x?xf32, #graph.syms<s2, s3>>) -> tensor<?xf32, #graph.syms<e0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2, s1 = input(0, 1) hint 8, s2 = input(1, 0) hint 4, s3 = input(1, 1) hint 4, e0 = s0 * s1, eq(s2 * s3, s0 * s1), lt(s3, s1)>} {
  %0 = graph.reshape %x : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?xf32, #graph.syms<e0>>
  %1 = graph.reshape %y : tensor<?x?xf32, #graph.syms<s2, s3>> -> tensor<?xf32, #graph.syms<e0>>
  %2 = graph.add %0, %1 : tensor<?xf32, #graph.syms<e0>>, tensor<?xf32, #graph.syms<e0>> -> tensor<?xf32, #graph.syms<e0>>
  func.return %2 : tensor<?xf32, #graph.syms<e0>>
}"""


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((2, 6), (3, 5)), r"^@forward: sizes s2 \* s3 = 15 and s0 \* s1 = 12 differ at s0 = 2, "),
        (((2, 6), (2, 6)), r"^@forward: s3 < s1 does not hold at s1 = 6, s3 = 6: the program"),
    ],
)
def test_sizes_that_break_a_relation_or_a_condition_are_refused(
    shapes: tuple[tuple[int, int], tuple[int, int]], message: str
) -> None:
    x, y = torch.randn(*shapes[0]), torch.randn(*shapes[1])
    (got,) = interpret(parse(RELATED), [torch.randn(3, 4), torch.randn(6, 2)])
    assert got.shape == (12,)
    with pytest.raises(InterpretError, match=message):
        interpret(parse(RELATED), [x, y])
