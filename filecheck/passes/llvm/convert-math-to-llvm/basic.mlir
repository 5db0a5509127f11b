// RUN: xfuse-opt %s -p convert-math-to-llvm | filecheck %s

// math ops become LLVM intrinsics of their width.
func.func @k(%x: f32, %y: f64) -> f32 attributes {xfuse.kernel} {
  %e = math.exp %x : f32
  %s = math.sqrt %e : f32
  %t = math.tanh %y : f64
  func.return %s : f32
}
// CHECK:      %e = llvm.call_intrinsic "llvm.exp.f32"(%x) : (f32) -> f32
// CHECK-NEXT: %s = llvm.call_intrinsic "llvm.sqrt.f32"(%e) : (f32) -> f32
// CHECK-NEXT: %t = llvm.call_intrinsic "llvm.tanh.f64"(%y) : (f64) -> f64
