// RUN: not xfuse-opt %s -p canonicalize,fuse-gredy 2>&1 | filecheck %s
// RUN: not xfuse-opt %s -p 'cse{frobnicate=1}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not xfuse-opt %s -p 'convert-memref-to-ptr{lower_func=3}' 2>&1 | filecheck %s --check-prefix=TYPE
// RUN: not xfuse-opt %s -p 'fuse-greedy{arg-limit=abc}' 2>&1 | filecheck %s --check-prefix=INT
// RUN: not xfuse-opt %s -p 'cse{' 2>&1 | filecheck %s --check-prefix=SYNTAX
// RUN: not xfuse-opt %s -p decompose, 2>&1 | filecheck %s --check-prefix=TRAILING
// RUN: not xfuse-opt %s -p cse,,decompose 2>&1 | filecheck %s --check-prefix=DOUBLE

// CHECK: error: unknown pass 'fuse-gredy'
// CHECK-SAME: xfuse passes:
// CHECK-NOT: Traceback
// OPTION: error: pass 'cse' has no option 'frobnicate' (its options: none)
// OPTION-NOT: Traceback
// TYPE: error: pass 'convert-memref-to-ptr': option 'lower-func' must be true or false, found 3
// TYPE-NOT: Traceback
// INT: error: pass 'fuse-greedy': option 'arg-limit' must be an integer, found 'abc'
// INT-NOT: Traceback
// SYNTAX: error: invalid pass pipeline 'cse{' at column
// SYNTAX-NOT: Traceback
// TRAILING: error: invalid pass pipeline 'decompose,' at column 11: Expected pass name here
// DOUBLE: error: invalid pass pipeline 'cse,,decompose' at column 5: Expected pass name here

func.func @f() {
  func.return
}
