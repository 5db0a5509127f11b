// RUN: xfuse-opt %s -p 'decompose{keep_linear=true}' | filecheck %s

func.func @linear_then_gelu(%x: tensor<3x8xf32>, %w: tensor<5x8xf32>) -> tensor<3x5xf32> {
  %y = graph.linear %x, %w : tensor<3x8xf32>, tensor<5x8xf32> -> tensor<3x5xf32>
  %z = graph.gelu %y approximate = "none" : tensor<3x5xf32>
  func.return %z : tensor<3x5xf32>
}

// CHECK-LABEL: func.func @linear_then_gelu
// CHECK-NEXT:    %[[Y:.*]] = graph.linear %x, %w : tensor<3x8xf32>, tensor<5x8xf32> -> tensor<3x5xf32>
// CHECK-NOT:     graph.matmul
// CHECK:         graph.erf
// CHECK-NOT:     graph.gelu
