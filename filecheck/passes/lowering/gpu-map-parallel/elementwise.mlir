// RUN: xfuse-opt %s -p gpu-map-parallel | filecheck %s
// RUN: xfuse-opt %s -p 'gpu-map-parallel{unroll=2 block-size=128}' | filecheck %s --check-prefix=UNROLL
// RUN: not xfuse-opt %s -p 'gpu-map-parallel{block-size=2048}' 2>&1 | filecheck %s --check-prefix=BAD
// RUN: xfuse-opt %s -p 'gpu-map-parallel{min-threads=65536}' | filecheck %s --check-prefix=SPREAD

// An elementwise kernel maps to a grid-stride loop over chunks of four f32 lanes (one 16-byte
// access per thread and step), with the defaults the CUDA runtime uses (block 256, unroll 1,
// at least 32768 threads).
func.func @k(%x: memref<131072xf32>, %out: memref<131072xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 131072 : index
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<131072xf32>
    %e = math.exp %a : f32
    memref.store %e, %out[%i] : memref<131072xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
// CHECK:      func.func @k(%x: memref<131072xf32>, %out: memref<131072xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.gpu.strategy = "elementwise", xfuse.gpu.block = 256 : i64, xfuse.gpu.items = 32768 : i64} {
// CHECK:        llvm.call_intrinsic "llvm.nvvm.read.ptx.sreg.ctaid.x"() : () -> i32
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} : i32 {
// CHECK:          %a = memref.load %x[%{{.*}}] {xfuse.gpu.align = 16 : i64} : memref<131072xf32>
// CHECK-NEXT:     %a_1 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 1 : i64} : memref<131072xf32>
// CHECK-NEXT:     %a_2 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 2 : i64} : memref<131072xf32>
// CHECK-NEXT:     %a_3 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 3 : i64} : memref<131072xf32>
// CHECK:          memref.store %e, %out[%{{.*}}] {xfuse.gpu.align = 16 : i64} : memref<131072xf32>
// CHECK-NOT:  scf.parallel

// UNROLL:     xfuse.gpu.block = 128 : i64
// UNROLL-COUNT-8: math.exp

// A small kernel, or a larger `min-threads`, spreads over more threads: the width halves until
// there are enough (here 512 elements, one a thread; and 2 lanes a thread for 65536 threads).
func.func @small(%x: memref<512xf32>, %out: memref<512xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 512 : index
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<512xf32>
    %e = math.exp %a : f32
    memref.store %e, %out[%i] : memref<512xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
// CHECK:      func.func @small({{.*}} xfuse.gpu.strategy = "elementwise", xfuse.gpu.block = 256 : i64, xfuse.gpu.items = 512 : i64} {
// CHECK:          %a = memref.load %x[%{{.*}}] : memref<512xf32>
// CHECK-NEXT:     %e = math.exp %a : f32
// CHECK-NOT:      xfuse.gpu.lane

// SPREAD:     func.func @k({{.*}} xfuse.gpu.items = 65536 : i64} {
// SPREAD:       %a = memref.load %x[%{{.*}}] {xfuse.gpu.align = 8 : i64} : memref<131072xf32>
// SPREAD-NEXT:  %a_1 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 1 : i64} : memref<131072xf32>
// SPREAD-NEXT:  math.exp

// BAD: pass 'gpu-map-parallel': option 'block-size' must be an integer from 1 to 1024
