// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s
// RUN: xfuse-opt %s -p fuse-greedy --fusion-report | filecheck %s --check-prefix=REPORT

// A softmax whose output is permuted: the permuted element (i, j) reads row j's sum, which one
// row loop computes only in row j's iteration. Fusion refuses the merge (`loop-structure`):
// one kernel computes the row statistics, the other recomputes the exponentials, divides and
// writes the permuted result.
func.func @softmax_permuted(%x: tensor<6x8xf32>) -> tensor<8x6xf32> {
  %m = graph.reduce_max %x dims = [1] keepdim : tensor<6x8xf32> -> tensor<6x1xf32>
  %s = graph.sub %x, %m : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>
  %e = graph.exp %s : tensor<6x8xf32>
  %z = graph.reduce_sum %e dims = [1] keepdim : tensor<6x8xf32> -> tensor<6x1xf32>
  %y = graph.div %e, %z : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>
  %t = graph.permute %y perm = [1, 0] : tensor<6x8xf32> -> tensor<8x6xf32>
  func.return %t : tensor<8x6xf32>
}

// CHECK-LABEL: func.func @softmax_permuted
// CHECK:         %z, %m = fusion.group(%x) kind = "reduction"
// CHECK:           graph.reduce_max
// CHECK:           graph.reduce_sum
// CHECK:         %t = fusion.group(%z, %x, %m) kind = "injective"
// CHECK-NOT:       graph.reduce
// CHECK:           graph.permute
// CHECK-NEXT:      fusion.yield

// REPORT: rejected because  pairs  first pair
// REPORT: loop-structure    1      %z graph.reduce_sum -> %y graph.div
