// RUN: xfuse-opt %s -p convert-math-to-llvm | filecheck %s

// math.erfc (xfuse.dialects.mlir_ops) has no LLVM intrinsic: a call of libm's erfc / erfcf.
func.func @k(%x: f32, %y: f64) -> f32 attributes {xfuse.kernel} {
  %e = math.erfc %x : f32
  %d = math.erfc %y : f64
  func.return %e : f32
}
// CHECK:      %e = llvm.call @erfcf(%x) : (f32) -> f32
// CHECK-NEXT: %d = llvm.call @erfc(%y) : (f64) -> f64
// CHECK:      llvm.func @erfcf(f32) -> f32
// CHECK:      llvm.func @erfc(f64) -> f64
