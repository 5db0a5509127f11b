// RUN: xfuse-opt %s -p group-cleanup | filecheck %s

// Symbolic sizes (docs/dynamic-shapes.md): cleaning a group of symbolic types (the unused
// result and its op go, the constant is pooled) keeps the types' symbols.
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0, %1 = fusion.group(%x) kind = "elementwise" rule = "test" : (tensor<?x8xf32, #graph.syms<s0>>) -> (tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s0>>) {
  ^bb0(%a: tensor<?x8xf32, #graph.syms<s0>>):
    %c = graph.constant dense<2.0> : tensor<f32>
    %m = graph.mul %a, %c : tensor<?x8xf32, #graph.syms<s0>>, tensor<f32> -> tensor<?x8xf32, #graph.syms<s0>>
    %e = graph.exp %m : tensor<?x8xf32, #graph.syms<s0>>
    %n = graph.neg %a : tensor<?x8xf32, #graph.syms<s0>>
    fusion.yield %e, %n : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s0>>
  }
  func.return %0 : tensor<?x8xf32, #graph.syms<s0>>
}

// CHECK:      %[[G:.*]] = fusion.group(%x) kind = "elementwise" rule = "test" : (tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<s0>> {
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<?x8xf32, #graph.syms<s0>>):
// CHECK-NEXT:   %[[C:.*]] = graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT:   %[[M:.*]] = graph.mul %[[A]], %[[C]] : tensor<?x8xf32, #graph.syms<s0>>, tensor<f32> -> tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT:   %[[E:.*]] = graph.exp %[[M]] : tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT:   fusion.yield %[[E]] : tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT: }
// CHECK-NEXT: func.return %[[G]] : tensor<?x8xf32, #graph.syms<s0>>
