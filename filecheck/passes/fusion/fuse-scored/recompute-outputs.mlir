// RUN: xfuse-opt %s -p fuse-scored | filecheck %s
// RUN: xfuse-opt %s -p 'fuse-scored{recompute-outputs=false}' | filecheck %s --check-prefix=KEPT
// RUN: xfuse-opt %s -p fuse-scored --fusion-report | filecheck %s --check-prefix=REPORT

// GRN after a bias add and activation (ConvNeXt-V2): the activation %g feeds a reduction over
// the spatial dim, and the scaling after the channel mean reads it again. The reduction's
// group would write %g for that reader; instead the reader computes %g again from %y (read
// once more, as Inductor inlines a pointwise buffer into each reader), and %g is never
// written.
func.func @grn(%y: tensor<4x64x32xf32>, %b: tensor<32xf32>) -> tensor<4x64x32xf32> {
  %h = graph.add %y, %b : tensor<4x64x32xf32>, tensor<32xf32> -> tensor<4x64x32xf32>
  %g = graph.tanh %h : tensor<4x64x32xf32>
  %s = graph.reduce_sum %g dims = [1] keepdim : tensor<4x64x32xf32> -> tensor<4x1x32xf32>
  %m = graph.reduce_mean %s dims = [2] keepdim : tensor<4x1x32xf32> -> tensor<4x1x1xf32>
  %r = graph.div %s, %m : tensor<4x1x32xf32>, tensor<4x1x1xf32> -> tensor<4x1x32xf32>
  %n = graph.mul %g, %r : tensor<4x64x32xf32>, tensor<4x1x32xf32> -> tensor<4x64x32xf32>
  %o = graph.add %n, %g : tensor<4x64x32xf32>, tensor<4x64x32xf32> -> tensor<4x64x32xf32>
  func.return %o : tensor<4x64x32xf32>
}

// CHECK-LABEL: func.func @grn
// CHECK:         %s = fusion.group(%y, %b) kind = "reduction"
// CHECK:         %r = fusion.group(%s)
// CHECK:         %o = fusion.group(%r, %y, %b) kind = "elementwise" rule = "fuse-scored:recompute"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      graph.add
// CHECK-NEXT:      graph.tanh
// CHECK-NEXT:      graph.mul
// CHECK-NEXT:      graph.add

// KEPT-LABEL: func.func @grn
// KEPT:         %g, %s = fusion.group(%y, %b) kind = "reduction"
// KEPT:         %o = fusion.group(%g, %r)

// REPORT: group 2 elementwise fuse-scored:recompute 4 3/1 1
