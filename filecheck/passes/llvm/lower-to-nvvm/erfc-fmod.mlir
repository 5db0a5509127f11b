// RUN: xfuse-opt %s -p gpu-map-parallel,lower-to-nvvm | filecheck %s

// math.erfc and arith.remf (xfuse.dialects.mlir_ops) become libdevice's erfcf and fmodf.
func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  %three = arith.constant 3.0 : f32
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<1024xf32>
    %e = math.erfc %a : f32
    %r = arith.remf %e, %three : f32
    memref.store %r, %out[%i] : memref<1024xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}
// CHECK:      %e = llvm.call @__nv_erfcf(%a) : (f32) -> f32
// CHECK:      %r = llvm.call @__nv_fmodf(%e, %{{.*}}) : (f32, f32) -> f32
// CHECK-DAG:  llvm.func @__nv_erfcf(f32) -> f32
// CHECK-DAG:  llvm.func @__nv_fmodf(f32, f32) -> f32
// CHECK-NOT:  math.erfc
// CHECK-NOT:  arith.remf
