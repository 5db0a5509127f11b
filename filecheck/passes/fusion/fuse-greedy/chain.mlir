// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s

// A vertical chain with a bias over the last dim and a scalar constant: one group; the
// scalar constant is copied into the group, the bias becomes an input.
func.func @forward(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %c = graph.constant dense<2.0> : tensor<f32>
  %0 = graph.add %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %1 = graph.mul %0, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %2 = graph.tanh %1 : tensor<4x8xf32>
  %3 = graph.relu %2 : tensor<4x8xf32>
  func.return %3 : tensor<4x8xf32>
}

// CHECK:      func.func @forward(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:   %[[G:.*]] = fusion.group(%x, %b) kind = "elementwise" rule = "fuse-greedy:producer-consumer" {fusion.score = {{[0-9]+}} : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:   ^bb0(%[[X:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8xf32>):
// CHECK-NEXT:     %[[A:.*]] = graph.add %[[X]], %[[B]]
// CHECK-NEXT:     %[[C:.*]] = graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:     %[[M:.*]] = graph.mul %[[A]], %[[C]]
// CHECK-NEXT:     %[[T:.*]] = graph.tanh %[[M]]
// CHECK-NEXT:     %[[R:.*]] = graph.relu %[[T]]
// CHECK-NEXT:     fusion.yield %[[R]] : tensor<4x8xf32>
// CHECK-NEXT:   }
// CHECK-NEXT:   func.return %[[G]] : tensor<4x8xf32>
