"""`graph.gather` on CUDA: PTX that ptxas accepts, the row and elementwise strategies kept
with the kernel's error report, and (on a GPU) results equal to eager. On CUDA the runtime
does not read the error flag (docs/gpu.md): an index out of range is clamped, never read
outside the table."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.backends.test_cuda import gpu, ptx_of, run_on_gpu
from xfuse.backends.cuda import LaunchShape


def _embed_norm(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(F.embedding(ids, wte) + wpe[: ids.shape[-1]], wte.shape[-1:])


def test_embedding_layer_norm_maps_to_rows(tmp_path: Path) -> None:
    ids = torch.randint(0, 50, (4, 8))
    ptxs = ptx_of(_embed_norm, (ids, torch.randn(50, 64), torch.randn(16, 64)), tmp_path)
    strategies = [LaunchShape.from_ptx(p).strategy for p in ptxs]
    assert "rows" in strategies, strategies


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=str)
def test_gathered_columns_map_elementwise(index_dtype: torch.dtype, tmp_path: Path) -> None:
    j = torch.tensor([1, -1, 3], dtype=index_dtype)
    ptxs = ptx_of(lambda x, j: x[:, j] * 2, (torch.randn(8, 64), j), tmp_path)
    shape = LaunchShape.from_ptx(ptxs[-1])
    assert shape.strategy == "elementwise"


def test_gather_bf16_and_two_index_tensors(tmp_path: Path) -> None:
    x = torch.randn(5, 6, 7).to(torch.bfloat16)
    i, j = torch.tensor([[1], [-2]]), torch.tensor([0, 5, -6])
    ptx_of(lambda x, i, j: x[i, :, j] + 1, (x, i, j), tmp_path)
    ptx_of(
        lambda x, i: torch.gather(x, 1, i),
        (torch.randn(6, 40), torch.randint(0, 40, (6, 9))),
        tmp_path,
    )


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_embedding_layer_norm(dtype: torch.dtype) -> None:
    ids = torch.randint(0, 50, (4, 8))
    run_on_gpu(
        _embed_norm,
        (ids, torch.randn(50, 64).to(dtype), torch.randn(16, 64).to(dtype)),
        reduction=True,
    )


@pytest.mark.gpu
@gpu
def test_gpu_gather_and_index() -> None:
    run_on_gpu(
        lambda x, i: torch.gather(x, 1, i) * 2, (torch.randn(6, 40), torch.randint(0, 40, (6, 9)))
    )
    run_on_gpu(lambda x, j: x[:, j] - 1, (torch.randn(8, 64), torch.tensor([1, -1, 3, 3])))


@pytest.mark.gpu
@gpu
def test_gpu_bad_index_is_clamped_not_read_outside() -> None:
    import xfuse.api

    x = torch.randn(8, 64, device="cuda")
    good, bad = torch.tensor([1, 2], device="cuda"), torch.tensor([1, 10**9], device="cuda")
    program = xfuse.api.compile(lambda x, i: F.embedding(i, x) * 2, (x, good), device="cuda:0")
    out = program(x, bad)
    torch.cuda.synchronize()
    torch.testing.assert_close(out[0], x[1] * 2)
    torch.testing.assert_close(out[1], x[0] * 2)  # clamped to row 0
