// RUN: xfuse-opt %s -p split-reductions | filecheck %s

// The elementwise ops that only feed the reduction are rebuilt on the viewed input, so that the
// view is of the function's argument (a free view at run time, and the row kernel reads the
// buffer as [B, C]); a prologue read elsewhere too is left where it is and viewed.

func.func @sum_of_squares(%x: tensor<131072xf32>, %s: tensor<f32>) -> tensor<f32> {
  %a = graph.mul %x, %x : tensor<131072xf32>, tensor<131072xf32> -> tensor<131072xf32>
  %b = graph.mul %a, %s : tensor<131072xf32>, tensor<f32> -> tensor<131072xf32>
  %y = graph.reduce_sum %b dims = [0] : tensor<131072xf32> -> tensor<f32>
  func.return %y : tensor<f32>
}

func.func @shared(%x: tensor<131072xf32>) -> (tensor<f32>, tensor<131072xf32>) {
  %a = graph.exp %x : tensor<131072xf32>
  %y = graph.reduce_sum %a dims = [0] : tensor<131072xf32> -> tensor<f32>
  func.return %y, %a : tensor<f32>, tensor<131072xf32>
}

// CHECK-LABEL: func.func @sum_of_squares
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<131072xf32> -> tensor<512x256xf32>
// CHECK-NEXT:    %[[A:.*]] = graph.mul %[[R]], %[[R]] : tensor<512x256xf32>, tensor<512x256xf32> -> tensor<512x256xf32>
// CHECK-NEXT:    %[[B:.*]] = graph.mul %[[A]], %s : tensor<512x256xf32>, tensor<f32> -> tensor<512x256xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[B]] dims = [1] : tensor<512x256xf32> -> tensor<512xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<512xf32> -> tensor<f32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f32>

// CHECK-LABEL: func.func @shared
// CHECK-NEXT:    %[[A:.*]] = graph.exp %x : tensor<131072xf32>
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %[[A]] : tensor<131072xf32> -> tensor<512x256xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [1]
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [0]
// CHECK-NEXT:    func.return %[[Y]], %[[A]]
