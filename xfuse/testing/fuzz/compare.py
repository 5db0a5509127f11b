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
    but not worse than twice as much. The floor (`rmse_floor`) is 4 to 8 ulps of the values: it
    covers an output where eager happens to be exact or one ulp off (a one-element sum, whose
    RMSE is its one error, may be 0 for eager), and values that cancel to about 0 from inputs
    of about 1. A sum that is 23 ulps off where eager is 1.3 (seed 71 program 659, a serial sum
    in the kernel) fails: that is a less accurate kernel, fixed in the lowering, not here."""
    ref = reference.detach().cpu().double()
    if tuple(ref.shape) != tuple(eager.shape):
        return False
    return rmse(got.cpu(), ref) <= 2 * rmse(eager.cpu(), ref) + rmse_floor(ref, eager.dtype, scale)


def rmse_floor(reference: Tensor, dtype: torch.dtype, scale: float) -> float:
    """4 eps (magnitude + 1), eps the f32 epsilon (`dtype`'s if coarser: values are computed in
    f32 at least, whatever the output's dtype) and magnitude the larger of the f64
    `reference`'s mean |value| and `scale`."""
    if not reference.numel():
        return 0.0
    unit = max(float(torch.finfo(dtype).eps), float(torch.finfo(torch.float32).eps))
    return 4 * unit * (max(float(reference.abs().mean()), scale) + 1.0)


def pooled_rmse_ok(
    got: Sequence[Tensor], eager: Sequence[Tensor], reference: Sequence[Tensor], scale: float
) -> bool:
    """The RMSE rule over several samples of one value (`got[k]`, `eager[k]` and `reference[k]`
    are its k-th sample): each error is pooled over all samples before the rule compares them.

    A value of few elements (a 0-d input's gradient, a sum of a thousand terms) gives the rule
    one error to judge, a random draw: where its terms carry their ordinary rounding, eager's
    draw is under half of xfuse's about three times in ten, however accurate each term is.
    Pooled over several samples (other weights of the loss), both errors are estimates of
    their spreads, which the rule can compare."""
    refs = [r.detach().cpu().double() for r in reference]
    if any(tuple(r.shape) != tuple(e.shape) for r, e in zip(refs, eager, strict=True)):
        return False

    def pooled(values: Sequence[Tensor]) -> float:
        errors = [(v.cpu().double() - r).reshape(-1) for v, r in zip(values, refs, strict=True)]
        return rmse(torch.cat(errors), torch.zeros(sum(e.numel() for e in errors)))

    floor = rmse_floor(torch.cat([r.reshape(-1) for r in refs]), eager[0].dtype, scale)
    return pooled(got) <= 2 * pooled(eager) + floor


def same_bits(a: Tensor, b: Tensor) -> bool:
    """Same dtype, shape, strides and bits (NaNs and signed zeros included)."""
    if (a.dtype, a.shape, a.stride()) != (b.dtype, b.shape, b.stride()):
        return False
    x, y = (torch.empty(t.numel(), dtype=t.dtype).copy_(t.reshape(-1)) for t in (a, b))
    if x.is_floating_point() or x.is_complex():
        x, y = x.view(torch.uint8), y.view(torch.uint8)
    return torch.equal(x, y)
