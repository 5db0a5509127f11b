// RUN: xfuse-opt %s -p expand-math | filecheck %s

// f32 erfc becomes Juffa's erfcf: a polynomial in (|x| - 2) / (|x| + 2), times exp(-x^2)
// (expanded too) corrected by the rounding error of x^2; 0 beyond 10.0546875, 2 - erfc(|x|)
// for x < 0. f64 erfc stays (a libm call).
func.func @k(%x: f32, %y: f64) -> f32 attributes {xfuse.kernel} {
  %e = math.erfc %x : f32
  %d = math.erfc %y : f64
  func.return %e : f32
}
// CHECK:      math.absf %x : f32
// CHECK:      arith.constant 0.276978403 : f32
// CHECK:      arith.constant -4096 : i32
// CHECK:      arith.constant 10.0546875 : f32
// CHECK:      arith.cmpf uno, %x, %x : f32
// CHECK-NOT:  math.exp
// CHECK-NOT:  math.erfc %x
// CHECK:      %d = math.erfc %y : f64
