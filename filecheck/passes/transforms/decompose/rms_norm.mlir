// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @rms_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %y = graph.rms_norm %x weight(%w : tensor<8xf32>) rank = 1 eps = 1.0e-06 : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT:    %[[SQ:.*]] = graph.mul %x, %x
// CHECK-NEXT:    %[[MS:.*]] = graph.reduce_mean %[[SQ]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[EPS:.*]] = graph.constant dense<1.000000e-06> : tensor<f32>
// CHECK-NEXT:    %[[SUM:.*]] = graph.add %[[MS]], %[[EPS]]
// CHECK-NEXT:    %[[R:.*]] = graph.rsqrt %[[SUM]]
// CHECK-NEXT:    %[[N:.*]] = graph.mul %x, %[[R]] : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %[[N]], %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-NOT:     graph.rms_norm
