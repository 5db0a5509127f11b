"""`gpu-map-parallel` on kernels with symbolic sizes (xfuse/passes/lowering/gpu_map_parallel.py),
run without a GPU: the mapped kernel is interpreted (xDSL's interpreter) once per simulated
thread of a launch, its special registers (`llvm.nvvm.read.ptx.sreg.*`) that thread's, so that
every element is written with the right value at small sizes and grids, and at sizes past 2^32
elements with the largest grid the runtime launches (buffers read and written sparsely)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from xdsl.dialects import arith, llvm, memref, scf
from xdsl.dialects.builtin import IntegerType, ModuleOp, f32
from xdsl.interpreter import (
    Interpreter,
    InterpreterFunctions,
    PythonValues,
    impl,
    register_impls,
)
from xdsl.interpreters.arith import ArithFunctions
from xdsl.interpreters.func import FuncFunctions
from xdsl.interpreters.memref import MemRefFunctions
from xdsl.interpreters.scf import ScfFunctions
from xdsl.interpreters.shaped_array import ShapedArray
from xdsl.interpreters.utils.ptr import TypedPtr

from xfuse.ir.context import make_context, parse
from xfuse.passes.lowering.gpu_map_parallel import MAX_GRID_STRIDE_THREADS, GPUMapParallelPass

BLOCK = 8
"""Threads per simulated block (the kernel reads it from `ntid.x`, whatever its launch says)."""
WIDTH = 4
"""Elements per thread and step of the kernels below (128 bits of f32)."""


def _unsigned(value: int, t: Any) -> int:
    assert isinstance(t, IntegerType)
    return value % (1 << t.width.data)


@register_impls
class _GPUThread(InterpreterFunctions):
    """One thread of a launch: its special registers, and the unsigned integer ops the
    mapping emits that xDSL's arith functions lack. Records the integer type of every
    `scf.for` it enters (which index width the kernel chose)."""

    def __init__(self) -> None:
        self.registers: dict[str, int] = {}
        self.loop_types: set[Any] = set()

    @impl(llvm.CallIntrinsicOp)
    def run_sreg(
        self, interpreter: Interpreter, op: llvm.CallIntrinsicOp, args: PythonValues
    ) -> PythonValues:
        name = op.intrin.data.removeprefix("llvm.nvvm.read.ptx.sreg.")
        return (self.registers[name],)

    @impl(arith.DivUIOp)
    def run_divui(
        self, interpreter: Interpreter, op: arith.DivUIOp, args: PythonValues
    ) -> PythonValues:
        t = op.result.type
        return (_unsigned(args[0], t) // _unsigned(args[1], t),)

    @impl(arith.RemUIOp)
    def run_remui(
        self, interpreter: Interpreter, op: arith.RemUIOp, args: PythonValues
    ) -> PythonValues:
        t = op.result.type
        return (_unsigned(args[0], t) % _unsigned(args[1], t),)

    @impl(arith.MinUIOp)
    def run_minui(
        self, interpreter: Interpreter, op: arith.MinUIOp, args: PythonValues
    ) -> PythonValues:
        t = op.result.type
        return (min(args, key=lambda v: _unsigned(v, t)),)

    @impl(arith.ExtUIOp)
    def run_extui(
        self, interpreter: Interpreter, op: arith.ExtUIOp, args: PythonValues
    ) -> PythonValues:
        return (_unsigned(int(args[0]), op.input.type),)

    @impl(arith.TruncIOp)
    def run_trunci(
        self, interpreter: Interpreter, op: arith.TruncIOp, args: PythonValues
    ) -> PythonValues:
        return (_unsigned(int(args[0]), op.result.type),)


@register_impls
class _Loops(ScfFunctions):
    def __init__(self, thread: _GPUThread) -> None:
        self.thread = thread

    @impl(scf.ForOp)
    def run_for(self, interpreter: Interpreter, op: scf.ForOp, args: PythonValues) -> PythonValues:
        self.thread.loop_types.add(op.body.block.args[0].type)
        # `impl` wraps the inherited function: its results are the wrapper's `values`
        return super().run_for(interpreter, op, args).values


class _Sparse:
    """A 1-D buffer of any length: element i reads `read(i)`; stores are recorded."""

    def __init__(self, read: Callable[[int], float]) -> None:
        self.read = read
        self.stored: dict[int, float] = {}


@register_impls
class _SparseMemory(InterpreterFunctions):
    """memref.load and memref.store on `_Sparse` buffers."""

    @impl(memref.LoadOp)
    def run_load(
        self, interpreter: Interpreter, op: memref.LoadOp, args: PythonValues
    ) -> PythonValues:
        buffer, index = args
        return (buffer.read(index),)

    @impl(memref.StoreOp)
    def run_store(
        self, interpreter: Interpreter, op: memref.StoreOp, args: PythonValues
    ) -> PythonValues:
        value, buffer, index = args
        buffer.stored[index] = value
        return ()


def _buffer(values: list[float]) -> ShapedArray[float]:
    return ShapedArray(TypedPtr[float].new(values, xtype=f32), [len(values)])


def _launch(
    module: ModuleOp,
    buffers: Sequence[Any],
    sizes: list[int],
    blocks: int | Sequence[int],
    grid: int,
    block: int = BLOCK,
) -> set[Any]:
    """Run the mapped kernel `k` as a launch of `grid` blocks of `block` threads would, its
    first `blocks` blocks simulated (or the blocks of that list; a thread of another finds no
    work where the caller makes them cover every position); returns the loop types its
    threads ran. `_Sparse` buffers are read and written as such."""
    thread = _GPUThread()
    interpreter = Interpreter(module)
    sparse = any(isinstance(b, _Sparse) for b in buffers)
    memory = _SparseMemory() if sparse else MemRefFunctions()
    for functions in (ArithFunctions(), FuncFunctions(), memory, _Loops(thread)):
        interpreter.register_implementations(functions)
    interpreter.register_implementations(thread)
    for ctaid in range(blocks) if isinstance(blocks, int) else blocks:
        for tid in range(block):
            thread.registers = {"ctaid.x": ctaid, "ntid.x": block, "tid.x": tid, "nctaid.x": grid}
            interpreter.call_op("k", (*buffers, *sizes))
    return thread.loop_types


# y = x * 2 + b[j, k] over x: [s0, s1, 8], b: [s1, 8] (4 f32 a thread and step; x and y at
# the loop's position, b at indices carried across steps, s1 a runtime extent), and
# y = x * 2 + b[k] over x: [s0, 5] (5 takes no vector: flat lanes of 4 elements, and a tail).
THREE_D = """
builtin.module {
  func.func @k(%x: memref<?xf32>, %b: memref<?xf32>, %y: memref<?xf32>, %s0: index, %s1: index) attributes {xfuse.kernel, xfuse.parallel_dims = 3 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s0", xfuse.size_hints = [2 : i64, 3 : i64]} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c8 = arith.constant 8 : index
    %row = arith.muli %s1, %c8 : index
    %two = arith.constant 2.0 : f32
    "scf.parallel"(%c0, %c0, %c0, %s0, %s1, %c8, %c1, %c1, %c1) <{operandSegmentSizes = array<i32: 3, 3, 3, 0>}> ({
    ^bb0(%i: index, %j: index, %k: index):
      %o1 = arith.muli %i, %row : index
      %o2 = arith.muli %j, %c8 : index
      %o3 = arith.addi %o1, %o2 : index
      %o = arith.addi %o3, %k : index
      %q = arith.addi %o2, %k : index
      %xv = memref.load %x[%o] : memref<?xf32>
      %bv = memref.load %b[%q] : memref<?xf32>
      %t = arith.mulf %xv, %two : f32
      %u = arith.addf %t, %bv : f32
      memref.store %u, %y[%o] : memref<?xf32>
      scf.reduce
    }) : (index, index, index, index, index, index, index, index, index) -> ()
    func.return
  }
}
"""

FLAT = """
builtin.module {
  func.func @k(%x: memref<?xf32>, %b: memref<5xf32>, %y: memref<?xf32>, %s0: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [3 : i64]} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c5 = arith.constant 5 : index
    %two = arith.constant 2.0 : f32
    "scf.parallel"(%c0, %c0, %s0, %c5, %c1, %c1) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%i: index, %k: index):
      %o1 = arith.muli %i, %c5 : index
      %o = arith.addi %o1, %k : index
      %xv = memref.load %x[%o] : memref<?xf32>
      %bv = memref.load %b[%k] : memref<5xf32>
      %t = arith.mulf %xv, %two : f32
      %u = arith.addf %t, %bv : f32
      memref.store %u, %y[%o] : memref<?xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}
"""


def _mapped(text: str) -> ModuleOp:
    module = parse(text)
    GPUMapParallelPass().apply(make_context(), module)
    return module


def _operands(
    text: str, sizes: list[int]
) -> tuple[int, list[float], list[float], list[ShapedArray[float]]]:
    """The elements of `text`'s kernel at `sizes`, its x, its b (b's elements: b repeats
    along y with that period) and its buffers, y's unwritten (NaN)."""
    inner = 8 if text is THREE_D else 5
    elements = math.prod(sizes) * inner
    period = sizes[-1] * inner if text is THREE_D else inner
    x = [float(i) for i in range(elements)]
    b = [100.0 * (k + 1) for k in range(period)]
    return elements, x, b, [_buffer(x), _buffer(b), _buffer([math.nan] * elements)]


@pytest.mark.parametrize(
    ("text", "sizes"),
    [(THREE_D, [3, 5]), (THREE_D, [1, 7]), (FLAT, [7]), (FLAT, [2])],
    ids=["3d-15-rows", "3d-7-rows", "flat-7-rows", "flat-2-rows"],
)
@pytest.mark.parametrize("grid", [1, 2, 64], ids=["1-block", "2-blocks", "64-blocks"])
def test_a_symbolic_kernel_writes_every_element(text: str, sizes: list[int], grid: int) -> None:
    """Each element once, with its own `b`, whatever the grid: threads step over the rest
    (one block of 8 threads: several steps; 64 blocks: one step a thread)."""
    elements, x, b, buffers = _operands(text, sizes)
    blocks = grid if grid <= 2 else math.ceil(elements / BLOCK)
    types = _launch(_mapped(text), buffers, sizes, blocks, grid)
    assert types == {IntegerType(64)}
    assert buffers[2].data == [2 * x[i] + b[i % len(b)] for i in range(elements)]


@pytest.mark.parametrize(
    ("text", "sizes"),
    [(THREE_D, [3, 2**32 + 5]), (FLAT, [2**32 + 3])],
    ids=["3d-extent-past-2-32", "flat-past-2-32"],
)
def test_positions_past_2_32_index_right_at_the_largest_grid(text: str, sizes: list[int]) -> None:
    """Elements past 2^32 (and, in 3-D, an extent past 2^32, which a thread's 32-bit division
    of its first position takes as 2^32 - 1) at the most threads the runtime launches: the
    first, a middle and the last thread each write their chunks `WIDTH` elements apart, a
    grid's stride apart, and only those, with the right values (FLAT: the first threads also
    the elements after the last whole chunk)."""
    inner = 8 if text is THREE_D else 5
    elements = math.prod(sizes) * inner
    period = sizes[-1] * inner if text is THREE_D else inner
    x = _Sparse(float)
    b = _Sparse(lambda k: 100.0 * (k + 1))
    y = _Sparse(lambda i: math.nan)
    grid = MAX_GRID_STRIDE_THREADS
    threads = [0, 1, 12345, grid - 1]
    types = _launch(_mapped(text), [x, b, y], sizes, threads, grid, block=1)
    assert types == {IntegerType(64)}
    chunks = elements // WIDTH
    expected = {
        i
        for t in threads
        for c in range(t, chunks, grid)
        for i in range(c * WIDTH, (c + 1) * WIDTH)
    }
    expected |= {chunks * WIDTH + t for t in threads if chunks * WIDTH + t < elements}
    assert max(expected) >= 2**32
    assert set(y.stored) == expected
    assert all(v == 2 * i + 100.0 * (i % period + 1) for i, v in y.stored.items())


def test_a_row_kernel_reads_a_gathered_element_per_lane_with_no_vector_claim() -> None:
    """A softmax over `x[..., idx]`: the row's lanes read `idx` as one aligned vector, but
    `x` at the indices it holds, each lane at its own (`idx[1]`, not `idx[0] + 1`) and with
    no alignment claimed (rows of 31 f32 put odd rows' first elements 4 bytes off; XLNet's
    relative shift failed on the H200 with a misaligned address)."""
    import torch
    from xdsl.dialects import func

    from xfuse.frontend.export import import_for_xfuse
    from xfuse.ir.names import ALIGN_ATTR, KERNEL_ATTR, LANE_ATTR
    from xfuse.passes.lowering.gpu_map_parallel import map_kernel
    from xfuse.pipeline import compile_pipeline
    from xfuse.runtime.compiler import is_fresh_view, lower_to_loops

    idx = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 30])

    def shifted_softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.index_select(x, 3, idx) * 0.25, dim=-1)

    module = import_for_xfuse(shifted_softmax, (torch.randn(2, 4, 16, 31),)).program.module
    compile_pipeline("cuda")(module)
    lower_to_loops(module, "cuda", leave=is_fresh_view)
    kernels = [
        op for op in module.ops if isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes
    ]
    assert len(kernels) == 1
    kernel = kernels[0]
    assert map_kernel(kernel, module) == "rows"
    x = kernel.body.block.args[0]
    index = kernel.body.block.args[1]
    loads = [op for op in kernel.walk() if isinstance(op, memref.LoadOp)]
    assert any(LANE_ATTR in op.attributes for op in loads if op.memref is index)
    gathered = [op for op in loads if op.memref is x]
    assert len(gathered) > 1
    columns = {list(op.indices)[-1] for op in gathered}
    for op in gathered:
        assert ALIGN_ATTR not in op.attributes and LANE_ATTR not in op.attributes
        column = list(op.indices)[-1].owner
        # the index read from `idx` (wrapped where negative), not another lane's `+ lane`
        assert not (isinstance(column, arith.AddiOp) and set(column.operands) & columns)


def _row_sums(hint: int) -> str:
    """y[r] = sum of x's row r of 96 f32, over a runtime count of rows `s0` hinted at `hint`."""
    return f"""
builtin.module {{
  func.func @k(%x: memref<?xf32>, %y: memref<?xf32>, %s0: index) attributes {{xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [{hint} : i64]}} {{
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c96 = arith.constant 96 : index
    %zero = arith.constant 0.0 : f32
    "scf.parallel"(%c0, %s0, %c1) <{{operandSegmentSizes = array<i32: 1, 1, 1, 0>}}> ({{
    ^bb0(%r: index):
      %base = arith.muli %r, %c96 : index
      %sum = scf.for %j = %c0 to %c96 step %c1 iter_args(%acc = %zero) -> (f32) {{
        %o = arith.addi %base, %j : index
        %v = memref.load %x[%o] : memref<?xf32>
        %a = arith.addf %acc, %v : f32
        scf.yield %a : f32
      }}
      memref.store %sum, %y[%r] : memref<?xf32>
      scf.reduce
    }}) : (index, index, index) -> ()
    func.return
  }}
}}
"""


@pytest.mark.parametrize(("hint", "rows_per_block"), [(65536, 32), (2, 8)])
def test_rows_of_a_runtime_count_take_threads_for_the_count_at_its_hints(
    hint: int, rows_per_block: int
) -> None:
    """Rows of 96 f32 (24 vectors): many rows at the hints take 8 threads a row, 3 vectors
    each (32 rows a block of 256), as the same rows of a static count do; a few take 32, a
    thread a vector (a small kernel is bound by latency). Before, a runtime count always
    took 32."""
    from xdsl.dialects import func
    from xdsl.dialects.builtin import StringAttr

    from xfuse.ir.names import ITEMS_SIZES_ATTR, STRATEGY_ATTR

    kernel = next(op for op in _mapped(_row_sums(hint)).ops if isinstance(op, func.FuncOp))
    assert kernel.attributes[STRATEGY_ATTR] == StringAttr("rows")
    items = kernel.attributes[ITEMS_SIZES_ATTR]
    assert items == StringAttr(f"items = (s0 + {rows_per_block - 1}) floordiv {rows_per_block}")
