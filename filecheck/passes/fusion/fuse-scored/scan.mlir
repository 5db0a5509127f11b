// RUN: xfuse-opt %s -p fuse-scored | filecheck %s
// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s --check-prefix=GREEDY

// A scan's kernel takes its producers (computed at the scan's index) and its
// elementwise consumers (which read the running value at its own index). A flip reads the
// scan reversed and a second scan is a loop of its own: both stay out (reason `scan`).
func.func @forward(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi64>) {
  %r = graph.relu %x : tensor<4x8xf32>
  %e = graph.exp %b : tensor<8xf32>
  %m = graph.mul %r, %e : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %c = graph.scan %m dim = 1 kind = "sum" : tensor<4x8xf32> -> tensor<4x8xf32>
  %a = graph.sub %c, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %f = graph.flip %c dims = [1] : tensor<4x8xf32>
  %i = graph.scan %m dim = 0 kind = "argmax" : tensor<4x8xf32> -> tensor<4x8xi64>
  func.return %a, %f, %i : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xi64>
}

// CHECK:       %a, %c, %m = fusion.group(%x, %b) kind = "reduction"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    graph.exp
// CHECK-NEXT:    graph.relu
// CHECK-NEXT:    graph.mul
// CHECK-NEXT:    graph.scan
// CHECK-NEXT:    graph.sub
// CHECK-NEXT:    fusion.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  %f = graph.flip %c
// CHECK-NEXT:  %i = graph.scan %m dim = 0 kind = "argmax"

// GREEDY:      %c, %a = fusion.group(%e, %x) kind = "reduction" rule = "fuse-greedy:producer-consumer"
// GREEDY-NEXT: ^bb0
// GREEDY-NEXT:   graph.relu
// GREEDY-NEXT:   graph.mul
// GREEDY-NEXT:   graph.scan %{{.*}} dim = 1 kind = "sum"
// GREEDY-NEXT:   graph.sub
// GREEDY-NEXT:   fusion.yield
// GREEDY-NEXT: }
// GREEDY-NEXT: %f = graph.flip %c
// GREEDY-NEXT: %i = fusion.group(%e, %x) kind = "reduction" rule = "fuse-greedy:recompute"
// GREEDY-NEXT: ^bb0
// GREEDY-NEXT:   graph.relu
// GREEDY-NEXT:   graph.mul
// GREEDY-NEXT:   graph.scan %{{.*}} dim = 0 kind = "argmax"
// GREEDY-NEXT:   fusion.yield
