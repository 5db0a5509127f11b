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
    With an f64 `reference`, an output outside assert_close's tolerance still passes when its
    RMSE against the reference is at most 2x eager's plus a tiny epsilon: a few f32 ulps of
    `scale`, the largest magnitude the program computes (rounding of an intermediate value), or
    with one scale per output, that output's own."""
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
    ref = reference.detach().cpu().double()
    if tuple(ref.shape) != tuple(eager.shape):
        return False
    # Values are computed in f32 at least, whatever the output's dtype: f32's epsilon at least.
    unit = max(float(torch.finfo(eager.dtype).eps), float(torch.finfo(torch.float32).eps))
    eps = 4 * unit * (max(float(ref.abs().mean()), scale) + 1.0) if ref.numel() else 0.0
    return rmse(got.cpu(), ref) <= 2 * rmse(eager.cpu(), ref) + eps
