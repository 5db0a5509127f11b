// RUN: xfuse-opt %s -p gpu-map-parallel,lower-to-nvvm | filecheck %s

// Rounding to bf16 is one cvt.rn.bf16.f32 on the GPU (as eager's __float2bfloat16), not the
// integer expansion that lower-to-llvm uses on the CPU.
func.func @k(%x: memref<1024xbf16>, %out: memref<1024xbf16>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<1024xbf16>
    %w = arith.extf %a : bf16 to f32
    %e = math.exp %w : f32
    %r = arith.truncf %e : f32 to bf16
    memref.store %r, %out[%i] : memref<1024xbf16>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
// CHECK:      llvm.call @__nv_expf
// CHECK:      llvm.inline_asm "cvt.rn.bf16.f32 $0, $1;", "=h,f" %{{.*}} : (f32) -> i16
// CHECK-NOT:  arith.truncf
// CHECK-NOT:  llvm.lshr
