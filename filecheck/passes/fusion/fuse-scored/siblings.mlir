// RUN: xfuse-opt %s -p fuse-scored | filecheck %s

// Two readers of the same input over the same iteration space share one group with two
// outputs: the input is read once.
func.func @forward(%x: tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>) {
  %a = graph.exp %x : tensor<64x64xf32>
  %b = graph.tanh %x : tensor<64x64xf32>
  func.return %a, %b : tensor<64x64xf32>, tensor<64x64xf32>
}

// CHECK:       %b, %a = fusion.group(%x) kind = "elementwise" rule = "fuse-scored:sibling"
// CHECK-SAME:    (tensor<64x64xf32>) -> (tensor<64x64xf32>, tensor<64x64xf32>)
// CHECK-NEXT:  ^bb0(%[[X:.*]]: tensor<64x64xf32>):
// CHECK-NEXT:    %[[A:.*]] = graph.exp %[[X]]
// CHECK-NEXT:    %[[B:.*]] = graph.tanh %[[X]]
// CHECK-NEXT:    fusion.yield %[[B]], %[[A]]
// CHECK:       func.return %a, %b
