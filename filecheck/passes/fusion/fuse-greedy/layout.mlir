// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s

// Injective layout ops fold into the group (index arithmetic in the kernel), on either side
// of a reshape or permute.
func.func @reshape_permute(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %e = graph.exp %x : tensor<4x8xf32>
  %p = graph.permute %e perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %r = graph.reshape %p : tensor<8x4xf32> -> tensor<32xf32>
  %n = graph.neg %r : tensor<32xf32>
  %y = graph.reshape %n : tensor<32xf32> -> tensor<8x4xf32>
  func.return %y : tensor<8x4xf32>
}

// CHECK-LABEL: func.func @reshape_permute
// CHECK-NEXT:    %y = fusion.group(%x) kind = "injective" rule = "fuse-greedy:producer-consumer"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      graph.exp
// CHECK-NEXT:      graph.permute
// CHECK-NEXT:      graph.reshape
// CHECK-NEXT:      graph.neg
// CHECK-NEXT:      graph.reshape
// CHECK-NEXT:      fusion.yield

// A slice folds into its reader, and takes in its producer (which reduces nothing and has no
// other reader): the kernel computes exp only where the slice reads it.
func.func @slice(%x: tensor<4x8xf32>) -> tensor<4x4xf32> {
  %e = graph.exp %x : tensor<4x8xf32>
  %s = graph.slice %e start = [0, 0] limit = [4, 4] stride = [1, 1] : tensor<4x8xf32> -> tensor<4x4xf32>
  %y = graph.neg %s : tensor<4x4xf32>
  func.return %y : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @slice
// CHECK-NEXT:    %y = fusion.group(%x) kind = "injective"
// CHECK-NEXT:    ^bb0
// CHECK-NEXT:      graph.exp
// CHECK-NEXT:      graph.slice
// CHECK-NEXT:      graph.neg
