// RUN: xfuse-opt %s -p gpu-map-parallel,lower-to-nvvm | filecheck %s

// `x.pow(2)` in bf16 (RMSNorm) is a square on the GPU, as in f32: the bf16 exponent is the
// truncf of an f32 constant by the time math becomes libdevice calls, and the rule for small
// powers sees through it (libdevice's powf made the bf16 RMSNorm kernel's PTX 7x larger).
func.func @k(%x: memref<1024xbf16>, %out: memref<1024xbf16>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  %two = arith.constant 2.000000e+00 : bf16
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<1024xbf16>
    %w = arith.extf %a : bf16 to f32
    %e = arith.extf %two : bf16 to f32
    %p = math.powf %w, %e : f32
    %r = arith.truncf %p : f32 to bf16
    memref.store %r, %out[%i] : memref<1024xbf16>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
// CHECK-NOT:  __nv_powf
// CHECK:      llvm.fmul %[[W:.*]], %[[W]]
// CHECK-NOT:  __nv_powf
