// RUN: xfuse-opt %s -p decompose | filecheck %s

// f16 and bf16 reductions are computed in f32 and cast back, as torch does.

func.func @softmax_f16(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %y = graph.softmax %x dim = 1 : tensor<4x8xf16>
  func.return %y : tensor<4x8xf16>
}

func.func @layer_norm_bf16(%x: tensor<4x8xbf16>, %w: tensor<8xbf16>) -> tensor<4x8xbf16> {
  %y = graph.layer_norm %x weight(%w : tensor<8xbf16>) rank = 1 eps = 1.0e-05 : tensor<4x8xbf16>
  func.return %y : tensor<4x8xbf16>
}

// CHECK-LABEL: func.func @softmax_f16
// CHECK-NEXT:    %[[X:.*]] = graph.cast %x : tensor<4x8xf16> to tensor<4x8xf32>
// CHECK-NEXT:    graph.reduce_max %[[X]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK:         %[[Y:.*]] = graph.div %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[OUT:.*]] = graph.cast %[[Y]] : tensor<4x8xf32> to tensor<4x8xf16>
// CHECK-NEXT:    func.return %[[OUT]] : tensor<4x8xf16>

// CHECK-LABEL: func.func @layer_norm_bf16
// CHECK-NEXT:    %[[X:.*]] = graph.cast %x : tensor<4x8xbf16> to tensor<4x8xf32>
// CHECK-NEXT:    graph.reduce_mean %[[X]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK:         %[[W:.*]] = graph.cast %w : tensor<8xbf16> to tensor<8xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %{{.*}}, %[[W]] : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[OUT:.*]] = graph.cast %[[Y]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK-NEXT:    func.return %[[OUT]] : tensor<4x8xbf16>
