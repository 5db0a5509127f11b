// RUN: not xfuse-opt %s -p fuse-greedy,lower-to-loops 2>&1 | filecheck %s

// What a symbolic kernel does not compute yet is refused in one line naming the op: here a
// flatten of two symbolic dims inside a group (its index would divide by a symbol).

func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>) -> tensor<?xf32, #graph.syms<s2>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 1) hint 8, s2 = s0 * s1>} {
  %0 = graph.exp %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  %1 = graph.reshape %0 : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?xf32, #graph.syms<s2>>
  %2 = graph.exp %1 : tensor<?xf32, #graph.syms<s2>>
  func.return %2 : tensor<?xf32, #graph.syms<s2>>
}

// CHECK: error: pass 'lower-to-loops' failed: cannot lower @forward_k0 to loops: 'graph.reshape' of [s0, s1] to [s2] has a symbolic dim after the first (its strides would be symbolic): no loop lowering yet
