"""`lower-to-llvm{target=cpu}` and the conversions it runs, on hand-written loop IR."""

from __future__ import annotations

import pytest
from xdsl.context import Context
from xdsl.dialects import func, llvm
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64
from xdsl.utils.exceptions import PassFailedException

from xfuse.ir import parse
from xfuse.passes import available_passes
from xfuse.passes.lower_to_llvm import LowerToLLVMPass

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
    assert available_passes()["lower-to-llvm"]() is LowerToLLVMPass


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
