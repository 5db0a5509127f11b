// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// y[i, k] = x[k, i] * 2 with y: [s0, 8], x: [8, s0] (s0 at run time): 4 f32 of y's static
// innermost dim a thread and step. y's lanes are adjacent elements, one 128-bit store; x's are
// s0 elements apart (the innermost index times a runtime size), four scalar loads.

builtin.module {
  func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [6 : i64]} {
    %3 = arith.constant 0 : index
    %4 = arith.constant 1 : index
    %5 = arith.constant 8 : index
    %6 = arith.constant 2.000000e+00 : f32
    "scf.parallel"(%3, %3, %2, %5, %4, %4) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%7: index, %8: index):
      %9 = arith.muli %8, %2 : index
      %10 = arith.addi %9, %7 : index
      %11 = memref.load %0[%10] : memref<?xf32>
      %12 = arith.mulf %11, %6 : f32
      %13 = arith.muli %7, %5 : index
      %14 = arith.addi %13, %8 : index
      memref.store %12, %1[%14] : memref<?xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": -1, "items_sizes": "items = (8 * s0) floordiv 4", "kernel": "forward_k0", "size_args": ["s0"], "strategy": "elementwise"}
// CHECK:      .visible .entry forward_k0(
// CHECK-NOT:  ld.global.nc.v
// CHECK:      ld.global.nc.b32
// CHECK-NOT:  ld.global.nc.v
// CHECK:      ld.global.nc.b32
// CHECK-NOT:  ld.global.nc.v
// CHECK:      ld.global.nc.b32
// CHECK-NOT:  ld.global.nc.v
// CHECK:      ld.global.nc.b32
// CHECK-NOT:  ld.global
// CHECK:      st.global.v4.b32
