// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s

// Decomposed softmax and log-softmax: each is ONE reduction group, the reductions and the
// pointwise math around them together.
func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = graph.reduce_max %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %s = graph.sub %x, %m : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %e = graph.exp %s : tensor<4x8xf32>
  %z = graph.reduce_sum %e dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %y = graph.div %e, %z : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %y = fusion.group(%x) kind = "reduction" rule = "fuse-greedy:producer-consumer"
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<4x8xf32>):
// CHECK-NEXT:      graph.reduce_max
// CHECK-NEXT:      graph.sub
// CHECK-NEXT:      graph.exp
// CHECK-NEXT:      graph.reduce_sum
// CHECK-NEXT:      graph.div
// CHECK-NEXT:      fusion.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y

func.func @log_softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %m = graph.reduce_max %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %s = graph.sub %x, %m : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %e = graph.exp %s : tensor<4x8xf32>
  %z = graph.reduce_sum %e dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %l = graph.log %z : tensor<4x1xf32>
  %y = graph.sub %s, %l : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @log_softmax
// CHECK-NEXT:    %y = fusion.group(%x) kind = "reduction"
// CHECK-NOT:     fusion.group
// CHECK:         func.return %y
