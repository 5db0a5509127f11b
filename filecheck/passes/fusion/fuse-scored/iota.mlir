// RUN: xfuse-opt %s -p fuse-scored,group-cleanup | filecheck %s

// An iota (arange) has no inputs: like a scalar constant it is copied into every group that
// reads it (a kernel computes it from the loop index), never a group input or output, and
// the original is erased once nothing reads it.
func.func @forward(%x: tensor<4x8xf32>, %y: tensor<8x3xi64>) -> (tensor<4x8xf32>, tensor<8x3xi64>) {
  %i = graph.iota dim = 0 start = 0 step = 1 : tensor<8xi64>
  %f = graph.cast %i : tensor<8xi64> to tensor<8xf32>
  %a = graph.add %x, %f : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %j = graph.iota dim = 0 start = 0 step = 1 : tensor<8x1xi64>
  %b = graph.mul %y, %j : tensor<8x3xi64>, tensor<8x1xi64> -> tensor<8x3xi64>
  func.return %a, %b : tensor<4x8xf32>, tensor<8x3xi64>
}

// CHECK:       %a = fusion.group(%x) kind = "elementwise"
// CHECK-NEXT:  ^bb0(%{{.*}}: tensor<4x8xf32>):
// CHECK-NEXT:    %i = graph.iota dim = 0 start = 0 step = 1 : tensor<8xi64>
// CHECK-NEXT:    %f = graph.cast %i
// CHECK-NEXT:    %{{.*}} = graph.add
// CHECK-NEXT:    fusion.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  %b = fusion.group(%y) kind = "elementwise"
// CHECK-NEXT:  ^bb0(%{{.*}}: tensor<8x3xi64>):
// CHECK-NEXT:    %j = graph.iota dim = 0 start = 0 step = 1 : tensor<8x1xi64>
// CHECK-NEXT:    %{{.*}} = graph.mul
// CHECK-NEXT:    fusion.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %a, %b
