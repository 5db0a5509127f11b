// RUN: xfuse-opt %s -p split-reductions | filecheck %s
// RUN: xfuse-opt %s -p 'split-reductions{min-length=1000}' | filecheck %s --check-prefix=LOW

// Shorter than min-length (65536 by default): left alone.

func.func @short(%x: tensor<8x65535xf32>) -> tensor<8xf32> {
  %y = graph.reduce_sum %x dims = [1] : tensor<8x65535xf32> -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// CHECK-LABEL: func.func @short
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %x dims = [1] : tensor<8x65535xf32> -> tensor<8xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<8xf32>

// LOW-LABEL: func.func @short
// LOW-NEXT:    graph.reshape %x : tensor<8x65535xf32> -> tensor<8x257x255xf32>
// LOW-NEXT:    graph.reduce_sum %{{.*}} dims = [2] : tensor<8x257x255xf32> -> tensor<8x257xf32>
// LOW-NEXT:    graph.reduce_sum %{{.*}} dims = [1] : tensor<8x257xf32> -> tensor<8xf32>
