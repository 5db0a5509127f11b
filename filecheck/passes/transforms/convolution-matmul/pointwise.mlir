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

// Left to torch: a 5x5 window of stride 1 (its patches would read each element 25 times), a
// 1x1 one of stride 3, a batch of 2, f16, and a 1x1 one of an input the call gives (it may
// come channels-last, and then torch takes oneDNN).
func.func @kept(%x: tensor<1x4x6x6xf32>, %w3: tensor<4x4x5x5xf32>, %w1: tensor<4x4x1x1xf32>, %x2: tensor<2x4x6x6xf32>, %h: tensor<1x4x6x6xf16>, %wh: tensor<4x4x1x1xf16>) -> (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>, tensor<2x4x6x6xf32>, tensor<1x4x6x6xf16>, tensor<1x4x6x6xf32>) {
  %r = graph.relu %x : tensor<1x4x6x6xf32>
  %r2 = graph.relu %x2 : tensor<2x4x6x6xf32>
  %rh = graph.relu %h : tensor<1x4x6x6xf16>
  %a = graph.torch_call "aten.convolution.default"(%r, %w3) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x5x5xf32>) -> tensor<1x4x2x2xf32>
  %b = graph.torch_call "aten.convolution.default"(%r, %w1) args = ["%t0", "%t1", none, [3 : i64, 3 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x2x2xf32>
  %c = graph.torch_call "aten.convolution.default"(%r2, %w1) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<2x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<2x4x6x6xf32>
  %d = graph.torch_call "aten.convolution.default"(%rh, %wh) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf16>, tensor<4x4x1x1xf16>) -> tensor<1x4x6x6xf16>
  %e = graph.torch_call "aten.convolution.default"(%x, %w1) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x6x6xf32>
  func.return %a, %b, %c, %d, %e : tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>, tensor<2x4x6x6xf32>, tensor<1x4x6x6xf16>, tensor<1x4x6x6xf32>
}

// CHECK-LABEL: func.func @kept
// CHECK-COUNT-5: graph.torch_call "aten.convolution.default"
// CHECK-NOT:     graph.matmul
// CHECK-NOT:     graph.patches

// A 1x1 window of stride 2: the product at full resolution, every second pixel of it read.
func.func @strided(%x: tensor<1x16x5x4xf32>, %w: tensor<8x16x1x1xf32>) -> tensor<1x8x3x2xf32> {
  %r = graph.relu %x : tensor<1x16x5x4xf32>
  %y = graph.torch_call "aten.convolution.default"(%r, %w) args = ["%t0", "%t1", none, [2 : i64, 2 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x16x5x4xf32>, tensor<8x16x1x1xf32>) -> tensor<1x8x3x2xf32>
  func.return %y : tensor<1x8x3x2xf32>
}

// CHECK-LABEL: func.func @strided
// CHECK-NEXT:    %[[R:.*]] = graph.relu %x
// CHECK-NEXT:    %[[C:.*]] = graph.reshape %[[R]] : tensor<1x16x5x4xf32> -> tensor<16x20xf32>
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<8x16x1x1xf32> -> tensor<8x16xf32>
// CHECK-NEXT:    %[[M:.*]] = graph.matmul %[[W]], %[[C]] : tensor<8x16xf32>, tensor<16x20xf32> -> tensor<8x20xf32>
// CHECK-NEXT:    %[[F:.*]] = graph.reshape %[[M]] : tensor<8x20xf32> -> tensor<1x8x5x4xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.slice %[[F]] start = [0, 0, 0, 0] limit = [1, 8, 5, 4] stride = [1, 1, 2, 2] : tensor<1x8x5x4xf32> -> tensor<1x8x3x2xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<1x8x3x2xf32>

// A 3x3 window of stride 2 (small patches, which read each element 2.25 times): the patches,
// seen as [OH*OW, C*9], times the weight, seen as [O, C*9] and transposed; the [OH*OW, O]
// product is the result channels-last, read as NCHW through a permute.
func.func @windowed(%x: tensor<1x4x5x5xf32>, %w: tensor<6x4x3x3xf32>, %b: tensor<6xf32>) -> tensor<1x6x3x3xf32> {
  %r = graph.relu %x : tensor<1x4x5x5xf32>
  %y = graph.torch_call "aten.convolution.default"(%r, %w, %b) args = ["%t0", "%t1", "%t2", [2 : i64, 2 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x5x5xf32>, tensor<6x4x3x3xf32>, tensor<6xf32>) -> tensor<1x6x3x3xf32>
  func.return %y : tensor<1x6x3x3xf32>
}

// CHECK-LABEL: func.func @windowed
// CHECK-NEXT:    %[[R:.*]] = graph.relu %x
// CHECK-NEXT:    %[[I:.*]] = graph.reshape %[[R]] : tensor<1x4x5x5xf32> -> tensor<4x5x5xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.patches %[[I]] kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<4x5x5xf32> -> tensor<3x3x4x3x3xf32>
// CHECK-NEXT:    %[[ROWS:.*]] = graph.reshape %[[P]] : tensor<3x3x4x3x3xf32> -> tensor<9x36xf32>
// CHECK-NEXT:    %[[W:.*]] = graph.reshape %w : tensor<6x4x3x3xf32> -> tensor<6x36xf32>
// CHECK-NEXT:    %[[WT:.*]] = graph.permute %[[W]] perm = [1, 0] : tensor<6x36xf32> -> tensor<36x6xf32>
// CHECK-NEXT:    %[[M:.*]] = graph.torch_call "aten.addmm.default"(%b, %[[ROWS]], %[[WT]]) args = ["%t0", "%t1", "%t2"] kwargs = {} : (tensor<6xf32>, tensor<9x36xf32>, tensor<36x6xf32>) -> tensor<9x6xf32>
// CHECK-NEXT:    %[[PIX:.*]] = graph.reshape %[[M]] : tensor<9x6xf32> -> tensor<3x3x6xf32>
// CHECK-NEXT:    %[[PL:.*]] = graph.permute %[[PIX]] perm = [2, 0, 1] : tensor<3x3x6xf32> -> tensor<6x3x3xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[PL]] : tensor<6x3x3xf32> -> tensor<1x6x3x3xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<1x6x3x3xf32>

// A program input's window becomes patches too, whatever torch would pick (16 output pixels
// for 4 channels: few enough per channel).
func.func @stem(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x7x7xf32>) -> tensor<1x4x4x4xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [2 : i64, 2 : i64], [3 : i64, 3 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x3x8x8xf32>, tensor<4x3x7x7xf32>) -> tensor<1x4x4x4xf32>
  func.return %y : tensor<1x4x4x4xf32>
}

// CHECK-LABEL: func.func @stem
// CHECK:         graph.patches %{{.*}} kernel = [7, 7] stride = [2, 2] padding = [3, 3] : tensor<3x8x8xf32> -> tensor<4x4x3x7x7xf32>
// CHECK:         graph.matmul %{{.*}}, %{{.*}} : tensor<16x147xf32>, tensor<147x4xf32> -> tensor<16x4xf32>
// CHECK-NOT:     aten.convolution

// Many output pixels per output channel (64 for 2): left to torch, whose own orientation has
// the pixels as BLAS's rows.
func.func @many_pixels(%x: tensor<1x2x8x8xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x8x8xf32> {
  %r = graph.relu %x : tensor<1x2x8x8xf32>
  %y = graph.torch_call "aten.convolution.default"(%r, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x2x8x8xf32>, tensor<2x2x3x3xf32>) -> tensor<1x2x8x8xf32>
  func.return %y : tensor<1x2x8x8xf32>
}

// CHECK-LABEL: func.func @many_pixels
// CHECK:         graph.torch_call "aten.convolution.default"
// CHECK-NOT:     graph.patches
