// RUN: xfuse-opt %s -p decompose | filecheck %s

// A linear with a bias that only externs read, through views (a query projection split into
// heads for the attention), stays whole: the bias stays in the GEMM and the views stay free.
func.func @query_heads(%x: tensor<1x16x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>) -> tensor<1x4x16x16xf32> {
  %q = graph.linear %x, %w bias(%b : tensor<64xf32>) : tensor<1x16x64xf32>, tensor<64x64xf32> -> tensor<1x16x64xf32>
  %r = graph.reshape %q : tensor<1x16x64xf32> -> tensor<1x16x4x16xf32>
  %h = graph.permute %r perm = [0, 2, 1, 3] : tensor<1x16x4x16xf32> -> tensor<1x4x16x16xf32>
  %a = graph.torch_call "aten.scaled_dot_product_attention.default"(%h) args = ["%t0", "%t0", "%t0"] kwargs = {} : (tensor<1x4x16x16xf32>) -> tensor<1x4x16x16xf32>
  func.return %a : tensor<1x4x16x16xf32>
}

// CHECK-LABEL: func.func @query_heads
// CHECK-NEXT:    %[[Q:.*]] = graph.linear %x, %w bias(%b : tensor<64xf32>)
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %[[Q]]
// CHECK-NEXT:    %[[H:.*]] = graph.permute %[[R]]
// CHECK-NOT:     graph.matmul

// Read by a kernel op as well (or returned), it is decomposed: the bias add may fuse there.
func.func @also_read_by_a_kernel(%x: tensor<1x16x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>) -> tensor<1x16x64xf32> {
  %q = graph.linear %x, %w bias(%b : tensor<64xf32>) : tensor<1x16x64xf32>, tensor<64x64xf32> -> tensor<1x16x64xf32>
  %e = graph.exp %q : tensor<1x16x64xf32>
  func.return %e : tensor<1x16x64xf32>
}

// CHECK-LABEL: func.func @also_read_by_a_kernel
// CHECK:         graph.matmul
// CHECK:         graph.add
