"""cumsum, cumprod, logcumsumexp, cummax and cummin compiled end to end
(xfuse.compile, strict: no eager part) against eager on the CPU, their CUDA kernels assembled
by ptxas, and on a GPU against eager."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import xfuse
from tests.backends.test_cuda import ptx_of
from xfuse.testing.fuzz.compare import compare_outputs, flat_tensors

Fn = Callable[[torch.Tensor], Any]
NAN, INF = float("nan"), float("inf")

CASES: dict[str, Fn] = {
    "cumsum": lambda x: torch.cumsum(x, 1),
    "cumsum_dim0": lambda x: torch.cumsum(x, 0),
    "cumsum_negative_dim": lambda x: torch.cumsum(x, -1),
    "cumsum_in_a_program": lambda x: torch.cumsum(torch.relu(x) * 2, 1) - x,
    "cumprod": lambda x: torch.cumprod(x, 1),
    "logcumsumexp": lambda x: torch.logcumsumexp(x, 1),
    "cummax": lambda x: torch.cummax(x, 1),
    "cummin_dim0": lambda x: torch.cummin(x, 0),
    "cummax_indices": lambda x: torch.cummax(x, -1).indices,
}
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.bool)


def compiled(fn: Fn, x: torch.Tensor, device: str = "cpu") -> Any:
    program = xfuse.compile(fn, (x,), device, quiet=True, fallback="error")
    calls = [op for op in program.default.program.module.walk() if op.name == "graph.torch_call"]
    assert not calls, [str(op) for op in calls]
    return program(x)


def sample(shape: tuple[int, ...], dtype: torch.dtype, device: str = "cpu") -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return (torch.rand(shape, generator=gen) > 0.5).to(device)
    if not dtype.is_floating_point:
        return torch.randint(-3, 4, shape, generator=gen).to(device, dtype)
    return torch.randn(shape, generator=gen).to(device, dtype)


def supported(name: str, dtype: torch.dtype) -> bool:
    """Eager has no integer logcumsumexp."""
    return not (name == "logcumsumexp" and not dtype.is_floating_point)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_on_cpu(name: str, dtype: torch.dtype) -> None:
    if not supported(name, dtype):
        pytest.skip("eager raises")
    fn, x = CASES[name], sample((5, 37), dtype)
    if "in_a_program" in name and dtype == torch.bool:
        pytest.skip("relu of bool")
    torch.testing.assert_close(compiled(fn, x), fn(x), equal_nan=True)


@pytest.mark.parametrize("name", list(CASES))
def test_non_contiguous_inputs(name: str) -> None:
    fn = CASES[name]
    for x in (sample((37, 5), torch.float32).t(), sample((5, 74), torch.float32)[:, ::2]):
        torch.testing.assert_close(compiled(fn, x), fn(x), equal_nan=True)


@pytest.mark.parametrize("shape", [(1, 7), (5, 1), (0, 4), (4, 0), (1, 1), (3, 1, 6)], ids=str)
@pytest.mark.parametrize("name", ["cumsum", "cumsum_dim0", "cummax", "logcumsumexp"])
def test_size_one_and_empty_dims(name: str, shape: tuple[int, ...]) -> None:
    fn, x = CASES[name], sample(shape, torch.float32)
    torch.testing.assert_close(compiled(fn, x), fn(x), equal_nan=True)


@pytest.mark.parametrize(
    ("fn", "count"),
    [
        (CASES["cumsum_in_a_program"], 1),  # relu, mul -> cumsum -> sub: one kernel
        (lambda x: torch.cummax(torch.sin(x), 1), 2),  # one scan per kernel, sin recomputed
        (lambda x: torch.cumsum(x, 1).flip(1), 2),  # a flip reads the scan reversed
        (lambda x: torch.softmax(torch.cumsum(x, 1), 1), 2),  # a reduction of its own
    ],
)
def test_kernels(fn: Fn, count: int) -> None:
    x = sample((6, 9), torch.float32)
    program = xfuse.compile(fn, (x,), "cpu", quiet=True, fallback="error")
    assert len(program.kernels) == count
    torch.testing.assert_close(program(x), fn(x))


def test_a_0d_input() -> None:
    x = torch.tensor(2.5)
    for fn in (CASES["cumsum_negative_dim"], lambda a: torch.cummax(a, 0)):
        torch.testing.assert_close(compiled(fn, x), fn(x))


EDGES = torch.tensor(
    [
        [1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0, -0.0],
        [-INF, -INF, 0.0, INF, INF, -INF, NAN, 1.0],
        [0.0, -0.0, 0.0, -0.0, 2.0, 2.0, 1.0, 2.0],
        [INF, -INF, 3.0, -INF, INF, INF, -1.0, 0.5],
    ]
)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["cummax", "cummin_dim0", "logcumsumexp", "cumsum", "cumprod"])
def test_nan_inf_and_ties_as_eager(name: str, dtype: torch.dtype) -> None:
    """cummax / cummin: ties and NaNs take the later index, NaN sticks; logcumsumexp: -inf
    stays -inf, the same infinity twice stays it, NaN propagates."""
    fn, x = CASES[name], EDGES.to(dtype)
    torch.testing.assert_close(compiled(fn, x), fn(x), equal_nan=True)


def test_integer_ties_take_the_later_index() -> None:
    x = torch.tensor([[3, 1, 1, 2, 1, 5, 5]])
    for fn in (CASES["cummax"], lambda a: torch.cummin(a, 1)):
        torch.testing.assert_close(compiled(fn, x), fn(x))


def test_dtype_argument_and_integer_promotion() -> None:
    x = sample((4, 9), torch.float32)
    fn: Fn = lambda a: torch.cumsum(a, 1, dtype=torch.float64)  # noqa: E731
    torch.testing.assert_close(compiled(fn, x), fn(x))
    i = sample((4, 9), torch.int64).to(torch.int32)
    for fn in (lambda a: torch.cumsum(a, 1), lambda a: torch.cumprod(a, 0)):
        out = compiled(fn, i)
        assert out.dtype == torch.int64
        torch.testing.assert_close(out, fn(i))


def test_f16_accumulates_in_f32_as_eager() -> None:
    x = torch.cat([torch.tensor([2048.0]), torch.ones(63)]).half().reshape(1, 64)
    fn = CASES["cumsum"]
    torch.testing.assert_close(compiled(fn, x), fn(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", ["cumsum", "cumsum_dim0", "cumprod"])
def test_f32_accumulates_in_f64_as_eager(name: str) -> None:
    """Eager's CPU cumsum and cumprod carry an f32 value in f64 and round each output once:
    so does xfuse, to the bit (seed 140, program 11: a 64-step f32 chain, 22 ulps off once
    summed)."""
    x = sample((6, 200), torch.float32)
    x = x.abs() * 0.01 + 1.0 if name == "cumprod" else x
    fn = CASES[name]
    torch.testing.assert_close(compiled(fn, x), fn(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", list(CASES))
def test_cuda_kernels_assemble(name: str, tmp_path: Path) -> None:
    ptxs = ptx_of(CASES[name], (sample((64, 40), torch.float32),), tmp_path)
    assert all("ld.global" in ptx for ptx in ptxs)
    assert not any("shfl" in ptx for ptx in ptxs)  # a scan is no row reduction


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64], ids=str)
@pytest.mark.parametrize("name", ["cumsum", "logcumsumexp", "cummax", "cumprod"])
def test_cuda_kernels_of_other_dtypes_assemble(
    name: str, dtype: torch.dtype, tmp_path: Path
) -> None:
    ptxs = ptx_of(CASES[name], (sample((8, 40), dtype),), tmp_path)
    assert dtype != torch.float64 or all(".f64" in ptx for ptx in ptxs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CASES))
def test_matches_eager_on_cuda(name: str, dtype: torch.dtype) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if not supported(name, dtype) or ("in_a_program" in name and dtype == torch.bool):
        pytest.skip("eager raises")
    fn = CASES[name]
    for x in (sample((5, 300), dtype, "cuda"), sample((300, 5), dtype, "cuda").t()):
        got, want = compiled(fn, x, "cuda"), fn(x)
        if dtype in (torch.float16, torch.bfloat16):
            # CUDA eager scans f16/bf16 in its own order (a parallel scan over the row, in
            # the element type), xfuse in f32 along the row: judged against the f64 result,
            # no further from it than eager (the README's rule for reassociated reductions).
            reference = flat_tensors(fn(x.double()))
            assert compare_outputs(flat_tensors(got), flat_tensors(want), reference) is None
        else:
            torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cummax", "cummin_dim0", "logcumsumexp"])
def test_nan_inf_and_ties_on_cuda(name: str) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    fn, x = CASES[name], EDGES.cuda()
    torch.testing.assert_close(compiled(fn, x, "cuda"), fn(x), equal_nan=True)
