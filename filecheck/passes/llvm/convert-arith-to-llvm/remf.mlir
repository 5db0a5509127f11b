// RUN: xfuse-opt %s -p convert-arith-to-llvm | filecheck %s

// arith.remf (C's fmod, xfuse.dialects.mlir_ops) becomes llvm.frem, which the CPU backend
// computes with fmodf / fmod: exact for every quotient.
func.func @k(%x: f32, %y: f32, %a: f64, %b: f64) -> f32 attributes {xfuse.kernel} {
  %r = arith.remf %x, %y : f32
  %d = arith.remf %a, %b : f64
  func.return %r : f32
}
// CHECK:      %r = llvm.frem %x, %y {{.*}}: f32
// CHECK-NEXT: %d = llvm.frem %a, %b {{.*}}: f64
// CHECK-NOT:  arith.remf
