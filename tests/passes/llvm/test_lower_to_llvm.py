"""`lower-to-llvm{target=cpu}` and the conversions it runs, on hand-written loop IR."""

from __future__ import annotations

import pytest
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.utils.exceptions import PassFailedException

from xfuse.ir.context import parse
from xfuse.passes import get_all_passes
from xfuse.passes.llvm.lower_to_llvm import LowerToLLVMPass

KERNEL = """builtin.module {
  func.func @forward(%t: memref<6x5xf32>) {
    func.return
  }
  func.func @k(%x: memref<6x5xbf16>, %y: memref<5xf16>, %out: memref<6x5xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c6 = arith.constant 6 : index
    %c5 = arith.constant 5 : index
    "scf.parallel"(%c0, %c0, %c6, %c5, %c1, %c1) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%i: index, %j: index):
      %a = memref.load %x[%i, %j] : memref<6x5xbf16>
      %b = memref.load %y[%j] : memref<5xf16>
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : f16 to f32
      %s = arith.addf %af, %bf : f32
      %e = math.exp %s : f32
      %r = math.sqrt %e : f32
      memref.store %r, %out[%i, %j] : memref<6x5xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}"""


def lowered(text: str = KERNEL, target: str = "cpu") -> ModuleOp:
    module = parse(text)
    LowerToLLVMPass(target=target).apply(Context(), module)
    module.verify()
    return module


def test_pass_is_registered() -> None:
    assert get_all_passes()["lower-to-llvm"]() is LowerToLLVMPass


def test_kernel_becomes_llvm_func_with_range_and_noalias_pointers() -> None:
    module = lowered()
    (kernel,) = [op for op in module.ops if isinstance(op, llvm.FuncOp)]
    assert kernel.sym_name.data == "k"
    inputs = list(kernel.function_type.inputs)
    assert inputs[:2] == [i64, i64]
    assert all(isinstance(t, llvm.LLVMPointerType) for t in inputs[2:]) and len(inputs) == 5
    assert kernel.arg_attrs is not None
    assert ["llvm.noalias" in a.data for a in kernel.arg_attrs] == [False, False, True, True, True]


def test_only_llvm_ops_remain_in_kernels() -> None:
    module = lowered()
    (kernel,) = [op for op in module.ops if isinstance(op, llvm.FuncOp)]
    assert {op.dialect_name() for op in kernel.walk()} == {"llvm"}


def test_forward_is_left_alone() -> None:
    module = lowered()
    forward = [op for op in module.ops if isinstance(op, func.FuncOp)]
    assert [f.sym_name.data for f in forward] == ["forward"]


def test_extent_and_arity_globals() -> None:
    globals_ = {op.sym_name.data: op.value for op in lowered().ops if isinstance(op, llvm.GlobalOp)}
    assert globals_ == {"k.extent": IntegerAttr(6, i64), "k.arity": IntegerAttr(3, i64)}


def test_outer_dim_runs_from_lo_to_hi() -> None:
    module = lowered()
    (kernel,) = [op for op in module.ops if isinstance(op, llvm.FuncOp)]
    lo, hi = kernel.body.blocks[0].args[:2]
    assert any(isinstance(use.operation, llvm.BrOp) for use in lo.uses)
    assert all(isinstance(use.operation, llvm.ICmpOp) for use in hi.uses)


def test_low_precision_loads_keep_their_width() -> None:
    loads = [op for op in lowered().walk() if isinstance(op, llvm.LoadOp)]
    widths = sorted(str(op.dereferenced_value.type) for op in loads)
    assert widths == ["f16", "i16"]  # bf16 travels as its bits


def test_zero_parallel_dims_kernel_gets_an_extent_of_one() -> None:
    text = """builtin.module {
  func.func @k(%x: memref<4xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %zero = arith.constant 0.0 : f32
    %s = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %zero) -> (f32) {
      %v = memref.load %x[%i] : memref<4xf32>
      %a = arith.addf %acc, %v : f32
      scf.yield %a : f32
    }
    memref.store %s, %out[] : memref<f32>
    func.return
  }
}"""
    module = lowered(text)
    extents = [op.value for op in module.ops if isinstance(op, llvm.GlobalOp)]
    assert IntegerAttr(1, i64) in extents


def test_unknown_target_fails() -> None:
    with pytest.raises(PassFailedException, match="unknown target 'tpu'"):
        lowered(target="tpu")


def test_parallel_loop_not_from_zero_fails() -> None:
    text = KERNEL.replace('"scf.parallel"(%c0, %c0,', '"scf.parallel"(%c1, %c0,')
    with pytest.raises(Exception, match="from 0 by 1"):
        lowered(text)


SOFTMAX = """builtin.module {
  func.func @k(%x: memref<4x8xf32>, %out: memref<4x8xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c8 = arith.constant 8 : index
    %ninf = arith.constant 0xff800000 : f32
    %zero = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %m = scf.for %j = %c0 to %c8 step %c1 iter_args(%a = %ninf) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<4x8xf32>
        %a2 = arith.maximumf %a, %v : f32
        scf.yield %a2 : f32
      }
      %s = scf.for %j = %c0 to %c8 step %c1 iter_args(%a = %zero) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<4x8xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        %a2 = arith.addf %a, %e fastmath<reassoc> : f32
        scf.yield %a2 : f32
      }
      scf.for %j = %c0 to %c8 step %c1 {
        %v = memref.load %x[%i, %j] : memref<4x8xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        %q = arith.divf %e, %s : f32
        memref.store %q, %out[%i, %j] : memref<4x8xf32>
      }
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
}"""


def prepared(text: str) -> ModuleOp:
    from xfuse.passes.llvm.lower_to_llvm import prepare_cpu_kernels

    module = parse(text)
    prepare_cpu_kernels(module)
    return module


def test_cpu_softmax_computes_exp_once_and_divides_once_per_row() -> None:
    from xdsl.dialects import arith, math, memref, scf

    module = prepared(SOFTMAX)
    kernel = next(op for op in module.ops if isinstance(op, func.FuncOp))
    loops = [op for op in kernel.walk() if isinstance(op, scf.ForOp)]
    row, _, reduce_loop, write_loop = loops  # the row loop [lo, hi), max, sum, write
    assert row.lb == kernel.body.block.args[0]
    exps = [op for op in kernel.walk() if isinstance(op, math.ExpOp)]
    assert len(exps) == 1 and exps[0].parent_op() is reduce_loop
    # the sum loop keeps exp in the output, the write loop scales it in place
    stores = [op for op in reduce_loop.body.block.ops if isinstance(op, memref.StoreOp)]
    assert len(stores) == 1 and stores[0].value == exps[0].result
    write_ops = [op.name for op in write_loop.body.block.ops]
    assert write_ops == ["memref.load", "arith.mulf", "memref.store", "scf.yield"]
    assert not any(isinstance(op, arith.DivfOp) for op in write_loop.walk())


def test_cpu_softmax_runs_right() -> None:
    import torch

    from xfuse.backends.cpu import CPUBackend

    backend = CPUBackend()
    kernel = backend.load(backend.compile(parse(SOFTMAX), "k"), "k")
    x, out = torch.randn(4, 8), torch.empty(4, 8)
    kernel([x, out])
    torch.testing.assert_close(out, torch.softmax(x, -1))


SYMBOLIC_SOFTMAX = (
    SOFTMAX.replace("%out: memref<4x8xf32>)", "%out: memref<4x8xf32>, %n: index)")
    .replace("parallel_dims = 1 : i64}", 'parallel_dims = 1 : i64, xfuse.size_args = ["s0"]}')
    .replace("    %c8 = arith.constant 8 : index\n", "")
    .replace("%c8", "%n")
    .replace("^bb0(%i: index):\n", "^bb0(%i: index):\n      %row = arith.muli %i, %n : index\n")
    .replace(
        "        %v = memref.load",
        "        %o = arith.addi %row, %j : index\n        %v = memref.load",
    )
    .replace("[%i, %j]", "[%o]")
    .replace("memref<4x8xf32>", "memref<?xf32>")
)
"""`SOFTMAX` over rows of a runtime length `%n` (as lower-to-loops makes it for symbolic
sizes): its buffers are 1-D, read and written at the linear offset `row + j`."""


def test_cpu_symbolic_softmax_computes_exp_once() -> None:
    """The write loop's offset `row + j` is `row + j'` of the sum loop: exp is kept there."""
    from xdsl.dialects import math, memref, scf

    module = prepared(SYMBOLIC_SOFTMAX)
    kernel = next(op for op in module.ops if isinstance(op, func.FuncOp))
    # The write loop is versioned for short rows (`short_rows`): both copies read exp back.
    _, _, reduce_loop, *write_loops = [op for op in kernel.walk() if isinstance(op, scf.ForOp)]
    (exp,) = [op for op in kernel.walk() if isinstance(op, math.ExpOp)]
    assert exp.parent_op() is reduce_loop
    (kept,) = [op for op in reduce_loop.body.block.ops if isinstance(op, memref.StoreOp)]
    assert kept.value == exp.result and kept.memref == kernel.body.block.args[3]  # %out
    assert len(write_loops) == 2
    assert not any(isinstance(op, math.ExpOp) for loop in write_loops for op in loop.walk())


@pytest.mark.parametrize("n", [2, 3, 17, 100])
def test_cpu_symbolic_softmax_runs_right(n: int) -> None:
    import torch

    from xfuse.backends.cpu import CPUBackend

    backend = CPUBackend()
    kernel = backend.load(backend.compile(parse(SYMBOLIC_SOFTMAX), "k"), "k")
    x, out = torch.randn(4, n), torch.empty(4, n)
    kernel.launch_sized([x, out], [n], None)
    torch.testing.assert_close(out, torch.softmax(x, -1))


def test_values_are_kept_only_in_buffers_written_after_they_are_needed() -> None:
    # The write loop stores %out before it computes exp again, %out2 after: only %out2 can
    # hold exp until then.
    write_loop = """      scf.for %j = %c0 to %c8 step %c1 {
        %v = memref.load %x[%i, %j] : memref<4x8xf32>"""
    text = (
        SOFTMAX.replace("%out: memref<4x8xf32>)", "%out: memref<4x8xf32>, %out2: memref<4x8xf32>)")
        .replace(
            write_loop, write_loop + "\n        memref.store %v, %out[%i, %j] : memref<4x8xf32>"
        )
        .replace("memref.store %q, %out[", "memref.store %q, %out2[")
    )
    from xdsl.dialects import math, memref, scf

    module = prepared(text)
    kernel = next(op for op in module.ops if isinstance(op, func.FuncOp))
    assert len([op for op in kernel.walk() if isinstance(op, math.ExpOp)]) == 1
    reduce_loop = [op for op in kernel.walk() if isinstance(op, scf.ForOp)][2]
    (kept,) = [op for op in reduce_loop.body.block.ops if isinstance(op, memref.StoreOp)]
    assert kept.memref == kernel.body.block.args[-1]  # %out2
