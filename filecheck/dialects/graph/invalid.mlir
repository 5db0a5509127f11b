// RUN: xfuse-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per verifier message of the graph dialect (xfuse/dialects/graph/). Each error
// points at the op that does not verify.

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op expected operand to have a static shape, found tensor<?xf32>
func.func @f(%x: tensor<?xf32>) {
  %0 = graph.neg %x : tensor<?xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op expected operand element type to be one of f32, f16, bf16, f64, i32, i64, i1, found i8
func.func @f(%x: tensor<4xi8>) {
  %0 = graph.neg %x : tensor<4xi8>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.reshape' op expected operand and result to have the same element type, found f32, f16
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.reshape %x : tensor<4xf32> -> tensor<4xf16>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.reduce_sum' op expected dims in [0, 2), found 2
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.reduce_sum %x dims = [2] : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.reduce_sum' op expected dims to be unique, found [1, 1]
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.reduce_sum %x dims = [1, 1] : tensor<4x8xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.cast' op expected result shape [4], found [5]
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.cast %x : tensor<4xf32> to tensor<5xf16>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.exp' op expected a floating-point operand, found i32
func.func @f(%x: tensor<4xi32>) {
  %0 = graph.exp %x : tensor<4xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op expected a numeric operand, found i1
func.func @f(%x: tensor<4xi1>) {
  %0 = graph.neg %x : tensor<4xi1>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.add' op expected operands of the same element type, found f32 and i32
func.func @f(%x: tensor<4xf32>, %y: tensor<4xi32>) {
  %0 = graph.add %x, %y : tensor<4xf32>, tensor<4xi32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pow' op expected floating-point operands, found i32
func.func @f(%x: tensor<4xi32>) {
  %0 = graph.pow %x, %x : tensor<4xi32>, tensor<4xi32> -> tensor<4xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.add' op operand shapes [3] and [4] do not broadcast
func.func @f(%x: tensor<3xf32>, %y: tensor<4xf32>) {
  %0 = graph.add %x, %y : tensor<3xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.eq' op expected result element type i1, found f32
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.eq %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.mul' op expected result shape [4], found [4, 4]
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.mul %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.where' op expected an i1 condition, found f32
func.func @f(%c: tensor<4xf32>, %x: tensor<4xf32>) {
  %0 = graph.where %c, %x, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.where' op expected lhs, rhs and result to have the same element type, found f32, f16, f32
func.func @f(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf16>) {
  %0 = graph.where %c, %x, %y : tensor<4xi1>, tensor<4xf32>, tensor<4xf16> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.where' op operand shapes [3], [4] and [4] do not broadcast
func.func @f(%c: tensor<3xi1>, %x: tensor<4xf32>) {
  %0 = graph.where %c, %x, %x : tensor<3xi1>, tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.broadcast_in_dim' op expected 1 dims (the operand's rank), found 2
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.broadcast_in_dim %x dims = [0, 1] : tensor<4xf32> -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.broadcast_in_dim' op expected increasing dims, found [1, 0]
func.func @f(%x: tensor<4x1xf32>) {
  %0 = graph.broadcast_in_dim %x dims = [1, 0] : tensor<4x1xf32> -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.broadcast_in_dim' op operand dim 0 of size 4 cannot broadcast to result dim 0 of size 3
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.broadcast_in_dim %x dims = [0] : tensor<4xf32> -> tensor<3x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.reduce_mean' op expected a floating-point operand, found i32
func.func @f(%x: tensor<4x8xi32>) {
  %0 = graph.reduce_mean %x dims = [1] : tensor<4x8xi32> -> tensor<4xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.reshape' op expected the result to have 32 elements like the operand, found 30
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.reshape %x : tensor<4x8xf32> -> tensor<30xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.permute' op expected a permutation of [0, 2), found [0, 0]
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.permute %x perm = [0, 0] : tensor<4x8xf32> -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected 2 start values (the operand's rank), found 1
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.slice %x start = [0] limit = [4, 8] stride = [1, 1] : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected a positive stride in dim 1, found 0
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.slice %x start = [0, 0] limit = [4, 8] stride = [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected 0 <= start <= limit <= 8 in dim 1, found 0:9
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.slice %x start = [0, 0] limit = [4, 9] stride = [1, 1] : tensor<4x8xf32> -> tensor<4x9xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.concat' op expected at least one operand
func.func @f(%x: tensor<4xf32>) {
  %0 = "graph.concat"() <{dim = 0 : i64}> : () -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.concat' op expected dim in [0, 1), found 1
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.concat %x, %x dim = 1 : tensor<4xf32>, tensor<4xf32> -> tensor<8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.concat' op expected operand 1 of shape [2, 3] to match [2, 4] outside dim 0
func.func @f(%x: tensor<2x4xf32>, %y: tensor<2x3xf32>) {
  %0 = graph.concat %x, %y dim = 0 : tensor<2x4xf32>, tensor<2x3xf32> -> tensor<4x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.matmul' op expected operands of rank >= 2, found ranks 1 and 1
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.matmul %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<f32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.matmul' op operand shapes [4, 8] and [4, 8] do not match for matmul
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.matmul %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.linear' op expected bias of shape [4], found [5]
func.func @f(%x: tensor<8x16xf32>, %w: tensor<4x16xf32>, %b: tensor<5xf32>) {
  %0 = graph.linear %x, %w bias(%b : tensor<5xf32>) : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.linear' op expected input [..., K] and weight [N, K], found [8, 16] and [4, 8]
func.func @f(%x: tensor<8x16xf32>, %w: tensor<4x8xf32>) {
  %0 = graph.linear %x, %w : tensor<8x16xf32>, tensor<4x8xf32> -> tensor<8x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.torch_call' op expected a non-empty target
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.torch_call ""(%x) args = ["%t0"] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.torch_call' op picks names 2 positions for 1 results
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.torch_call "aten.sort.default"(%x) args = ["%t0"] kwargs = {} picks = [0 : i64, 1 : i64] : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.torch_call' op orders names 2 orders for 1 results
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.torch_call "aten.t.default"(%x) args = ["%t0"] kwargs = {} orders = [array<i64: 1, 0>, array<i64>] : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.torch_call' op expected result 0's order to be a permutation of [0, 2), found [0, 0]
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.torch_call "aten.t.default"(%x) args = ["%t0"] kwargs = {} orders = [array<i64: 0, 0>] : (tensor<4x8xf32>) -> tensor<8x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.torch_call' op expected tensor references below 1, found %t1
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.torch_call "aten.add.Tensor"(%x) args = ["%t0", "%t1"] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.constant' op expected result type tensor<f32>, found tensor<2xf32>
func.func @f(%x: tensor<4xf32>) {
  %0 = "graph.constant"() <{value = dense<1.0> : tensor<f32>}> : () -> tensor<2xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.softmax' op expected a floating-point operand, found i32
func.func @f(%x: tensor<4x8xi32>) {
  %0 = graph.softmax %x dim = 1 : tensor<4x8xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.log_softmax' op expected dim in [0, 2), found 2
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.log_softmax %x dim = 2 : tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.layer_norm' op expected a floating-point operand, found i32
func.func @f(%x: tensor<4x8xi32>) {
  %0 = graph.layer_norm %x rank = 1 eps = 1.0e-05 : tensor<4x8xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.layer_norm' op expected rank in [1, 2], found 3
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.layer_norm %x rank = 3 eps = 1.0e-05 : tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.rms_norm' op expected weight of shape [8], found [4]
func.func @f(%x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  %0 = graph.rms_norm %x weight(%w : tensor<4xf32>) rank = 1 eps = 1.0e-06 : tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.layer_norm' op expected bias of element type f32, found f16
func.func @f(%x: tensor<4x8xf32>, %b: tensor<8xf16>) {
  %0 = graph.layer_norm %x bias(%b : tensor<8xf16>) rank = 1 eps = 1.0e-05 : tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gelu' op expected a floating-point operand, found i32
func.func @f(%x: tensor<4xi32>) {
  %0 = graph.gelu %x approximate = "none" : tensor<4xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gelu' op expected approximate to be "none" or "tanh", found "fast"
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.gelu %x approximate = "fast" : tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.var' op expected a floating-point operand, found i32
func.func @f(%x: tensor<4x8xi32>) {
  %0 = graph.var %x dims = [1] correction = 1 : tensor<4x8xi32> -> tensor<4xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.isnan' op expected an i1 result, found f32
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.isnan %x : tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.bitwise_not' op expected an integer or bool operand, found f32
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.bitwise_not %x : tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.bitwise_and' op expected integer or bool operands, found f32
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.bitwise_and %x, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.remainder' op expected numeric operands, found i1
func.func @f(%x: tensor<4xi1>) {
  %0 = graph.remainder %x, %x : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.erfc' op expected a floating-point operand, found i64
func.func @f(%x: tensor<4xi64>) {
  %0 = graph.erfc %x : tensor<4xi64>
  func.return
}

// -----

// Index arithmetic: iota.
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.iota' op expected an i32 or i64 result, found f32
func.func @f() {
  %0 = graph.iota dim = 0 start = 0 step = 1 : tensor<4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.iota' op expected dim in [0, 1), found 1
func.func @f() {
  %0 = graph.iota dim = 1 start = 0 step = 1 : tensor<4xi64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.iota' op expected a non-zero step
func.func @f() {
  %0 = graph.iota dim = 0 start = 0 step = 0 : tensor<4xi64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.flip' op expected dims in [0, 2), found 2
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.flip %x dims = [2] : tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.roll' op expected as many shifts as dims, found 2 and 1
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.roll %x shifts = [1, 2] dims = [1] : tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.roll' op expected dims to be unique, found [1, 1]
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.roll %x shifts = [1, 2] dims = [1, 1] : tensor<4x8xf32>
  func.return
}

// -----
// Padding and pooling

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected mode in ['constant', 'reflect', 'replicate'], found "wrap"
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.pad %x low = [1] high = [1] mode = "wrap" value = 0.0 : f64 : tensor<4xf32> -> tensor<6xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected a size >= 0 in dim 0, found -1
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.pad %x low = [-3] high = [-2] mode = "constant" value = 0.0 : f64 : tensor<4xf32> -> tensor<0xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected reflect padding below the size 4 of dim 0, found 4, 0
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.pad %x low = [4] high = [0] mode = "reflect" value = 0.0 : f64 : tensor<4xf32> -> tensor<8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected a non-empty dim 0 to replicate
func.func @f(%x: tensor<0xf32>) {
  %0 = graph.pad %x low = [1] high = [0] mode = "replicate" value = 0.0 : f64 : tensor<0xf32> -> tensor<1xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected result dim 0 of size s0 + 2, found s0 (not equal for every size of its symbol)
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.pad %x low = [0, 1] high = [2, 1] mode = "constant" value = 0.0 : f64 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x10xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected open_high dims of constant padding, with high 0, found dim 0
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = s0 + 2>} {
  %0 = graph.pad %x low = [0, 0] high = [1, 0] open_high = [0] mode = "constant" value = 0.0 : f64 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<e0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected constant padding of dim 0, size symbol 's0', found mode "reflect"
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = s0 + 2>} {
  %0 = graph.pad %x low = [1, 0] high = [1, 0] mode = "reflect" value = 0.0 : f64 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<e0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected 0 <= start <= limit <= 3 in dim 1, found 3:4
func.func @f(%x: tensor<4x?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 1) hint 16 range [3, inf]>} {
  %0 = graph.slice %x start = [0, 3] limit = [4, 4] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected a slice within the last 2 elements of symbolic dim 0 (limit after start, both from the end, a positive stride), found -4:-1:1
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.slice %x start = [-4, 0] limit = [-1, 8] stride = [1, 1] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<3x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected a slice within the last 2 elements of symbolic dim 0 (limit after start, both from the end, a positive stride), found -2:3:1
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.slice %x start = [-2, 0] limit = [3, 8] stride = [1, 1] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<5x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected a start >= 0 and a positive stride in dim 0, found 0, 0
func.func @f(%a: tensor<?xf32, #graph.syms<s0>>, %x: tensor<?x8xf32, #graph.syms<e0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = s0 + 2>} {
  %0 = graph.slice %x start = [0, 0] limit = [-2, 8] stride = [0, 1] : tensor<?x8xf32, #graph.syms<e0>> -> tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected result dim 0 of size (e0 - 0) / 2 rounded up, found e0 (no symbol of the function's table)
func.func @f(%a: tensor<?xf32, #graph.syms<s0>>, %x: tensor<?x8xf32, #graph.syms<e0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = s0 + 2>} {
  %0 = graph.slice %x start = [0, 0] limit = [-1, 8] stride = [2, 1] : tensor<?x8xf32, #graph.syms<e0>> -> tensor<?x8xf32, #graph.syms<e0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.slice' op expected result dim 0 of size (e0 - 2) / 1 rounded up, found e0 (not equal for every size of its symbol)
func.func @f(%a: tensor<?xf32, #graph.syms<s0>>, %x: tensor<?x8xf32, #graph.syms<e0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = s0 + 2>} {
  %0 = graph.slice %x start = [1, 0] limit = [-2, 8] stride = [1, 1] : tensor<?x8xf32, #graph.syms<e0>> -> tensor<?x8xf32, #graph.syms<e0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected an f64 value, found f32
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.pad %x low = [1] high = [1] mode = "constant" value = 0.0 : f32 : tensor<4xf32> -> tensor<6xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected an integral value for i64, found 1.5
func.func @f(%x: tensor<4xi64>) {
  %0 = graph.pad %x low = [1] high = [1] mode = "constant" value = 1.5 : f64 : tensor<4xi64> -> tensor<6xi64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pad' op expected result shape [6], found [7]
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.pad %x low = [1] high = [1] mode = "constant" value = 0.0 : f64 : tensor<4xf32> -> tensor<7xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected kind in ['max', 'avg', 'argmax'], found "min"
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "min" kernel = [2] stride = [2] padding = [0] dilation = [1] : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected 1 to 2 window dims (the operand's rank), found 3
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [2, 2, 2] stride = [2, 2, 2] padding = [0, 0, 0] dilation = [1, 1, 1] : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected 1 stride values (the kernel's), found 2
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [2] stride = [2, 2] padding = [0] dilation = [1] : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected kernel, stride, dilation > 0 and 0 <= padding <= kernel / 2 in window dim 0, found 2, 2, 1, 2
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [2] stride = [2] padding = [2] dilation = [1] : tensor<2x8xf32> -> tensor<2x6xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected no dilation for avg, found [2]
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "avg" kernel = [2] stride = [2] padding = [0] dilation = [2] : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected a floating-point operand, found i64
func.func @f(%x: tensor<2x8xi64>) {
  %0 = graph.pool %x kind = "avg" kernel = [2] stride = [2] padding = [0] dilation = [1] : tensor<2x8xi64> -> tensor<2x4xi64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected a non-zero divisor
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "avg" kernel = [2] stride = [2] padding = [0] dilation = [1] divisor = 0 : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected no divisor or count_include_pad for max
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [2] stride = [2] padding = [0] dilation = [1] divisor = 2 : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected a numeric operand, found i1
func.func @f(%x: tensor<2x8xi1>) {
  %0 = graph.pool %x kind = "max" kernel = [2] stride = [2] padding = [0] dilation = [1] : tensor<2x8xi1> -> tensor<2x4xi1>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected result shape [2, 4] or [2, 5], found [2, 3]
func.func @f(%x: tensor<2x9xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [2] stride = [2] padding = [0] dilation = [1] : tensor<2x9xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected an i64 result for argmax, found f32
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "argmax" kernel = [2] stride = [2] padding = [0] dilation = [1] : tensor<2x8xf32> -> tensor<2x4xf32>
  func.return
}

// -----

// graph.gather
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op expected table and result to have the same element type, found f32, f16
func.func @f(%t: tensor<10x4xf32>, %i: tensor<6x1xi64>) {
  %0 = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x1xi64> -> tensor<6x4xf16>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op expected at least one index tensor
func.func @f(%t: tensor<10x4xf32>) {
  %0 = graph.gather %t[] dim = 0 : tensor<10x4xf32>,  -> tensor<6x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op expected a table of rank 3 (the result's rank 2 + 1) and a result of rank >= 1, found 2
func.func @f(%t: tensor<10x4xf32>, %i: tensor<6x1xi64>) {
  %0 = graph.gather %t[%i, %i] dim = 0 : tensor<10x4xf32>, tensor<6x1xi64>, tensor<6x1xi64> -> tensor<6x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op expected dim in [0, 2), found 2
func.func @f(%t: tensor<10x4xf32>, %i: tensor<6x1xi64>) {
  %0 = graph.gather %t[%i] dim = 2 : tensor<10x4xf32>, tensor<6x1xi64> -> tensor<6x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op expected index 0 of type i32 or i64, found f32
func.func @f(%t: tensor<10x4xf32>, %i: tensor<6x1xf32>) {
  %0 = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x1xf32> -> tensor<6x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op index 0 of shape [6, 2] does not broadcast to the result shape [6, 4]
func.func @f(%t: tensor<10x4xf32>, %i: tensor<6x2xi64>) {
  %0 = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x2xi64> -> tensor<6x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op table dim 1 of size 4 is smaller than result dim 1 of size 5 (it must be 1 or at least as large)
func.func @f(%t: tensor<10x4xf32>, %i: tensor<6x1xi64>) {
  %0 = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x1xi64> -> tensor<6x5xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.argmax' op expected a numeric operand, found i1
func.func @f(%x: tensor<4xi1>) {
  %0 = graph.argmax %x dims = [0] : tensor<4xi1> -> tensor<i64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.argmax' op expected an i64 result, found i32
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.argmax %x dims = [0] : tensor<4xf32> -> tensor<i32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.argmin' op expected one dim, found [0, 1]
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.argmin %x dims = [0, 1] : tensor<4x8xf32> -> tensor<i64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected stride 1, padding 0, dilation 1 for an adaptive pool
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "avg" kernel = [3] stride = [2] padding = [0] dilation = [1] adaptive : tensor<2x8xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected no divisor or count_include_pad for an adaptive pool
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "avg" kernel = [4] stride = [1] padding = [0] dilation = [1] adaptive count_include_pad : tensor<2x8xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected non-empty window dims for an adaptive pool
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [1] stride = [1] padding = [0] dilation = [1] adaptive : tensor<2x8xf32> -> tensor<2x0xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op expected kernel [4] (the largest adaptive window), found [3]
func.func @f(%x: tensor<2x8xf32>) {
  %0 = graph.pool %x kind = "max" kernel = [3] stride = [1] padding = [0] dilation = [1] adaptive : tensor<2x8xf32> -> tensor<2x3xf32>
  func.return
}

// -----

// graph.scan: cumsum, cumprod, logcumsumexp, cummax / cummin
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected kind in ['sum', 'prod', 'logsumexp', 'max', 'min', 'argmax', 'argmin'], found "mean"
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.scan %x dim = 1 kind = "mean" : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected dim in [0, 2), found 2
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.scan %x dim = 2 kind = "sum" : tensor<4x8xf32> -> tensor<4x8xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected an i64 result for argmin, found i32
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.scan %x dim = 1 kind = "argmin" : tensor<4x8xf32> -> tensor<4x8xi32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected operand and result to have the same element type, found f32, f16
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.scan %x dim = 1 kind = "max" : tensor<4x8xf32> -> tensor<4x8xf16>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected a numeric operand for sum, found i1
func.func @f(%x: tensor<4x8xi1>) {
  %0 = graph.scan %x dim = 1 kind = "sum" : tensor<4x8xi1> -> tensor<4x8xi1>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected a floating-point operand for logsumexp, found i64
func.func @f(%x: tensor<4x8xi64>) {
  %0 = graph.scan %x dim = 1 kind = "logsumexp" : tensor<4x8xi64> -> tensor<4x8xi64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.scan' op expected result shape [4, 8], found [8, 4]
func.func @f(%x: tensor<4x8xf32>) {
  %0 = graph.scan %x dim = 1 kind = "prod" : tensor<4x8xf32> -> tensor<8x4xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.patches' op expected a [C, H, W] operand and 2 kernel, stride and padding values, found [1, 8, 4, 4], [3, 3], [2, 2], [1, 1]
func.func @f(%x: tensor<1x8x4x4xf32>) {
  %0 = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<1x8x4x4xf32> -> tensor<2x2x8x3x3xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.patches' op expected kernel, stride > 0 and 0 <= padding <= kernel / 2 in window dim 1, found 3, 2, 2
func.func @f(%x: tensor<8x4x4xf32>) {
  %0 = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 2] : tensor<8x4x4xf32> -> tensor<2x3x8x3x3xf32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.patches' op expected result shape [2, 2, 8, 3, 3], found [4, 8, 3, 3]
func.func @f(%x: tensor<8x4x4xf32>) {
  %0 = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<8x4x4xf32> -> tensor<4x8x3x3xf32>
  func.return
}

// -----

// Symbolic sizes (docs/dynamic-shapes.md).

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 'e0' = (s0 - 1) floordiv 2 is not in canonical form: it is -1 + (s0 + 1) floordiv 2 (in input symbols and floor divisions)
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = (s0 - 1) floordiv 2>} {
  %0 = graph.neg %x : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 'e0' = (s0) floordiv 1 divides by 1: a floor division's divisor is 2 or more
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = (s0) floordiv 1>} {
  %0 = graph.neg %x : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbols 'e0' and 'e1' are the same size ((s0 + 1) floordiv 2): use one symbol
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, e0 = (s0 + 1) floordiv 2, e1 = (s0 + 1) floordiv 2>} {
  %0 = graph.neg %x : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// Size relations: equalities of products of input symbols (eq(lhs, rhs)).

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op relation eq(s2 * s9, s0 * s1) uses 's9', which is no input symbol
func.func @f(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %y: tensor<?x?xf32, #graph.syms<s2, s3>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2, s1 = input(0, 1) hint 8, s2 = input(1, 0) hint 2, s3 = input(1, 1) hint 8, eq(s2 * s9, s0 * s1)>} {
  %0 = graph.neg %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op relation eq(s2, s0) rewrites a monomial of degree 1: an equal input size is the same symbol
func.func @f(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %y: tensor<?x?xf32, #graph.syms<s2, s3>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2, s1 = input(0, 1) hint 8, s2 = input(1, 0) hint 2, s3 = input(1, 1) hint 8, eq(s2, s0)>} {
  %0 = graph.neg %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op relation eq(s0 * s1, s2 * s3) is not oriented: its right-hand side has a monomial not smaller than its left-hand side (degree first, then the later input symbols)
func.func @f(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %y: tensor<?x?xf32, #graph.syms<s2, s3>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2, s1 = input(0, 1) hint 8, s2 = input(1, 0) hint 2, s3 = input(1, 1) hint 8, eq(s0 * s1, s2 * s3)>} {
  %0 = graph.neg %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op relation eq(s2 * s3, s0 * s1) rewrites a monomial an earlier one rewrites
func.func @f(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %y: tensor<?x?xf32, #graph.syms<s2, s3>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2, s1 = input(0, 1) hint 8, s2 = input(1, 0) hint 2, s3 = input(1, 1) hint 8, eq(s2 * s3, s0 * s1), eq(s2 * s3, s0 * s1)>} {
  %0 = graph.neg %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  func.return
}

// -----

// Size conditions: inequalities of the table's symbols (le, lt, ne).

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op condition le(s1, s9) uses 's9', which is no size symbol
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>, %y: tensor<?xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 8, s1 = input(1, 0) hint 5, le(s1, s9)>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op condition ne(2, 3) has no size symbol: it holds at every call or at none
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>, %y: tensor<?xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 8, s1 = input(1, 0) hint 5, ne(2, 3)>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.pool' op graph.pool does not take symbolic sizes yet (operand 0 is tensor<?x4x9x9xf32, #graph.syms<s0>>)
func.func @f(%x: tensor<?x4x9x9xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.pool %x kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<?x4x9x9xf32, #graph.syms<s0>> -> tensor<?x4x5x5xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op operand 0 names size symbols (s0) but the function has no graph.sizes table
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) {
  %0 = graph.neg %x : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's1' of operand 0 is not in the function's graph.sizes table
func.func @f(%x: tensor<?x8xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 1) hint 4>} {
  %0 = graph.neg %x : tensor<?x8xf32, #graph.syms<s1>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's0' is read from input(0, 1), which is tensor<?x8xf32, #graph.syms<s0>>
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 1) hint 4>} {
  %0 = graph.neg %x : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op expected operand to name one size symbol per dynamic dim, found tensor<?x?xf32, #graph.syms<s0>>
func.func @f(%x: tensor<?x?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.neg %x : tensor<?x?xf32, #graph.syms<s0>>
  func.return
}

// -----

// Two symbols are equal only where they are one symbol: s0 and s1 may differ.
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.add' op operand shapes [s0, 8] and [s1, 8] do not broadcast for every size of their symbols
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<?x8xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(1, 0) hint 4>} {
  %0 = graph.add %x, %y : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>> -> tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// A symbol (never 1) against a static size other than 1: not provable.
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.mul' op operand shapes [s0, 8] and [4, 8] do not broadcast for every size of their symbols
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<4x8xf32>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.mul %x, %y : tensor<?x8xf32, #graph.syms<s0>>, tensor<4x8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.reshape' op expected the result to have 8 * s0 elements like the operand, found 4 * s0 (not equal for every size of their symbols)
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.reshape %x : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x4xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.concat' op expected result dim 0 of size s0 + s1, found s2 (not equal for every size of their symbols)
func.func @f(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<?x8xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(1, 0) hint 4, s2 = 2 * s0>} {
  %0 = graph.concat %x, %y dim = 0 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>> -> tensor<?x8xf32, #graph.syms<s2>>
  func.return
}

// -----

// The table itself: errors point at the first op that reads it.
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op expected a size symbol name, found 's$0'
func.func @f(%x: tensor<?xf32, #graph.syms<s$0>>) attributes {graph.sizes = #graph.sizes<s$0 = input(0, 0) hint 4>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s$0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's0' is defined twice
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s0 = 2 * s0>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's1' = 2 * s2 uses 's2', which is not defined before it
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 2 * s2>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's1' = 3 is the constant 3: write it as a static size
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = s0 - s0 + 3>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbols 's1' and 's2' are the same size (2 * s0): use one symbol
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 2 * s0, s2 = s0 + s0>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's0' has range [1, ...]: a symbol's range starts at 2 or more (sizes 0 and 1 are specialised)
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [1, 8]>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's0' has an empty range [8, 4]
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [8, 4]>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbol 's0' has hint 1 outside its range [2, inf]
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 1>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.neg' op size symbols 's0' and 's1' both read input(0, 0)
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 0) hint 4>} {
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.gather' op table dim 0 of size s0 is smaller than result dim 0 of size s2 (it must be 1 or at least as large)
func.func @f(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %i: tensor<?x?xi64, #graph.syms<s2, s3>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 6, s1 = input(0, 1) hint 4, s2 = input(1, 0) hint 5, s3 = input(1, 1) hint 3>} {
  %0 = graph.gather %x[%i] dim = 1 : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x?xi64, #graph.syms<s2, s3>> -> tensor<?x?xf32, #graph.syms<s2, s3>>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.size_value' op size symbol 's1' of s1 - 7 is not in the function's table
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.size_value <s1 - 7> : tensor<i64>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.size_value' op expected a 0-d i64 result, found tensor<i32>
func.func @f(%x: tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.size_value <s0> : tensor<i32>
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'graph.size_value' op a size value outside a function with a size table
func.func @f(%x: tensor<4xf32>) {
  %0 = graph.size_value <s0> : tensor<i64>
  func.return
}
