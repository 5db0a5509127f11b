// RUN: xfuse-opt %s -p gpu-map-parallel,lower-to-nvvm | filecheck %s
// RUN: not xfuse-opt %s -p lower-to-nvvm 2>&1 | filecheck %s --check-prefix=UNMAPPED

// A mapped elementwise kernel: thread and block ids from NVVM intrinsics, 16-byte aligned
// noalias pointers, a thread's four lanes loaded as one aligned chunk, exp through libdevice.
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
// CHECK:      llvm.func @k(%x: !llvm.ptr {llvm.noalias, llvm.align = 16 : i64}, %out: !llvm.ptr {llvm.noalias, llvm.align = 16 : i64}) {
// CHECK:        llvm.call_intrinsic "llvm.nvvm.read.ptx.sreg.ctaid.x"() : () -> i32
// CHECK:        llvm.call_intrinsic "llvm.nvvm.read.ptx.sreg.tid.x"() : () -> i32
// CHECK:        %a = llvm.load %{{.*}} {alignment = 16 : i64} : !llvm.ptr -> f32
// CHECK:        %e = llvm.call @__nv_expf(%a) : (f32) -> f32
// CHECK:        llvm.store %e, %{{.*}} {alignment = 16 : i64} : f32, !llvm.ptr
// CHECK:      llvm.func @__nv_expf(f32) -> f32
// CHECK-NOT:  math.exp

// UNMAPPED: error: pass 'lower-to-nvvm' failed: @k: run gpu-map-parallel before lower-to-nvvm
