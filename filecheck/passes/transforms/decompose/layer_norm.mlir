// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @layer_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = graph.layer_norm %x weight(%w : tensor<8xf32>) bias(%b : tensor<8xf32>) rank = 1 eps = 1.0e-05 : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

func.func @layer_norm_no_affine(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %y = graph.layer_norm %x rank = 2 eps = 1.0e-03 : tensor<2x4x8xf32>
  func.return %y : tensor<2x4x8xf32>
}

// x - mean is corrected by its own mean (the rounding error of the mean, which would shift every
// element the same way); the variance is mean(d^2) - c^2, so that both means read d in one pass.
// CHECK-LABEL: func.func @layer_norm
// CHECK-NEXT:    %[[MEAN:.*]] = graph.reduce_mean %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[D:.*]] = graph.sub %x, %[[MEAN]]
// CHECK-NEXT:    %[[ERR:.*]] = graph.reduce_mean %[[D]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[SQ:.*]] = graph.mul %[[D]], %[[D]]
// CHECK-NEXT:    %[[MSQ:.*]] = graph.reduce_mean %[[SQ]] dims = [1] keepdim
// CHECK-NEXT:    %[[ERR2:.*]] = graph.mul %[[ERR]], %[[ERR]]
// CHECK-NEXT:    %[[DIFF:.*]] = graph.sub %[[MSQ]], %[[ERR2]]
// CHECK-NEXT:    %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[VAR:.*]] = graph.maximum %[[DIFF]], %[[ZERO]]
// CHECK-NEXT:    %[[C:.*]] = graph.sub %[[D]], %[[ERR]]
// CHECK-NEXT:    %[[EPS:.*]] = graph.constant dense<1.000000e-05> : tensor<f32>
// CHECK-NEXT:    %[[VE:.*]] = graph.add %[[VAR]], %[[EPS]]
// CHECK-NEXT:    %[[R:.*]] = graph.rsqrt %[[VE]] : tensor<4x1xf32>
// CHECK-NEXT:    %[[N:.*]] = graph.mul %[[C]], %[[R]]
// CHECK-NEXT:    %[[W:.*]] = graph.mul %[[N]], %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[B:.*]] = graph.add %[[W]], %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[B]]

// CHECK-LABEL: func.func @layer_norm_no_affine
// CHECK-NEXT:    graph.reduce_mean %x dims = [1, 2] keepdim : tensor<2x4x8xf32> -> tensor<2x1x1xf32>
// CHECK:         graph.constant dense<1.000000e-03>
// CHECK:         %[[N:.*]] = graph.mul %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x1x1xf32> -> tensor<2x4x8xf32>
// CHECK-NEXT:    func.return %[[N]]
// CHECK-NOT:     graph.layer_norm
