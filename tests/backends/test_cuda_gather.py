"""`graph.gather` on CUDA: PTX that ptxas accepts, the row and elementwise strategies kept
with the kernel's error report, and (on a GPU) results equal to eager. On CUDA an index out
of range stops the kernel (`trap`), as eager's device-side assert does (docs/gpu.md); it is
clamped first, so nothing is ever read outside the table."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


def test_a_bad_index_traps_on_cuda(tmp_path: Path) -> None:
    ptxs = ptx_of(
        lambda x, i: F.embedding(i, x) * 2, (torch.randn(8, 64), torch.tensor([1])), tmp_path
    )
    assert any("trap;" in p for p in ptxs)


def test_gather_bf16_and_two_index_tensors(tmp_path: Path) -> None:
    x = torch.randn(5, 6, 7).to(torch.bfloat16)
    i, j = torch.tensor([[1], [-2]]), torch.tensor([0, 5, -6])
    ptx_of(lambda x, i, j: x[i, :, j] + 1, (x, i, j), tmp_path)
    ptx_of(
        lambda x, i: torch.gather(x, 1, i),
        (torch.randn(6, 40), torch.randint(0, 40, (6, 9))),
        tmp_path,
    )


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_embedding_layer_norm(dtype: torch.dtype) -> None:
    ids = torch.randint(0, 50, (4, 8))
    run_on_gpu(
        _embed_norm,
        (ids, torch.randn(50, 64).to(dtype), torch.randn(16, 64).to(dtype)),
        reduction=True,
    )


@gpu
def test_gpu_gather_and_index() -> None:
    run_on_gpu(
        lambda x, i: torch.gather(x, 1, i) * 2, (torch.randn(6, 40), torch.randint(0, 40, (6, 9)))
    )
    run_on_gpu(lambda x, j: x[:, j] - 1, (torch.randn(8, 64), torch.tensor([1, -1, 3, 3])))


BAD_INDEX = textwrap.dedent(
    """
    import torch, torch.nn.functional as F
    import xfuse.api
    x = torch.randn(8, 64, device="cuda")
    good, bad = torch.tensor([1, 2], device="cuda"), torch.tensor([1, 10**9], device="cuda")
    program = xfuse.api.compile(lambda x, i: F.embedding(i, x) * 2, (x, good), device="cuda:0")
    torch.testing.assert_close(program(x, good), F.embedding(good, x) * 2)
    print("good ok", flush=True)
    program(x, bad)
    torch.cuda.synchronize()
    print("bad returned", flush=True)
    """
)


@gpu
def test_gpu_bad_index_stops_like_eager() -> None:
    """A bad index on CUDA ends in a CUDA error at the next synchronisation, as eager's
    device-side assert does (in a child process: the error leaves the context unusable)."""
    run = subprocess.run(
        [sys.executable, "-c", BAD_INDEX], capture_output=True, text=True, timeout=300
    )
    assert "good ok" in run.stdout, run.stderr[-2000:]
    assert "bad returned" not in run.stdout
    assert "CUDA error" in run.stderr or "CUDA" in run.stderr, run.stderr[-2000:]
