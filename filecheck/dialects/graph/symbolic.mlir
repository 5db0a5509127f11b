// RUN: xfuse-opt %s | xfuse-opt | filecheck %s
// RUN: xfuse-opt %s --print-op-generic | xfuse-opt | filecheck %s

// Symbolic sizes (docs/dynamic-shapes.md): dynamic dims name their size symbols in the type's
// #graph.syms encoding; the function's graph.sizes table defines them. Every op that takes
// symbolic sizes, printed and read back.

// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096], s1 = input(0, 1) hint 16 range [2, inf]>}
func.func @elementwise(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %b: tensor<?xf32, #graph.syms<s1>>, %c: tensor<?x1xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096], s1 = input(0, 1) hint 16>} {
  // A symbol broadcasts against itself and against 1.
  // CHECK-NEXT: %0 = graph.add %x, %b : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?xf32, #graph.syms<s1>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %0 = graph.add %x, %b : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?xf32, #graph.syms<s1>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  // CHECK-NEXT: %1 = graph.mul %0, %c : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %1 = graph.mul %0, %c : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  // CHECK-NEXT: %2 = graph.exp %1 : tensor<?x?xf32, #graph.syms<s0, s1>>
  %2 = graph.exp %1 : tensor<?x?xf32, #graph.syms<s0, s1>>
  // CHECK-NEXT: %3 = graph.isnan %2 : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x?xi1, #graph.syms<s0, s1>>
  %3 = graph.isnan %2 : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x?xi1, #graph.syms<s0, s1>>
  // CHECK-NEXT: %4 = graph.where %3, %x, %2 : tensor<?x?xi1, #graph.syms<s0, s1>>, tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %4 = graph.where %3, %x, %2 : tensor<?x?xi1, #graph.syms<s0, s1>>, tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  // CHECK-NEXT: %5 = graph.cast %4 : tensor<?x?xf32, #graph.syms<s0, s1>> to tensor<?x?xf16, #graph.syms<s0, s1>>
  %5 = graph.cast %4 : tensor<?x?xf32, #graph.syms<s0, s1>> to tensor<?x?xf16, #graph.syms<s0, s1>>
  func.return
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<?x8xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  // CHECK-NEXT: %0 = graph.reduce_sum %x dims = [1] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s0>>
  %0 = graph.reduce_sum %x dims = [1] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s0>>
  // Reducing the symbolic dim leaves a static shape.
  // CHECK-NEXT: %1 = graph.reduce_max %x dims = [0] keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<1x8xf32>
  %1 = graph.reduce_max %x dims = [0] keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<1x8xf32>
  // CHECK-NEXT: %2 = graph.argmax %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8xi64>
  %2 = graph.argmax %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8xi64>
  // CHECK-NEXT: %3 = graph.scan %x dim = 0 kind = "sum" : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<s0>>
  %3 = graph.scan %x dim = 0 kind = "sum" : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<s0>>
  // CHECK-NEXT: %4 = graph.var %x dims = [1] correction = 1 keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
  %4 = graph.var %x dims = [1] correction = 1 keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
  // CHECK-NEXT: %5 = graph.softmax %x dim = 1 : tensor<?x8xf32, #graph.syms<s0>>
  %5 = graph.softmax %x dim = 1 : tensor<?x8xf32, #graph.syms<s0>>
  // CHECK-NEXT: %6 = graph.gelu %x approximate = "tanh" : tensor<?x8xf32, #graph.syms<s0>>
  %6 = graph.gelu %x approximate = "tanh" : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// CHECK-LABEL: func.func @norms
func.func @norms(%x: tensor<?x8xf32, #graph.syms<s0>>, %w: tensor<8xf32>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  // CHECK-NEXT: %0 = graph.layer_norm %x weight(%w : tensor<8xf32>) rank = 1 eps = 1.000000e-05 : tensor<?x8xf32, #graph.syms<s0>>
  %0 = graph.layer_norm %x weight(%w : tensor<8xf32>) rank = 1 eps = 1.0e-05 : tensor<?x8xf32, #graph.syms<s0>>
  func.return
}

// Derived symbols: a reshape's element counts and a concatenation's sum are equal
// polynomials of the input symbols.
// CHECK-LABEL: func.func @layout
// CHECK-SAME: s2 = 8 * s0, s3 = s0 + s1, s4 = s0 * s1>
func.func @layout(%x: tensor<?x8xf32, #graph.syms<s0>>, %y: tensor<?x8xf32, #graph.syms<s1>>, %v: tensor<8xf32>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(1, 0) hint 3, s2 = 8 * s0, s3 = s0 + s1, s4 = s0 * s1>} {
  // CHECK-NEXT: %0 = graph.reshape %x : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s2>>
  %0 = graph.reshape %x : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s2>>
  // CHECK-NEXT: %1 = graph.reshape %x : tensor<?x8xf32, #graph.syms<s0>> -> tensor<2x?x4xf32, #graph.syms<s0>>
  %1 = graph.reshape %x : tensor<?x8xf32, #graph.syms<s0>> -> tensor<2x?x4xf32, #graph.syms<s0>>
  // CHECK-NEXT: %2 = graph.concat %x, %y dim = 0 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>> -> tensor<?x8xf32, #graph.syms<s3>>
  %2 = graph.concat %x, %y dim = 0 : tensor<?x8xf32, #graph.syms<s0>>, tensor<?x8xf32, #graph.syms<s1>> -> tensor<?x8xf32, #graph.syms<s3>>
  // CHECK-NEXT: %3 = graph.permute %x perm = [1, 0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8x?xf32, #graph.syms<s0>>
  %3 = graph.permute %x perm = [1, 0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8x?xf32, #graph.syms<s0>>
  // CHECK-NEXT: %4 = graph.broadcast_in_dim %v dims = [1] : tensor<8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
  %4 = graph.broadcast_in_dim %v dims = [1] : tensor<8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
  // CHECK-NEXT: %5 = graph.flip %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>>
  %5 = graph.flip %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>>
  // CHECK-NEXT: %6 = graph.matmul %x, %3 : tensor<?x8xf32, #graph.syms<s0>>, tensor<8x?xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s0>>
  %6 = graph.matmul %x, %3 : tensor<?x8xf32, #graph.syms<s0>>, tensor<8x?xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s0>>
  %7 = graph.permute %y perm = [1, 0] : tensor<?x8xf32, #graph.syms<s1>> -> tensor<8x?xf32, #graph.syms<s1>>
  %8 = graph.matmul %x, %7 : tensor<?x8xf32, #graph.syms<s0>>, tensor<8x?xf32, #graph.syms<s1>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  // CHECK: %{{.*}} = graph.reshape %{{.*}} : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?xf32, #graph.syms<s4>>
  %9 = graph.reshape %8 : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?xf32, #graph.syms<s4>>
  func.return
}

// CHECK-LABEL: func.func @externs
func.func @externs(%x: tensor<?x16xf32, #graph.syms<s0>>, %w: tensor<4x16xf32>, %b: tensor<4xf32>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 8>} {
  // CHECK-NEXT: %0 = graph.linear %x, %w bias(%b : tensor<4xf32>) : tensor<?x16xf32, #graph.syms<s0>>, tensor<4x16xf32> -> tensor<?x4xf32, #graph.syms<s0>>
  %0 = graph.linear %x, %w bias(%b : tensor<4xf32>) : tensor<?x16xf32, #graph.syms<s0>>, tensor<4x16xf32> -> tensor<?x4xf32, #graph.syms<s0>>
  // CHECK-NEXT: %1 = graph.torch_call "aten.cumsum.default"(%x) args = ["%t0", 1 : i64] kwargs = {} : (tensor<?x16xf32, #graph.syms<s0>>) -> tensor<?x16xf32, #graph.syms<s0>>
  %1 = graph.torch_call "aten.cumsum.default"(%x) args = ["%t0", 1] kwargs = {} : (tensor<?x16xf32, #graph.syms<s0>>) -> tensor<?x16xf32, #graph.syms<s0>>
  func.return
}

// A floor division of a polynomial by an integer: the output size of a stride-2 convolution
// and of the pooling after it, an atom of later polynomials.
// CHECK-LABEL: func.func @floordiv
// CHECK-SAME: graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2 range [2, 64], s1 = input(0, 2) hint 32 range [8, 512], e0 = (s1 + 1) floordiv 2, e1 = (s1 + 3) floordiv 4, e2 = 8 * e1>
func.func @floordiv(%x: tensor<?x3x?xf32, #graph.syms<s0, s1>>, %w: tensor<8x3x3xf32>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2 range [2, 64], s1 = input(0, 2) hint 32 range [8, 512], e0 = (s1 + 1) floordiv 2, e1 = (s1 + 3) floordiv 4, e2 = 8 * e1>} {
  // CHECK-NEXT: %0 = graph.torch_call "aten.convolution.default"(%x, %w) {{.*}} -> tensor<?x8x?xf32, #graph.syms<s0, e0>>
  %0 = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [2], [1], [1], false, [0], 1] kwargs = {} : (tensor<?x3x?xf32, #graph.syms<s0, s1>>, tensor<8x3x3xf32>) -> tensor<?x8x?xf32, #graph.syms<s0, e0>>
  // CHECK-NEXT: %1 = graph.relu %0 : tensor<?x8x?xf32, #graph.syms<s0, e0>>
  %1 = graph.relu %0 : tensor<?x8x?xf32, #graph.syms<s0, e0>>
  // CHECK-NEXT: %2 = graph.torch_call "aten.max_pool1d.default"(%1) {{.*}} -> tensor<?x8x?xf32, #graph.syms<s0, e1>>
  %2 = graph.torch_call "aten.max_pool1d.default"(%1) args = ["%t0", [3], [2], [1]] kwargs = {} : (tensor<?x8x?xf32, #graph.syms<s0, e0>>) -> tensor<?x8x?xf32, #graph.syms<s0, e1>>
  // CHECK-NEXT: %3 = graph.reshape %2 : tensor<?x8x?xf32, #graph.syms<s0, e1>> -> tensor<?x?xf32, #graph.syms<s0, e2>>
  %3 = graph.reshape %2 : tensor<?x8x?xf32, #graph.syms<s0, e1>> -> tensor<?x?xf32, #graph.syms<s0, e2>>
  func.return
}

// Conditions: inequalities of sizes torch's trace assumed (a slice to another input's width
// is within it), after the symbols; each side a polynomial of the table's symbols.
// CHECK-LABEL: func.func @conditions
// CHECK-SAME: graph.sizes = #graph.sizes<s0 = input(0, 0) hint 8 range [2, inf], s1 = input(1, 0) hint 5 range [2, inf], e0 = (s0) floordiv 2, le(s1, s0), ne(s0, s1), lt(2 * s1 - 1, e0 * s0 + 3)>
func.func @conditions(%x: tensor<?xf32, #graph.syms<s0>>, %y: tensor<?xf32, #graph.syms<s1>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 8, s1 = input(1, 0) hint 5, e0 = (s0) floordiv 2, le(s1, s0), ne(s0, s1), lt(2 * s1 - 1, s0 * e0 + 3)>} {
  // CHECK-NEXT: %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  %0 = graph.neg %x : tensor<?xf32, #graph.syms<s0>>
  func.return
}

// A slice counted from a symbolic dim's end within its last MIN_SIZE (2) elements: a start and
// a limit `-1 - k` for `size - k`, a static result dim (`x[:, -1]`, `x[:, -2:-1]`).
// CHECK-LABEL: func.func @slices_from_the_end
func.func @slices_from_the_end(%x: tensor<4x?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 1) hint 16>} {
  // CHECK-NEXT: %0 = graph.slice %x start = [0, -2] limit = [4, -1] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  %0 = graph.slice %x start = [0, -2] limit = [4, -1] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  // CHECK-NEXT: %1 = graph.slice %x start = [0, -3] limit = [4, -1] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x2xf32>
  %1 = graph.slice %x start = [0, -3] limit = [4, -1] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x2xf32>
  // CHECK-NEXT: %2 = graph.slice %x start = [0, -3] limit = [4, -2] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  %2 = graph.slice %x start = [0, -3] limit = [4, -2] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  func.return
}

// An input symbol whose range starts above MIN_SIZE (torch's guards raised it: `x[:, 3]`
// holds from 4) is sliced within its lowest size from either end (`x[:, 3]`, `x[:, -4]`).
// CHECK-LABEL: func.func @slices_within_the_lowest_size
func.func @slices_within_the_lowest_size(%x: tensor<4x?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 1) hint 16 range [4, inf]>} {
  // CHECK-NEXT: %0 = graph.slice %x start = [0, 3] limit = [4, 4] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  %0 = graph.slice %x start = [0, 3] limit = [4, 4] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  // CHECK-NEXT: %1 = graph.slice %x start = [0, -5] limit = [4, -4] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  %1 = graph.slice %x start = [0, -5] limit = [4, -4] stride = [1, 1] : tensor<4x?xf32, #graph.syms<s0>> -> tensor<4x1xf32>
  func.return
}

// A gather whose result dim is another symbol than the table's there: the table's
// condition (`le(s2, s0)`, from torch's check of a gather's sizes) holds it at least as large.
// CHECK-LABEL: func.func @gather_within_a_condition
func.func @gather_within_a_condition(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %i: tensor<?x?xi64, #graph.syms<s2, s3>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 6, s1 = input(0, 1) hint 4, s2 = input(1, 0) hint 5, s3 = input(1, 1) hint 3, le(s2, s0)>} {
  // CHECK-NEXT: %0 = graph.gather %x[%i] dim = 1 : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x?xi64, #graph.syms<s2, s3>> -> tensor<?x?xf32, #graph.syms<s2, s3>>
  %0 = graph.gather %x[%i] dim = 1 : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x?xi64, #graph.syms<s2, s3>> -> tensor<?x?xf32, #graph.syms<s2, s3>>
  func.return
}

// A size of the call read as a number: a polynomial of the table's symbols, a 0-d i64.
// CHECK-LABEL: func.func @size_value
func.func @size_value(%x: tensor<?x8xi64, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 9, e0 = (s0 + 6) floordiv 7>} {
  // CHECK-NEXT: %0 = graph.size_value <7 * e0 - 7> : tensor<i64>
  %0 = graph.size_value <7 * e0 - 7> : tensor<i64>
  // CHECK-NEXT: %1 = graph.ge %x, %0 : tensor<?x8xi64, #graph.syms<s0>>, tensor<i64> -> tensor<?x8xi1, #graph.syms<s0>>
  %1 = graph.ge %x, %0 : tensor<?x8xi64, #graph.syms<s0>>, tensor<i64> -> tensor<?x8xi1, #graph.syms<s0>>
  func.return
}
