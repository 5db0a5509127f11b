// RUN: xfuse-opt %s -p gpu-map-parallel | filecheck %s
// RUN: xfuse-opt %s -p 'gpu-map-parallel{unroll=2 block-size=128}' | filecheck %s --check-prefix=UNROLL
// RUN: not xfuse-opt %s -p 'gpu-map-parallel{block-size=2048}' 2>&1 | filecheck %s --check-prefix=BAD

// An elementwise kernel maps to a grid-stride loop over chunks of four f32 lanes (one 16-byte
// access per thread and step), with the defaults the CUDA runtime uses (block 256, unroll 1).
func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<1024xf32>
    %e = math.exp %a : f32
    memref.store %e, %out[%i] : memref<1024xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
// CHECK:      func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.gpu.strategy = "elementwise", xfuse.gpu.block = 256 : i64, xfuse.gpu.items = 256 : i64} {
// CHECK:        llvm.call_intrinsic "llvm.nvvm.read.ptx.sreg.ctaid.x"() : () -> i32
// CHECK:        scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} : i32 {
// CHECK:          %a = memref.load %x[%{{.*}}] {xfuse.gpu.align = 16 : i64} : memref<1024xf32>
// CHECK-NEXT:     %a_1 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 1 : i64} : memref<1024xf32>
// CHECK-NEXT:     %a_2 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 2 : i64} : memref<1024xf32>
// CHECK-NEXT:     %a_3 = memref.load %x[%{{.*}}] {xfuse.gpu.lane = 3 : i64} : memref<1024xf32>
// CHECK:          memref.store %e, %out[%{{.*}}] {xfuse.gpu.align = 16 : i64} : memref<1024xf32>
// CHECK-NOT:  scf.parallel

// UNROLL:     xfuse.gpu.block = 128 : i64
// UNROLL-COUNT-8: math.exp

// BAD: pass 'gpu-map-parallel': option 'block-size' must be an integer from 1 to 1024
