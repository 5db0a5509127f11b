"""CUDA kernels with symbolic sizes (docs/dynamic-shapes.md, "GPU"): the PTX takes the sizes as
i64 parameters after its buffers, ptxas accepts it, its launch computes the grid from the size
arguments per call, and (on a GPU) one loaded kernel matches torch at every size."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import Dim
from xdsl.dialects import func
from xdsl.dialects.builtin import ArrayAttr, ModuleOp, StringAttr

from tests.backends.test_cuda import ARCH, assemble, gpu, loop_ir
from tests.runtime.test_symbolic_program import POOLED
from xfuse.backends.cuda import CUDABackend, LaunchShape
from xfuse.dialects import graph
from xfuse.errors import CodegenError
from xfuse.frontend import import_module
from xfuse.ir.context import parse
from xfuse.ir.functions import kernel_functions
from xfuse.ir.names import SIZE_ARGS_ATTR, SIZES_ATTR
from xfuse.passes.lowering.gpu_map_parallel import MAX_GRID_STRIDE_THREADS
from xfuse.pipeline import pipeline
from xfuse.runtime.symbolic import DEFAULT_PASSES


class Softmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


class Pointwise(torch.nn.Module):
    def forward(self, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x + b) * 2


class Norm(torch.nn.Module):
    """A layer norm over a static row of 32, rows symbolic: the static row machinery (the row
    kept in registers) on a runtime number of rows."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(torch.relu(x), (32,))


class WideNorm(torch.nn.Module):
    """A layer norm over GPT-2's rows of 768, rows symbolic: each row at a linear offset of
    the runtime buffer (`row * 768 + j`), a multiple of a 128-bit vector's elements."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(torch.relu(x), (768,))


class ShiftedNorm(torch.nn.Module):
    """A layer norm over the last 768 of each row of 769: rows at offsets `row * 769 + 1 + j`,
    no multiple of a vector's elements."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(torch.relu(x[:, 1:]), (768,))


class ColumnMean(torch.nn.Module):
    """A mean over the symbolic batch: a column reduction to a runtime length."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=0) + 1


class Cumsum(torch.nn.Module):
    """A scan along the symbolic dim: the serial strategy over runtime extents."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x * 2, dim=1)


def rows_and_length() -> dict[str, Any]:
    return {"x": {0: Dim("rows", min=2, max=4096), 1: Dim("n", min=2, max=65536)}}


CASES: dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...], dict[str, Any]]] = {
    "softmax": (Softmax(), (torch.randn(4, 100),), rows_and_length()),
    "softmax_long": (Softmax(), (torch.randn(4, 8192),), rows_and_length()),
    "pointwise": (
        Pointwise(),
        (torch.randn(4, 6, 8), torch.randn(8)),
        {"x": {0: Dim("a", min=2), 1: Dim("b", min=2)}, "b": None},
    ),
    "layer_norm": (Norm(), (torch.randn(5, 32),), {"x": {0: Dim("batch", min=2)}}),
    "layer_norm_wide": (WideNorm(), (torch.randn(5, 768),), {"x": {0: Dim("batch", min=2)}}),
    "layer_norm_shifted": (
        ShiftedNorm(),
        (torch.randn(5, 769),),
        {"x": {0: Dim("batch", min=2)}},
    ),
    "column_mean": (ColumnMean(), (torch.randn(5, 16),), {"x": {0: Dim("batch", min=2)}}),
    "cumsum": (Cumsum(), (torch.randn(3, 7),), rows_and_length()),
}


def symbolic_loop_ir(case: str) -> tuple[ModuleOp, graph.SizesAttr, list[str]]:
    """The loop IR of a case's symbolic program (as `SymbolicProgram` builds it), its size
    table and its kernels' names."""
    model, inputs, dynamic = CASES[case]
    program = import_module(model.eval(), inputs, dynamic_shapes=dynamic)
    module = program.module.clone()
    pipeline(DEFAULT_PASSES).apply(module)
    table = next(op.attributes[SIZES_ATTR] for op in module.ops if isinstance(op, func.FuncOp))
    assert isinstance(table, graph.SizesAttr)
    pipeline("lower-to-loops")(module)
    return module, table, [k.sym_name.data for k in kernel_functions(module)]


def size_arguments(
    module: ModuleOp, name: str, table: graph.SizesAttr, x: torch.Tensor
) -> list[int]:
    """The kernel's size arguments for a call whose first input is `x`."""
    kernel = next(k for k in kernel_functions(module) if k.sym_name.data == name)
    args = kernel.attributes[SIZE_ARGS_ATTR]
    assert isinstance(args, ArrayAttr)
    sizes: list[int] = []
    for symbol in args.data:
        assert isinstance(symbol, StringAttr)
        source = table.by_name[symbol.data].source
        assert source is not None and source[0] == 0
        sizes.append(x.shape[source[1]])
    return sizes


@pytest.mark.parametrize("case", sorted(CASES))
def test_symbolic_kernels_take_their_sizes_and_assemble(case: str, tmp_path: Path) -> None:
    module, _, names = symbolic_loop_ir(case)
    assert len(names) == 1  # one kernel a case (what the GPU test launches)
    for name in names:
        ptx = CUDABackend(ARCH).compile(module, name).decode()
        shape = LaunchShape.from_ptx(ptx)
        assert shape.sizes >= 1 and shape.items == -1 and shape.items_sizes
        params = ptx.split(f".entry {name}(", 1)[1].split(")", 1)[0]
        trailing = [p.strip() for p in params.strip().split(",")][-shape.sizes :]
        assert all(p.startswith(".param .u64 ") and ".ptr" not in p for p in trailing)
        assemble(ptx, tmp_path)


@pytest.mark.parametrize(
    ("case", "strategy", "block", "sizes", "items"),
    [
        # a warp a row, 8 rows a block: ceil(rows / 8) blocks
        ("softmax", "rows", 256, [2, 3], 1),
        ("softmax", "rows", 256, [17, 5000], 3),
        # rows of about 8192 (the hint): a block of 128 threads a row, a block per row
        ("softmax_long", "rows", 128, [33, 3], 33),
        # a grid-stride loop over 8 * a * b f32 elements, 4 (128 bits) a thread and step
        ("pointwise", "elementwise", 256, [3, 5], 30),
        # a static row of 32 f32 at run-time rows: 8 chunks of 4, a thread each (the rows'
        # count unknown, a thread a chunk), 32 rows a block
        ("layer_norm", "rows", 256, [9], 1),
        ("layer_norm", "rows", 256, [33], 2),
        ("cumsum", "serial", 256, [4, 9], 4),
    ],
)
def test_the_launch_computes_its_work_from_the_sizes(
    case: str, strategy: str, block: int, sizes: list[int], items: int
) -> None:
    module, _, names = symbolic_loop_ir(case)
    shapes = [LaunchShape.from_ptx(CUDABackend(ARCH).compile(module, n).decode()) for n in names]
    (shape,) = [s for s in shapes if s.strategy == strategy]
    assert shape.block == block
    assert shape.work_items(sizes) == items


def _global_accesses(ptx: str) -> list[str]:
    return re.findall(r"(?:ld\.global\.nc|st\.global)\.\S+", ptx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_symbolic_rows_at_aligned_offsets_take_the_static_kernels_vectors(
    dtype: torch.dtype,
) -> None:
    """A layer norm over rows of 768 at runtime row counts reads and writes each row in
    128-bit accesses at its linear offset (`row * 768 + j`, a multiple of a vector's elements
    plus the loop index), as the static kernel of the same rows does: the same accesses."""
    model = WideNorm()
    x = torch.randn(5, 768).to(dtype)
    CASES["wide_norm_dtype"] = (model, (x,), {"x": {0: Dim("batch", min=2)}})
    try:
        module, _, (name,) = symbolic_loop_ir("wide_norm_dtype")
    finally:
        del CASES["wide_norm_dtype"]
    symbolic = _global_accesses(CUDABackend(ARCH).compile(module, name).decode())
    static_module, (static_name,) = loop_ir(model, (x,))
    static = _global_accesses(CUDABackend(ARCH).compile(static_module, static_name).decode())
    assert sorted(symbolic) == sorted(static)
    assert set(symbolic) == {"ld.global.nc.v4.b32", "st.global.v4.b32"}


def test_symbolic_rows_at_unaligned_offsets_keep_scalar_accesses() -> None:
    """Rows at `row * 769 + 1 + j`: no offset of a row is a multiple of a vector's elements,
    so the row's accesses stay one element each."""
    module, _, (name,) = symbolic_loop_ir("layer_norm_shifted")
    assert set(_global_accesses(CUDABackend(ARCH).compile(module, name).decode())) == {
        "ld.global.nc.b32",
        "st.global.b32",
    }


def test_the_launch_line_writes_work_items_in_the_size_syntax_of_graph_sizes() -> None:
    line = LaunchShape(
        "k", "rows", 256, -1, ("a", "b"), "q0 = (8 * b + a - 1) floordiv 2, items = 3 * q0"
    ).to_comment()
    assert line == (
        '// xfuse-launch {"block": 256, "items": -1, "items_sizes": "q0 = (8 * b + a - 1) '
        'floordiv 2, items = 3 * q0", "kernel": "k", "size_args": ["a", "b"], "strategy": "rows"}'
    )
    shape = LaunchShape.from_ptx(line + "\n")
    assert shape.sizes == 2
    assert shape.work_items([5, 3]) == 3 * ((8 * 3 + 5 - 1) // 2)


def test_a_launch_line_whose_work_items_do_not_parse_is_refused() -> None:
    line = LaunchShape("k", "rows", 256, -1, ("a",), "items = a").to_comment()
    with pytest.raises(CodegenError, match="work items do not parse"):
        LaunchShape.from_ptx(line.replace("items = a", "items = a +") + "\n")


def test_a_floor_division_in_a_bound_is_a_symbol_of_the_launch_line(tmp_path: Path) -> None:
    module = pipeline(f"{DEFAULT_PASSES},lower-to-loops")(parse(POOLED))
    (name,) = [k.sym_name.data for k in kernel_functions(module)]
    ptx = CUDABackend(ARCH).compile(module, name).decode()
    shape = LaunchShape.from_ptx(ptx)
    assert (shape.size_args, shape.items_sizes) == (
        ("s0",),
        "q0 = (s0 + 1) floordiv 2, items = 2 * q0",
    )
    assert [shape.work_items([n]) for n in (2, 9, 64)] == [2 * ((n + 1) // 2) for n in (2, 9, 64)]
    assemble(ptx, tmp_path)


@pytest.mark.parametrize("waves", [0, 8])
def test_a_grid_stride_launch_takes_at_most_the_threads_its_index_arithmetic_assumes(
    waves: int,
) -> None:
    """A symbolic grid-stride kernel divides a thread's position and the grid's stride in
    32 bits (gpu-map-parallel's `MAX_GRID_STRIDE_THREADS`): however many items, and without a
    limit of waves, its grid stays within them; a small launch keeps its blocks."""
    shape = LaunchShape("k", "elementwise", 256, -1, ("a",), "items = a")
    assert shape.grid(2**40, 132, waves) * 256 <= MAX_GRID_STRIDE_THREADS
    assert shape.grid(1000, 132, waves) == 4
    assert LaunchShape("k", "rows", 256, -1, ("a",), "items = a").grid(2**40, 132, waves) == 2**40


def test_a_static_kernel_keeps_its_launch_line() -> None:
    line = LaunchShape("k", "rows", 256, 8).to_comment()
    assert line == '// xfuse-launch {"block": 256, "items": 8, "kernel": "k", "strategy": "rows"}'
    assert LaunchShape.from_ptx(line + "\n") == LaunchShape("k", "rows", 256, 8)


# ---------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------

SIZES: dict[str, list[tuple[int, ...]]] = {
    "softmax": [(2, 2), (3, 100), (9, 31), (64, 1000), (5, 5000), (300, 33)],
    "softmax_long": [(2, 2), (3, 8192), (7, 10000), (2, 65536), (100, 64)],
    "pointwise": [(2, 2, 8), (3, 5, 8), (64, 33, 8), (1000, 7, 8)],
    "layer_norm": [(2, 32), (9, 32), (64, 32), (4097, 32)],
    "layer_norm_wide": [(2, 768), (9, 768), (4097, 768)],
    "layer_norm_shifted": [(2, 769), (9, 769), (300, 769)],
    "column_mean": [(2, 16), (9, 16), (1000, 16)],
    "cumsum": [(2, 2), (3, 7), (64, 300)],
}


@gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_one_loaded_kernel_matches_torch_at_every_size(case: str) -> None:
    module, table, names = symbolic_loop_ir(case)
    (name,) = names
    backend = CUDABackend()
    kernel = backend.load(backend.compile(module, name), name)
    model, inputs, _ = CASES[case]
    torch.manual_seed(0)
    for shape in SIZES[case]:
        x = torch.randn(*shape, device="cuda")
        buffers = [x, *(t.cuda() for t in inputs[1:])]  # the kernel's inputs, in this order
        expected = model(*buffers)
        out = torch.empty_like(expected)
        with pytest.raises(CodegenError, match="size arguments"):
            kernel([*buffers, out])
        kernel.launch_sized([*buffers, out], size_arguments(module, name, table, x), None)
        torch.cuda.synchronize()
        torch.testing.assert_close(out, expected, msg=lambda m, s=shape: f"{s}: {m}")
