// RUN: xfuse-opt %s -p channels-last | filecheck %s
// RUN: xfuse-opt %s -p 'channels-last{force=true}' | filecheck %s --check-prefix=FORCE

// Without `force`, a function goes channels-last when it has two or more f16/bf16
// convolutions (cuDNN's NHWC f32 kernels, and one strided patch convolution, are slower on an
// H100) and, as Inductor decides for inference, their FLOPs weighted by channels-last's
// speed-up per kind favour it. Grouped convolutions with more than one channel per group are
// slower in NHWC. All three functions here are left alone (tests/passes/transforms has the
// bf16 cases).

func.func @small(%x: tensor<1x8x8x8xf32>, %w: tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32>
  %r = graph.relu %y : tensor<1x8x8x8xf32>
  func.return %r : tensor<1x8x8x8xf32>
}

// CHECK-LABEL: func.func @small
// CHECK-NEXT:    %[[Y:.*]] = graph.torch_call "aten.convolution.default"(%x, %w)
// CHECK-NEXT:    %[[R:.*]] = graph.relu %[[Y]] : tensor<1x8x8x8xf32>
// CHECK-NEXT:    func.return %[[R]]

// FORCE-LABEL: func.func @small
// FORCE:         graph.relu %{{.*}} : tensor<1x8x8x8xf32>
// FORCE-NEXT:    graph.permute %{{.*}} perm = [0, 3, 1, 2]

func.func @grouped(%x: tensor<1x8x8x8xf32>, %w: tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 2 : i64] kwargs = {} : (tensor<1x8x8x8xf32>, tensor<8x4x3x3xf32>) -> tensor<1x8x8x8xf32>
  %r = graph.relu %y : tensor<1x8x8x8xf32>
  func.return %r : tensor<1x8x8x8xf32>
}

// CHECK-LABEL: func.func @grouped
// CHECK-NEXT:    %[[Y:.*]] = graph.torch_call "aten.convolution.default"(%x, %w)
// CHECK-NEXT:    %[[R:.*]] = graph.relu %[[Y]] : tensor<1x8x8x8xf32>
// CHECK-NEXT:    func.return %[[R]]

// FORCE-LABEL: func.func @grouped
// FORCE:         graph.torch_call "aten.clone.default"(%x)
// FORCE:         graph.relu %{{.*}} : tensor<1x8x8x8xf32>
// FORCE-NEXT:    graph.permute %{{.*}} perm = [0, 3, 1, 2]

// A program that may write memory (an in-place torch op) is never rewritten, even forced; one
// without a 2-D convolution (here a transposed one) has nothing to gain.

func.func @writes(%x: tensor<1x8x8x8xf32>, %w: tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x8x8xf32>
  %z = graph.torch_call "aten.relu_.default"(%y) args = ["%t0"] kwargs = {} : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  func.return %z : tensor<1x8x8x8xf32>
}

// CHECK-LABEL: func.func @writes
// CHECK-NEXT:    graph.torch_call "aten.convolution.default"(%x, %w)
// FORCE-LABEL: func.func @writes
// FORCE-NEXT:    graph.torch_call "aten.convolution.default"(%x, %w)

func.func @transposed(%x: tensor<1x8x8x8xf32>, %w: tensor<8x8x3x3xf32>) -> tensor<1x8x10x10xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], true, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x8x8x8xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x10x10xf32>
  %r = graph.relu %y : tensor<1x8x10x10xf32>
  func.return %r : tensor<1x8x10x10xf32>
}

// CHECK-LABEL: func.func @transposed
// CHECK-NEXT:    graph.torch_call "aten.convolution.default"(%x, %w)
// CHECK-NEXT:    graph.relu %{{.*}} : tensor<1x8x10x10xf32>
// FORCE-LABEL: func.func @transposed
// FORCE-NEXT:    graph.torch_call "aten.convolution.default"(%x, %w)
// FORCE-NEXT:    graph.relu %{{.*}} : tensor<1x8x10x10xf32>
