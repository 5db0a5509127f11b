// RUN: xfuse-opt %s -p fuse-scored | filecheck %s

// A diamond through an extern: %a feeds %d directly and through the matmul. Fusing %a into
// %d would put the matmul both before and after the group: they stay apart.
func.func @forward(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = graph.exp %x : tensor<8x8xf32>
  %m = graph.matmul %a, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %d = graph.add %a, %m : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  func.return %d : tensor<8x8xf32>
}

// CHECK:       %a = graph.exp %x
// CHECK-NEXT:  %m = graph.matmul %a, %w
// CHECK-NEXT:  %d = graph.add %a, %m
// CHECK-NEXT:  func.return %d
