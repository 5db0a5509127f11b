"""The decompositions of ops Inductor lowers (`xfuse.frontend.decompositions`) on
CUDA: PTX that ptxas accepts (f64 transcendentals through libdevice included), and on a GPU
results equal to eager."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.backends.test_cuda import gpu, ptx_of, run_on_gpu

CASES: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = [
    ("lgamma", torch.lgamma, lambda: (torch.randn(64) * 5,)),
    ("erfinv_bf16", torch.erfinv, lambda: ((torch.rand(64) * 2 - 1).to(torch.bfloat16),)),
    ("i0", torch.i0, lambda: (torch.randn(64) * 10,)),
    ("i1_f64", torch.special.i1, lambda: (torch.randn(64, dtype=torch.float64) * 10,)),
    ("as_strided", lambda x: torch.as_strided(x, (6, 3), (2, 1), 1) * 2, lambda: (torch.randn(4, 5),)),
    ("unfold", lambda x: x.unfold(1, 3, 2) + 1, lambda: (torch.randn(3, 9),)),
    ("group_norm", lambda x: F.group_norm(x, 2), lambda: (torch.randn(2, 4, 5),)),
    ("group_norm_1", lambda x, w, b: F.group_norm(x, 1, w, b), lambda: (torch.randn(2, 4, 3, 5), torch.randn(4), torch.randn(4))),
    ("bilinear", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), lambda: (torch.randn(1, 2, 4, 4),)),
    ("max_dim", lambda x: torch.max(x, 1).values, lambda: (torch.randn(5, 7),)),
    ("max_dim_indices", lambda x: torch.max(x, 1).indices, lambda: (torch.randn(5, 7),)),
    ("empty", lambda x: torch.empty_like(x).fill_(1) + x, lambda: (torch.randn(8),)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "fn", "make"), CASES, ids=[c[0] for c in CASES])
def test_ptx(name: str, fn: Callable[..., Any], make: Callable[[], Any], tmp_path: Path) -> None:
    ptx_of(fn, make(), tmp_path)


@gpu
@pytest.mark.parametrize(("name", "fn", "make"), CASES, ids=[c[0] for c in CASES])
def test_gpu(name: str, fn: Callable[..., Any], make: Callable[[], Any]) -> None:
    run_on_gpu(fn, make(), reduction=name.startswith("group_norm"))
