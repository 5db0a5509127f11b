// RUN: xfuse-opt %s -p depthwise-stencil | filecheck %s
// RUN: xfuse-opt %s -p "depthwise-stencil{max-taps=2}" | filecheck %s --check-prefix=SMALL

// A 2x2 depthwise convolution, stride 2, padding 1, with a bias: the padded input, one
// strided slice and one weight column ([1, C, 1, 1], which broadcasts into the output) per
// tap, their products summed from +0 in window order, the bias last.
func.func @depthwise(%x: tensor<1x4x6x6xf32>, %w: tensor<4x1x2x2xf32>, %b: tensor<4xf32>) -> tensor<1x4x3x3xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w, %b) args = ["%t0", "%t1", "%t2", [2 : i64, 2 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 4 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x1x2x2xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>
  func.return %y : tensor<1x4x3x3xf32>
}

// CHECK-LABEL: func.func @depthwise
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<4x1x2x2xf32> -> tensor<1x4x2x2xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.pad %x low = [0, 0, 1, 1] high = [0, 0, 1, 1] mode = "constant"
// CHECK-NEXT:    %[[Z:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[X0:.*]] = graph.slice %[[P]] start = [0, 0, 0, 0] limit = [1, 4, 5, 5] stride = [1, 1, 2, 2]
// CHECK-NEXT:    %[[C0:.*]] = graph.slice %[[W]] start = [0, 0, 0, 0] limit = [1, 4, 1, 1] stride = [1, 1, 1, 1]
// CHECK-NEXT:    %[[T0:.*]] = graph.mul %[[X0]], %[[C0]] : tensor<1x4x3x3xf32>, tensor<1x4x1x1xf32>
// CHECK-NEXT:    %[[S0:.*]] = graph.add %[[Z]], %[[T0]]
// CHECK-NEXT:    %[[X1:.*]] = graph.slice %[[P]] start = [0, 0, 0, 1] limit = [1, 4, 5, 6] stride = [1, 1, 2, 2]
// CHECK-NEXT:    %[[C1:.*]] = graph.slice %[[W]] start = [0, 0, 0, 1] limit = [1, 4, 1, 2]
// CHECK-NEXT:    %[[T1:.*]] = graph.mul %[[X1]], %[[C1]]
// CHECK-NEXT:    %[[S1:.*]] = graph.add %[[S0]], %[[T1]]
// CHECK-NEXT:    graph.slice %[[P]] start = [0, 0, 1, 0] limit = [1, 4, 6, 5]
// CHECK:         graph.slice %[[P]] start = [0, 0, 1, 1] limit = [1, 4, 6, 6]
// CHECK:         %[[S3:.*]] = graph.add
// CHECK-NEXT:    %[[B:.*]] = graph.reshape %b : tensor<4xf32> -> tensor<1x4x1x1xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.add %[[S3]], %[[B]]
// CHECK-NEXT:    func.return %[[Y]] : tensor<1x4x3x3xf32>
// CHECK-NOT:     graph.torch_call

// SMALL-LABEL: func.func @depthwise
// SMALL-NEXT:    graph.torch_call "aten.convolution.default"

// bf16, 1-D, no bias: input and weight are widened where they are read (the column spread
// over the output first), the taps summed in f32 and rounded once.
func.func @half(%x: tensor<1x4x5xbf16>, %w: tensor<4x1x2xbf16>) -> tensor<1x4x4xbf16> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64], [0 : i64], [1 : i64], false, [0 : i64], 4 : i64] kwargs = {} : (tensor<1x4x5xbf16>, tensor<4x1x2xbf16>) -> tensor<1x4x4xbf16>
  func.return %y : tensor<1x4x4xbf16>
}

// CHECK-LABEL: func.func @half
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<4x1x2xbf16> -> tensor<1x4x2xbf16>
// CHECK-NEXT:    graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[X0:.*]] = graph.slice %x start = [0, 0, 0] limit = [1, 4, 4]
// CHECK-NEXT:    %[[C0:.*]] = graph.slice %[[W]] start = [0, 0, 0] limit = [1, 4, 1]
// CHECK-NEXT:    %[[B0:.*]] = graph.broadcast_in_dim %[[C0]] dims = [0, 1, 2] : tensor<1x4x1xbf16> -> tensor<1x4x4xbf16>
// CHECK-NEXT:    %[[XF:.*]] = graph.cast %[[X0]] : tensor<1x4x4xbf16> to tensor<1x4x4xf32>
// CHECK-NEXT:    %[[WF:.*]] = graph.cast %[[B0]] : tensor<1x4x4xbf16> to tensor<1x4x4xf32>
// CHECK-NEXT:    graph.mul %[[XF]], %[[WF]] : tensor<1x4x4xf32>, tensor<1x4x4xf32>
// CHECK:         graph.add
// CHECK:         %[[S:.*]] = graph.add
// CHECK-NEXT:    %[[Y:.*]] = graph.cast %[[S]] : tensor<1x4x4xf32> to tensor<1x4x4xbf16>
// CHECK-NEXT:    func.return %[[Y]]

// SMALL-LABEL: func.func @half
// SMALL-NEXT:    graph.reshape

// A dense convolution is left to the library.
func.func @dense(%x: tensor<1x4x6x6xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @dense
// CHECK-NEXT:    graph.torch_call "aten.convolution.default"
