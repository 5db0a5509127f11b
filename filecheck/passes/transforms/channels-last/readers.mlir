// RUN: xfuse-opt %s -p 'channels-last{force=true}' | filecheck %s

// Readers of a convolution's output other than elementwise ops.

// A global average pool (a mean over H and W that keeps them) reads the NHWC value over dims 1
// and 2; its [N, 1, 1, C] result is [N, C, 1, 1] by a reshape. Without keepdim the kept dims
// (N, C) come out in NCHW order.
func.func @pool(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x1x1xf32>) -> (tensor<2x4x1x1xf32>, tensor<2x4xf32>) {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<2x3x8x8xf32>, tensor<4x3x1x1xf32>) -> tensor<2x4x8x8xf32>
  %k = graph.reduce_mean %y dims = [2, 3] keepdim : tensor<2x4x8x8xf32> -> tensor<2x4x1x1xf32>
  %m = graph.reduce_max %y dims = [2, 3] : tensor<2x4x8x8xf32> -> tensor<2x4xf32>
  func.return %k, %m : tensor<2x4x1x1xf32>, tensor<2x4xf32>
}

// CHECK-LABEL: func.func @pool
// CHECK:         %[[YV:.*]] = graph.torch_call "aten.permute.default"(%{{.*}}) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]]
// CHECK-NEXT:    %[[K:.*]] = graph.reduce_mean %[[YV]] dims = [1, 2] keepdim : tensor<2x8x8x4xf32> -> tensor<2x1x1x4xf32>
// CHECK-NEXT:    %[[KN:.*]] = graph.reshape %[[K]] : tensor<2x1x1x4xf32> -> tensor<2x4x1x1xf32>
// CHECK-NEXT:    %[[M:.*]] = graph.reduce_max %[[YV]] dims = [1, 2] : tensor<2x8x8x4xf32> -> tensor<2x4xf32>
// CHECK-NEXT:    func.return %[[KN]], %[[M]]

// ConvNeXt's own permute to NHWC (for a layer norm over C) is the NHWC view itself, and its
// permute back to NCHW before the next convolution is that convolution's channels-last view.
func.func @convnext(%x: tensor<1x4x8x8xf32>, %w: tensor<4x1x7x7xf32>, %w2: tensor<4x4x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [3 : i64, 3 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 4 : i64] kwargs = {} : (tensor<1x4x8x8xf32>, tensor<4x1x7x7xf32>) -> tensor<1x4x8x8xf32>
  %t = graph.permute %y perm = [0, 2, 3, 1] : tensor<1x4x8x8xf32> -> tensor<1x8x8x4xf32>
  %n = graph.reduce_mean %t dims = [3] keepdim : tensor<1x8x8x4xf32> -> tensor<1x8x8x1xf32>
  %c = graph.sub %t, %n : tensor<1x8x8x4xf32>, tensor<1x8x8x1xf32> -> tensor<1x8x8x4xf32>
  %b = graph.permute %c perm = [0, 3, 1, 2] : tensor<1x8x8x4xf32> -> tensor<1x4x8x8xf32>
  %z = graph.torch_call "aten.convolution.default"(%b, %w2) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x4x8x8xf32>, tensor<4x4x1x1xf32>) -> tensor<1x4x8x8xf32>
  func.return %z : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @convnext
// CHECK:         %[[Y:.*]] = graph.torch_call "aten.convolution.default"
// CHECK-NEXT:    %[[YV:.*]] = graph.torch_call "aten.permute.default"(%[[Y]]) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]]
// CHECK-NEXT:    %[[N:.*]] = graph.reduce_mean %[[YV]] dims = [3] keepdim
// CHECK-NEXT:    %[[C:.*]] = graph.sub %[[YV]], %[[N]]
// CHECK-NEXT:    %[[CV:.*]] = graph.torch_call "aten.permute.default"(%[[C]]) args = ["%t0", [0 : i64, 3 : i64, 1 : i64, 2 : i64]]
// CHECK-NEXT:    %[[Z:.*]] = graph.torch_call "aten.convolution.default"(%[[CV]], %w2)
// CHECK-NEXT:    func.return %[[Z]]

// Max pooling keeps channels-last: it reads a view of the NHWC value and its result is read as
// NHWC in turn. A torch op not known to accept any strides (here `aten.cumsum`) gets a
// contiguous copy; a reshape reads the NCHW permute of the NHWC view (fused in its kernel).
func.func @externs(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x8x8xf32>, tensor<256xf32>) {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32>
  %r = graph.relu %y : tensor<1x4x8x8xf32>
  %p, %i = graph.torch_call "aten.max_pool2d_with_indices.default"(%r) args = ["%t0", [2 : i64, 2 : i64], [2 : i64, 2 : i64]] kwargs = {} : (tensor<1x4x8x8xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x4x4x4xi64>)
  %q = graph.neg %p : tensor<1x4x4x4xf32>
  %c = graph.torch_call "aten.cumsum.default"(%y) args = ["%t0", 1 : i64] kwargs = {} : (tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  %f = graph.reshape %y : tensor<1x4x8x8xf32> -> tensor<256xf32>
  func.return %q, %c, %f : tensor<1x4x4x4xf32>, tensor<1x4x8x8xf32>, tensor<256xf32>
}

// CHECK-LABEL: func.func @externs
// CHECK:         %[[Y:.*]] = graph.torch_call "aten.convolution.default"
// CHECK-NEXT:    %[[YV:.*]] = graph.torch_call "aten.permute.default"(%[[Y]]) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]]
// CHECK-NEXT:    %[[YN:.*]] = graph.permute %[[YV]] perm = [0, 3, 1, 2]
// CHECK-NEXT:    %[[R:.*]] = graph.relu %[[YV]] : tensor<1x8x8x4xf32>
// CHECK-NEXT:    %[[RV:.*]] = graph.torch_call "aten.permute.default"(%[[R]]) args = ["%t0", [0 : i64, 3 : i64, 1 : i64, 2 : i64]]
// CHECK-NEXT:    %[[P:.*]], %{{.*}} = graph.torch_call "aten.max_pool2d_with_indices.default"(%[[RV]])
// CHECK-NEXT:    %[[PV:.*]] = graph.torch_call "aten.permute.default"(%[[P]]) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]]
// CHECK-NEXT:    %[[Q:.*]] = graph.neg %[[PV]] : tensor<1x4x4x4xf32>
// CHECK-NEXT:    %[[QN:.*]] = graph.permute %[[Q]] perm = [0, 3, 1, 2]
// CHECK-NEXT:    %[[YC:.*]] = graph.torch_call "aten.clone.default"(%[[Y]]) args = ["%t0"] kwargs = {memory_format = "memory_format:contiguous_format"}
// CHECK-NEXT:    %[[C:.*]] = graph.torch_call "aten.cumsum.default"(%[[YC]])
// CHECK-NEXT:    %[[F:.*]] = graph.reshape %[[YN]] : tensor<1x4x8x8xf32> -> tensor<256xf32>
// CHECK-NEXT:    func.return %[[QN]], %[[C]], %[[F]]

// A concatenation of convolution outputs (DenseNet's features) joins their NHWC values along
// the last dim; a reader that is not elementwise (here the return) reads its NCHW permute.
func.func @concat(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x1x1xf32>, %v: tensor<2x3x1x1xf32>) -> tensor<1x6x8x8xf32> {
  %a = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x3x8x8xf32>, tensor<4x3x1x1xf32>) -> tensor<1x4x8x8xf32>
  %b = graph.torch_call "aten.convolution.default"(%x, %v) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x3x8x8xf32>, tensor<2x3x1x1xf32>) -> tensor<1x2x8x8xf32>
  %c = graph.concat %a, %b dim = 1 : tensor<1x4x8x8xf32>, tensor<1x2x8x8xf32> -> tensor<1x6x8x8xf32>
  func.return %c : tensor<1x6x8x8xf32>
}

// CHECK-LABEL: func.func @concat
// CHECK:         %[[AV:.*]] = graph.torch_call "aten.permute.default"(%{{.*}}) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]] {{.*}} -> tensor<1x8x8x4xf32>
// CHECK:         %[[BV:.*]] = graph.torch_call "aten.permute.default"(%{{.*}}) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]] {{.*}} -> tensor<1x8x8x2xf32>
// CHECK-NEXT:    %[[C:.*]] = graph.concat %[[AV]], %[[BV]] dim = 3 : tensor<1x8x8x4xf32>, tensor<1x8x8x2xf32> -> tensor<1x8x8x6xf32>
// CHECK-NEXT:    %[[CN:.*]] = graph.permute %[[C]] perm = [0, 3, 1, 2] : tensor<1x8x8x6xf32> -> tensor<1x6x8x8xf32>
// CHECK-NEXT:    func.return %[[CN]]
