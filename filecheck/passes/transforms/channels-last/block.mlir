// RUN: xfuse-opt %s -p 'channels-last{force=true}' | filecheck %s

// conv -> batch norm -> relu -> conv -> + residual -> relu, returned. The first convolution's
// input (a program input) is converted once by torch; each convolution's output is read as NHWC
// through a view; batch norm and relu run on NHWC tensors, with the per-channel vectors
// reshaped to broadcast along the last dim; the second convolution reads a channels-last view
// of relu's NHWC result; the returned value is permuted back to NCHW in the last op's kernel.


func.func @block(%x: tensor<2x3x8x8xf32>, %w1: tensor<4x3x3x3xf32>, %w2: tensor<4x4x3x3xf32>, %m: tensor<4xf32>) -> tensor<2x4x8x8xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w1) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  %mr = graph.reshape %m : tensor<4xf32> -> tensor<4x1x1xf32>
  %b = graph.sub %y, %mr : tensor<2x4x8x8xf32>, tensor<4x1x1xf32> -> tensor<2x4x8x8xf32>
  %r = graph.relu %b : tensor<2x4x8x8xf32>
  %z = graph.torch_call "aten.convolution.default"(%r, %w2) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<2x4x8x8xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x8x8xf32>
  %s = graph.add %z, %r : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<2x4x8x8xf32>
  %o = graph.relu %s : tensor<2x4x8x8xf32>
  func.return %o : tensor<2x4x8x8xf32>
}

// CHECK-LABEL: func.func @block
// CHECK-NEXT:    %[[XC:.*]] = graph.torch_call "aten.clone.default"(%x) args = ["%t0"] kwargs = {memory_format = "memory_format:channels_last"}
// CHECK-NEXT:    %[[Y:.*]] = graph.torch_call "aten.convolution.default"(%[[XC]], %w1)
// CHECK-NEXT:    %[[YV:.*]] = graph.torch_call "aten.permute.default"(%[[Y]]) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]] kwargs = {} : (tensor<2x4x8x8xf32>) -> tensor<2x8x8x4xf32>
// CHECK-NEXT:    %[[M:.*]] = graph.reshape %m : tensor<4xf32> -> tensor<1x1x1x4xf32>
// CHECK-NEXT:    %[[B:.*]] = graph.sub %[[YV]], %[[M]] : tensor<2x8x8x4xf32>, tensor<1x1x1x4xf32> -> tensor<2x8x8x4xf32>
// CHECK-NEXT:    %[[R:.*]] = graph.relu %[[B]] : tensor<2x8x8x4xf32>
// CHECK-NEXT:    %[[RV:.*]] = graph.torch_call "aten.permute.default"(%[[R]]) args = ["%t0", [0 : i64, 3 : i64, 1 : i64, 2 : i64]] kwargs = {} : (tensor<2x8x8x4xf32>) -> tensor<2x4x8x8xf32>
// CHECK-NEXT:    %[[Z:.*]] = graph.torch_call "aten.convolution.default"(%[[RV]], %w2)
// CHECK-NEXT:    %[[ZV:.*]] = graph.torch_call "aten.permute.default"(%[[Z]])
// CHECK-NEXT:    %[[S:.*]] = graph.add %[[ZV]], %[[R]] : tensor<2x8x8x4xf32>, tensor<2x8x8x4xf32> -> tensor<2x8x8x4xf32>
// CHECK-NEXT:    %[[O:.*]] = graph.relu %[[S]] : tensor<2x8x8x4xf32>
// CHECK-NEXT:    %[[ON:.*]] = graph.permute %[[O]] perm = [0, 3, 1, 2] : tensor<2x8x8x4xf32> -> tensor<2x4x8x8xf32>
// CHECK-NEXT:    func.return %[[ON]] : tensor<2x4x8x8xf32>
