"""Padding and pooling compiled end to end (xfuse.compile, strict: no eager part) against
eager on the CPU, and their CUDA kernels assembled by ptxas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import func

import xfuse
from tests.backends.test_cuda import ptx_of
from xfuse.backends.cpu import CPUBackend
from xfuse.dialects import graph
from xfuse.frontend.export import import_for_xfuse
from xfuse.ir.names import KERNEL_ATTR
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime.compiler import lower_to_loops
from xfuse.runtime.driver import run_pipeline

Fn = Callable[[torch.Tensor], torch.Tensor]

CASES: dict[str, tuple[Fn, tuple[int, ...]]] = {
    "pad_constant": (lambda x: F.pad(x, (1, 2, -1, 1), value=1.5), (2, 3, 5, 6)),
    "pad_after_relu": (lambda x: F.pad(torch.relu(x) * 2, (1, 1, 1, 1)), (2, 3, 5, 6)),
    "pad_every_dim": (lambda x: F.pad(x, (1, 0, 2, 1, 0, 3, 1, 1)), (2, 3, 5, 6)),
    "pad_crop": (lambda x: F.pad(x, (-1, -2)), (2, 3, 5, 6)),
    "pad_reflect": (lambda x: F.pad(x, (1, 2, 4, 1), mode="reflect"), (2, 3, 5, 6)),
    "pad_replicate": (lambda x: F.pad(x, (1, 2, 2, 1, 3, 3), mode="replicate"), (2, 3, 5, 6, 4)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), (2, 3, 9, 9)),
    "max_pool2d_relu_after": (lambda x: torch.relu(F.max_pool2d(x, 3, 2, 1)) + 1, (2, 3, 9, 9)),
    "max_pool2d_ceil": (lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 10, 10)),
    "max_pool2d_dilation": (lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2), (2, 3, 10, 10)),
    "max_pool2d_stride_over_kernel": (lambda x: F.max_pool2d(x, 2, 3), (2, 3, 10, 10)),
    "max_pool2d_1x1": (lambda x: F.max_pool2d(x, 1, 2), (2, 3, 7, 7)),
    "max_pool1d": (lambda x: F.max_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "max_pool3d": (lambda x: F.max_pool3d(x, 3, 2, 1), (1, 2, 7, 7, 7)),
    "max_pool2d_large_window": (lambda x: F.max_pool2d(x, 7, 3, 3, ceil_mode=True), (2, 3, 20, 20)),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), (2, 3, 9, 9)),
    "avg_pool2d_exclude_pad": (
        lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
        (2, 3, 10, 10),
    ),
    "avg_pool2d_ceil": (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (2, 3, 10, 10)),
    "avg_pool2d_divisor": (lambda x: F.avg_pool2d(x, 3, 2, 1, divisor_override=5), (2, 3, 9, 9)),
    "avg_pool1d": (lambda x: F.avg_pool1d(x, 3, 2, 1), (2, 3, 9)),
    "avg_pool2d_large_window": (lambda x: F.avg_pool2d(x, 8, 4, 4, ceil_mode=True), (2, 3, 21, 21)),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 3)), (2, 3, 9, 9)),
    "adaptive_avg_pool_global": (lambda x: F.adaptive_avg_pool2d(x, 1), (2, 3, 9, 9)),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, 3), (2, 3, 9, 9)),
    "adaptive_avg_pool2d_uneven": (lambda x: F.adaptive_avg_pool2d(x, (5, 7)), (1, 8, 8, 8)),
    "adaptive_avg_pool1d_uneven": (lambda x: F.adaptive_avg_pool1d(x, 5), (2, 3, 8)),
    "adaptive_avg_pool_uneven_large": (lambda x: F.adaptive_avg_pool2d(x, (3, 2)), (1, 2, 40, 13)),
    "adaptive_max_pool2d_uneven": (lambda x: F.adaptive_max_pool2d(x, (2, 3)), (1, 4, 4, 4)),
}


def _compiled(fn: Fn, x: torch.Tensor) -> torch.Tensor:
    compiled = xfuse.compile(fn, (x,), "cpu", quiet=True, fallback="error")
    calls = [  # a channels-last input's NHWC view (`channels-last`) is torch's: a view
        op
        for op in compiled.default.program.module.walk()
        if isinstance(op, graph.TorchCallOp) and op.target.data != "aten.permute.default"
    ]
    assert not calls, [str(op) for op in calls]
    return compiled(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_on_cpu(name: str, dtype: torch.dtype) -> None:
    fn, shape = CASES[name]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dtype)
    if "max" in name:
        x.view(-1)[::7] = float("nan")  # NaN propagates, as eager's
    torch.testing.assert_close(_compiled(fn, x), fn(x), equal_nan=True)


@pytest.mark.parametrize("name", ["pad_constant", "max_pool2d", "avg_pool2d_exclude_pad"])
def test_channels_last_input(name: str) -> None:
    fn, shape = CASES[name]
    x = torch.randn(shape).to(memory_format=torch.channels_last)
    torch.testing.assert_close(_compiled(fn, x), fn(x), equal_nan=True)


def test_integer_max_pool_and_pad() -> None:
    x = torch.randint(-50, 50, (2, 3, 9, 9))
    fn: Fn = lambda x: F.pad(F.max_pool2d(x, 3, 2, 1), (1, 1), value=-3)  # noqa: E731
    torch.testing.assert_close(_compiled(fn, x), fn(x))


def test_a_window_of_minus_infinity_stays_minus_infinity() -> None:
    x = torch.full((1, 1, 4, 4), float("-inf"))
    fn: Fn = lambda x: F.max_pool2d(x, 2, 2, 1)  # noqa: E731
    torch.testing.assert_close(_compiled(fn, x), fn(x))


def test_a_padded_stride_2_window_loads_vectors_not_gathers() -> None:
    """ResNet's max pool: the vectorizer loads each window row's strided elements as masked
    vectors and shuffles them apart (`MASKED_INTERLEAVED`), rather than gathering them one by
    one (it gathered without the option, at 2.1x the kernel's time)."""
    fn, x = (lambda x: F.max_pool2d(x, 3, 2, 1)), torch.randn(1, 16, 32, 32)
    module = import_for_xfuse(fn, (x,)).program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    lower_to_loops(module, "cpu")
    (name,) = [
        op.sym_name.data
        for op in module.ops
        if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    optimized = str(CPUBackend().optimized(module, name))
    assert "llvm.masked.gather" not in optimized
    torch.testing.assert_close(_compiled(fn, x), fn(x))


INDICES: dict[str, tuple[Callable[..., tuple[torch.Tensor, torch.Tensor]], tuple[int, ...]]] = {
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), (2, 3, 9, 9)),
    "max_pool1d_ceil": (
        lambda x: F.max_pool1d(x, 3, 2, 0, ceil_mode=True, return_indices=True),
        (1, 2, 3),
    ),
    "max_pool3d_dilation": (
        lambda x: F.max_pool3d(x, 3, 2, 1, dilation=2, return_indices=True),
        (1, 2, 7, 7, 7),
    ),
    "max_pool2d_large_window": (
        lambda x: F.max_pool2d(x, 7, 3, 3, return_indices=True),
        (1, 2, 20, 20),
    ),
    "adaptive_max_pool2d": (
        lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True),
        (1, 2, 9, 6),
    ),
    "adaptive_max_pool2d_uneven_large": (
        lambda x: F.adaptive_max_pool2d(x, (3, 2), return_indices=True),
        (1, 2, 40, 13),
    ),
    "adaptive_max_pool3d_uneven": (
        lambda x: F.adaptive_max_pool3d(x, (2, 3, 2), return_indices=True),
        (1, 2, 4, 4, 5),
    ),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("name", list(INDICES))
def test_max_pool_indices_match_eager(name: str, dtype: torch.dtype) -> None:
    """The first maximum's position, or the last NaN's, in one kernel with the values."""
    fn, shape = INDICES[name]
    if dtype == torch.int64 and name.startswith("adaptive"):
        pytest.skip("eager has no integer adaptive_max_pool2d")
    gen = torch.Generator().manual_seed(0)
    if dtype == torch.int64:
        x = torch.randint(-3, 3, shape, generator=gen)  # ties: the first one wins
    else:
        x = torch.randn(shape, generator=gen).to(dtype)
        x.view(-1)[::5] = float("nan")
        x.view(-1)[1::9] = float("-inf")
    compiled = xfuse.compile(fn, (x,), "cpu", quiet=True, fallback="error")
    assert len(compiled.kernels) == 1
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


def test_cuda_max_pool_indices_assemble(tmp_path: Path) -> None:
    fn, shape = INDICES["max_pool2d"]
    (ptx,) = ptx_of(fn, (torch.randn(shape),), tmp_path)
    assert ".u64" in ptx or ".b64" in ptx


@pytest.mark.parametrize(
    "name",
    [
        "pad_after_relu",
        "pad_reflect",
        "max_pool2d",
        "avg_pool2d_exclude_pad",
        "max_pool2d_large_window",
    ],
)
def test_cuda_kernels_assemble(name: str, tmp_path: Path) -> None:
    fn, shape = CASES[name]
    ptxs = ptx_of(fn, (torch.randn(shape),), tmp_path)
    assert all("ld.global" in ptx for ptx in ptxs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_on_cuda(name: str, dtype: torch.dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fn, shape = CASES[name]
    x = torch.randn(shape, device="cuda").to(dtype)
    if "max" in name:
        x.view(-1)[::7] = float("nan")
    compiled = xfuse.compile(fn, (x,), "cuda", quiet=True, fallback="error")
    torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: F.adaptive_avg_pool1d(x, 5), (0, 8, 8)),
        (lambda x: F.max_pool2d(x, 2), (0, 3, 4, 4)),
        (lambda x: F.pad(x, (1, 1)), (0, 3)),
        (lambda x: F.pad(x, (1, 1), value=2.0), (3, 0)),  # all padding: a constant
    ],
)
def test_empty_tensors(fn: Fn, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    torch.testing.assert_close(_compiled(fn, x), fn(x))
