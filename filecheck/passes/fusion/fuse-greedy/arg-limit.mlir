// RUN: xfuse-opt %s -p 'fuse-greedy{arg-limit=4}' | filecheck %s

// With at most 4 inputs plus outputs per group, the chain of adds of fresh inputs splits.
func.func @forward(%a: tensor<8xf32>, %b: tensor<8xf32>, %c: tensor<8xf32>, %d: tensor<8xf32>, %e: tensor<8xf32>) -> tensor<8xf32> {
  %0 = graph.add %a, %b : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %1 = graph.add %0, %c : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %2 = graph.add %1, %d : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %3 = graph.add %2, %e : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  func.return %3 : tensor<8xf32>
}

// CHECK:       %[[G0:.*]] = fusion.group(%c, %a, %b) kind = "elementwise"
// CHECK-SAME:    (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK:       %[[G1:.*]] = fusion.group(%e, %[[G0]], %d) kind = "elementwise"
// CHECK-SAME:    (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK:       func.return %[[G1]]
