// RUN: xfuse-opt %s -p fuse-greedy,lower-to-loops | filecheck %s

// A group with outputs of two shapes of as many elements for every size (one flattened): one
// kernel over the group's elements writes both at the same linear offset.

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> (tensor<?x8xf32, #graph.syms<s0>>, tensor<?xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 8 * s0>} {
  %0 = graph.exp %x : tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.reshape %0 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
  %2 = graph.exp %1 : tensor<?xf32, #graph.syms<s1>>
  func.return %0, %2 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?xf32, #graph.syms<s1>>
}

// CHECK:      %0, %1 = fusion.launch @forward_k0(%x)
// CHECK-NOT:  fusion.launch
// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: memref<?xf32>, %3: index)
// CHECK:        %7 = arith.muli %3, %6 : index
// CHECK:        ^bb0(%8: index):
// CHECK-NEXT:     %9 = memref.load %0[%8] : memref<?xf32>
// CHECK-NEXT:     %10 = math.exp %9 : f32
// CHECK-NEXT:     %11 = math.exp %10 : f32
// CHECK-NEXT:     memref.store %11, %1[%8] : memref<?xf32>
// CHECK-NEXT:     memref.store %10, %2[%8] : memref<?xf32>
