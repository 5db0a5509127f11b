// RUN: xfuse-opt %s -p lower-to-llvm | filecheck %s

// A column mean: each iteration of the split loop takes a block of 64 columns (768 / 64 = 12
// blocks); the sums live in a 64-element stack block, the row loop outside the column loop. Its
// 49 rows are added in runs of 16 (the last ends at row 49) into a second block, of partials,
// which after each run is added into the sums and reset to 0.
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
// CHECK-NEXT:    %[[N:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NEXT:    llvm.alloca %[[N]] x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK-NEXT:    %[[M:.*]] = llvm.mlir.constant(64) : i64
// CHECK-NEXT:    llvm.alloca %[[M]] x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
// CHECK-NOT:     llvm.alloca
// CHECK:         %[[LEN:.*]] = llvm.mlir.constant(16) : i64
// CHECK:         %[[STOP:.*]] = llvm.add %{{.*}}, %[[LEN]] : i64
// CHECK-NEXT:    %[[BEFORE:.*]] = llvm.icmp "ult" %[[STOP]], %c49 : i64
// CHECK-NEXT:    llvm.select %[[BEFORE]], %[[STOP]], %c49 : i1, i64
// CHECK:         llvm.fadd %{{.*}}, %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc>} : f32
// CHECK:         llvm.fadd %{{.*}}, %{{.*}} {fastmathFlags = #llvm.fastmath<reassoc>} : f32
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
