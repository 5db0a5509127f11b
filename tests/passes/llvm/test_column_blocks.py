"""Column reductions in blocks of columns (`xfuse.passes.llvm.column_blocks`, cpu): which kernels
are blocked, that a blocked kernel matches eager, and that a long column sum adds its rows in
runs (no less accurate than eager's cascade sum)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from xdsl.dialects import scf

import xfuse
from xfuse.ir.context import parse
from xfuse.passes.llvm.column_blocks import BLOCK, ROW_BLOCK, block_column_reductions
from xfuse.runtime.cache import KernelCache
from xfuse.testing.fuzz.compare import compare_outputs, rmse

Program = Callable[..., torch.Tensor]


def _layer_norm_channels_first(x: torch.Tensor) -> torch.Tensor:
    mean = x.mean(1, keepdim=True)
    var = (x - mean).pow(2).mean(1, keepdim=True)
    return (x - mean) / torch.sqrt(var + 1e-6)


CASES: dict[str, tuple[Program, tuple[int, ...], torch.dtype]] = {
    "column sum": (lambda x: x.sum(0), (64, 768), torch.float32),
    "column mean, columns not a multiple of the block": (
        lambda x: x.mean(0),
        (49, 100),
        torch.float32,
    ),
    "fewer columns than a block": (lambda x: x.sum(0), (33, 24), torch.float32),
    "pixel mean in NHWC": (lambda x: x.mean((1, 2)), (2, 7, 7, 130), torch.float32),
    "column max and argmax": (lambda x: x.max(0).values + x.argmax(0), (40, 96), torch.float32),
    "layer norm over channels first": (_layer_norm_channels_first, (2, 96, 200), torch.float32),
    "bf16 column sum": (lambda x: x.sum(0), (50, 300), torch.bfloat16),
    "sum of squares after a scale": (
        lambda x: (x * 0.5).pow(2).sum(0) / 3.0,
        (70, 129),
        torch.float32,
    ),
}


def _blocked_loops(program: xfuse.CompiledProgram) -> int:
    count = 0
    for kernel in program.default.program.kernels:
        module = parse(kernel.loop_ir)
        for parallel in [o for o in module.walk() if isinstance(o, scf.ParallelOp)]:
            count += block_column_reductions(parallel)
    return count


@pytest.mark.parametrize("name", list(CASES))
def test_a_blocked_kernel_matches_eager(name: str, tmp_path: Path) -> None:
    """Blocked, and within eager's tolerance (sums: no further from an f64 run than twice
    eager's error)."""
    fn, shape, dtype = CASES[name]
    x = torch.randn(shape, dtype=dtype)
    blocked = xfuse.compile(fn, (x,), quiet=True, cache=KernelCache(tmp_path / "blocked"))
    assert _blocked_loops(blocked) >= 1
    reference = [fn(x.double())]
    assert compare_outputs([blocked(x)], [fn(x)], reference) is None


def test_a_map_written_beside_its_column_mean_is_blocked() -> None:
    """A residual block's end in NHWC (ConvNeXt's last stage): the map and its pooled mean, one
    kernel whose row loop stores each element of the map as it sums the element's column."""

    def block_end(x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = r + 0.5 * (x + 1.0)
        return y, y.mean((1, 2))

    x, r = torch.randn(1, 7, 7, 200), torch.randn(1, 7, 7, 200)
    program = xfuse.compile(block_end, (x, r), quiet=True)
    assert len(program.default.program.kernels) == 1
    assert _blocked_loops(program) == 1
    got, want = program(x, r), block_end(x, r)
    reference = block_end(x.double(), r.double())
    assert compare_outputs(list(got), list(want), list(reference)) is None


@pytest.mark.parametrize(
    ("fn", "shape"),
    [
        (lambda x: x.sum(1), (768, 64)),  # a row reduction: unit stride along its rows already
        (lambda x: torch.relu(x) * 2.0, (64, 768)),  # no reduction
        (lambda x: x.sum(0), (49, 4)),  # too few columns
    ],
)
def test_rows_elementwise_kernels_and_narrow_columns_are_left_alone(
    fn: Program, shape: tuple[int, ...]
) -> None:
    x = torch.randn(shape)
    program = xfuse.compile(fn, (x,), quiet=True)
    assert _blocked_loops(program) == 0
    torch.testing.assert_close(program(x), fn(x))


def test_the_block_is_a_whole_number_of_wide_vectors() -> None:
    assert BLOCK % 16 == 0


def _centered_exp(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean(0)).exp()


def test_a_kernel_with_symbolic_rows_is_blocked_and_matches_eager() -> None:
    """Columns of a static count over rows of a runtime count (a size argument): blocked as a
    static kernel's (a block of columns an `alloca` of `BLOCK`), at every number of rows."""
    from torch.export import Dim

    from xfuse.backends.cpu import CPUBackend
    from xfuse.frontend import import_module
    from xfuse.runtime.symbolic import SymbolicProgram

    program = import_module(
        _centered_exp, (torch.randn(9, 100),), dynamic_shapes={"x": {0: Dim("rows", min=2)}}
    )
    compiled = SymbolicProgram(program.module)
    (name,) = compiled.kernels
    assert f"alloca float, i64 {BLOCK}" in CPUBackend().llvm_ir(compiled.module, name)
    for rows in (2, 3, 17, 65, 300):
        x = torch.randn(rows, 100)
        (got,) = compiled(x)
        torch.testing.assert_close(got, _centered_exp(x))


def _near_one(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return 1.0 + 0.01 * torch.randn(shape, generator=generator)


def _near_a_tenth(shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    return 0.1 + 0.01 * torch.rand(shape, generator=generator)


@pytest.mark.parametrize(("shape", "values"), [((64, 16), _near_a_tenth), ((4096, 16), _near_one)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_long_column_sum_is_no_less_accurate_than_eager(
    shape: tuple[int, ...],
    values: Callable[[tuple[int, ...], torch.Generator], torch.Tensor],
    seed: int,
) -> None:
    """Rows of values of one sign added one by one gather their rounding errors (2.3-3x
    eager's error against an f64 sum, at 64 and 4096 rows); in runs of `ROW_BLOCK`, as torch's
    cascade sum adds them, they stay within twice eager's."""
    x = values(shape, torch.Generator().manual_seed(seed))
    program = xfuse.compile(lambda t: t.sum(0), (x,), quiet=True)
    assert _blocked_loops(program) >= 1
    reference = x.double().sum(0)
    assert rmse(program(x), reference) <= 2 * rmse(x.sum(0), reference)


def test_a_column_sum_over_runtime_rows_is_no_less_accurate_than_eager() -> None:
    """Rows of a runtime count are added in runs as well, at every count."""
    from torch.export import Dim

    from xfuse.frontend import import_module
    from xfuse.runtime.symbolic import SymbolicProgram

    def column_sum(x: torch.Tensor) -> torch.Tensor:
        return x.sum(0)

    program = import_module(
        column_sum, (torch.randn(9, 100),), dynamic_shapes={"x": {0: Dim("rows", min=2)}}
    )
    compiled = SymbolicProgram(program.module)
    generator = torch.Generator().manual_seed(0)
    for rows in (2, ROW_BLOCK, ROW_BLOCK + 1, 300, 5000):
        x = _near_one((rows, 100), generator)
        (got,) = compiled(x)
        reference = x.double().sum(0)
        assert rmse(got, reference) <= 2 * rmse(x.sum(0), reference), rows
