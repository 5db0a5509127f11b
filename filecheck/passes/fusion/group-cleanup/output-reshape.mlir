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

// Only the reshape is read: the kernel still writes the relu's own shape (its loops index it
// as it is computed, a window's rows and columns without dividing a flat index).
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
// CHECK-NEXT:    %[[P:.*]] = fusion.group(%x) kind = "elementwise" rule = "fuse-scored:producer-consumer" : (tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<1x4x2x2xf32>):
// CHECK-NEXT:      %[[R:.*]] = graph.relu %[[A]] : tensor<1x4x2x2xf32>
// CHECK-NEXT:      fusion.yield %[[R]] : tensor<1x4x2x2xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[V:.*]] = graph.reshape %[[P]] : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
// CHECK-NEXT:    func.return %[[V]] : tensor<4x4xf32>

// A group with a reduction keeps its lone reshaped output: its loops follow the reduction.
func.func @reduced(%x: tensor<4x4xf32>) -> tensor<1x4xf32> {
  %q = fusion.group(%x) kind = "reduction" rule = "fuse-scored:producer-consumer" : (tensor<4x4xf32>) -> tensor<1x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %s = graph.reduce_sum %a dims = [1] : tensor<4x4xf32> -> tensor<4xf32>
    %v = graph.reshape %s : tensor<4xf32> -> tensor<1x4xf32>
    fusion.yield %v : tensor<1x4xf32>
  }
  func.return %q : tensor<1x4xf32>
}

// CHECK-LABEL: func.func @reduced
// CHECK-NEXT:    fusion.group(%x) kind = "reduction"
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4x4xf32>):
// CHECK-NEXT:      %[[S:.*]] = graph.reduce_sum %[[A]] dims = [1] : tensor<4x4xf32> -> tensor<4xf32>
// CHECK-NEXT:      graph.reshape %[[S]] : tensor<4xf32> -> tensor<1x4xf32>

// The reshape is read inside the group too: its shape is the loops' shape, left alone.
func.func @read_inside(%x: tensor<1x4x2x2xf32>) -> tensor<4x4xf32> {
  %q, %e = fusion.group(%x) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<1x4x2x2xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  ^bb0(%a: tensor<1x4x2x2xf32>):
    %r = graph.relu %a : tensor<1x4x2x2xf32>
    %v = graph.reshape %r : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
    %n = graph.exp %v : tensor<4x4xf32>
    fusion.yield %v, %n : tensor<4x4xf32>, tensor<4x4xf32>
  }
  %s = graph.add %q, %e : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  func.return %s : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @read_inside
// CHECK-NEXT:    fusion.group(%x) kind = "injective"
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<1x4x2x2xf32>):
// CHECK-NEXT:      %[[R:.*]] = graph.relu %[[A]] : tensor<1x4x2x2xf32>
// CHECK-NEXT:      %[[V:.*]] = graph.reshape %[[R]] : tensor<1x4x2x2xf32> -> tensor<4x4xf32>
// CHECK-NEXT:      %[[N:.*]] = graph.exp %[[V]] : tensor<4x4xf32>
// CHECK-NEXT:      fusion.yield %[[V]], %[[N]] : tensor<4x4xf32>, tensor<4x4xf32>
