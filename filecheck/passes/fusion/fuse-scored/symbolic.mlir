// RUN: xfuse-opt %s -p fuse-scored,group-cleanup | filecheck %s

// Symbolic sizes (docs/dynamic-shapes.md): s0 and s1 have the same hint, but may differ, so
// their spaces are not one: two groups where static [4, 8] tensors make one horizontal group.
// Scores count bytes at the hints: 4 x 8 f32 elements written and read back, 256 bytes.
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<?x8xf32, #graph.syms<s1>>) -> (tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(1, 0) hint 4>} {
  %0 = graph.exp %x : tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.relu %0 : tensor<?x8xf32, #graph.syms<s0>>
  %2 = graph.exp %y : tensor<?x8xf32, #graph.syms<s1>>
  %3 = graph.relu %2 : tensor<?x8xf32, #graph.syms<s1>>
  func.return %1, %3 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>>
}

// CHECK:      func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<?x8xf32, #graph.syms<s1>>) -> (tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, inf], s1 = input(1, 0) hint 4 range [2, inf]>} {
// CHECK-NEXT:   %0 = fusion.group(%x) kind = "elementwise" rule = "fuse-scored:producer-consumer" {fusion.score = 256 : i64} : (tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<s0>> {
// CHECK-NEXT:   ^bb0(%[[X:.*]]: tensor<?x8xf32, #graph.syms<s0>>):
// CHECK-NEXT:     %[[E:.*]] = graph.exp %[[X]] : tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT:     %[[R:.*]] = graph.relu %[[E]] : tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT:     fusion.yield %[[R]] : tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT:   }
// CHECK-NEXT:   %1 = fusion.group(%y) kind = "elementwise" rule = "fuse-scored:producer-consumer" {fusion.score = 256 : i64} : (tensor<?x8xf32, #graph.syms<s1>>) -> tensor<?x8xf32, #graph.syms<s1>> {
// CHECK:        func.return %0, %1 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>>
