// RUN: xfuse-opt %s -p fold-linear | filecheck %s

// The second layer of an MLP after fusion: the GEMM and its lone bias add become one linear.
func.func @bias(%x: tensor<4x16xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %wt = graph.permute %w perm = [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
  %mm = graph.matmul %x, %wt : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  %y = graph.add %b, %mm : tensor<8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @bias
// CHECK-NEXT:    %[[Y:.*]] = graph.linear %x, %w bias(%b : tensor<8xf32>) : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[Y]]

// A bias add that fusion put in a group with the ReLU stays there; the GEMM still folds.
func.func @fused_bias(%x: tensor<2x3x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<2x3x16xf32> {
  %wt = graph.permute %w perm = [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %mm = graph.matmul %x, %wt : tensor<2x3x8xf32>, tensor<8x16xf32> -> tensor<2x3x16xf32>
  %g = fusion.group (%mm, %b) kind = "elementwise" rule = "test" : (tensor<2x3x16xf32>, tensor<16xf32>) -> tensor<2x3x16xf32> {
  ^bb0(%a: tensor<2x3x16xf32>, %c: tensor<16xf32>):
    %s = graph.add %a, %c : tensor<2x3x16xf32>, tensor<16xf32> -> tensor<2x3x16xf32>
    %r = graph.relu %s : tensor<2x3x16xf32>
    fusion.yield %r : tensor<2x3x16xf32>
  }
  func.return %g : tensor<2x3x16xf32>
}

// CHECK-LABEL: func.func @fused_bias
// CHECK-NEXT:    %[[MM:.*]] = graph.linear %x, %w : tensor<2x3x8xf32>, tensor<16x8xf32> -> tensor<2x3x16xf32>
// CHECK-NEXT:    %[[G:.*]] = fusion.group(%[[MM]], %b)
// CHECK:           graph.add
// CHECK-NEXT:      graph.relu

// Left alone: the GEMM's result has another user (the add is not its only use), a bias that
// is not per output column, and a matmul whose rhs is not a transposed weight.
func.func @kept(%x: tensor<4x16xf32>, %w: tensor<8x16xf32>, %m: tensor<4x8xf32>, %v: tensor<16x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %wt = graph.permute %w perm = [1, 0] : tensor<8x16xf32> -> tensor<16x8xf32>
  %mm = graph.matmul %x, %wt : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  %y = graph.add %mm, %m : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %z = graph.matmul %x, %v : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  func.return %y, %mm, %z : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK-NEXT:    %[[MM:.*]] = graph.linear %x, %w : tensor<4x16xf32>, tensor<8x16xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.add %[[MM]], %m
// CHECK-NEXT:    %[[Z:.*]] = graph.matmul %x, %v
// CHECK-NEXT:    func.return %[[Y]], %[[MM]], %[[Z]]
