// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @linear(%x: tensor<2x3x8xf32>, %w: tensor<5x8xf32>, %b: tensor<5xf32>) -> tensor<2x3x5xf32> {
  %y = graph.linear %x, %w bias(%b : tensor<5xf32>) : tensor<2x3x8xf32>, tensor<5x8xf32> -> tensor<2x3x5xf32>
  func.return %y : tensor<2x3x5xf32>
}

func.func @linear_vector(%x: tensor<8xf32>, %w: tensor<5x8xf32>) -> tensor<5xf32> {
  %y = graph.linear %x, %w : tensor<8xf32>, tensor<5x8xf32> -> tensor<5xf32>
  func.return %y : tensor<5xf32>
}

// CHECK-LABEL: func.func @linear
// CHECK-NEXT:    %[[WT:.*]] = graph.permute %w perm = [1, 0] : tensor<5x8xf32> -> tensor<8x5xf32>
// CHECK-NEXT:    %[[MM:.*]] = graph.matmul %x, %[[WT]] : tensor<2x3x8xf32>, tensor<8x5xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.add %[[MM]], %b : tensor<2x3x5xf32>, tensor<5xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT:    func.return %[[Y]]

// CHECK-LABEL: func.func @linear_vector
// CHECK-NEXT:    %[[ROW:.*]] = graph.reshape %x : tensor<8xf32> -> tensor<1x8xf32>
// CHECK-NEXT:    %[[WT:.*]] = graph.permute %w perm = [1, 0]
// CHECK-NEXT:    %[[MM:.*]] = graph.matmul %[[ROW]], %[[WT]] : tensor<1x8xf32>, tensor<8x5xf32> -> tensor<1x5xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[MM]] : tensor<1x5xf32> -> tensor<5xf32>
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-NOT:     graph.linear
