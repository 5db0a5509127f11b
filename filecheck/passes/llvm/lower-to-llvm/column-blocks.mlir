// RUN: xfuse-opt %s -p lower-to-llvm | filecheck %s

// A column mean: each iteration of the split loop takes a block of 64 columns (768 / 64 = 12
// blocks); the sums live in a 64-element stack block, the row loop outside the column loop. Its
// 49 rows are added in 49 / 16 = 3 runs of 16, each run's rows unrolled in the column loop from
// 0 (%t to %t_15) and the run's sum added into the block's; the last row is added on its own.
func.func @colmean(%x: memref<49x768xf32>, %out: memref<768xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c768 = arith.constant 768 : index
  %c49 = arith.constant 49 : index
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 4.900000e+01 : f32
  "scf.parallel"(%c0, %c768, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%c: index):
    %s = scf.for %r = %c0 to %c49 step %c1 iter_args(%a = %zero) -> (f32) {
      %v = memref.load %x[%r, %c] : memref<49x768xf32>
      %t = arith.addf %a, %v fastmath<reassoc> : f32
      scf.yield %t : f32
    }
    %m = arith.divf %s, %n : f32
    memref.store %m, %out[%c] : memref<768xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}

// CHECK-LABEL: llvm.func @colmean(
// CHECK-NOT:     ^bb
// CHECK:         %[[N:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NEXT:    llvm.alloca %[[N]] x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK-NOT:     llvm.alloca
// CHECK:         %[[LEN:.*]] = llvm.mlir.constant(16) : i64
// CHECK:         %[[COUNT:.*]] = llvm.udiv %{{.*}}, %[[LEN]] : i64
// CHECK-NEXT:    llvm.mul %[[COUNT]], %[[LEN]] : i64
// CHECK:         %t = llvm.fadd %{{.*}}, %v {fastmathFlags = #llvm.fastmath<reassoc>} : f32
// CHECK:         %t_15 = llvm.fadd %t_14, %v_15 {fastmathFlags = #llvm.fastmath<reassoc>} : f32
// CHECK-NOT:     llvm.fadd %t_15, %v
// CHECK:         llvm.fadd %{{.*}}, %t_15 {fastmathFlags = #llvm.fastmath<reassoc>} : f32
// CHECK:         %t_16 = llvm.fadd %{{.*}}, %v_16 {fastmathFlags = #llvm.fastmath<reassoc>} : f32
// CHECK:         llvm.fdiv
// CHECK:       llvm.mlir.global external constant @colmean.extent(12 : i64)

// A row sum reads its rows with unit stride already: one row per iteration, no block.
func.func @rowsum(%x: memref<768x49xf32>, %out: memref<768xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c768 = arith.constant 768 : index
  %c49 = arith.constant 49 : index
  %zero = arith.constant 0.000000e+00 : f32
  "scf.parallel"(%c0, %c768, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%c: index):
    %s = scf.for %r = %c0 to %c49 step %c1 iter_args(%a = %zero) -> (f32) {
      %v = memref.load %x[%c, %r] : memref<768x49xf32>
      %t = arith.addf %a, %v fastmath<reassoc> : f32
      scf.yield %t : f32
    }
    memref.store %s, %out[%c] : memref<768xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}

// CHECK-LABEL: llvm.func @rowsum(
// CHECK-NOT:     llvm.alloca
// CHECK:       llvm.mlir.global external constant @rowsum.extent(768 : i64)
