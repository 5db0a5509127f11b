// RUN: xfuse-opt %s -p convolution-bias | filecheck %s

// A convolution with a bias runs without it; the bias, one value per output channel, is
// added after it by a graph op.
func.func @bias(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) -> tensor<1x8x4x4xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w, %b) args = ["%t0", "%t1", "%t2", [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @bias
// CHECK-NEXT:    %[[C:.*]] = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32>
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %b : tensor<8xf32> -> tensor<1x8x1x1xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.add %[[C]], %[[R]] : tensor<1x8x4x4xf32>, tensor<1x8x1x1xf32> -> tensor<1x8x4x4xf32>
// CHECK-NEXT:    func.return %[[Y]]

// Without a bias, or with the bias's tensor also read as another argument, it stays.
func.func @none(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @none
// CHECK-NEXT:    graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none,
// CHECK-NEXT:    func.return
