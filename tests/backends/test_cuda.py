"""
The CUDA backend. CPU-only: PTX for every supported op and several groups (assembled with
ptxas for sm_90 where ptxas is on the PATH), the mapping strategies, the artifact format and
the errors. `gpu`-marked tests run the kernels against torch on an NVIDIA GPU.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import torch
import torch.nn.functional as F
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, StringAttr

import xfuse.api
from tests.backends.test_cpu_math_ops import BINARY as MATH_BINARY
from tests.backends.test_cpu_math_ops import (
    POWERS,
    SIGNED_ZERO_FNS,
    edge_inputs,
    same_signs,
    signed_zero_inputs,
)
from tests.backends.test_cpu_math_ops import UNARY as MATH_UNARY
from xfuse.backends import get_backend
from xfuse.backends.cuda import CUDABackend, CUDAUnavailable, LaunchShape, Tuning, compile_kernel
from xfuse.backends.nvptx import LibdeviceNotFound, compile_to_ptx, find_libdevice
from xfuse.errors import CodegenError
from xfuse.frontend.export import import_for_xfuse
from xfuse.ir.context import make_context, parse
from xfuse.ir.names import BLOCK_ATTR, KERNEL_ATTR, STRATEGY_ATTR
from xfuse.passes.lowering.gpu_map_parallel import GPUMapParallelPass
from xfuse.pipeline import DEFAULT_PIPELINE, compile_pipeline
from xfuse.runtime.compiler import lower_to_loops
from xfuse.runtime.driver import run_pipeline
from xfuse.testing.fuzz.compare import compare_outputs

ARCH = "sm_90"
PTXAS = shutil.which("ptxas")


def loop_ir(fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> tuple[ModuleOp, list[str]]:
    """The program's module after fusion and lower-to-loops, and its kernels' names."""
    imported = import_for_xfuse(fn, inputs)
    module = imported.program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    lower_to_loops(module, "cuda")
    names = [
        op.sym_name.data
        for op in module.ops
        if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    return module, names


def assemble(ptx: str, tmp_path: Path) -> None:
    """ptxas accepts the PTX (skipped where ptxas is missing)."""
    if PTXAS is None:
        return
    source = tmp_path / "kernel.ptx"
    source.write_text(ptx)
    result = subprocess.run(
        [PTXAS, f"-arch={ARCH}", str(source), "-o", str(tmp_path / "kernel.cubin")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def ptx_of(
    fn: Callable[..., Any],
    inputs: tuple[torch.Tensor, ...],
    tmp_path: Path,
    tuning: Tuning | None = None,
) -> list[str]:
    module, names = loop_ir(fn, inputs)
    assert names, "expected at least one kernel"
    backend = CUDABackend(ARCH, tuning)
    ptxs = [backend.compile(module, name).decode() for name in names]
    for name, ptx in zip(names, ptxs, strict=True):
        assert f".entry {name}(" in ptx
        assemble(ptx, tmp_path)
    return ptxs


def _x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "neg": torch.neg,
    "abs": torch.abs,
    "exp": torch.exp,
    "log": lambda x: torch.log(x.abs() + 1),
    "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 1),
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "erf": torch.erf,
    "sin": torch.sin,
    "cos": torch.cos,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.5),
    "reciprocal": lambda x: 1 / (x.abs() + 1),
}

BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": lambda a, b: a / (b.abs() + 1),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": lambda a, b: torch.pow(a.abs() + 1, b),
    "where": lambda a, b: torch.where(a > b, a, b),
}

REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda x: x.sum(-1),
    "mean": lambda x: x.mean(-1, keepdim=True),
    "amax": lambda x: x.amax(-1),
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layernorm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "rmsnorm": lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6),
    "column_sum": lambda x: x.sum(0),
    "argmax": lambda x: x.argmax(-1),  # a value and an index accumulator (serial)
    "any": lambda x: (x > 0).any(-1),
}

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


# ---------------------------------------------------------------------------------------------
# PTX generation (CPU only)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_op_compiles_to_ptx(name: str, tmp_path: Path) -> None:
    ptx_of(UNARY[name], (_x(8, 64),), tmp_path)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_op_compiles_to_ptx(name: str, tmp_path: Path) -> None:
    ptx_of(BINARY[name], (_x(8, 64), _x(8, 64)), tmp_path)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_compiles_to_ptx(name: str, tmp_path: Path) -> None:
    ptx_of(REDUCTIONS[name], (_x(8, 96),), tmp_path)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_low_precision_groups_compile(dtype: torch.dtype, tmp_path: Path) -> None:
    ptx_of(lambda x: torch.softmax(x, -1), (_x(4, 64, dtype=dtype),), tmp_path)
    ptx_of(lambda x, w: F.gelu(x * w) + 1, (_x(4, 64, dtype=dtype), _x(64, dtype=dtype)), tmp_path)


def test_pointwise_group_uses_128_bit_accesses(tmp_path: Path) -> None:
    fn = lambda x, w, b: F.gelu(x * w + b) * torch.sigmoid(x)  # noqa: E731
    # 512x256 elements: at 4 a thread, the 32768 threads of `min-threads` (a smaller kernel
    # spreads over more threads instead)
    (ptx,) = ptx_of(fn, (_x(512, 256), _x(256), _x(256)), tmp_path)
    assert "ld.global.nc.v4.b32" in ptx or "ld.global.nc.v4.f32" in ptx
    assert "st.global.v4" in ptx
    assert '"strategy": "elementwise"' in ptx.splitlines()[0]


def test_half_pointwise_uses_128_bit_accesses(tmp_path: Path) -> None:
    (ptx,) = ptx_of(lambda x: torch.tanh(x) * 2, (_x(512, 512, dtype=torch.float16),), tmp_path)
    assert "ld.global.nc.v4.b32" in ptx or "ld.global.nc.v8" in ptx


def _loss_gradient(
    logits: torch.Tensor, target: torch.Tensor, scale: torch.Tensor, lse: torch.Tensor
) -> torch.Tensor:
    """A cross-entropy's gradient: a row's one-hot target minus its softmax, scaled, in bf16."""
    iota = torch.arange(logits.shape[1])
    onehot = (target[:, None] == iota[None, :]).float()
    softmax = torch.exp(logits.float() - lse[:, None])
    return ((onehot - softmax) * scale[:, None]).to(torch.bfloat16)


@pytest.mark.parametrize("columns", [1008, 1001])
def test_row_values_beside_half_elements_keep_128_bit_accesses(
    columns: int, tmp_path: Path
) -> None:
    """A row's i64 target and f32 statistics, read beside its bf16 elements, are shared by a
    chunk's lanes (or read by each lane where rows are odd): the chunk is 8 bf16 elements,
    one 128-bit load and store, not the 2 lanes of 8-byte elements (512 rows: chunks of 8
    leave `min-threads` threads)."""
    rows = 512
    args = (_x(rows, columns, dtype=torch.bfloat16), torch.randint(0, columns, (rows,)))
    ptxs = ptx_of(_loss_gradient, (*args, _x(rows), _x(rows)), tmp_path)
    ptx = max(ptxs, key=lambda p: LaunchShape.from_ptx(p).items)  # the [rows, columns] kernel
    assert LaunchShape.from_ptx(ptx).items == rows * columns // 8
    assert ptx.count("ld.global.nc.v4") == 1 and ptx.count("st.global.v4") == 1


def test_small_pointwise_spreads_over_threads(tmp_path: Path) -> None:
    """Under `min-threads` elements' worth of vectors, one element a thread: more blocks."""
    (ptx,) = ptx_of(lambda x: torch.tanh(x) * 2, (_x(16, 128, dtype=torch.float16),), tmp_path)
    shape = LaunchShape.from_ptx(ptx)
    assert (shape.strategy, shape.items) == ("elementwise", 16 * 128)
    assert ".v4" not in ptx and ".v8" not in ptx


def test_odd_width_pointwise_stays_scalar(tmp_path: Path) -> None:
    (ptx,) = ptx_of(lambda x: x * 3, (_x(5, 7),), tmp_path)
    assert ".v4" not in ptx


ODD_ROWS: dict[str, tuple[Callable[..., Any], tuple[int, ...]]] = {
    "pointwise": (lambda x: torch.tanh(x) * 2, (512, 1001)),
    "slice": (lambda x: x[..., :1001] + 1, (512, 1008)),  # a padded product sliced back
}
"""Kernels whose rows (1,001 bf16) take no vector access, over a loop a multiple of 8 long."""


@pytest.mark.parametrize("name", sorted(ODD_ROWS))
def test_odd_rows_store_vectors_over_the_flattened_loop(name: str, tmp_path: Path) -> None:
    """A chunk of a thread is 8 consecutive elements of the flattened loop (across rows):
    its stores at its own elements are one 128-bit store, and so are its loads of a buffer of
    the loop's shape; the slice's loads of the padded rows stay one element each."""
    fn, shape = ODD_ROWS[name]
    (ptx,) = ptx_of(fn, (_x(*shape, dtype=torch.bfloat16),), tmp_path)
    assert LaunchShape.from_ptx(ptx).items == 512 * 1001 // 8
    assert ptx.count("st.global.v4") == 1 and ptx.count("st.global") == 1
    loads = (1, 1) if name == "pointwise" else (8, 0)
    assert (ptx.count("ld.global"), ptx.count("ld.global.nc.v4")) == loads


def test_short_rows_reduce_within_a_warp(tmp_path: Path) -> None:
    (ptx,) = ptx_of(lambda x: torch.softmax(x, -1), (_x(64, 512),), tmp_path)
    shape = LaunchShape.from_ptx(ptx)
    assert shape.strategy == "rows"
    assert ptx.count("shfl.sync.bfly") == 10  # max and sum over 32 lanes
    assert "bar.sync" not in ptx


def test_long_rows_reduce_through_shared_memory_and_stay_in_registers(tmp_path: Path) -> None:
    (ptx,) = ptx_of(lambda x: torch.softmax(x, -1), (_x(4, 16384),), tmp_path)
    shape = LaunchShape.from_ptx(ptx)
    assert (shape.strategy, shape.block, shape.items) == ("rows", 256, 4)
    assert ".shared" in ptx and "bar.sync" in ptx
    # 64 elements per thread as sixteen 128-bit loads, read once for the max, the sum and the
    # output; the division by the row's sum is a multiplication by its reciprocal
    assert ptx.count("ld.global") == 16 and ptx.count("ld.global.nc.v4") == 16
    assert ptx.count("st.global.v4") == 16
    assert ptx.count("div.rn.f32") + ptx.count("rcp.rn.f32") == 1


def test_rmsnorm_squares_without_powf(tmp_path: Path) -> None:
    fn = lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    (ptx,) = ptx_of(fn, (_x(4, 4096), _x(4096)), tmp_path)
    assert "lg2" not in ptx and "ex2" not in ptx  # no libdevice powf
    assert ptx.count("ld.global.nc.v4") == 2 * 4096 // (4 * 64)  # x and w, vectorized


def test_sqrt_is_correctly_rounded_as_eager(tmp_path: Path) -> None:
    """f32 sqrt is `sqrt.rn` (libdevice asked as nvcc's `-prec-sqrt=true` builds eager's
    kernels), not `sqrt.approx`; a cube is two multiplications, not libdevice's powf."""
    (ptx,) = ptx_of(torch.sqrt, (_x(256),), tmp_path)
    assert "sqrt.rn.f32" in ptx and "sqrt.approx" not in ptx
    (ptx,) = ptx_of(lambda x: torch.hypot(x, x * 2), (_x(256),), tmp_path)
    assert "sqrt.approx" not in ptx
    (ptx,) = ptx_of(lambda x: torch.pow(x, 3.0), (_x(256),), tmp_path)
    assert "lg2" not in ptx and "ex2" not in ptx and ptx.count("mul.rn.f32") == 2


def test_bf16_rounding_read_back_is_one_cvt(tmp_path: Path) -> None:
    """A bf16 result that the kernel reads again (x * 2, then + 1) is rounded and read back in
    one `cvt.rn.bf16x2.f32` (bf16(x) over a zero half: the rounded f32), not a 16-bit cvt and
    a shift; bf16 constants are rounded at compile time; the stored result keeps its cvt."""
    (ptx,) = ptx_of(lambda x: (x * 2 + 1) * x, (_x(64, 64, dtype=torch.bfloat16),), tmp_path)
    assert ptx.count("cvt.rn.bf16x2.f32") == 2  # x * 2 and + 1, each read by the next op
    assert ptx.count("cvt.rn.bf16.f32") == 1  # the product, stored


def test_unrolled_pointwise_guards_each_chunk_and_keeps_vectors(tmp_path: Path) -> None:
    (ptx,) = ptx_of(lambda x: torch.sigmoid(x) * 2, (_x(4000, 64),), tmp_path, Tuning(unroll=2))
    shape = LaunchShape.from_ptx(ptx)
    assert shape.items == 4000 * 64 // 4 // 2  # thread-steps of two v4 chunks
    assert ptx.count("ld.global.nc.v4") == 2 and ptx.count("st.global.v4") == 2


def test_very_long_rows_are_re_read(tmp_path: Path) -> None:
    # 48K elements a row: longer than a block keeps in registers with 16 elements a thread
    # (1024 threads x 16), shorter than split-reductions' min-length (65536), which would make
    # it two stages of short rows.
    tuning = Tuning(max_cached=16)
    (ptx,) = ptx_of(lambda x: x.sum(-1), (_x(2, 49152),), tmp_path, tuning)
    assert LaunchShape.from_ptx(ptx).strategy == "rows"
    assert ptx.count("ld.global") < 8


ROWS_THROUGH_A_PERMUTE = """
builtin.module {
  func.func @xfuse_kernel(%x: memref<2x4x16x32xf32>, %y: memref<2x64x1xf32>) attributes {xfuse.kernel} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c2 = arith.constant 2 : index
    %c32 = arith.constant 32 : index
    %c64 = arith.constant 64 : index
    %c16 = arith.constant 16 : index
    %c512 = arith.constant 512 : index
    %zero = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%c0, %c0, %c2, %c64, %c1, %c1) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%n: index, %r: index):
      %w = arith.remui %r, %c16 : index
      %s = scf.for %k = %c0 to %c32 step %c1 iter_args(%acc = %zero) -> (f32) {
        %flat = arith.muli %r, %c32 : index
        %pos = arith.addi %flat, %k : index
        %h = arith.divui %pos, %c512 : index
        %v = memref.load %x[%n, %h, %w, %k] : memref<2x4x16x32xf32>
        %a = arith.addf %acc, %v : f32
        scf.yield %a : f32
      }
      memref.store %s, %y[%n, %r, %c0] : memref<2x64x1xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}"""
"""A row sum whose row is read through a reshape and a permute (Swin's window reverse before
its layer norm): the row's position `r` and the loop index `k` meet in index arithmetic."""


def test_rows_read_through_a_permute_reduce_within_a_warp() -> None:
    """A warp a row, as for any row (one thread a row walked Swin-T's 96-wide rows alone: 1 ms a
    kernel at batch 32 on an H200), element by element (a chunk of such a row is no vector of
    consecutive memory)."""
    ptx = compile_kernel(parse(ROWS_THROUGH_A_PERMUTE), "xfuse_kernel", "sm_90")
    assert LaunchShape.from_ptx(ptx).strategy == "rows"
    assert "shfl.sync.bfly" in ptx and ".v4" not in ptx and ".v2" not in ptx


def _nll_mean(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """A language model's loss: the mean over tokens (an f32 sum and an i64 count of the
    tokens not ignored) of the picked log-probabilities."""
    return F.cross_entropy(logits, targets, ignore_index=-100)


def test_64_bit_row_sums_share_partials_in_two_halves(tmp_path: Path) -> None:
    """An i64 count and an f64 sum reduce across a row's threads (a shuffle moves 32 bits: each
    step moves both halves) instead of running on one thread."""
    sums: list[tuple[Callable[[torch.Tensor], torch.Tensor], torch.Tensor]] = [
        (lambda x: (x > 0).sum(-1), _x(4, 8192)),
        (lambda x: x.sum(-1), _x(4, 4096).double()),
    ]
    for fn, x in sums:
        (ptx,) = ptx_of(fn, (x,), tmp_path)
        assert LaunchShape.from_ptx(ptx).strategy == "rows"
        assert ptx.count("shfl.sync.bfly.b32") == 2 * 5  # 32 lanes: 5 steps, of two halves


def test_a_loss_over_all_tokens_reduces_on_a_block(tmp_path: Path) -> None:
    """The loss's sum and count over 8192 tokens, each a gather from its row: one row of 8192
    elements over a block's threads (one thread walking them took 2.2 ms on an H200)."""
    logits, targets = _x(8192, 64), torch.randint(0, 64, (8192,))
    ptxs = ptx_of(_nll_mean, (logits, targets), tmp_path)
    strategies = [LaunchShape.from_ptx(ptx).strategy for ptx in ptxs]
    assert "serial" not in strategies, strategies


def test_column_reduction_runs_one_thread_per_column(tmp_path: Path) -> None:
    """Neighbouring threads walk neighbouring columns: each load of theirs is coalesced."""
    (ptx,) = ptx_of(lambda x: x.sum(0), (_x(64, 32768),), tmp_path)
    assert LaunchShape.from_ptx(ptx).strategy == "serial"


def test_few_columns_run_a_warp_each(tmp_path: Path) -> None:
    """Fewer columns than `min-threads` (a layer norm over the channels of a small NCHW image
    ran as 196 threads walking 384 channels each): a warp a column, 32 times the threads."""
    (ptx,) = ptx_of(lambda x: x.sum(0), (_x(64, 128),), tmp_path)
    assert LaunchShape.from_ptx(ptx).strategy == "rows"
    assert "shfl.sync.bfly" in ptx


def _patch_embedding(
    x: torch.Tensor, cls: torch.Tensor, pos: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """A vision transformer's tokens: an NCHW feature map as tokens, the class token put first
    (a concat), the position embedding added, then the first layer norm."""
    tokens = torch.cat([cls, x.flatten(2).transpose(1, 2)], dim=1) + pos
    return F.layer_norm(tokens, (w.shape[0],), w)


def _patch_inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    return (
        _x(1, 96, 14, 14, dtype=dtype),
        _x(1, 1, 96, dtype=dtype),
        _x(1, 197, 96, dtype=dtype),
        _x(96, dtype=dtype),
    )


def test_rows_that_read_through_a_concat_run_a_warp_each(tmp_path: Path) -> None:
    """The layer norm over tokens read through a concat (each element from one of two places,
    an `scf.if` in the row loop): a warp a row, not one thread walking each of ViT's 197 rows
    (1.2 ms on an H200, where Inductor's kernel takes microseconds)."""
    ptxs = ptx_of(_patch_embedding, _patch_inputs(), tmp_path)
    strategies = [LaunchShape.from_ptx(ptx).strategy for ptx in ptxs]
    assert "rows" in strategies and "serial" not in strategies, strategies


def _chunks_norm(
    p: torch.Tensor, q: torch.Tensor, r: torch.Tensor, x: torch.Tensor, w: torch.Tensor
) -> torch.Tensor:
    """EdgeNeXt's split-depth block before its attention: channel chunks, three computed as
    tokens and the last an NCHW map's, concatenated, then a layer norm over the channels."""
    tokens = torch.cat([p, q + 1, r * 2, x.flatten(2).transpose(1, 2)], dim=2)
    return F.layer_norm(tokens, (w.shape[0],), w)


def _chunks_inputs(dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    chunks = [_x(2, 49, 76, dtype=dtype) for _ in range(3)]
    return (*chunks, _x(2, 76, 7, 7, dtype=dtype), _x(304, dtype=dtype))


def test_rows_that_read_through_a_concat_of_four_run_a_warp_each(tmp_path: Path) -> None:
    """A concat of four is a select inside a select inside a select in the row loop: a warp a
    row, not one thread walking each of the 98 rows four times (EdgeNeXt-S at batch 32 on an
    H200: 0.28 ms for 1568 rows of 304 channels)."""
    ptxs = ptx_of(_chunks_norm, _chunks_inputs(), tmp_path)
    strategies = [LaunchShape.from_ptx(ptx).strategy for ptx in ptxs]
    assert "rows" in strategies and "serial" not in strategies, strategies


def _squeeze_excite(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MobileNetV3's block before its squeeze-and-excitation: a depthwise convolution and a
    ReLU, then their mean over each channel's image (NCHW: a reduction over two dims)."""
    y = F.relu(F.conv2d(x, w, padding=2, stride=2, groups=x.shape[1]))
    return y, y.mean((2, 3))


def _spatial_reductions(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    y = torch.sigmoid(x)
    return y, y.mean((2, 3)), x.amax((1, 2, 3)), (x * x).sum((1, 2, 3))


def test_reductions_over_several_dims_run_a_warp_a_row(tmp_path: Path) -> None:
    """A reduction over an NCHW image's H and W is a nest of two loops (three over C, H, W);
    the nest becomes one loop over the row, mapped a warp a row, where one thread walked each
    (MobileNetV3's block of 72 channels at batch 1: 72 threads, 0.29 ms on an H200)."""
    for fn, inputs in [
        (_squeeze_excite, (_x(1, 72, 56, 56), _x(72, 1, 5, 5))),
        (_spatial_reductions, (_x(1, 72, 28, 28),)),
        (_spatial_reductions, (_x(256, 64, 7, 7),)),
    ]:
        ptxs = ptx_of(fn, inputs, tmp_path)
        strategies = [LaunchShape.from_ptx(ptx).strategy for ptx in ptxs]
        assert "serial" not in strategies, strategies
        assert any("shfl.sync.bfly" in ptx for ptx in ptxs)


def _gelu_and_spatial_sum_of_squares(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = F.gelu(x)
    return y, (y.float() * y.float()).sum((1, 2))


def test_split_spatial_reduction_addresses_without_divisions(tmp_path: Path) -> None:
    """CUDA's split of a channels-last image's spatial sum (ConvNeXt-V2's GRN) reads the
    [32, 56, 56, 384] input in chunks of 64 positions: its buffer is declared [32, 3136, 384],
    so no element's address takes a 64-bit division by 56 (a multiply-high in the PTX)."""
    module = import_for_xfuse(
        _gelu_and_spatial_sum_of_squares, (_x(32, 56, 56, 384, dtype=torch.bfloat16),)
    ).program.module
    compile_pipeline("cuda")(module)
    lower_to_loops(module, "cuda")
    backend = CUDABackend(ARCH)
    (stage,) = [  # stage 1 reads the bf16 input (stage 2 its f32 partial sums)
        op
        for op in module.ops
        if isinstance(op, func.FuncOp)
        and KERNEL_ATTR in op.attributes
        and "bf16" in str(op.function_type)
    ]
    assert "memref<32x3136x384xbf16>" in str(stage.function_type)
    ptx = backend.compile(module, stage.sym_name.data).decode()
    assert "mul.hi.u64" not in ptx and "div.u64" not in ptx and "rem.u64" not in ptx
    assemble(ptx, tmp_path)


def test_a_scan_inside_a_nest_stays_serial(tmp_path: Path) -> None:
    """A cumulative sum stores its running value at each step: no row to split among lanes."""
    ptxs = ptx_of(lambda x: torch.cumsum(x, 2).mean((2, 3)), (_x(2, 8, 6, 5),), tmp_path)
    assert "serial" in [LaunchShape.from_ptx(ptx).strategy for ptx in ptxs]


def _patch_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A layer norm over an NCHW image's channels, written channels-last (Swin's patch
    embedding): each row (token) reads a column of memory and writes a row."""
    return F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), w, b)


def test_rows_read_down_columns_and_written_along_rows_run_a_warp_each(tmp_path: Path) -> None:
    """32768 tokens of 96 channels: a warp a token reads it once into registers and writes
    it coalesced, where a thread a token read it once per loop and wrote 96 elements a row
    apart (Swin-T's first kernel: 0.32 ms at batch 32 on an H200)."""
    (ptx,) = ptx_of(_patch_norm, (_x(8, 96, 64, 64), _x(96), _x(96)), tmp_path)
    assert LaunchShape.from_ptx(ptx).strategy == "rows"
    # rows of 3 channels, fewer than a warp's elements: a thread a row
    (ptx,) = ptx_of(_patch_norm, (_x(8, 3, 128, 128), _x(3), _x(3)), tmp_path)
    assert LaunchShape.from_ptx(ptx).strategy == "serial"


def test_a_short_row_takes_threads_that_keep_it_in_registers_whatever_the_options() -> None:
    """With `max-cached` below `short-row-chunks` (2 and 4), 64 channels a token take 32
    threads of 2 elements each, which keep the row in registers (no loop re-reads it), not 16
    of 4, 8 rows a block."""
    module, (name,) = loop_ir(_patch_norm, (_x(8, 64, 64, 64), _x(64), _x(64)))
    GPUMapParallelPass(max_cached=2, short_row_chunks=4).apply(make_context(), module)
    kernel = next(
        op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == name
    )
    assert kernel.attributes[STRATEGY_ATTR] == StringAttr("rows")
    assert kernel.attributes[BLOCK_ATTR] == IntegerAttr(256, 64)
    assert not any(isinstance(op, scf.ForOp) for op in kernel.walk())


def flat_kernel(n: int) -> str:
    """Loop IR of `y = x * 2` over n f16 elements (as lower-to-loops writes flat groups)."""
    return f"""
    func.func @k(%x: memref<{n}xf16>, %y: memref<{n}xf16>) attributes {{xfuse.kernel, xfuse.parallel_dims = 1 : i64}} {{
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cn = arith.constant {n} : index
      %two = arith.constant 2.0 : f16
      "scf.parallel"(%c0, %cn, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
      ^bb0(%i: index):
        %v = memref.load %x[%i] : memref<{n}xf16>
        %r = arith.mulf %v, %two : f16
        memref.store %r, %y[%i] : memref<{n}xf16>
        scf.reduce
      }}) : (index, index, index) -> ()
      func.return
    }}
    """


def _mapped(n: int) -> str:
    module = parse(flat_kernel(n))
    GPUMapParallelPass().apply(make_context(), module)
    return str(module)


def test_index_math_is_32_bit_for_small_tensors() -> None:
    text = _mapped(1 << 20)
    assert ": i32 {" in text and ": i64 {" not in text


def test_index_math_is_64_bit_beyond_2_31_elements() -> None:
    assert ": i64 {" in _mapped(2**31 + 4096)


def test_kernel_beyond_2_31_elements_compiles(tmp_path: Path) -> None:
    ptx = CUDABackend(ARCH).compile(parse(flat_kernel(2**31 + 4096)), "k").decode()
    assert "ld.global.nc.v4" in ptx
    assemble(ptx, tmp_path)


def test_artifact_carries_its_launch_shape(tmp_path: Path) -> None:
    module, (name,) = loop_ir(lambda x: x + 1, (_x(512, 256),))
    ptx = CUDABackend(ARCH).compile(module, name).decode()
    shape = LaunchShape.from_ptx(ptx)
    assert shape.kernel == name and shape.block == 256 and shape.items == 512 * 256 // 4
    assert LaunchShape.from_ptx(shape.to_comment() + "\n") == shape


def test_tuning_comes_from_the_environment_and_names_the_target(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from xfuse.backends.cuda import Tuning

    monkeypatch.setenv("XFUSE_CUDA_TUNING", "unroll=4,rows_min_blocks=2")
    backend = CUDABackend(ARCH)
    assert backend.tuning == Tuning(unroll=4, rows_min_blocks=2)
    assert backend.target == "cuda-sm_90-unroll4-rows_min_blocks2"
    module, (name,) = loop_ir(lambda x: torch.softmax(x, -1), (_x(4, 16384),))
    ptx = backend.compile(module, name).decode()
    assert ".minnctapersm 2" in ptx
    assemble(ptx, tmp_path)
    monkeypatch.setenv("XFUSE_CUDA_TUNING", "unroll")
    with pytest.raises(ValueError, match="XFUSE_CUDA_TUNING"):
        CUDABackend(ARCH)


def test_target_names_the_architecture() -> None:
    assert CUDABackend("sm_80").target == "cuda-sm_80"
    assert isinstance(get_backend("cuda"), CUDABackend)


def test_unknown_kernel_is_a_codegen_error() -> None:
    module, _ = loop_ir(lambda x: x + 1, (_x(4, 4),))
    with pytest.raises(CodegenError, match="no kernel @missing"):
        CUDABackend(ARCH).compile(module, "missing")


def test_libdevice_is_found_through_cuda_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "nvvm" / "libdevice" / "libdevice.10.bc"
    fake.parent.mkdir(parents=True)
    fake.write_bytes(b"BC")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert find_libdevice() == fake


def test_missing_libdevice_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc").exists():
        pytest.skip("/usr/local/cuda has libdevice")
    with pytest.raises(LibdeviceNotFound, match="set CUDA_HOME"):
        find_libdevice()


def test_loading_without_pycuda_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    module, (name,) = loop_ir(lambda x: x + 1, (_x(4, 4),))
    ptx = CUDABackend(ARCH).compile(module, name)
    monkeypatch.setitem(sys.modules, "pycuda", None)
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    with pytest.raises(CUDAUnavailable, match="needs pycuda"):
        CUDABackend(ARCH).load(ptx, name)


# ---------------------------------------------------------------------------------------------
# On the GPU
# ---------------------------------------------------------------------------------------------


def _has_gpu() -> bool:
    try:
        import pycuda.driver  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


_NEEDS_GPU = pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU and pycuda")

_Test = TypeVar("_Test", bound=Callable[..., Any])


def gpu(test: _Test) -> _Test:
    """A GPU test: marked `gpu` (what `pytest -m gpu` selects on the GPU machine) and skipped
    where there is no NVIDIA GPU or no pycuda."""
    return cast(_Test, pytest.mark.gpu(_NEEDS_GPU(test)))


def run_on_gpu(
    fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], *, reduction: bool = False
) -> None:
    """xfuse on the GPU equals eager on the GPU: within torch's default tolerance of the
    output's dtype, or for reductions (whose order of summation differs) with an RMSE against
    an f64 reference at most twice eager's (`xfuse.testing.fuzz.compare_outputs`)."""
    import xfuse.api
    from xfuse.testing.fuzz.compare import compare_outputs

    cuda_inputs = tuple(t.cuda() for t in inputs)
    expected = fn(*cuda_inputs)
    compiled = xfuse.api.compile(fn, cuda_inputs, device="cuda:0")
    actual = compiled(*cuda_inputs)
    torch.cuda.synchronize()
    if not reduction:
        torch.testing.assert_close(actual, expected)
        return
    reference = fn(*(t.double() if t.is_floating_point() else t for t in cuda_inputs))
    if not isinstance(expected, tuple):
        actual, expected, reference = (actual,), (expected,), (reference,)
    mismatch = compare_outputs(list(actual), list(expected), list(reference))
    assert mismatch is None, mismatch


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_gpu_unary(name: str, dtype: torch.dtype) -> None:
    run_on_gpu(UNARY[name], (_x(33, 256, dtype=dtype),))


@gpu
@pytest.mark.parametrize("name", sorted(ODD_ROWS))
def test_gpu_odd_rows_over_the_flattened_loop(name: str) -> None:
    fn, shape = ODD_ROWS[name]
    run_on_gpu(fn, (_x(*shape, dtype=torch.bfloat16),))


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_gpu_binary(name: str, dtype: torch.dtype) -> None:
    run_on_gpu(BINARY[name], (_x(33, 256, dtype=dtype), _x(256, dtype=dtype)))


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("length", [100, 1000, 5000, 16384, 40000])
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_gpu_reduction(name: str, length: int, dtype: torch.dtype) -> None:
    run_on_gpu(REDUCTIONS[name], (_x(7, length, dtype=dtype),), reduction=True)


@gpu
@pytest.mark.parametrize("length", [100, 8192, 40000])
def test_gpu_64_bit_row_reductions(length: int) -> None:
    x = _x(7, length)
    run_on_gpu(lambda a: (a > 0).sum(-1), (x,))
    run_on_gpu(lambda a: a.sum(-1), (x.double(),), reduction=True)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_rows_through_a_concat(dtype: torch.dtype) -> None:
    run_on_gpu(_patch_embedding, _patch_inputs(dtype), reduction=True)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_rows_through_a_concat_of_four(dtype: torch.dtype) -> None:
    run_on_gpu(_chunks_norm, _chunks_inputs(dtype), reduction=True)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_reductions_over_several_dims(dtype: torch.dtype) -> None:
    run_on_gpu(
        _squeeze_excite,
        (_x(1, 72, 56, 56, dtype=dtype), _x(72, 1, 5, 5, dtype=dtype)),
        reduction=True,
    )
    run_on_gpu(_spatial_reductions, (_x(3, 72, 28, 28, dtype=dtype),), reduction=True)
    run_on_gpu(_spatial_reductions, (_x(256, 64, 7, 7, dtype=dtype),), reduction=True)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_rows_read_down_columns(dtype: torch.dtype) -> None:
    inputs = (_x(8, 96, 64, 64, dtype=dtype), _x(96, dtype=dtype), _x(96, dtype=dtype))
    run_on_gpu(_patch_norm, inputs, reduction=True)


@gpu
def test_gpu_loss_over_all_tokens() -> None:
    targets = torch.randint(0, 64, (8192,))
    targets[::7] = -100
    run_on_gpu(_nll_mean, (_x(8192, 64), targets), reduction=True)


@gpu
def test_gpu_pointwise_group_with_misaligned_input() -> None:
    x = torch.randn(1025 * 64 + 1, device="cuda:0")[1:].view(1025, 64)
    run_on_gpu(lambda a: torch.sigmoid(a) * 2, (x,))


@gpu
def test_gpu_on_a_side_stream() -> None:
    import xfuse.api

    x = torch.randn(256, 1024, device="cuda:0")
    compiled = xfuse.api.compile(lambda a: torch.softmax(a, -1), (x,), device="cuda:0")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = compiled(x * 1)
    stream.synchronize()
    torch.testing.assert_close(y, torch.softmax(x, -1))


@gpu
def test_gpu_mlp() -> None:
    import xfuse.api
    from examples.mlp import make_mlp

    model, (x,) = make_mlp()
    model, x = model.cuda(), x.cuda()
    with torch.no_grad():
        expected = model(x)
        actual = xfuse.api.compile(model, (x,), device="cuda:0")(x)
    torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)


@gpu
def test_gpu_transformer_block() -> None:
    import xfuse.api
    from examples.transformer import make_transformer_block

    model, (x,) = make_transformer_block()
    model, x = model.cuda(), x.cuda()
    with torch.no_grad():
        expected = model(x)
        actual = xfuse.api.compile(model, (x,), device="cuda:0")(x)
    torch.testing.assert_close(actual, expected, rtol=1e-3, atol=1e-3)


@gpu
def test_gpu_elementwise_beyond_2_31_elements() -> None:
    import xfuse.api

    n = 2**31 + 4096
    x = torch.empty(n, dtype=torch.float16, device="cuda:0")
    x[:4096].normal_()
    x[-4096:].normal_()
    compiled = xfuse.api.compile(lambda a: a * 2 + 1, (x,), device="cuda:0")
    y = compiled(x)
    torch.cuda.synchronize()
    torch.testing.assert_close(y[:4096], x[:4096] * 2 + 1)
    torch.testing.assert_close(y[-4096:], x[-4096:] * 2 + 1)
    del y, x
    torch.cuda.empty_cache()


def _xfuse_opt(source: Path, passes: str) -> ModuleOp:
    result = subprocess.run(
        [sys.executable, "-m", "xfuse.cli.opt", str(source), "-p", passes],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return parse(result.stdout)


@pytest.mark.parametrize(
    "fn, inputs",
    [
        (lambda x: torch.relu(x * 2 + 1), (_x(64, 1024),)),
        (lambda x: torch.softmax(x, -1), (_x(32, 512),)),
        (lambda x: x.sum(1), (_x(16, 4096),)),
    ],
    ids=["pointwise", "softmax", "row-sum"],
)
def test_xfuse_opt_maps_kernels_as_the_runtime_does(
    fn: Callable[..., Any], inputs: tuple[torch.Tensor, ...], tmp_path: Path
) -> None:
    """One declaration of the GPU mapping's options: `xfuse-opt -p gpu-map-parallel` with its
    defaults, then `lower-to-nvvm`, gives the PTX that the CUDA backend runs."""
    module, names = loop_ir(fn, inputs)
    backend = CUDABackend(ARCH, Tuning())
    for name in names:
        launch_line, runtime_ptx = backend.compile(module, name).decode().split("\n", 1)
        kernel = next(
            op for op in module.ops if isinstance(op, func.FuncOp) and op.sym_name.data == name
        )
        source = tmp_path / f"{name}.mlir"
        source.write_text(str(ModuleOp([kernel.clone()])))
        mapped = _xfuse_opt(source, "gpu-map-parallel")
        (mapped_kernel,) = [op for op in mapped.ops if isinstance(op, func.FuncOp)]
        block = mapped_kernel.attributes[BLOCK_ATTR]
        assert isinstance(block, IntegerAttr)
        assert LaunchShape.from_ptx(launch_line).block == block.value.data
        source.write_text(str(mapped))
        lowered = _xfuse_opt(source, "lower-to-nvvm")
        assert compile_to_ptx(lowered, {name: block.value.data}, ARCH, {name: 0}) == runtime_ptx


def test_no_fma_across_ops(tmp_path: Path) -> None:
    """`x * w + b` rounds twice, as eager's two kernels do: `mul.rn` and `add.rn` (which ptxas
    does not fuse either), no `fma` (docs/contracts.md)."""
    (ptx,) = ptx_of(lambda x, w, b: x * w + b, (_x(64, 256), _x(256), _x(256)), tmp_path)
    body = [line.split()[0] for line in ptx.splitlines() if line.strip().endswith(";")]
    assert "mul.rn.f32" in body and "add.rn.f32" in body
    assert not [op for op in body if op.startswith("fma")]


@gpu
def test_gpu_multiply_add_chain_is_eager_bit_for_bit() -> None:
    """Without FMA contraction a fused chain of products and sums has eager's values exactly
    (one rounding per op); contracted, 35% of them differed in the last bit (H200)."""

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (x * w + b) * x - w * b

    x, w, b = (t.cuda() for t in (_x(256, 1024), _x(1024), _x(1024)))
    compiled = xfuse.api.compile(fn, (x, w, b), device="cuda:0")
    torch.testing.assert_close(compiled(x, w, b), fn(x, w, b), rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_gpu_clamps_keep_the_sign_of_zero(dtype: torch.dtype) -> None:
    """relu, clamp, hardtanh and relu6 keep -0.0 where eager's CUDA kernels do (the CPU test
    of the same name has the reason)."""
    x = signed_zero_inputs(dtype).cuda()
    for name, fn in SIGNED_ZERO_FNS.items():
        got = xfuse.api.compile(fn, (x,), device="cuda:0", quiet=True, fallback="error")(x)
        want = fn(x)
        torch.testing.assert_close(got, want, equal_nan=True, rtol=0, atol=0, msg=name)
        assert same_signs(got, want), name


# ---------------------------------------------------------------------------------------------
# The math ops of tests/backends/test_cpu_math_ops.py (which has their edge values) on CUDA
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MATH_UNARY))
def test_math_unary_op_compiles_to_ptx(name: str, tmp_path: Path) -> None:
    ptx_of(MATH_UNARY[name], (_x(8, 64),), tmp_path)


@pytest.mark.parametrize("name", sorted(MATH_BINARY))
def test_math_binary_op_compiles_to_ptx(name: str, tmp_path: Path) -> None:
    ptx_of(MATH_BINARY[name], (_x(8, 64), _x(8, 64)), tmp_path)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_math_ops_compile_to_ptx_in_other_dtypes(dtype: torch.dtype, tmp_path: Path) -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (
            torch.asinh(x) + torch.log1p(x.abs()) + torch.hypot(x, y) + torch.round(x),
            torch.isnan(x) | torch.signbit(y),
        )

    ptx_of(fn, (_x(8, 64, dtype=dtype), _x(8, 64, dtype=dtype)), tmp_path)


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(MATH_UNARY))
def test_gpu_math_unary_edges(name: str, dtype: torch.dtype) -> None:
    x = edge_inputs(dtype).cuda()
    expected = MATH_UNARY[name](x)
    actual = xfuse.api.compile(MATH_UNARY[name], (x,), device="cuda:0")(x)
    if name in REORDERED:
        # Sums whose order differs from eager's (CUDA's var_mean is Welford's): against the
        # f64 result, no worse than twice eager's error; the values are clamped to 1e3.
        # NaN (rows holding one) where eager has NaN; the rest by that rule.
        reference = MATH_UNARY[name](x.double())
        nan = expected.isnan()
        assert torch.equal(actual.isnan(), nan)
        got, want, ref = (t.masked_fill(nan, 0) for t in (actual, expected, reference))
        assert compare_outputs([got], [want], [ref], scale=1e3) is None
        return
    torch.testing.assert_close(actual, expected, equal_nan=True)


REORDERED = {"var_mean", "vector_norm_1", "vector_norm_2", "vector_norm_3"}
"""Reductions of `MATH_UNARY` whose f32 result depends on the order of the sum."""


@gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(MATH_BINARY))
def test_gpu_math_binary_edges(name: str, dtype: torch.dtype) -> None:
    x = edge_inputs(dtype).cuda()
    y = x.flip(0)
    expected = MATH_BINARY[name](x, y)
    actual = xfuse.api.compile(MATH_BINARY[name], (x, y), device="cuda:0")(x, y)
    torch.testing.assert_close(actual, expected, equal_nan=True)


@gpu
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16, torch.float16), ids=str)
@pytest.mark.parametrize("exponent", POWERS, ids=str)
def test_gpu_small_powers_are_eager_bit_for_bit(exponent: float, dtype: torch.dtype) -> None:
    """`x ** c` for the exponents eager's CUDA pow kernel special-cases, bit for bit at every
    edge value: f16 and bf16 products rounded after each product, 0.5 and -0.5 through the
    correctly rounded sqrt and the rsqrt eager uses."""
    x = (edge_inputs(dtype) * 3).cuda()
    fn: Callable[[torch.Tensor], torch.Tensor] = lambda x: torch.pow(x, exponent)  # noqa: E731
    got = xfuse.api.compile(fn, (x,), device="cuda:0", fallback="error")(x)
    want = fn(x)
    same = (got == want) | (got.isnan() & want.isnan())
    assert bool(same.all()), f"{int((~same).sum())} elements differ from eager"


@gpu
@pytest.mark.parametrize("dtype", (torch.float32, torch.float16, torch.float64), ids=str)
def test_gpu_sqrt_is_eager_bit_for_bit(dtype: torch.dtype) -> None:
    x = edge_inputs(dtype).abs().cuda()
    got = xfuse.api.compile(torch.sqrt, (x,), device="cuda:0", fallback="error")(x)
    assert torch.equal(got.nan_to_num(), torch.sqrt(x).nan_to_num())


@gpu
def test_gpu_launcher_launches_and_hands_other_cases_to_the_checked_call() -> None:
    """A kernel's `launcher` (what a program's runner calls) computes the kernel's result on
    aligned buffers on torch's default stream, and gives the same through the checked call
    for a misaligned view (copied aligned and back) and on another stream; a kernel whose
    module is not loaded yet loads it on that first call."""
    backend = CUDABackend(ARCH)
    kernel = backend.load(backend.compile(parse(flat_kernel(4096)), "k"), "k")
    launch = kernel.launcher(2)
    assert launch is not None
    x = torch.randn(4096 + 8, dtype=torch.float16, device="cuda")
    for source in (x[:4096], x[1:4097]):  # aligned, then 2 bytes off
        out = torch.empty(4096, dtype=torch.float16, device="cuda")
        launch(source, out)
        torch.testing.assert_close(out, source * 2)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = torch.zeros(4096, dtype=torch.float16, device="cuda")
        launch(x[:4096], out)
    side.synchronize()
    torch.testing.assert_close(out, x[:4096] * 2)
