"""Scatters compiled end to end (xfuse.compile, strict: no eager part) against eager on the
CPU, their CUDA kernels assembled by ptxas, and (`gpu` marker) run on CUDA."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import xfuse
from tests.backends.test_cuda import ptx_of

Fn = Callable[..., torch.Tensor]


def _setitem(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[:, 1:5:2] = torch.relu(y)
    x[-1] = 5.0
    return x + 1


# --- scatter task: scatters with affine indices ----------------------------------------------

AFFINE: dict[str, tuple[Fn, tuple[int, ...], tuple[int, ...]]] = {
    "slice_scatter": (lambda x, y: torch.slice_scatter(x, y, 1, 2, 5) * 2, (4, 8), (4, 3)),
    "slice_scatter_step": (
        lambda x, y: torch.slice_scatter(x, y, 2, 1, 8, 3),
        (2, 3, 8),
        (2, 3, 3),
    ),
    "select_scatter": (lambda x, y: torch.select_scatter(x, y.exp(), 0, -1), (4, 8), (8,)),
    "diagonal_scatter": (lambda x, y: torch.diagonal_scatter(x, y, -1, 2, 1), (3, 5, 4), (3, 3)),
    "setitem": (_setitem, (4, 8), (4, 2)),
}


def _compiled(fn: Fn, *args: torch.Tensor, device: str = "cpu") -> xfuse.CompiledProgram:
    compiled = xfuse.compile(fn, args, device, quiet=True, fallback="error")
    calls = [op for op in compiled.default.program.module.walk() if op.name == "graph.torch_call"]
    assert not calls, [str(op) for op in calls]
    return compiled


def _inputs(name: str, dtype: torch.dtype, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    _, *shapes = AFFINE[name]
    return tuple(torch.randn(s, generator=gen).to(device=device, dtype=dtype) for s in shapes)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(AFFINE))
def test_affine_scatter_is_one_kernel_matching_eager(name: str, dtype: torch.dtype) -> None:
    fn = AFFINE[name][0]
    args = _inputs(name, dtype)
    compiled = _compiled(fn, *args)
    assert len(compiled.kernels) == 1
    torch.testing.assert_close(compiled(*args), fn(*args))


def test_affine_scatter_of_integers() -> None:
    fn: Fn = lambda x, y: torch.slice_scatter(x, y * 3, 0, 1, 4, 2)  # noqa: E731
    x, y = torch.randint(-9, 9, (5, 3)), torch.randint(-9, 9, (2, 3))
    torch.testing.assert_close(_compiled(fn, x, y)(x, y), fn(x, y), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["slice_scatter_step", "diagonal_scatter", "setitem"])
def test_cuda_affine_scatter_kernels_assemble(name: str, tmp_path: Path) -> None:
    fn = AFFINE[name][0]
    ptxs = ptx_of(fn, _inputs(name, torch.float32), tmp_path)
    assert all("selp" in ptx or "@%p" in ptx for ptx in ptxs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(AFFINE))
def test_affine_scatter_matches_eager_on_cuda(name: str, dtype: torch.dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fn = AFFINE[name][0]
    args = _inputs(name, dtype, "cuda")
    torch.testing.assert_close(_compiled(fn, *args, device="cuda")(*args), fn(*args))
