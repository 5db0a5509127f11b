// RUN: xfuse-opt %s -p fuse-greedy,fusion-report | filecheck %s

// The fusion-report pass lists the groups with the rule that formed them.
func.func @forward(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %e = graph.exp %x : tensor<4x8xf32>
  %n = graph.neg %e : tensor<4x8xf32>
  %m = graph.matmul %n, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %s = graph.sigmoid %m : tensor<4x8xf32>
  func.return %s : tensor<4x8xf32>
}

// CHECK:      // function  group  kind         rule                           bytes saved  ops  inputs  outputs
// CHECK-NEXT: // @forward  0      elementwise  fuse-greedy:producer-consumer  256          2    1       1
// CHECK-NEXT: // 1 groups
// CHECK:      %m = graph.matmul %n, %w
// CHECK-NEXT: %s = graph.sigmoid %m
