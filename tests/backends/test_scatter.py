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


# --- scatters with affine indices -----------------------------------------------------------

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


# --- scatters with computed indices ---------------------------------------------------------


def _put_mask(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y[x > 0.5] = 0.0
    return torch.relu(y) * 2


def _ints(*values: int) -> torch.Tensor:
    return torch.tensor(values)


def _accumulated(t: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Duplicate indices in f32; one index for f16/bf16 (several stay eager: eager rounds
    after each addition)."""
    i = _ints(-1, 2, -1) if t == torch.float32 else _ints(-1)
    return torch.randn(5, 7).to(t), i, torch.randn(len(i), 7).to(t)


COMPUTED: dict[str, tuple[Fn, Callable[[torch.dtype], tuple[torch.Tensor, ...]]]] = {
    "scatter_duplicates": (
        lambda x, i, v: torch.scatter(x, 1, i, v.exp()) + 1,
        lambda t: (
            torch.randn(3, 8).to(t),
            _ints(7, 0, 7, 2, 2, 2, 5, -0, 1).reshape(3, 3),
            torch.randn(3, 3).to(t),
        ),
    ),
    "scatter_add": (
        lambda x, i, v: torch.scatter_add(x * 2, 0, i, v),
        lambda t: (
            torch.randn(4, 6).to(t),
            _ints(3, 1, 0, 3, 3, 2).reshape(1, 6),
            torch.randn(1, 6).to(t),
        ),
    ),
    "scatter_reduce_amax": (
        lambda x, i, v: torch.scatter_reduce(x, 0, i, v, "amax", include_self=False),
        lambda t: (torch.randn(4, 6).to(t), torch.randint(0, 4, (3, 6)), torch.randn(3, 6).to(t)),
    ),
    "index_put_negative_duplicates": (
        lambda x, i, v: x.index_put((i,), v) - 1,
        lambda t: (torch.randn(5, 7).to(t), _ints(-1, 2, 4, 2), torch.randn(4, 7).to(t)),
    ),
    "index_put_accumulate": (
        lambda x, i, v: x.index_put((i,), v, accumulate=True),
        _accumulated,
    ),
    "index_copy": (
        lambda x, i, v: torch.index_copy(x, 1, i, v),
        lambda t: (torch.randn(5, 7).to(t), _ints(6, 0, 3), torch.randn(5, 3).to(t)),
    ),
    "index_put_mask": (_put_mask, lambda t: (torch.randn(5, 7).to(t),)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", list(COMPUTED))
def test_computed_scatter_matches_eager(name: str, dtype: torch.dtype) -> None:
    """No eager part (the index check, the source positions taken apart, the search fused
    with its consumers); values as eager's CPU kernels give them (the last of duplicate
    indices wins; sums in eager's order)."""
    fn, make = COMPUTED[name]
    args = make(dtype)
    compiled = _compiled(fn, *args)
    assert len(compiled.kernels) <= 5
    torch.testing.assert_close(compiled(*args), fn(*args))


def test_integer_accumulation_with_duplicates_is_exact() -> None:
    fn: Fn = lambda x, i, v: x.index_put((i,), v, accumulate=True)  # noqa: E731
    x, i, v = torch.randint(-9, 9, (4, 3)), _ints(1, 1, 3, 1, -4), torch.randint(-9, 9, (5, 3))
    torch.testing.assert_close(_compiled(fn, x, i, v)(x, i, v), fn(x, i, v), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["scatter_duplicates", "index_put_negative_duplicates"])
def test_out_of_range_index_raises_index_error(name: str) -> None:
    """The compiled program raises like eager for an index outside the dim (never touching
    memory outside the tensor), and runs on after it."""
    fn, make = COMPUTED[name]
    args = make(torch.float32)
    compiled = _compiled(fn, *args)
    bad = args[1].clone()
    bad.view(-1)[0] = 99
    with pytest.raises(IndexError):
        compiled(args[0], bad, args[2])
    torch.testing.assert_close(compiled(*args), fn(*args))


@pytest.mark.parametrize("name", ["scatter_duplicates", "scatter_add", "index_put_accumulate"])
def test_cuda_computed_scatter_kernels_assemble_and_trap(name: str, tmp_path: Path) -> None:
    fn, make = COMPUTED[name]
    ptxs = ptx_of(fn, make(torch.float32), tmp_path)
    assert any("trap;" in ptx for ptx in ptxs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(COMPUTED))
def test_computed_scatter_matches_eager_on_cuda(name: str, dtype: torch.dtype) -> None:
    """Against eager's CPU result: CUDA eager leaves the winner among duplicate indices
    unspecified, and adds them in no fixed order."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fn, make = COMPUTED[name]
    args = make(dtype)
    cuda_args = tuple(a.cuda() for a in args)
    got = _compiled(fn, *cuda_args, device="cuda")(*cuda_args)
    torch.testing.assert_close(got.cpu(), fn(*args))
