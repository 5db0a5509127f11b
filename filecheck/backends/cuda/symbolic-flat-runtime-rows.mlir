// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// y = x * 2 with x, y: [s0, s1] f32 (both sizes at run time): rows of a runtime length take
// flat lanes, 4 consecutive elements of the flattened space a thread and step; x and y are
// read and written at the iteration's own element (index i * s1 + j, the flattened
// position), so both are aligned 128-bit accesses. The part chunk (s0 * s1 mod 4 elements)
// goes one element a thread after the loop.

builtin.module {
  func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s0", xfuse.size_hints = [6 : i64, 9 : i64]} {
    %4 = arith.constant 0 : index
    %5 = arith.constant 1 : index
    %6 = arith.constant 2.000000e+00 : f32
    "scf.parallel"(%4, %4, %2, %3, %5, %5) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%7: index, %8: index):
      %9 = arith.muli %7, %3 : index
      %10 = arith.addi %9, %8 : index
      %11 = memref.load %0[%10] : memref<?xf32>
      %12 = arith.mulf %11, %6 : f32
      memref.store %12, %1[%10] : memref<?xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": -1, "items_sizes": "items = (s0 * s1 + 3) floordiv 4", "kernel": "forward_k0", "size_args": ["s0", "s1"], "strategy": "elementwise"}
// CHECK:      .visible .entry forward_k0(
// CHECK:      ld.global.nc.v4.b32
// CHECK:      st.global.v4.b32
// CHECK:      ld.global.nc.b32
// CHECK:      st.global.b32
// CHECK-NOT:  global
