// RUN: xfuse-opt %s -p decompose,fuse-greedy | filecheck %s

// Symbolic sizes (docs/dynamic-shapes.md): a bias add, a softmax over the static dim and a
// flatten into the derived symbol s1 = 8 * s0 fuse as their static counterparts do; the
// group's types keep their symbols.
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %b: tensor<8xf32>) -> tensor<?xf32, #graph.syms<s1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096], s1 = 8 * s0>} {
  %0 = graph.add %x, %b : tensor<?x8xf32, #graph.syms<s0>>, tensor<8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.softmax %0 dim = 1 : tensor<?x8xf32, #graph.syms<s0>>
  %2 = graph.reshape %1 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
  %3 = graph.tanh %2 : tensor<?xf32, #graph.syms<s1>>
  func.return %3 : tensor<?xf32, #graph.syms<s1>>
}

// CHECK:      func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %b: tensor<8xf32>) -> tensor<?xf32, #graph.syms<s1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096], s1 = 8 * s0>} {
// CHECK-NEXT:   %[[G:.*]] = fusion.group(%x, %b) kind = "reduction" rule = "fuse-greedy:producer-consumer" {fusion.score = {{[0-9]+}} : i64} : (tensor<?x8xf32, #graph.syms<s0>>, tensor<8xf32>) -> tensor<?xf32, #graph.syms<s1>> {
// CHECK:          graph.reduce_max %{{.*}} dims = [1] keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK:          graph.reshape %{{.*}} : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
// CHECK-NEXT:     %[[T:.*]] = graph.tanh %{{.*}} : tensor<?xf32, #graph.syms<s1>>
// CHECK-NEXT:     fusion.yield %[[T]] : tensor<?xf32, #graph.syms<s1>>
// CHECK-NEXT:   }
// CHECK-NEXT:   func.return %[[G]] : tensor<?xf32, #graph.syms<s1>>
