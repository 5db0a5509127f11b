// RUN: xfuse-opt %s -p convert-arith-to-llvm | filecheck %s

// arith ops on scalars become their llvm ops; float arithmetic may contract into FMAs.
func.func @k(%a: i64, %b: i64, %x: f32, %y: f32) -> f32 attributes {xfuse.kernel} {
  %s = arith.addi %a, %b : i64
  %m = arith.mulf %x, %y : f32
  %c = arith.cmpf olt, %m, %y : f32
  %r = arith.select %c, %m, %y : f32
  %f = arith.sitofp %s : i64 to f32
  %t = arith.addf %r, %f : f32
  func.return %t : f32
}
// CHECK:      %s = llvm.add %a, %b : i64
// CHECK-NEXT: %m = llvm.fmul %x, %y {fastmathFlags = #llvm.fastmath<contract>} : f32
// CHECK-NEXT: %c = llvm.fcmp "olt" %m, %y : f32
// CHECK-NEXT: %r = llvm.select %c, %m, %y : i1, f32
// CHECK-NEXT: %f = llvm.sitofp %s : i64 to f32
// CHECK-NEXT: %t = llvm.fadd %r, %f {fastmathFlags = #llvm.fastmath<contract>} : f32
// CHECK-NOT:  arith.
