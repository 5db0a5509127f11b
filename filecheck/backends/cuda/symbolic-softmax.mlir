// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// Softmax over x: [s0, s1], the rows and the row length sizes at run time (i64 parameters
// after the buffers). The threads of a row stride over its runtime length one element at a
// time (no row kept in registers: its length is unknown), so the block shape is valid for
// every length; it is chosen at the size hints: a warp a row (8 rows a block) for rows of
// about 100, a block of 128 threads a row (warp shuffles, then shared memory) for rows of
// about 8192. The launch computes its blocks from the size arguments (here named s77 and
// s27, as torch.export names them) per call: `items = (s77 + 7) floordiv 8` (rows in blocks
// of 8), or `items = s77`, in the size syntax of a `graph.sizes` table.

builtin.module {
  func.func @softmax_short(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s77", "s27"], xfuse.extent = "s77", xfuse.size_hints = [4 : i64, 100 : i64]} {
    %4 = arith.constant 0 : index
    %5 = arith.constant 1 : index
    %6 = arith.constant 0xff800000 : f32
    %7 = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%4, %2, %5) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%8: index):
      %9 = arith.muli %8, %3 : index
      %10 = scf.for %11 = %4 to %3 step %5 iter_args(%12 = %6) -> (f32) {
        %13 = arith.addi %9, %11 : index
        %14 = memref.load %0[%13] : memref<?xf32>
        %15 = arith.maximumf %12, %14 : f32
        scf.yield %15 : f32
      }
      %16 = scf.for %17 = %4 to %3 step %5 iter_args(%18 = %7) -> (f32) {
        %19 = arith.addi %9, %17 : index
        %20 = memref.load %0[%19] : memref<?xf32>
        %21 = arith.subf %20, %10 : f32
        %22 = math.exp %21 : f32
        %23 = arith.addf %18, %22 fastmath<reassoc> : f32
        scf.yield %23 : f32
      }
      scf.for %24 = %4 to %3 step %5 {
        %25 = arith.addi %9, %24 : index
        %26 = memref.load %0[%25] : memref<?xf32>
        %27 = arith.subf %26, %10 : f32
        %28 = math.exp %27 : f32
        %29 = arith.divf %28, %16 : f32
        memref.store %29, %1[%25] : memref<?xf32>
      }
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
  func.func @softmax_long(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s77", "s27"], xfuse.extent = "s77", xfuse.size_hints = [4 : i64, 8192 : i64]} {
    %4 = arith.constant 0 : index
    %5 = arith.constant 1 : index
    %6 = arith.constant 0xff800000 : f32
    %7 = arith.constant 0.000000e+00 : f32
    "scf.parallel"(%4, %2, %5) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%8: index):
      %9 = arith.muli %8, %3 : index
      %10 = scf.for %11 = %4 to %3 step %5 iter_args(%12 = %6) -> (f32) {
        %13 = arith.addi %9, %11 : index
        %14 = memref.load %0[%13] : memref<?xf32>
        %15 = arith.maximumf %12, %14 : f32
        scf.yield %15 : f32
      }
      %16 = scf.for %17 = %4 to %3 step %5 iter_args(%18 = %7) -> (f32) {
        %19 = arith.addi %9, %17 : index
        %20 = memref.load %0[%19] : memref<?xf32>
        %21 = arith.subf %20, %10 : f32
        %22 = math.exp %21 : f32
        %23 = arith.addf %18, %22 fastmath<reassoc> : f32
        scf.yield %23 : f32
      }
      scf.for %24 = %4 to %3 step %5 {
        %25 = arith.addi %9, %24 : index
        %26 = memref.load %0[%25] : memref<?xf32>
        %27 = arith.subf %26, %10 : f32
        %28 = math.exp %27 : f32
        %29 = arith.divf %28, %16 : f32
        memref.store %29, %1[%25] : memref<?xf32>
      }
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": -1, "items_sizes": "items = (s77 + 7) floordiv 8", "kernel": "softmax_short", "size_args": ["s77", "s27"], "strategy": "rows"}
// CHECK:      .visible .entry softmax_short(
// CHECK:        .param .u64 softmax_short_param_2,
// CHECK-NEXT:   .param .u64 softmax_short_param_3
// CHECK-NEXT: )
// CHECK:      .maxntid 256
// CHECK-NOT:  .shared
// CHECK:      ld.param.b64 %{{rd[0-9]+}}, [softmax_short_param_3];
// CHECK:      ld.global.nc.b32
// CHECK:      max.NaN.f32
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// CHECK:      ex2.approx
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// CHECK:      rcp.rn.f32
// CHECK:      st.global.b32
// CHECK-NOT:  bar.sync

// CHECK:      // xfuse-launch {"block": 128, "items": -1, "items_sizes": "items = s77", "kernel": "softmax_long", "size_args": ["s77", "s27"], "strategy": "rows"}
// CHECK:      .visible .entry softmax_long(
// CHECK:      .maxntid 128
// CHECK:      .shared .align 4 .b8 __xfuse_smem_softmax_long_0[128];
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// CHECK:      st.shared.b32
// CHECK:      bar.sync 0;
// CHECK:      rcp.rn.f32
// CHECK:      st.global.b32
