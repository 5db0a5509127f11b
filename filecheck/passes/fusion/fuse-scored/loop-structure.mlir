// RUN: xfuse-opt %s -p fuse-scored | filecheck %s
// RUN: xfuse-opt %s -p fuse-scored --fusion-report | filecheck %s --check-prefix=REPORT

// A softmax whose output is permuted: the permuted element (i, j) reads row j's sum, which one
// row loop computes only in row j's iteration. Fusion refuses the merge (`loop-structure`)
// and the group splits there: the reductions in one kernel, the division and the permute in
// another; each lowers to loops.
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
// CHECK:         %e, %z = fusion.group(%x) kind = "reduction"
// CHECK:           graph.reduce_max
// CHECK:           graph.reduce_sum
// CHECK:         %t = fusion.group(%e, %z) kind = "injective"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      graph.div
// CHECK-NEXT:      graph.permute
// CHECK-NEXT:      fusion.yield

// REPORT: rejected because  pairs  first pair
// REPORT: loop-structure    2      %z graph.reduce_sum -> %y graph.div

// A layer norm whose output is reshaped into heads: the same memory position as the
// full-shape element, so one kernel (the reduction absorbs a shape of as many elements).
func.func @layer_norm_into_heads(%x: tensor<6x8xf32>) -> tensor<6x2x4xf32> {
  %c = graph.constant dense<1.000000e-05> : tensor<f32>
  %mu = graph.reduce_mean %x dims = [1] keepdim : tensor<6x8xf32> -> tensor<6x1xf32>
  %d = graph.sub %x, %mu : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>
  %sq = graph.mul %d, %d : tensor<6x8xf32>, tensor<6x8xf32> -> tensor<6x8xf32>
  %v = graph.reduce_mean %sq dims = [1] keepdim : tensor<6x8xf32> -> tensor<6x1xf32>
  %ve = graph.add %v, %c : tensor<6x1xf32>, tensor<f32> -> tensor<6x1xf32>
  %r = graph.rsqrt %ve : tensor<6x1xf32>
  %n = graph.mul %d, %r : tensor<6x8xf32>, tensor<6x1xf32> -> tensor<6x8xf32>
  %h = graph.reshape %n : tensor<6x8xf32> -> tensor<6x2x4xf32>
  func.return %h : tensor<6x2x4xf32>
}

// CHECK-LABEL: func.func @layer_norm_into_heads
// CHECK-NEXT:    %h = fusion.group(%x) kind = "reduction"
// CHECK-NOT:     fusion.group
// CHECK:         func.return %h
