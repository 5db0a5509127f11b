// RUN: xfuse-opt %s -p group-cleanup | filecheck %s

// An input the group reads only through reshapes to one shape is reshaped outside the group
// (at run time a view): the kernel indexes the buffer in that shape, a split reduction's rows
// at (row, i).
func.func @rows(%x: tensor<4096xf32>) -> tensor<64xf32> {
  %p = fusion.group(%x) kind = "reduction" rule = "fuse-scored:producer-consumer" : (tensor<4096xf32>) -> tensor<64xf32> {
  ^bb0(%a: tensor<4096xf32>):
    %r = graph.reshape %a : tensor<4096xf32> -> tensor<64x64xf32>
    %s = graph.reduce_sum %r dims = [1] : tensor<64x64xf32> -> tensor<64xf32>
    fusion.yield %s : tensor<64xf32>
  }
  func.return %p : tensor<64xf32>
}

// CHECK-LABEL: func.func @rows
// CHECK-NEXT:    %[[V:.*]] = graph.reshape %x : tensor<4096xf32> -> tensor<64x64xf32>
// CHECK-NEXT:    %[[P:.*]] = fusion.group(%[[V]]) kind = "reduction" rule = "fuse-scored:producer-consumer" : (tensor<64x64xf32>) -> tensor<64xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<64x64xf32>):
// CHECK-NEXT:      %[[S:.*]] = graph.reduce_sum %[[A]] dims = [1] : tensor<64x64xf32> -> tensor<64xf32>
// CHECK-NEXT:      fusion.yield %[[S]] : tensor<64xf32>

// Read directly too: left inside.
func.func @also_direct(%x: tensor<4096xf32>) -> (tensor<64xf32>, tensor<4096xf32>) {
  %p, %e = fusion.group(%x) kind = "reduction" rule = "fuse-scored:producer-consumer" : (tensor<4096xf32>) -> (tensor<64xf32>, tensor<4096xf32>) {
  ^bb0(%a: tensor<4096xf32>):
    %r = graph.reshape %a : tensor<4096xf32> -> tensor<64x64xf32>
    %s = graph.reduce_sum %r dims = [1] : tensor<64x64xf32> -> tensor<64xf32>
    %n = graph.exp %a : tensor<4096xf32>
    fusion.yield %s, %n : tensor<64xf32>, tensor<4096xf32>
  }
  func.return %p, %e : tensor<64xf32>, tensor<4096xf32>
}

// CHECK-LABEL: func.func @also_direct
// CHECK-NEXT:    fusion.group(%x)
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4096xf32>):
// CHECK-NEXT:      graph.reshape %[[A]] : tensor<4096xf32> -> tensor<64x64xf32>

// A chain of reshapes (Swin's window mask made [nW, 1, N, N], then [1, nW, 1, N, N] to
// broadcast over the batch of windows) goes out whole: the group, left with nothing to compute,
// goes, and its reader reads the views.
func.func @chain(%m: tensor<4x9x9xf32>, %x: tensor<2x4x3x9x9xf32>) -> tensor<2x4x3x9x9xf32> {
  %r = fusion.group(%m) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<4x9x9xf32>) -> tensor<1x4x1x9x9xf32> {
  ^bb0(%a: tensor<4x9x9xf32>):
    %u = graph.reshape %a : tensor<4x9x9xf32> -> tensor<4x1x9x9xf32>
    %v = graph.reshape %u : tensor<4x1x9x9xf32> -> tensor<1x4x1x9x9xf32>
    fusion.yield %v : tensor<1x4x1x9x9xf32>
  }
  %y = fusion.group(%x, %r) kind = "elementwise" rule = "fuse-scored:producer-consumer" : (tensor<2x4x3x9x9xf32>, tensor<1x4x1x9x9xf32>) -> tensor<2x4x3x9x9xf32> {
  ^bb0(%b: tensor<2x4x3x9x9xf32>, %n: tensor<1x4x1x9x9xf32>):
    %e = graph.add %b, %n : tensor<2x4x3x9x9xf32>, tensor<1x4x1x9x9xf32> -> tensor<2x4x3x9x9xf32>
    fusion.yield %e : tensor<2x4x3x9x9xf32>
  }
  func.return %y : tensor<2x4x3x9x9xf32>
}

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[U:.*]] = graph.reshape %m : tensor<4x9x9xf32> -> tensor<4x1x9x9xf32>
// CHECK-NEXT:    %[[V:.*]] = graph.reshape %[[U]] : tensor<4x1x9x9xf32> -> tensor<1x4x1x9x9xf32>
// CHECK-NEXT:    fusion.group(%x, %[[V]])
// CHECK-NOT:     graph.reshape
// CHECK:         func.return
