"""Comparing xfuse's outputs with eager's (torch's tolerances; reductions against an f64 reference)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from xfuse.testing.fuzz.program import Tensor

# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def flat_tensors(value: Any) -> list[Tensor]:
    from torch.utils import _pytree as pytree

    return [t for t in pytree.tree_leaves(value) if isinstance(t, Tensor)]


def rmse(a: Tensor, b: Tensor) -> float:
    if a.numel() == 0:
        return 0.0
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


def compare_outputs(
    got: Sequence[Tensor],
    expected: Sequence[Tensor],
    reference: Sequence[Tensor] | None = None,
    scale: float | Sequence[float] = 1.0,
) -> str | None:
    """None when `got` matches `expected`, else one line saying where and how it differs.
    With an f64 `reference` (programs with reductions, matmuls or low precision, whose result
    depends on the order of operations), an output outside assert_close's tolerance still
    passes when it is no further from the reference than eager is (`_rmse_ok`): its error is
    at most 2x eager's plus a few f32 ulps of its magnitude, or of `scale`, the largest
    magnitude the program computes, for values an intermediate's rounding reaches; with one
    scale per output (the semantics mode), that output's own."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, eager has {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        if tuple(g.shape) != tuple(e.shape) or g.dtype != e.dtype:
            return f"output {i} is {g.dtype} {list(g.shape)}, eager gives {e.dtype} {list(e.shape)}"
        try:
            torch.testing.assert_close(g.cpu(), e.cpu(), equal_nan=True)
            continue
        except AssertionError as error:
            detail = " ".join(str(error).split())
        own = scale if isinstance(scale, float | int) else scale[i]
        if reference is not None and e.is_floating_point() and _rmse_ok(g, e, reference[i], own):
            continue
        return f"output {i}: {detail}"
    return None


def _rmse_ok(got: Tensor, eager: Tensor, reference: Tensor, scale: float) -> bool:
    """The rule for reordered float arithmetic: RMSE(got, f64) <= 2 RMSE(eager, f64) + floor.

    Both errors are measured against the f64 run, so xfuse may round differently from eager
    but not worse than twice as much. The floor, 4 eps (magnitude + 1) with eps the f32 epsilon
    (the output dtype's if coarser) and magnitude the larger of the output's mean |value| and
    `scale`, is 4 to 8 ulps of the values: it covers an output where eager happens to be exact
    or one ulp off (a one-element sum, whose RMSE is its one error, may be 0 for eager), and
    `+ 1` values that cancel to about 0 from inputs of about 1. A sum that is 23 ulps off where
    eager is 1.3 (seed 71 program 659, a serial sum in the kernel) fails: that is a less
    accurate kernel, fixed in the lowering, not here."""
    ref = reference.detach().cpu().double()
    if tuple(ref.shape) != tuple(eager.shape):
        return False
    # Values are computed in f32 at least, whatever the output's dtype: f32's epsilon at least.
    unit = max(float(torch.finfo(eager.dtype).eps), float(torch.finfo(torch.float32).eps))
    eps = 4 * unit * (max(float(ref.abs().mean()), scale) + 1.0) if ref.numel() else 0.0
    return rmse(got.cpu(), ref) <= 2 * rmse(eager.cpu(), ref) + eps


def same_bits(a: Tensor, b: Tensor) -> bool:
    """Same dtype, shape, strides and bits (NaNs and signed zeros included)."""
    if (a.dtype, a.shape, a.stride()) != (b.dtype, b.shape, b.stride()):
        return False
    x, y = (torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1)) for t in (a, b))
    if x.is_floating_point() or x.is_complex():
        x, y = x.view(torch.uint8), y.view(torch.uint8)
    return torch.equal(x, y)
