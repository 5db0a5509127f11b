// RUN: not xfuse-opt %s -p lower-to-loops 2>&1 | filecheck %s

// An op a symbolic kernel does not compute yet is refused in one line naming it.

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.flip %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>>
  func.return %0 : tensor<?x8xf32, #graph.syms<s0>>
}

// CHECK: error: pass 'lower-to-loops' failed: cannot lower @forward_k0 to loops: 'graph.flip' on symbolic sizes has no loop lowering yet
