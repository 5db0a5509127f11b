// RUN: xfuse-opt %s -p 'fuse-scored{window=2}' | filecheck %s --check-prefix=W2
// RUN: xfuse-opt %s -p fuse-scored | filecheck %s --check-prefix=W64
// RUN: xfuse-opt %s -p 'fuse-scored{max-group-size=2}' | filecheck %s --check-prefix=SIZE
// RUN: xfuse-opt %s -p 'fuse-scored{max-rounds=1}' | filecheck %s --check-prefix=ROUND

// %a and its reader %d are 4 positions apart (the matmuls between them do not fuse): with
// a window of 2 they are never paired. At most 2 ops per group, or a single round (each
// node merges once per round), splits the chain %d -> %e -> %f.
func.func @forward(%x: tensor<8x8xf32>, %w: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = graph.exp %x : tensor<8x8xf32>
  %m0 = graph.matmul %x, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %m1 = graph.matmul %m0, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %m2 = graph.matmul %m1, %w : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %d = graph.add %a, %m2 : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
  %e = graph.tanh %d : tensor<8x8xf32>
  %f = graph.neg %e : tensor<8x8xf32>
  func.return %f : tensor<8x8xf32>
}

// W2:       %a = graph.exp %x
// W2:       %f = fusion.group(%a, %m2) kind = "elementwise"
// W2-NEXT:  ^bb0
// W2-NEXT:    graph.add
// W2-NEXT:    graph.tanh
// W2-NEXT:    graph.neg

// W64:      %f = fusion.group
// W64-NEXT: ^bb0
// W64-NEXT:   graph.exp
// W64-NEXT:   graph.add

// SIZE:      %a = graph.exp %x
// SIZE:      %e = fusion.group(%a, %m2) kind = "elementwise"
// SIZE-NEXT: ^bb0
// SIZE-NEXT:   graph.add
// SIZE-NEXT:   graph.tanh
// SIZE-NEXT:   fusion.yield
// SIZE-NEXT: }
// SIZE-NEXT: %f = graph.neg %e

// ROUND:      %a = graph.exp %x
// ROUND:      %e = fusion.group(%a, %m2) kind = "elementwise"
// ROUND:      %f = graph.neg %e
