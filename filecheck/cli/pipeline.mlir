// RUN: xfuse-opt %s -p cse,canonicalize --print-between-passes | filecheck %s
// RUN: xfuse-opt %s -p cse --no-verify-each -o %t && filecheck %s --check-prefix=FILE < %t
// RUN: xfuse-opt %s --split-input-file | filecheck %s --check-prefix=SPLIT

// Pipelines with several passes print the IR between them; `-o` writes the result to a file.

// CHECK: // IR after cse:
// CHECK: func.func @f
// CHECK-COUNT-1: graph.exp
// CHECK-NOT: // IR after canonicalize
// CHECK: func.func @f
// CHECK-COUNT-1: graph.exp

// FILE: func.func @f
// FILE-COUNT-1: graph.exp

// SPLIT: func.func @f
// SPLIT: {{//}} -----
// SPLIT: func.func @g

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  %1 = graph.exp %x : tensor<4xf32>
  %2 = graph.add %0, %1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %2 : tensor<4xf32>
}

// -----

func.func @g() {
  func.return
}
