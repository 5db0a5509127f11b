// RUN: xfuse-opt %s -p split-reductions | filecheck %s

// A full sum of 2^20 elements: 1024 rows of 1024 (stage 1), then the 1024 partial sums.

func.func @sum(%x: tensor<1048576xf32>) -> tensor<f32> {
  %y = graph.reduce_sum %x dims = [0] : tensor<1048576xf32> -> tensor<f32>
  func.return %y : tensor<f32>
}

// A full sum over two dims: viewed as [B, C] all the same.
func.func @sum_2d(%x: tensor<300x1000xf32>) -> tensor<f32> {
  %y = graph.reduce_sum %x dims = [0, 1] : tensor<300x1000xf32> -> tensor<f32>
  func.return %y : tensor<f32>
}

// CHECK-LABEL: func.func @sum
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<1048576xf32> -> tensor<1024x1024xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [1] : tensor<1024x1024xf32> -> tensor<1024xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<1024xf32> -> tensor<f32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f32>

// CHECK-LABEL: func.func @sum_2d
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<300x1000xf32> -> tensor<600x500xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [1] : tensor<600x500xf32> -> tensor<600xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<600xf32> -> tensor<f32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f32>
