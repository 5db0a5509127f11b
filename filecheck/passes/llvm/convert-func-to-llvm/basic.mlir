// RUN: xfuse-opt %s -p convert-func-to-llvm | filecheck %s

// Functions become llvm.funcs: memrefs are noalias pointers, index is i64.
func.func @forward(%t: memref<4xf32>) {
  func.return
}
func.func @k(%x: memref<4xf32>, %n: index) attributes {xfuse.kernel} {
  func.return
}
// CHECK:      llvm.func @forward(%t: !llvm.ptr {llvm.noalias}) {
// CHECK-NEXT:   llvm.return
// CHECK:      llvm.func @k(%x: !llvm.ptr {llvm.noalias}, %n: i64) {
// CHECK-NEXT:   llvm.return
