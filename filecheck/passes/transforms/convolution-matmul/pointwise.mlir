// RUN: xfuse-opt %s -p "convolution-matmul{every=true}" | filecheck %s
// RUN: xfuse-opt %s -p convolution-matmul | filecheck %s --check-prefix=TORCH

// A 1x1 convolution of stride 1 without padding, batch 1, of a value the program makes: the
// weight as [O, C] times the input as [C, H*W], seen as the result's shape.
func.func @pointwise(%x: tensor<1x16x4x4xf32>, %w: tensor<8x16x1x1xf32>) -> tensor<1x8x4x4xf32> {
  %r = graph.relu %x : tensor<1x16x4x4xf32>
  %y = graph.torch_call "aten.convolution.default"(%r, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x16x4x4xf32>, tensor<8x16x1x1xf32>) -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @pointwise
// CHECK-NEXT:    %[[R:.*]] = graph.relu %x
// CHECK-NEXT:    %[[C:.*]] = graph.reshape %[[R]] : tensor<1x16x4x4xf32> -> tensor<16x16xf32>
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
  %r = graph.relu %x : tensor<1x4x2x3xf64>
  %y = graph.torch_call "aten.convolution.default"(%r, %w, %b) args = ["%t0", "%t1", "%t2", [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x2x3xf64>, tensor<6x4x1x1xf64>, tensor<6xf64>) -> tensor<1x6x2x3xf64>
  func.return %y : tensor<1x6x2x3xf64>
}

// CHECK-LABEL: func.func @bias
// CHECK-NEXT:    %[[R:.*]] = graph.relu %x
// CHECK-NEXT:    %[[C:.*]] = graph.reshape %[[R]] : tensor<1x4x2x3xf64> -> tensor<4x6xf64>
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<6x4x1x1xf64> -> tensor<6x4xf64>
// CHECK-NEXT:    %[[B:.*]] = graph.reshape %b : tensor<6xf64> -> tensor<6x1xf64>
// CHECK-NEXT:    %[[M:.*]] = graph.torch_call "aten.addmm.default"(%[[B]], %[[W]], %[[C]]) args = ["%t0", "%t1", "%t2"] kwargs = {} : (tensor<6x1xf64>, tensor<6x4xf64>, tensor<4x6xf64>) -> tensor<6x6xf64>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[M]] : tensor<6x6xf64> -> tensor<1x6x2x3xf64>

// Left to torch: a 3x3 window, a stride of 2, a batch of 2, f16, and an input the call gives
// (it may come channels-last, and then torch takes oneDNN).
func.func @kept(%x: tensor<1x4x6x6xf32>, %w3: tensor<4x4x3x3xf32>, %w1: tensor<4x4x1x1xf32>, %x2: tensor<2x4x6x6xf32>, %h: tensor<1x4x6x6xf16>, %wh: tensor<4x4x1x1xf16>) -> (tensor<1x4x4x4xf32>, tensor<1x4x3x3xf32>, tensor<2x4x6x6xf32>, tensor<1x4x6x6xf16>, tensor<1x4x6x6xf32>) {
  %r = graph.relu %x : tensor<1x4x6x6xf32>
  %r2 = graph.relu %x2 : tensor<2x4x6x6xf32>
  %rh = graph.relu %h : tensor<1x4x6x6xf16>
  %a = graph.torch_call "aten.convolution.default"(%r, %w3) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x3x3xf32>) -> tensor<1x4x4x4xf32>
  %b = graph.torch_call "aten.convolution.default"(%r, %w1) args = ["%t0", "%t1", none, [2 : i64, 2 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x3x3xf32>
  %c = graph.torch_call "aten.convolution.default"(%r2, %w1) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<2x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<2x4x6x6xf32>
  %d = graph.torch_call "aten.convolution.default"(%rh, %wh) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf16>, tensor<4x4x1x1xf16>) -> tensor<1x4x6x6xf16>
  %e = graph.torch_call "aten.convolution.default"(%x, %w1) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x6x6xf32>
  func.return %a, %b, %c, %d, %e : tensor<1x4x4x4xf32>, tensor<1x4x3x3xf32>, tensor<2x4x6x6xf32>, tensor<1x4x6x6xf16>, tensor<1x4x6x6xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-5: graph.torch_call "aten.convolution.default"
// CHECK-NOT:     graph.matmul
