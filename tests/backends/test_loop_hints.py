"""Loop metadata for the CPU's LLVM pipeline (`xfuse.backends.loop_hints`): which short row
loops are vectorized at full width with a masked tail, and that their kernels compute eager's
values."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import xfuse
from xfuse.backends.cpu import CPUBackend
from xfuse.backends.loop_hints import PREDICATE, WIDTH
from xfuse.ir.context import parse


def _llvm_ir(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> str:
    program = xfuse.compile(fn, (x,), quiet=True)
    torch.testing.assert_close(program(x), fn(x))
    (kernel,) = program.default.program.kernels
    return CPUBackend().llvm_ir(parse(kernel.loop_ir), "xfuse_kernel")


def _padded_silu(x: torch.Tensor) -> torch.Tensor:
    return F.pad(F.silu(x), (0, 1, 0, 1))


@pytest.mark.parametrize("width", [28, 14, 9])
def test_a_padded_row_no_multiple_of_a_vector_is_vectorized_at_full_width(width: int) -> None:
    """A padded output's row of 28 (EfficientNet's SiLU before a stride-2 depthwise
    convolution): LLVM alone picks the widest vector dividing the trip (4 lanes)."""
    ir = _llvm_ir(_padded_silu, torch.randn(1, 8, width, width))
    assert f'!"{WIDTH}", i32 16' in ir and f'!"{PREDICATE}", i1 1' in ir


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        pytest.param(_padded_silu, (1, 8, 32, 32), id="whole-vectors"),
        pytest.param(_padded_silu, (1, 2, 4, 300), id="long-row"),
        pytest.param(lambda x: x.sum(-1), (64, 28), id="a-sum"),
    ],
)
def test_other_loops_keep_llvms_choice(
    fn: Callable[[torch.Tensor], torch.Tensor], shape: tuple[int, ...]
) -> None:
    """Rows of whole vectors, rows past `SHORT_ROW` and sums (whose lanes LLVM chooses, as
    eager's are summed) get no width."""
    assert WIDTH not in _llvm_ir(fn, torch.randn(shape))
