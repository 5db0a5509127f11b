// RUN: xfuse-opt %s -p expand-math | filecheck %s

// f32 exp becomes a range reduction (clamped to [-104, 88.8], x = n ln2 + r), a polynomial in r
// and a scale by 2^n built from the exponent bits: code LLVM can vectorize. sqrt is an LLVM
// intrinsic already, and f64 math stays as it is.
func.func @k(%x: f32, %y: f64) -> f32 attributes {xfuse.kernel} {
  %e = math.exp %x : f32
  %s = math.sqrt %e : f32
  %t = math.tanh %y : f64
  func.return %s : f32
}
// CHECK:      arith.constant -1.040000e+02 : f32
// CHECK:      arith.constant 8.880000e+01 : f32
// CHECK:      arith.constant 1.44269502 : f32
// CHECK:      math.floor
// CHECK:      arith.bitcast %{{.*}} : f32 to i32
// CHECK:      arith.shli
// CHECK:      arith.bitcast %{{.*}} : i32 to f32
// CHECK-NOT:  math.exp
// CHECK:      %s = math.sqrt %{{.*}} : f32
// CHECK-NEXT: %t = math.tanh %y : f64
