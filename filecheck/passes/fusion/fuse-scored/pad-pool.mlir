// RUN: xfuse-opt %s -p fuse-scored | filecheck %s
// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s --check-prefix=GREEDY

// A pad or pool takes in its producers although their spaces differ (it computes
// them at the positions its windows read): a batch norm + relu and the max pool after it are
// one group, an exp and the pad after it another. A producer whose value is also read
// elsewhere (%s, returned) stays out: the group would have an output of another shape.
func.func @forward(%x: tensor<1x4x8x8xf32>, %m: tensor<4x1x1xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x10x10xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %b = graph.sub %x, %m : tensor<1x4x8x8xf32>, tensor<4x1x1xf32> -> tensor<1x4x8x8xf32>
  %r = graph.relu %b : tensor<1x4x8x8xf32>
  %p = graph.pool %r kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>
  %e = graph.exp %x : tensor<1x4x8x8xf32>
  %q = graph.pad %e low = [0, 0, 1, 1] high = [0, 0, 1, 1] mode = "constant" value = 0.0 : f64 : tensor<1x4x8x8xf32> -> tensor<1x4x10x10xf32>
  %t = graph.tanh %x : tensor<1x4x8x8xf32>
  %w = graph.pool %t kind = "avg" kernel = [5, 5] stride = [1, 1] padding = [2, 2] dilation = [1, 1] count_include_pad : tensor<1x4x8x8xf32> -> tensor<1x4x8x8xf32>
  %s = graph.sigmoid %x : tensor<1x4x8x8xf32>
  %u = graph.pad %s low = [0, 0, 1, 1] high = [0, 0, 1, 1] mode = "constant" value = 0.0 : f64 : tensor<1x4x8x8xf32> -> tensor<1x4x10x10xf32>
  %v = graph.slice %u start = [0, 0, 0, 0] limit = [1, 4, 8, 8] stride = [1, 1, 1, 1] : tensor<1x4x10x10xf32> -> tensor<1x4x8x8xf32>
  func.return %p, %q, %w, %s : tensor<1x4x4x4xf32>, tensor<1x4x10x10xf32>, tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

// CHECK:       %p = fusion.group(%x, %m) kind = "injective"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    graph.sub
// CHECK-NEXT:    graph.relu
// CHECK-NEXT:    graph.pool
// CHECK-NEXT:    fusion.yield
// CHECK:       %q = fusion.group(%x) kind = "injective"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    graph.exp
// CHECK-NEXT:    graph.pad
// CHECK-NEXT:    fusion.yield
// CHECK:       %u = graph.pad %s
// CHECK-NEXT:  %v = graph.slice %u

// GREEDY:      fusion.group(%x, %m)
// GREEDY-NEXT: ^bb0
// GREEDY-NEXT:   graph.sub
// GREEDY-NEXT:   graph.relu
// GREEDY-NEXT:   graph.pool
