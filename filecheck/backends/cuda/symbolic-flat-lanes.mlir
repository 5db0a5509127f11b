// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// RUN: python -m xfuse.backends.cuda %s | filecheck %s --check-prefix=NODIV
// y = x[:, :7] with x: [s0, 8], y: [s0, 7] bf16 (s0 at run time): rows of 7 take no vector, the
// flattened index space does. A grid-stride loop over chunks of 8 consecutive elements of y
// (s0 * 7 / 8 of them: `items` rounds up for the part chunk). A chunk within a row takes the
// first lane's indices with the last plus the lane; one across rows, each lane's the one
// before's plus one with a carry (a thread divides by 7 only for its first indices, as a
// product). y's 8 lanes are one aligned 128-bit store at the chunk's position, x's are 8 loads.
// The fewer than 8 elements past the last whole chunk go one each to the first threads after
// the loop. The loop is there once, in 64-bit arithmetic, with no branch on the sizes choosing
// an index width.

builtin.module {
  func.func @forward_k0(%0: memref<?xbf16>, %1: memref<?xbf16>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [6 : i64]} {
    %3 = arith.constant 0 : index
    %4 = arith.constant 1 : index
    %5 = arith.constant 7 : index
    %6 = arith.constant 8 : index
    "scf.parallel"(%3, %3, %2, %5, %4, %4) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%7: index, %8: index):
      %9 = arith.muli %7, %6 : index
      %10 = arith.addi %9, %8 : index
      %11 = memref.load %0[%10] : memref<?xbf16>
      %12 = arith.muli %7, %5 : index
      %13 = arith.addi %12, %8 : index
      memref.store %11, %1[%13] : memref<?xbf16>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": -1, "items_sizes": "items = (7 * s0 + 7) floordiv 8", "kernel": "forward_k0", "size_args": ["s0"], "strategy": "elementwise"}
// CHECK:      .visible .entry forward_k0(
// CHECK:      mov.u32 %{{r[0-9]+}}, %nctaid.x;
// CHECK-COUNT-8: ld.global.nc.b16
// CHECK-NOT:  ld.global
// CHECK:      st.global.v4.b32
// CHECK:      setp.lt.u64
// CHECK-NEXT: @%{{p[0-9]+}} bra
// CHECK:      ld.global.nc.b16
// CHECK-NEXT: {{.*}}
// CHECK-NEXT: {{.*}}
// CHECK-NEXT: st.global.b16
// CHECK-NOT:  global

// NODIV-NOT:  {{div|rem}}.
// NODIV-NOT:  2147483647
