"""`divide_by_reciprocal` (xfuse/passes/lowering/divisions.py): a loop-invariant division becomes
a multiplication by the reciprocal, but where the quotient is rounded to an integer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import xfuse

DIVISOR = torch.tensor([[0.4515088200569153], [1.7061907052993774]])
"""Divisors by which 8 * d / d is exactly 8, and 8 * d * (1 / d) is just below it."""


@pytest.mark.parametrize(
    "fn",
    [
        lambda s, p: torch.div(s, p, rounding_mode="trunc").sum(1),
        lambda s, p: torch.div(s, p, rounding_mode="floor").sum(1),
        lambda s, p: torch.fmod(s / p * 3, 24).sum(1),
    ],
)
def test_a_quotient_that_is_rounded_is_divided(
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> None:
    s = (8 * DIVISOR).expand(2, 8).contiguous()
    compiled = xfuse.compile(fn, (s, DIVISOR), quiet=True)
    torch.testing.assert_close(compiled(s, DIVISOR), fn(s, DIVISOR))


def test_a_normalization_still_multiplies_by_the_reciprocal() -> None:
    from xdsl.dialects import arith, scf

    from xfuse.ir.context import parse
    from xfuse.passes.lowering.divisions import divide_by_reciprocal, kept_divisors

    module = parse(
        """
func.func @k(%x: memref<8xf32>, %y: memref<8xf32>, %s: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  scf.for %i = %c0 to %c8 step %c1 {
    %v = memref.load %x[%i] : memref<8xf32>
    %q = arith.divf %v, %s : f32
    memref.store %q, %y[%i] : memref<8xf32>
  }
  func.return
}
"""
    )
    (loop,) = [op for op in module.walk() if isinstance(op, scf.ForOp)]
    divide_by_reciprocal(loop, kept_divisors(module))
    assert not [op for op in loop.body.block.ops if isinstance(op, arith.DivfOp)]
    assert [op for op in loop.body.block.ops if isinstance(op, arith.MulfOp)]


def test_a_maximum_equals_the_value_it_was_taken_from_where_it_is_floored() -> None:
    """Training fuzz seed 83, program 455: a kernel takes a row's maximum of `v / 6` (its
    floor returned too, so that loop divides) and compares each element's `v / 6` with it in
    another loop, which multiplied by the reciprocal: an ulp apart, no element of three rows
    equalled the maximum, and amax's gradient divided by that count (0) gave NaN. Every
    division by a divisor that one division of the kernel keeps is kept."""

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = torch.clamp_min(a - b, 0) / 6
        m = v.amax(1, keepdim=True)
        return torch.floor(m), m == v

    x = torch.randn((4, 6, 4), generator=torch.Generator().manual_seed(83000704))
    d = x - x.mean(1, keepdim=True)
    a, b = (d * d).sum(1), d.mean(1) ** 2 * 6  # the program's variance, in two parts
    compiled = xfuse.compile(fn, (a, b), quiet=True)
    got, want = compiled(a, b), fn(a, b)
    assert torch.equal(got[1], want[1])
