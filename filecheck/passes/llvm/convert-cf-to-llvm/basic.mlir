// RUN: xfuse-opt %s -p convert-cf-to-llvm | filecheck %s

// Branches keep their block arguments.
func.func @k(%c: i1, %x: f32, %y: f32) -> f32 attributes {xfuse.kernel} {
  cf.cond_br %c, ^a(%x : f32), ^a(%y : f32)
^a(%v: f32):
  func.return %v : f32
}
// CHECK:      llvm.cond_br %c, ^a(%x : f32), ^a(%y : f32)
// CHECK-NEXT: ^a(%v: f32):
// CHECK-NOT:  cf.
