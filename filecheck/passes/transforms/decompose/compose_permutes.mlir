// RUN: xfuse-opt %s -p decompose | filecheck %s

// A torch call's result in memory order ([B, T, H, D] memory of a [B, H, T, D] tensor), read
// back to its logical shape and permuted again by the program: the permutes compose to the
// identity, and the reshape reads the call's result as it lies in memory.
func.func @identity(%x: tensor<1x4x16x8xf32>) -> tensor<1x16x32xf32> {
  %a = graph.torch_call "aten.scaled_dot_product_attention.default"(%x) args = ["%t0", "%t0", "%t0"] kwargs = {} orders = [array<i64: 0, 2, 1, 3>] : (tensor<1x4x16x8xf32>) -> tensor<1x16x4x8xf32>
  %b = graph.permute %a perm = [0, 2, 1, 3] : tensor<1x16x4x8xf32> -> tensor<1x4x16x8xf32>
  %c = graph.permute %b perm = [0, 2, 1, 3] : tensor<1x4x16x8xf32> -> tensor<1x16x4x8xf32>
  %d = graph.reshape %c : tensor<1x16x4x8xf32> -> tensor<1x16x32xf32>
  func.return %d : tensor<1x16x32xf32>
}

// CHECK-LABEL: func.func @identity
// CHECK-NEXT:    %[[A:.*]] = graph.torch_call
// CHECK-NEXT:    %[[D:.*]] = graph.reshape %[[A]] : tensor<1x16x4x8xf32> -> tensor<1x16x32xf32>
// CHECK-NEXT:    func.return %[[D]]

// Two permutes that are no identity together become one; the inner one stays while another
// op reads it.
func.func @composed(%x: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<3x2x4xf32>) {
  %a = graph.permute %x perm = [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
  %b = graph.permute %a perm = [2, 1, 0] : tensor<3x2x4xf32> -> tensor<4x2x3xf32>
  func.return %b, %a : tensor<4x2x3xf32>, tensor<3x2x4xf32>
}

// CHECK-LABEL: func.func @composed
// CHECK-NEXT:    %[[A:.*]] = graph.permute %x perm = [1, 0, 2] : tensor<2x3x4xf32> -> tensor<3x2x4xf32>
// CHECK-NEXT:    %[[B:.*]] = graph.permute %x perm = [2, 0, 1] : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
// CHECK-NEXT:    func.return %[[B]], %[[A]]

// Three in a row become one.
func.func @chain(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %a = graph.permute %x perm = [1, 2, 0] : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %b = graph.permute %a perm = [1, 2, 0] : tensor<3x4x2xf32> -> tensor<4x2x3xf32>
  %c = graph.permute %b perm = [1, 2, 0] : tensor<4x2x3xf32> -> tensor<2x3x4xf32>
  %d = graph.exp %c : tensor<2x3x4xf32>
  func.return %d : tensor<2x3x4xf32>
}

// CHECK-LABEL: func.func @chain
// CHECK-NEXT:    %[[D:.*]] = graph.exp %x : tensor<2x3x4xf32>
// CHECK-NEXT:    func.return %[[D]]
