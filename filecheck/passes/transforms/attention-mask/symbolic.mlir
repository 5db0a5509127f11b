// RUN: xfuse-opt %s -p 'attention-mask{symbolic=true}' | filecheck %s
// RUN: xfuse-opt %s -p attention-mask | filecheck %s --check-prefix=KEPT

// Symbolic sizes: a causal mask built from iotas over the symbolic length, causal at the size
// hint (and at every size: the guard that the pass records checks it at each call). With
// `symbolic`, attention runs with is_causal = true and the mask's ops go; without, it stays.
func.func @forward(%q: tensor<1x2x?x8xf32, #graph.syms<s0>>, %k: tensor<1x2x?x8xf32, #graph.syms<s0>>, %v: tensor<1x2x?x8xf32, #graph.syms<s0>>) -> tensor<1x2x?x8xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 2) hint 4>} {
  %i = graph.iota dim = 0 start = 0 step = 1 : tensor<?xi64, #graph.syms<s0>>
  %row = graph.reshape %i : tensor<?xi64, #graph.syms<s0>> -> tensor<1x?xi64, #graph.syms<s0>>
  %col = graph.reshape %i : tensor<?xi64, #graph.syms<s0>> -> tensor<?x1xi64, #graph.syms<s0>>
  %m = graph.le %row, %col : tensor<1x?xi64, #graph.syms<s0>>, tensor<?x1xi64, #graph.syms<s0>> -> tensor<?x?xi1, #graph.syms<s0, s0>>
  %m4 = graph.reshape %m : tensor<?x?xi1, #graph.syms<s0, s0>> -> tensor<1x1x?x?xi1, #graph.syms<s0, s0>>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m4) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {} : (tensor<1x2x?x8xf32, #graph.syms<s0>>, tensor<1x2x?x8xf32, #graph.syms<s0>>, tensor<1x2x?x8xf32, #graph.syms<s0>>, tensor<1x1x?x?xi1, #graph.syms<s0, s0>>) -> tensor<1x2x?x8xf32, #graph.syms<s0>>
  func.return %o : tensor<1x2x?x8xf32, #graph.syms<s0>>
}

// CHECK-LABEL: func.func @forward
// CHECK-NEXT:    %[[O:.*]] = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2", none] kwargs = {is_causal = true} :
// CHECK-NEXT:    func.return %[[O]]

// KEPT-LABEL: func.func @forward
// KEPT:         graph.le
// KEPT:         graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m4)
