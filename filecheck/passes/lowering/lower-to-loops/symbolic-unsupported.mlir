// RUN: not xfuse-opt %s -p fuse-greedy,lower-to-loops 2>&1 | filecheck %s

// What a symbolic kernel does not compute yet is refused in one line: here a group with
// outputs of two shapes (one flattened), which its loops over one shape cannot both write.

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> (tensor<?x8xf32, #graph.syms<s0>>, tensor<?xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 8 * s0>} {
  %0 = graph.exp %x : tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.reshape %0 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
  %2 = graph.exp %1 : tensor<?xf32, #graph.syms<s1>>
  func.return %0, %2 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?xf32, #graph.syms<s1>>
}

// CHECK: error: pass 'lower-to-loops' failed: cannot lower @forward_k0 to loops: output of shape [s0, 8] is neither the group's full shape [s1], its row shape, nor a permute of the full shape (symbolic sizes)
