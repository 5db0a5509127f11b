// RUN: xfuse-opt %s -p split-reductions | filecheck %s

// A reduction over the trailing dims keeps its leading dims: each kept row is split on its own,
// and keepdim's size-1 dims come back with a reshape at the end.

func.func @rows(%x: tensor<4x65536xf32>) -> tensor<4xf32> {
  %y = graph.reduce_sum %x dims = [1] : tensor<4x65536xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}

func.func @trailing_two_keepdim(%x: tensor<3x300x400xf32>) -> tensor<3x1x1xf32> {
  %y = graph.reduce_prod %x dims = [1, 2] keepdim : tensor<3x300x400xf32> -> tensor<3x1x1xf32>
  func.return %y : tensor<3x1x1xf32>
}

// The leading dims, with few results: split as a column reduction (columns.mlir).
func.func @leading(%x: tensor<65536x4xf32>) -> tensor<4xf32> {
  %y = graph.reduce_sum %x dims = [0] : tensor<65536x4xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @rows
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<4x65536xf32> -> tensor<4x256x256xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [2] : tensor<4x256x256xf32> -> tensor<4x256xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [1] : tensor<4x256xf32> -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<4xf32>

// CHECK-LABEL: func.func @trailing_two_keepdim
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<3x300x400xf32> -> tensor<3x375x320xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_prod %[[R]] dims = [2] : tensor<3x375x320xf32> -> tensor<3x375xf32>
// CHECK-NEXT:    %[[T:.*]] = graph.reduce_prod %[[P]] dims = [1] : tensor<3x375xf32> -> tensor<3xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[T]] : tensor<3xf32> -> tensor<3x1x1xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<3x1x1xf32>

// CHECK-LABEL: func.func @leading
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<65536x4xf32> -> tensor<256x256x4xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [1] : tensor<256x256x4xf32> -> tensor<256x4xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<256x4xf32> -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<4xf32>

// Neither the leading nor the trailing dims, few results: split beside the kept dims
// (columns.mlir has more).
func.func @middle(%x: tensor<64x65536x4xf32>) -> tensor<64x4xf32> {
  %y = graph.reduce_sum %x dims = [1] : tensor<64x65536x4xf32> -> tensor<64x4xf32>
  func.return %y : tensor<64x4xf32>
}

// CHECK-LABEL: func.func @middle
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<64x65536x4xf32> -> tensor<64x256x256x4xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [2] : tensor<64x256x256x4xf32> -> tensor<64x256x4xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [1] : tensor<64x256x4xf32> -> tensor<64x4xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<64x4xf32>
