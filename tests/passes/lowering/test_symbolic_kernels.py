"""Symbolic kernels (xfuse/passes/lowering/symbolic_kernels.py): a group output of as many
elements as the group's full shape for every size, but of other dims, is written at the same
linear offset by the group's one kernel, with eager's values at every size."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from xfuse.ir.context import parse
from xfuse.pipeline import pipeline
from xfuse.runtime.symbolic import SymbolicProgram

SIZES = "s0 = input(0, 3) hint 4 range [2, 64], s1 = input(0, 4) hint 5 range [2, 64]"
MASK5 = "tensor<1x1x1x?x?xf32, #graph.syms<s0, s1>>"
MASK2 = "tensor<?x?xf32, #graph.syms<s0, s1>>"

# a causal mask's shape: an output of [s0, s1] and one of [1, 1, 1, s0, s1] in one group
SQUEEZED = f"""
func.func @forward(%x: {MASK5}) -> ({MASK5}, {MASK2}) attributes {{graph.sizes = #graph.sizes<{SIZES}>}} {{
  %0 = graph.exp %x : {MASK5}
  %1 = graph.reshape %0 : {MASK5} -> {MASK2}
  %2 = graph.tanh %1 : {MASK2}
  func.return %0, %2 : {MASK5}, {MASK2}
}}
"""

FLAT = "tensor<?x64xf32, #graph.syms<s2>>"
SPLIT = "tensor<?x?x64xf32, #graph.syms<s0, s1>>"

# an output of [s0 * s1, 64] and one of [s0, s1, 64] in one group
PRODUCT = f"""
func.func @forward(%y: {SPLIT}) -> ({FLAT}, {SPLIT}) attributes {{graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2 range [2, 64], s1 = input(0, 1) hint 5 range [2, 64], s2 = s0 * s1>}} {{
  %0 = graph.reshape %y : {SPLIT} -> {FLAT}
  %1 = graph.exp %0 : {FLAT}
  %2 = graph.reshape %1 : {FLAT} -> {SPLIT}
  %3 = graph.tanh %2 : {SPLIT}
  func.return %1, %3 : {FLAT}, {SPLIT}
}}
"""


MAP = "tensor<2x16x?x?xf32, #graph.syms<s0, s1>>"
ROWS = "tensor<2x1x16x?xf32, #graph.syms<s2>>"
MEAN = "tensor<2x1x1x1xf32>"

# a group norm of one group: the mean over a map flattened into one dim (`s2 = s0 * s1`),
# subtracted from the map unflattened (the kernel writes it in the reduction's loop)
FLATTENED_MAP = f"""
func.func @forward(%x: {MAP}) -> {MAP} attributes {{graph.sizes = #graph.sizes<s0 = input(0, 2) hint 3 range [2, 64], s1 = input(0, 3) hint 5 range [2, 64], s2 = s0 * s1>}} {{
  %0 = graph.reshape %x : {MAP} -> {ROWS}
  %1 = graph.reduce_mean %0 dims = [2, 3] keepdim : {ROWS} -> {MEAN}
  %2 = graph.sub %x, %1 : {MAP}, {MEAN} -> {MAP}
  func.return %2 : {MAP}
}}
"""

KEPT = "tensor<?x1xf32, #graph.syms<s2>>"
DROPPED = "tensor<?xf32, #graph.syms<s2>>"
HEADS = "tensor<2x?x?x64xf32, #graph.syms<s0, s1>>"

# a row sum over a flattened product of symbols (`s2 = 2 * s0 * s1`), its size-1 dim dropped,
# beside the rows scaled: one kernel, whose rows read the sum at their own row
SUMMED_ROWS = f"""
func.func @forward(%x: {HEADS}) -> ({DROPPED}, {FLAT}) attributes {{graph.sizes = #graph.sizes<s0 = input(0, 1) hint 2 range [2, 64], s1 = input(0, 2) hint 5 range [2, 64], s2 = 2 * s0 * s1>}} {{
  %y = graph.reshape %x : {HEADS} -> {FLAT}
  %0 = graph.exp %y : {FLAT}
  %1 = graph.reduce_sum %0 dims = [1] keepdim : {FLAT} -> {KEPT}
  %2 = graph.reshape %1 : {KEPT} -> {DROPPED}
  %3 = graph.mul %0, %1 : {FLAT}, {KEPT} -> {FLAT}
  func.return %2, %3 : {DROPPED}, {FLAT}
}}
"""


def summed_rows(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    rows = x.reshape(-1, 64).exp()
    total = rows.sum(1, keepdim=True)
    return total.reshape(-1), rows * total


def flattened_map(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x - x.reshape(2, 1, 16, -1).mean((2, 3), keepdim=True),)


def squeezed(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.exp(), x.exp().reshape(x.shape[3:]).tanh()


def product(y: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return y.reshape(-1, 64).exp(), y.exp().tanh()


@pytest.mark.parametrize(
    ("text", "shapes", "eager"),
    [
        (SQUEEZED, [(1, 1, 1, 2, 3), (1, 1, 1, 7, 5), (1, 1, 1, 16, 33)], squeezed),
        (PRODUCT, [(2, 3, 64), (3, 7, 64), (5, 2, 64)], product),
        (FLATTENED_MAP, [(2, 16, 3, 5), (2, 16, 7, 2), (2, 16, 12, 9)], flattened_map),
        (SUMMED_ROWS, [(2, 2, 5, 64), (2, 3, 7, 64), (2, 9, 2, 64)], summed_rows),
    ],
    ids=["size-1-dims", "product-of-symbols", "reduction-of-a-flattened-map", "summed-rows"],
)
def test_an_output_of_as_many_elements_is_written_at_its_offset(
    text: str,
    shapes: list[tuple[int, ...]],
    eager: Callable[[torch.Tensor], tuple[torch.Tensor, ...]],
) -> None:
    """Both of the group's outputs come from one kernel (which `lower-to-loops` refused before),
    with eager's values at three sizes."""
    lowered = pipeline("fuse-greedy,lower-to-loops")(parse(text))
    assert str(lowered).count("xfuse.kernel") == 1
    program = SymbolicProgram(parse(text))
    for shape in shapes:
        x = torch.randn(*shape)
        for got, expected in zip(program(x), eager(x), strict=True):
            torch.testing.assert_close(got, expected)


TOKENS = "tensor<?x3x2xf32, #graph.syms<s0>>"

# a sum of a symbolic count of f32 terms to one value (a loss, a statistic)
TOTAL = f"""
func.func @forward(%x: {TOKENS}) -> tensor<f32> attributes {{graph.sizes = #graph.sizes<s0 = input(0, 0) hint 33 range [2, inf]>}} {{
  %0 = graph.reduce_sum %x dims = [0, 1, 2] : {TOKENS} -> tensor<f32>
  func.return %0 : tensor<f32>
}}
"""


def test_a_sum_of_a_symbolic_count_to_one_value_accumulates_as_the_static_one_does() -> None:
    """A total f32 sum whose count is short at the size hints (`reductions.TOTAL_SUM`)
    accumulates in f64 as the static kernel at those sizes does, at every size: the result is
    the f32 nearest the exact sum, where an f32 sum over loops drifts from eager's."""
    program = SymbolicProgram(parse(TOTAL))
    assert "arith.extf" in str(program.module)
    gen = torch.Generator().manual_seed(0)
    for n in (33, 2, 500):
        x = torch.randn(n, 3, 2, generator=gen) * 10 + 3
        (got,) = program(x)
        assert got.item() == x.double().sum().float().item(), n
