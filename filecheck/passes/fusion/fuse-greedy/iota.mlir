// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s

// An iota and the cast of it read by two groups: recomputed in each (no group input or
// extra output carries it).
func.func @forward(%x: tensor<4x8xf32>, %y: tensor<8x3xf32>) -> (tensor<4x8xf32>, tensor<8x3xf32>) {
  %i = graph.iota dim = 0 start = 0 step = 1 : tensor<8xi64>
  %f = graph.cast %i : tensor<8xi64> to tensor<8xf32>
  %a = graph.add %x, %f : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %r = graph.reshape %f : tensor<8xf32> -> tensor<8x1xf32>
  %b = graph.mul %y, %r : tensor<8x3xf32>, tensor<8x1xf32> -> tensor<8x3xf32>
  func.return %a, %b : tensor<4x8xf32>, tensor<8x3xf32>
}

// CHECK-NOT:   graph.iota
// CHECK:       %a = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:recompute"
// CHECK-NEXT:  ^bb0(%{{.*}}: tensor<4x8xf32>):
// CHECK-NEXT:    graph.iota
// CHECK-NEXT:    graph.cast
// CHECK-NEXT:    graph.add
// CHECK-NEXT:    fusion.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  %b = fusion.group(%y) kind = "injective" rule = "fuse-greedy:recompute"
// CHECK-NEXT:  ^bb0(%{{.*}}: tensor<8x3xf32>):
// CHECK-NEXT:    graph.iota
// CHECK-NEXT:    graph.cast
// CHECK-NEXT:    graph.reshape
// CHECK-NEXT:    graph.mul
// CHECK-NEXT:    fusion.yield
// CHECK-NEXT:  }
