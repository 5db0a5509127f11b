"""Padding and pooling: imported as graph.pad / graph.pool (or a reduction), interpreted equal
to eager; the forms that stay eager stay a graph.torch_call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from frontend_util import check_against_eager, op_names

from xfuse.dialects import graph

_gen = torch.Generator().manual_seed(0)


def rand(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


# (id, function, input, the graph op the import must contain)
CASES: list[tuple[str, Callable[..., Any], Callable[[], torch.Tensor], str]] = [
    (
        "pad_constant",
        lambda x: F.pad(x, (1, 2, 0, 1), value=1.5),
        lambda: rand(2, 3, 4),
        "graph.pad",
    ),
    ("pad_negative", lambda x: F.pad(x, (-1, 2, 1, -2)), lambda: rand(2, 5, 6), "graph.pad"),
    ("pad_all_dims", lambda x: F.pad(x, (1, 1, 2, 0, 0, 3)), lambda: rand(2, 3, 4), "graph.pad"),
    (
        "pad_int",
        lambda x: F.pad(x, (1, 2), value=-7),
        lambda: torch.randint(-5, 5, (3, 4), generator=_gen),
        "graph.pad",
    ),
    ("pad_bool", lambda x: F.pad(x > 0, (1, 1), value=True), lambda: rand(3, 4), "graph.pad"),
    (
        "pad_reflect1d",
        lambda x: F.pad(x, (2, 3), mode="reflect"),
        lambda: rand(2, 3, 5),
        "graph.pad",
    ),
    (
        "pad_reflect2d",
        lambda x: F.pad(x, (1, 2, 2, 1), mode="reflect"),
        lambda: rand(2, 3, 5, 6),
        "graph.pad",
    ),
    (
        "pad_reflect3d",
        lambda x: F.pad(x, (1, 0, 2, 1, 1, 1), mode="reflect"),
        lambda: rand(1, 2, 3, 4, 5),
        "graph.pad",
    ),
    (
        "pad_replicate",
        lambda x: F.pad(x, (3, 0, 1, 4), mode="replicate"),
        lambda: rand(2, 3, 5, 6),
        "graph.pad",
    ),
    (
        "pad_replicate_neg",
        lambda x: F.pad(x, (-1, 2), mode="replicate"),
        lambda: rand(2, 3, 5),
        "graph.pad",
    ),
    ("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, 1), lambda: rand(2, 3, 9), "graph.pool"),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), lambda: rand(2, 3, 9, 9), "graph.pool"),
    (
        "max_pool2d_ceil_dilation",
        lambda x: F.max_pool2d(x, (3, 2), (2, 1), (1, 0), dilation=(1, 2), ceil_mode=True),
        lambda: rand(1, 2, 10, 9),
        "graph.pool",
    ),
    ("max_pool2d_unbatched", lambda x: F.max_pool2d(x, 2), lambda: rand(3, 8, 8), "graph.pool"),
    ("max_pool3d", lambda x: F.max_pool3d(x, 2, 1, 1), lambda: rand(1, 2, 4, 5, 6), "graph.pool"),
    (
        "max_pool2d_int",
        lambda x: F.max_pool2d(x, 2, 1, 1),
        lambda: torch.randint(-9, 9, (1, 2, 5, 5), generator=_gen),
        "graph.pool",
    ),
    (
        "avg_pool1d",
        lambda x: F.avg_pool1d(x, 4, 3, 2, ceil_mode=True),
        lambda: rand(2, 3, 11),
        "graph.pool",
    ),
    (
        "avg_pool2d_exclude_pad",
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        lambda: rand(2, 3, 10, 10),
        "graph.pool",
    ),
    (
        "avg_pool2d_divisor",
        lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=4),
        lambda: rand(2, 3, 9, 9),
        "graph.pool",
    ),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 2, 2, 1), lambda: rand(1, 2, 5, 5, 5), "graph.pool"),
    (
        "avg_pool2d_one_window_past_the_plane",  # EfficientNet's AvgPool2d(1280, ceil_mode)
        lambda x: F.avg_pool2d(x, 1280, ceil_mode=True),
        lambda: rand(2, 5, 7, 7),
        "graph.reduce_mean",
    ),
    (
        "avg_pool2d_the_plane",
        lambda x: F.avg_pool2d(x, 7),
        lambda: rand(5, 7, 7),
        "graph.reduce_mean",
    ),
    (
        "avg_pool2d_the_plane_divisor",
        lambda x: F.avg_pool2d(x, 7, divisor_override=49),
        lambda: rand(1, 3, 7, 7),
        "graph.reduce_mean",
    ),
    (
        "avg_pool2d_the_plane_other_divisor",
        lambda x: F.avg_pool2d(x, 7, divisor_override=10),
        lambda: rand(1, 3, 7, 7),
        "graph.pool",
    ),
    (
        "avg_pool2d_the_plane_padded",
        lambda x: F.avg_pool2d(x, 9, padding=1, count_include_pad=False),
        lambda: rand(1, 3, 7, 7),
        "graph.pool",
    ),
    (
        "adaptive_avg_pool1d",
        lambda x: F.adaptive_avg_pool1d(x, 3),
        lambda: rand(2, 3, 9),
        "graph.pool",
    ),
    (
        "adaptive_avg_pool2d",
        lambda x: F.adaptive_avg_pool2d(x, (2, 3)),
        lambda: rand(2, 3, 8, 9),
        "graph.pool",
    ),
    (
        "adaptive_avg_pool3d",
        lambda x: F.adaptive_avg_pool3d(x, 2),
        lambda: rand(1, 2, 4, 4, 6),
        "graph.pool",
    ),
    (
        "adaptive_avg_pool_global",
        lambda x: F.adaptive_avg_pool2d(x, 1),
        lambda: rand(2, 3, 7, 7),
        "graph.reduce_mean",
    ),
    (
        "adaptive_max_pool2d",
        lambda x: F.adaptive_max_pool2d(x, 3),
        lambda: rand(2, 3, 9, 6),
        "graph.pool",
    ),
    (
        "adaptive_max_pool_global",
        lambda x: F.adaptive_max_pool2d(x, 1),
        lambda: rand(2, 3, 5, 5),
        "graph.reduce_max",
    ),
    (
        "max_pool2d_indices",
        lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True),
        lambda: rand(1, 2, 7, 7),
        "graph.pool",
    ),
    (
        "adaptive_max_pool2d_indices",
        lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True),
        lambda: rand(1, 2, 4, 6),
        "graph.pool",
    ),
    (
        "adaptive_avg_pool2d_uneven",
        lambda x: F.adaptive_avg_pool2d(x, (5, 7)),
        lambda: rand(1, 2, 8, 8),
        "graph.pool",
    ),
    (
        "adaptive_max_pool1d_uneven",
        lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True),
        lambda: rand(1, 2, 7),
        "graph.pool",
    ),
    (
        "interpolate_area",
        lambda x: F.interpolate(x, size=(3, 5), mode="area"),
        lambda: rand(1, 2, 7, 9),
        "graph.pool",
    ),
    (
        "adaptive_max_pool3d",
        lambda x: F.adaptive_max_pool3d(x, (1, 2, 2)),
        lambda: rand(1, 2, 3, 4, 4),
        "graph.pool",
    ),
]


@pytest.mark.parametrize(
    ("fn", "make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_imported_and_equal_to_eager(
    fn: Callable[..., Any], make: Callable[[], torch.Tensor], expected: str
) -> None:
    imported = check_against_eager(fn, (make(),))
    names = op_names(imported)
    assert expected in names
    assert "graph.torch_call" not in names


STAYS_EAGER: list[tuple[str, Callable[..., Any], Callable[[], torch.Tensor], str]] = [
    (
        "avg_pool_int",
        lambda x: F.avg_pool2d(x, 2),
        lambda: torch.randint(0, 9, (1, 2, 4, 4), generator=_gen),
        "aten.avg_pool2d.default",
    ),
]


@pytest.mark.parametrize(
    ("fn", "make", "target"), [c[1:] for c in STAYS_EAGER], ids=[c[0] for c in STAYS_EAGER]
)
def test_forms_left_to_torch(
    fn: Callable[..., Any], make: Callable[[], torch.Tensor], target: str
) -> None:
    imported = check_against_eager(fn, (make(),))
    calls = [op for op in imported.module.walk() if op.name == "graph.torch_call"]
    assert [op.target.data for op in calls] == [target]  # pyright: ignore[reportAttributeAccessIssue]


def test_pool_shape_and_window_properties() -> None:
    """ceil_mode is the longer result shape; stride [] is the kernel."""
    fn = lambda x: F.max_pool2d(x, 3, padding=1, ceil_mode=True)  # noqa: E731
    imported = check_against_eager(fn, (rand(1, 1, 10, 10),))
    (pool,) = [op for op in imported.module.walk() if isinstance(op, graph.PoolOp)]
    assert graph.shape_of(pool.result) == (1, 1, 4, 4)
    assert pool.window == ((3, 3), (3, 3), (1, 1), (1, 1))
