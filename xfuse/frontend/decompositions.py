"""Decompositions the importer adds to torch.export's core-aten table (issue 15: lower what
Inductor lowers).

torch.export's default table stops at core aten, so ops such as `native_group_norm`,
`upsample_bilinear2d` or `empty` reach the importer whole and would run eagerly. Inductor
decomposes them (or lowers them directly); xfuse does the same here, into aten ops the importer
maps:

- `TORCH_DECOMPOSED`: ops whose decomposition in torch's own tables (`torch._decomp`, the one
  Inductor uses) is exact and built of mapped ops;
- `OWN_DECOMPOSITIONS`: the few with no such entry, written here (each as Inductor lowers it).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

TORCH_DECOMPOSED: tuple[str, ...] = (
    "aten.native_group_norm.default",
    "aten.upsample_bilinear2d.vec",
    "aten.upsample_bilinear2d.default",
    "aten.addmv.default",
    "aten.dist.default",
    "aten.view_copy.default",
    "aten.permute_copy.default",
    "aten.narrow_copy.default",
    "aten.unbind_copy.int",
    "aten.as_strided_copy.default",
    "aten.ldexp.Tensor",
    "aten.max_pool2d_with_indices_backward.default",
    "aten.grid_sampler_2d.default",
)


def _empty(*args: Any, **kwargs: Any) -> torch.Tensor:
    """empty/empty_permuted: a fresh tensor whose values are undefined; zeros are such values
    (no memory is read that the program did not write)."""
    size = args[0]
    return torch.zeros(
        size, dtype=kwargs.get("dtype"), device=kwargs.get("device"), layout=kwargs.get("layout")
    )


def _new_empty(x: torch.Tensor, size: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """new_empty_strided: `_empty` in `x`'s dtype unless one is given."""
    return torch.zeros(size, dtype=kwargs.get("dtype") or x.dtype, device=x.device)


def _reduce_with_index(values: Any, index: Any) -> Callable[..., Any]:
    """max.dim / min.dim: the extreme value and the index of its first occurrence (NaN counts
    as the extreme, as eager's kernel has it), as amax/argmax do."""

    def decompose(x: torch.Tensor, dim: int, keepdim: bool = False) -> tuple[Any, Any]:
        return values(x, [dim], keepdim), index(x, dim, keepdim)

    return decompose


def _copy(x: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """Functional copy: `src` broadcast to `x`'s shape in `x`'s dtype."""
    return aten.expand.default(aten._to_copy.default(src, dtype=x.dtype), list(x.shape)).clone()


def _angle(x: torch.Tensor) -> Any:
    """The argument of a real number: pi below 0, NaN for NaN, else 0 (Inductor's)."""
    if x.is_complex():
        return NotImplemented
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    pi = torch.scalar_tensor(math.pi, dtype=dtype, device=x.device)
    zero = torch.scalar_tensor(0.0, dtype=dtype, device=x.device)
    return torch.where(torch.isnan(x), x.to(dtype), torch.where(x < 0, pi, zero))


LANCZOS_G = 7.0
LANCZOS = (
    0.99999999999980993,
    676.5203681218851,
    -1259.1392167224028,
    771.32342877765313,
    -176.61502916214059,
    12.507343278686905,
    -0.13857109526572012,
    9.9843695780195716e-6,
    1.5056327351493116e-7,
)
"""Lanczos's coefficients for g = 7, n = 9: Gamma to about 1e-15 relative error."""


def _lgamma(x: torch.Tensor) -> torch.Tensor:
    """log|Gamma(x)| (Inductor lowers it to libm's `lgamma`): Lanczos's series in f64 for
    x >= 1/2, the reflection `log(pi / |sin(pi x)|) - lgamma(1 - x)` below (sin of the exact
    distance to the nearest integer, so poles give +inf), rounded to the result's dtype; +inf
    at +-inf, NaN at NaN."""
    dtype = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    y = x.to(torch.float64)
    small = y < 0.5
    z = torch.where(small, 1.0 - y, y) - 1.0
    series = torch.full_like(z, LANCZOS[0])
    for k, c in enumerate(LANCZOS[1:], start=1):
        series = series + c / (z + k)
    t = z + (LANCZOS_G + 0.5)
    large = 0.5 * math.log(2 * math.pi) + (z + 0.5) * torch.log(t) - t + torch.log(series)
    sine = torch.abs(torch.sin(math.pi * (y - torch.round(y))))
    reflected = torch.log(math.pi / sine) - large
    value = torch.where(small, reflected, large)
    return torch.where(torch.isinf(y), math.inf, value).to(dtype)


OWN_DECOMPOSITIONS: dict[str, Callable[..., Any]] = {
    "aten.empty.memory_format": _empty,
    "aten.empty_permuted.default": _empty,
    "aten.empty_strided.default": _empty,
    "aten.new_empty_strided.default": _new_empty,
    "aten.max.dim": _reduce_with_index(aten.amax.default, aten.argmax.default),
    "aten.min.dim": _reduce_with_index(aten.amin.default, aten.argmin.default),
    "aten.copy.default": _copy,
    "aten.angle.default": _angle,
    "aten.lgamma.default": _lgamma,
}


def _overload(name: str) -> torch._ops.OpOverload:
    _, op, overload = name.split(".")
    return getattr(getattr(aten, op), overload)


def extra_decompositions() -> dict[torch._ops.OpOverload, Callable[..., Any]]:
    """The decompositions added to torch.export's table, by overload."""
    from torch._decomp import decomposition_table

    table = {_overload(n): decomposition_table[_overload(n)] for n in TORCH_DECOMPOSED}
    table.update({_overload(n): fn for n, fn in OWN_DECOMPOSITIONS.items()})
    return table
