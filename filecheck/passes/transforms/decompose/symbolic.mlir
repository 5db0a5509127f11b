// RUN: xfuse-opt %s -p decompose | filecheck %s

// Symbolic sizes (docs/dynamic-shapes.md): composites over static dims of tensors with a
// symbolic batch decompose into primitives whose types keep the symbol; a linear of a
// symbolic batch is a product with the transposed weight.
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %w: tensor<4x8xf32>) -> (tensor<?x8xf32, #graph.syms<s0>>, tensor<?x4xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.softmax %x dim = 1 : tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.linear %x, %w : tensor<?x8xf32, #graph.syms<s0>>, tensor<4x8xf32> -> tensor<?x4xf32, #graph.syms<s0>>
  func.return %0, %1 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x4xf32, #graph.syms<s0>>
}

// CHECK:      %[[M:.*]] = graph.reduce_max %x dims = [1] keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT: %[[D:.*]] = graph.sub %x, %[[M]] : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT: %[[E:.*]] = graph.exp %[[D]] : tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT: %[[S:.*]] = graph.reduce_sum %[[E]] dims = [1] keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT: %[[Y:.*]] = graph.div %[[E]], %[[S]] : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<s0>>
// CHECK-NEXT: %[[T:.*]] = graph.permute %w perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK-NEXT: %[[P:.*]] = graph.matmul %x, %[[T]] : tensor<?x8xf32, #graph.syms<s0>>, tensor<8x4xf32> -> tensor<?x4xf32, #graph.syms<s0>>
// CHECK-NEXT: func.return %[[Y]], %[[P]] : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x4xf32, #graph.syms<s0>>
