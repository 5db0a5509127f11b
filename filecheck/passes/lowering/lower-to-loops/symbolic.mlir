// RUN: not xfuse-opt %s -p fuse-greedy,lower-to-loops 2>&1 | filecheck %s

// Kernels take static shapes only, for now (docs/dynamic-shapes.md): a function with size
// symbols is refused in one line.
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.exp %x : tensor<?x8xf32, #graph.syms<s0>>
  func.return %0 : tensor<?x8xf32, #graph.syms<s0>>
}

// CHECK: error: pass 'lower-to-loops' failed: lower-to-loops does not take symbolic sizes yet: @forward has size symbols s0 (kernels with size arguments come in the next slice of docs/dynamic-shapes.md)
