"""Transposes in blocks of the inner dimension (`xfuse.passes.llvm.transpose_blocks`, cpu): which
kernels are blocked, the block size, that the CPU backend runs the blocked loop (its split
dimension is the block index) and that a blocked kernel computes what eager does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from xdsl.dialects import func, scf

import xfuse
from xfuse.backends.cpu import CPUBackend
from xfuse.ir.constants import int_constant
from xfuse.ir.context import parse
from xfuse.passes.llvm.lower_to_llvm import MIN_SPLIT_EXTENT
from xfuse.passes.llvm.transpose_blocks import block_size, block_transposed_loops
from xfuse.runtime.cache import KernelCache

Program = Callable[..., torch.Tensor]


def _residual(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """ConvNeXt's residual: an NCHW input plus a scaled NHWC branch permuted back."""
    return x + (0.5 * (y + 1.0)).permute(0, 3, 1, 2)


def _transpose(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x + y.t()) * 2.0


CASES: dict[str, tuple[Program, tuple[int, ...], tuple[int, ...]]] = {
    "NHWC branch added to NCHW": (_residual, (1, 32, 16, 16), (1, 16, 16, 32)),
    "matrix plus a transposed one": (_transpose, (48, 160), (160, 48)),
}


def _loop_irs(program: xfuse.CompiledProgram) -> list[str]:
    return [k.loop_ir for k in program.default.program.kernels]


def _blocked_loops(loop_ir: str) -> int:
    module = parse(loop_ir)
    parallels = [o for o in module.walk() if isinstance(o, scf.ParallelOp)]
    return sum(block_transposed_loops(parallel) for parallel in parallels)


@pytest.mark.parametrize("name", list(CASES))
def test_a_transposed_kernel_is_blocked_and_matches_eager(name: str, tmp_path: Path) -> None:
    """Blocked, the loaded kernel's split range the blocks (and the outer dimension within
    each, `MIN_SPLIT_EXTENT`), and bit for bit eager's values
    (each element is computed by the same ops as before, in another order)."""
    fn, x_shape, y_shape = CASES[name]
    x, y = torch.randn(x_shape), torch.randn(y_shape)
    program = xfuse.compile(fn, (x, y), quiet=True, cache=KernelCache(tmp_path))
    (loop_ir,) = _loop_irs(program)
    assert _blocked_loops(loop_ir) == 1
    module = parse(loop_ir)
    (kernel,) = [o.sym_name.data for o in module.walk() if isinstance(o, func.FuncOp)]
    (parallel,) = [o for o in module.walk() if isinstance(o, scf.ParallelOp)]
    outer, inner = (int_constant(bound) for bound in parallel.upperBound)
    assert outer is not None and inner is not None
    block = block_size(outer, inner)
    assert block is not None
    backend = CPUBackend()
    blocks = inner // block  # outermost, with the outer dimension under it when few
    split = blocks if blocks >= MIN_SPLIT_EXTENT else blocks * outer
    assert backend.load(backend.compile(module, kernel), kernel).extent == split
    assert torch.equal(program(x, y), fn(x, y))


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        (lambda x, y: x + y * 2.0, ((64, 256), (64, 256))),  # no transposed operand
        (_residual, ((1, 96, 7, 7), (1, 7, 7, 96))),  # 49 positions: no block of 16 or more
        (lambda x, y: (x + y.t()).sum(1), ((64, 256), (256, 64))),  # a reduction
    ],
)
def test_contiguous_short_and_reducing_kernels_are_left_alone(
    fn: Program, shapes: tuple[tuple[int, ...], ...]
) -> None:
    x, y = (torch.randn(s) for s in shapes)
    program = xfuse.compile(fn, (x, y), quiet=True)
    assert sum(_blocked_loops(loop_ir) for loop_ir in _loop_irs(program)) == 0
    torch.testing.assert_close(program(x, y), fn(x, y))


@pytest.mark.parametrize(
    ("outer", "inner", "expected"),
    [
        (96, 3136, 112),  # ConvNeXt-T's first stage: 112 positions of 96 channels per block
        (192, 784, 56),
        (384, 196, 28),
        (768, 49, None),  # no divisor of 49 between 16 and 49 / 4
        (8, 64, 16),  # at least four blocks
        (4, 97, None),  # a prime extent
    ],
)
def test_the_block_divides_the_inner_extent_within_the_tile(
    outer: int, inner: int, expected: int | None
) -> None:
    assert block_size(outer, inner) == expected
