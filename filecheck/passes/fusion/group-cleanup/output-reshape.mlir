// RUN: xfuse-opt %s -p group-cleanup | filecheck %s

// An output that is the reshape of another output becomes that output's reshape after the
// group (at run time a view): the kernel writes the values once, in one shape, and the group
// is elementwise again.
func.func @both(%x: tensor<1x4x2x2xf32>) -> (tensor<1x4x2x2xf32>, tensor<4x4xf32>) {
  %p, %q = fusion.group(%x) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<1x4x2x2xf32>) -> (tensor<1x4x2x2xf32>, tensor<4x4xf32>) {
  ^bb0(%a: tensor<1x4x2x2xf32>):
    %r = graph.relu %a : tensor<1x4x2x2xf32>
    %v = graph.reshape %r : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
    fusion.yield %r, %v : tensor<1x4x2x2xf32>, tensor<4x4xf32>
  }
  func.return %p, %q : tensor<1x4x2x2xf32>, tensor<4x4xf32>
}

// CHECK-LABEL: func.func @both
// CHECK-NEXT:    %[[P:.*]] = fusion.group(%x) kind = "elementwise" rule = "fuse-scored:producer-consumer" : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<1x4x2x2xf32>):
// CHECK-NEXT:      %[[R:.*]] = graph.relu %[[A]] : tensor<1x4x2x2xf32>
// CHECK-NEXT:      fusion.yield %[[R]] : tensor<1x4x2x2xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[V:.*]] = graph.reshape %[[P]] : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[P]], %[[V]] : tensor<1x4x2x2xf32>, tensor<4x4xf32>

// Only the reshape is read: the kernel writes that shape, nothing moves.
func.func @reshape_only(%x: tensor<1x4x2x2xf32>) -> tensor<4x4xf32> {
  %q = fusion.group(%x) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<1x4x2x2xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<1x4x2x2xf32>):
    %r = graph.relu %a : tensor<1x4x2x2xf32>
    %v = graph.reshape %r : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
    fusion.yield %v : tensor<4x4xf32>
  }
  func.return %q : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @reshape_only
// CHECK-NEXT:    fusion.group(%x)
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<1x4x2x2xf32>):
// CHECK-NEXT:      %[[R:.*]] = graph.relu %[[A]] : tensor<1x4x2x2xf32>
// CHECK-NEXT:      graph.reshape %[[R]] : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
