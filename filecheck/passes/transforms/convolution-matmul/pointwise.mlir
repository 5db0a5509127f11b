// RUN: xfuse-opt %s -p "convolution-matmul{every=true}" | filecheck %s
// RUN: xfuse-opt %s -p convolution-matmul | filecheck %s --check-prefix=TORCH

// A 1x1 convolution of stride 1 without padding, batch 1: the weight as [O, C] times the
// input as [C, H*W], seen as the result's shape.
func.func @pointwise(%x: tensor<1x16x4x4xf32>, %w: tensor<8x16x1x1xf32>) -> tensor<1x8x4x4xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x16x4x4xf32>, tensor<8x16x1x1xf32>) -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @pointwise
// CHECK-NEXT:    %[[C:.*]] = graph.reshape %x : tensor<1x16x4x4xf32> -> tensor<16x16xf32>
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<8x16x1x1xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    %[[M:.*]] = graph.matmul %[[W]], %[[C]] : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[M]] : tensor<8x16xf32> -> tensor<1x8x4x4xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<1x8x4x4xf32>

// torch runs this one on its slow path (batch 1, 256 input elements), so the default rewrites it too.
// TORCH-LABEL: func.func @pointwise
// TORCH:         graph.matmul
// TORCH-NEXT:    graph.reshape
// TORCH-NEXT:    func.return

// With a bias: addmm adds the product onto it, as torch's slow path does.
func.func @bias(%x: tensor<1x4x2x3xf64>, %w: tensor<6x4x1x1xf64>, %b: tensor<6xf64>) -> tensor<1x6x2x3xf64> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w, %b) args = ["%t0", "%t1", "%t2", [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x2x3xf64>, tensor<6x4x1x1xf64>, tensor<6xf64>) -> tensor<1x6x2x3xf64>
  func.return %y : tensor<1x6x2x3xf64>
}

// CHECK-LABEL: func.func @bias
// CHECK-NEXT:    %[[C:.*]] = graph.reshape %x : tensor<1x4x2x3xf64> -> tensor<4x6xf64>
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<6x4x1x1xf64> -> tensor<6x4xf64>
// CHECK-NEXT:    %[[B:.*]] = graph.reshape %b : tensor<6xf64> -> tensor<6x1xf64>
// CHECK-NEXT:    %[[M:.*]] = graph.torch_call "aten.addmm.default"(%[[B]], %[[W]], %[[C]]) args = ["%t0", "%t1", "%t2"] kwargs = {} : (tensor<6x1xf64>, tensor<6x4xf64>, tensor<4x6xf64>) -> tensor<6x6xf64>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[M]] : tensor<6x6xf64> -> tensor<1x6x2x3xf64>

// Left to torch: a 3x3 window, a stride of 2, a batch of 2, f16.
func.func @kept(%x: tensor<1x4x6x6xf32>, %w3: tensor<4x4x3x3xf32>, %w1: tensor<4x4x1x1xf32>, %x2: tensor<2x4x6x6xf32>, %h: tensor<1x4x6x6xf16>, %wh: tensor<4x4x1x1xf16>) -> (tensor<1x4x4x4xf32>, tensor<1x4x3x3xf32>, tensor<2x4x6x6xf32>, tensor<1x4x6x6xf16>) {
  %a = graph.torch_call "aten.convolution.default"(%x, %w3) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32>
  %b = graph.torch_call "aten.convolution.default"(%x, %w1) args = ["%t0", "%t1", none, [2 : i64, 2 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %c = graph.torch_call "aten.convolution.default"(%x2, %w1) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<2x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<2x4x6x6xf32>
  %d = graph.torch_call "aten.convolution.default"(%h, %wh) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf16>, tensor<4x4x1x1xf16>) -> tensor<1x4x6x6xf16>
  func.return %a, %b, %c, %d : tensor<1x4x4x4xf32>, tensor<1x4x3x3xf32>, tensor<2x4x6x6xf32>, tensor<1x4x6x6xf16>
}

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-4: graph.torch_call "aten.convolution.default"
// CHECK-NOT:     graph.matmul
