// RUN: xfuse-opt %s -p group-cleanup | filecheck %s

// Inside a group: identical constants pooled at the top, a recomputed exp computed once (CSE),
// a dead op removed; at the boundary: an unused output, a duplicate input and an input that
// nothing reads are dropped.
func.func @forward(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %r, %unused = fusion.group(%x, %y, %x) kind = "reduction" rule = "fuse-greedy:recompute" : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>, %a2: tensor<4xf32>):
    %e1 = graph.exp %a : tensor<4xf32>
    %c1 = graph.constant dense<2.0> : tensor<f32>
    %m1 = graph.mul %e1, %c1 : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
    %e2 = graph.exp %a2 : tensor<4xf32>
    %c2 = graph.constant dense<2.0> : tensor<f32>
    %m2 = graph.mul %e2, %c2 : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
    %dead = graph.reduce_sum %m2 dims = [0] : tensor<4xf32> -> tensor<f32>
    %s = graph.add %m1, %m2 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    fusion.yield %s, %m1 : tensor<4xf32>, tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// CHECK:       %r = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:recompute" : (tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: tensor<4xf32>):
// CHECK-NEXT:    %[[C:.*]] = graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[E:.*]] = graph.exp %[[A]]
// CHECK-NEXT:    %[[M:.*]] = graph.mul %[[E]], %[[C]]
// CHECK-NEXT:    %[[S:.*]] = graph.add %[[M]], %[[M]]
// CHECK-NEXT:    fusion.yield %[[S]] : tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %r
