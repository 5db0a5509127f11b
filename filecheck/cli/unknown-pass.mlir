// RUN: not xfuse-opt %s -p canonicalize,fuse-gredy 2>&1 | filecheck %s
// RUN: not xfuse-opt %s -p 'cse{frobnicate=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not xfuse-opt %s -p 'convert-memref-to-ptr{lower_func=3}' 2>&1 | filecheck %s --check-prefix=TYPE
// RUN: not xfuse-opt %s -p 'cse{' 2>&1 | filecheck %s --check-prefix=SYNTAX

// CHECK: error: unknown pass 'fuse-gredy'
// CHECK-SAME: xfuse passes:
// CHECK-NOT: Traceback
// OPTION: error: pass 'cse' has no option 'frobnicate' (its options: none)
// OPTION-NOT: Traceback
// TYPE: error: pass 'convert-memref-to-ptr': Incompatible types
// TYPE-NOT: Traceback
// SYNTAX: error: invalid pass pipeline 'cse{' at column
// SYNTAX-NOT: Traceback

func.func @f() {
  func.return
}
