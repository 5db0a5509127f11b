// RUN: xfuse-opt %s -p channels-last | filecheck %s

// Arguments a call passes in channels-last memory and results eager returns so carry
// `graph.channels_last` (the importer marks them). A function with such an argument goes
// channels-last without a convolution and without `force`: the argument is read as the NHWC
// tensor its memory is (torch's permute, a view), and a marked result that lives in NHWC memory
// is returned as the channels-last view of its NHWC value (no copy into eager's strides).

func.func @batch_norm(%x: tensor<1x8x4x4xf32> {graph.channels_last}, %m: tensor<8x1x1xf32>) -> (tensor<1x8x4x4xf32> {graph.channels_last}) {
  %y = graph.sub %x, %m : tensor<1x8x4x4xf32>, tensor<8x1x1xf32> -> tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @batch_norm
// CHECK-NEXT:    %[[XV:.*]] = graph.torch_call "aten.permute.default"(%x) args = ["%t0", [0 : i64, 2 : i64, 3 : i64, 1 : i64]]
// CHECK-NEXT:    %[[M:.*]] = graph.reshape %m : tensor<8x1x1xf32> -> tensor<1x1x1x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.sub %[[XV]], %[[M]] : tensor<1x4x4x8xf32>, tensor<1x1x1x8xf32> -> tensor<1x4x4x8xf32>
// CHECK-NEXT:    %[[YV:.*]] = graph.torch_call "aten.permute.default"(%[[Y]]) args = ["%t0", [0 : i64, 3 : i64, 1 : i64, 2 : i64]]
// CHECK-NEXT:    func.return %[[YV]]

// An unmarked result is the NCHW twin (the last kernel writes it contiguous, as eager returns
// it); a convolution reads a marked argument as it is, with no channels-last copy.
func.func @conv(%x: tensor<1x3x8x8xf32> {graph.channels_last}, %w: tensor<4x3x1x1xf32>) -> tensor<1x4x8x8xf32> {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [0 : i64, 0 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 1 : i64] kwargs = {} : (tensor<1x3x8x8xf32>, tensor<4x3x1x1xf32>) -> tensor<1x4x8x8xf32>
  %r = graph.relu %y : tensor<1x4x8x8xf32>
  func.return %r : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @conv
// CHECK-NOT:     aten.clone
// CHECK:         %[[Y:.*]] = graph.torch_call "aten.convolution.default"(%x, %w)
// CHECK-NEXT:    %[[YV:.*]] = graph.torch_call "aten.permute.default"(%[[Y]])
// CHECK-NEXT:    %[[R:.*]] = graph.relu %[[YV]] : tensor<1x8x8x4xf32>
// CHECK-NEXT:    %[[RN:.*]] = graph.permute %[[R]] perm = [0, 3, 1, 2]
// CHECK-NEXT:    func.return %[[RN]]

// Without a marked argument or a convolution the function is left alone.
func.func @plain(%x: tensor<1x8x4x4xf32>) -> (tensor<1x8x4x4xf32> {graph.channels_last}) {
  %y = graph.relu %x : tensor<1x8x4x4xf32>
  func.return %y : tensor<1x8x4x4xf32>
}

// CHECK-LABEL: func.func @plain
// CHECK-NEXT:    %[[Y:.*]] = graph.relu %x : tensor<1x8x4x4xf32>
// CHECK-NEXT:    func.return %[[Y]]
