// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @var(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %y = graph.var %x dims = [1] correction = 1 : tensor<4x8xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}

func.func @var_keepdim(%x: tensor<2x3x5xf32>) -> tensor<1x3x1xf32> {
  %y = graph.var %x dims = [0, 2] correction = 0 keepdim : tensor<2x3x5xf32> -> tensor<1x3x1xf32>
  func.return %y : tensor<1x3x1xf32>
}

// CHECK-LABEL: func.func @var
// CHECK-NEXT:    %[[MEAN:.*]] = graph.reduce_mean %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[D:.*]] = graph.sub %x, %[[MEAN]]
// CHECK-NEXT:    %[[ERR:.*]] = graph.reduce_mean %[[D]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[C:.*]] = graph.sub %[[D]], %[[ERR]]
// CHECK-NEXT:    %[[SQ:.*]] = graph.mul %[[C]], %[[C]]
// CHECK-NEXT:    %[[SUM:.*]] = graph.reduce_sum %[[SQ]] dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[N:.*]] = graph.constant dense<7.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[Y:.*]] = graph.div %[[SUM]], %[[N]] : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[Y]]

// CHECK-LABEL: func.func @var_keepdim
// CHECK:         graph.reduce_sum %{{.*}} dims = [0, 2] keepdim : tensor<2x3x5xf32> -> tensor<1x3x1xf32>
// CHECK-NEXT:    graph.constant dense<1.000000e+01> : tensor<f32>
// CHECK-NOT:     graph.var
