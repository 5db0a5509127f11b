// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s

// A cheap producer read by two consumers that cannot share a group (a matmul sits between):
// copying it into both saves more bytes than keeping it as an extra output.
func.func @recompute(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = graph.exp %x : tensor<8x8xf32>
  %p = graph.neg %a : tensor<8x8xf32>
  %m = graph.matmul %p, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %q = graph.add %a, %m : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  func.return %q : tensor<8x8xf32>
}

// CHECK-LABEL: func.func @recompute
// CHECK-NEXT:    %p = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:recompute"
// CHECK-NEXT:    ^bb0(%[[X0:.*]]: tensor<8x8xf32>):
// CHECK-NEXT:      graph.exp %[[X0]]
// CHECK-NEXT:      graph.neg
// CHECK:         %m = graph.matmul %p, %w
// CHECK-NEXT:    %q = fusion.group(%m, %x) kind = "elementwise" rule = "fuse-greedy:recompute"
// CHECK-NEXT:    ^bb0(%{{.*}}: tensor<8x8xf32>, %[[X1:.*]]: tensor<8x8xf32>):
// CHECK-NEXT:      graph.exp %[[X1]]
// CHECK-NEXT:      graph.add

// The producer is also a result of the function: it stays materialised, as an extra output
// of the group it joins.
func.func @multi_output(%x: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %a = graph.exp %x : tensor<8x8xf32>
  %q = graph.neg %a : tensor<8x8xf32>
  func.return %a, %q : tensor<8x8xf32>, tensor<8x8xf32>
}

// CHECK-LABEL: func.func @multi_output
// CHECK-NEXT:    %[[Q:.*]], %[[A:.*]] = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:multi-output"
// CHECK-SAME:      (tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>)
// CHECK:         func.return %[[A]], %[[Q]]
