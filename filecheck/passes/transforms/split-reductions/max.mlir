// RUN: xfuse-opt %s -p split-reductions | filecheck %s

// max and min split the same way; they are exact in any type, so f16 stays f16.

func.func @max(%x: tensor<100000xf32>) -> tensor<f32> {
  %y = graph.reduce_max %x dims = [0] : tensor<100000xf32> -> tensor<f32>
  func.return %y : tensor<f32>
}

func.func @min_f16(%x: tensor<100000xf16>) -> tensor<f16> {
  %y = graph.reduce_min %x dims = [0] : tensor<100000xf16> -> tensor<f16>
  func.return %y : tensor<f16>
}

// CHECK-LABEL: func.func @max
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<100000xf32> -> tensor<400x250xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_max %[[R]] dims = [1] : tensor<400x250xf32> -> tensor<400xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_max %[[P]] dims = [0] : tensor<400xf32> -> tensor<f32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f32>

// CHECK-LABEL: func.func @min_f16
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<100000xf16> -> tensor<400x250xf16>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_min %[[R]] dims = [1] : tensor<400x250xf16> -> tensor<400xf16>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_min %[[P]] dims = [0] : tensor<400xf16> -> tensor<f16>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f16>
