// RUN: xfuse-opt %s | xfuse-opt | filecheck %s
// RUN: xfuse-opt %s --print-op-generic | xfuse-opt | filecheck %s
// RUN: xfuse-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// Every graph op, printed in its custom form and read back (also from the generic form).

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<4xf32>, %i: tensor<4xi32>) -> tensor<4xf32> {
  // CHECK-NEXT: %{{.*}} = graph.neg %x : tensor<4xf32>
  %0 = graph.neg %x : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.abs %i : tensor<4xi32>
  %1 = graph.abs %i : tensor<4xi32>
  // CHECK-NEXT: %{{.*}} = graph.relu %{{.*}} : tensor<4xf32>
  %2 = graph.relu %0 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.exp %{{.*}} : tensor<4xf32>
  %3 = graph.exp %2 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.log %{{.*}} : tensor<4xf32>
  %4 = graph.log %3 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.sqrt %{{.*}} : tensor<4xf32>
  %5 = graph.sqrt %4 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.rsqrt %{{.*}} : tensor<4xf32>
  %6 = graph.rsqrt %5 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.tanh %{{.*}} : tensor<4xf32>
  %7 = graph.tanh %6 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.sigmoid %{{.*}} : tensor<4xf32>
  %8 = graph.sigmoid %7 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.erf %{{.*}} : tensor<4xf32>
  %9 = graph.erf %8 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.sin %{{.*}} : tensor<4xf32>
  %10 = graph.sin %9 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.cos %{{.*}} : tensor<4xf32>
  %11 = graph.cos %10 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.reciprocal %{{.*}} : tensor<4xf32>
  %12 = graph.reciprocal %11 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.cast %{{.*}} : tensor<4xf32> to tensor<4xf16>
  %13 = graph.cast %12 : tensor<4xf32> to tensor<4xf16>
  // CHECK-NEXT: %{{.*}} = graph.cast %{{.*}} : tensor<4xf16> to tensor<4xf32>
  %14 = graph.cast %13 : tensor<4xf16> to tensor<4xf32>
  func.return %14 : tensor<4xf32>
}

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<4x1xf32>, %b: tensor<4xf32>, %s: tensor<f32>) -> tensor<4x4xf32> {
  // CHECK-NEXT: %{{.*}} = graph.add %a, %b : tensor<4x1xf32>, tensor<4xf32> -> tensor<4x4xf32>
  %0 = graph.add %a, %b : tensor<4x1xf32>, tensor<4xf32> -> tensor<4x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.sub %{{.*}}, %s : tensor<4x4xf32>, tensor<f32> -> tensor<4x4xf32>
  %1 = graph.sub %0, %s : tensor<4x4xf32>, tensor<f32> -> tensor<4x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.mul %{{.*}}, %b : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  %2 = graph.mul %1, %b : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.div %{{.*}}, %a : tensor<4x4xf32>, tensor<4x1xf32> -> tensor<4x4xf32>
  %3 = graph.div %2, %a : tensor<4x4xf32>, tensor<4x1xf32> -> tensor<4x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.pow %{{.*}}, %s : tensor<4x4xf32>, tensor<f32> -> tensor<4x4xf32>
  %4 = graph.pow %3, %s : tensor<4x4xf32>, tensor<f32> -> tensor<4x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.maximum %{{.*}}, %{{.*}} : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %5 = graph.maximum %4, %3 : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.minimum %{{.*}}, %b : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  %6 = graph.minimum %5, %b : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x4xf32>
  func.return %6 : tensor<4x4xf32>
}

// CHECK-LABEL: func.func @compare_select
func.func @compare_select(%a: tensor<4xf32>, %b: tensor<4xf32>, %s: tensor<f32>) -> tensor<4xf32> {
  // CHECK-NEXT: %{{.*}} = graph.eq %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  %0 = graph.eq %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.ne %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  %1 = graph.ne %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.lt %a, %s : tensor<4xf32>, tensor<f32> -> tensor<4xi1>
  %2 = graph.lt %a, %s : tensor<4xf32>, tensor<f32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.le %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  %3 = graph.le %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.gt %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  %4 = graph.gt %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.ge %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  %5 = graph.ge %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.where %{{.*}}, %a, %s : tensor<4xi1>, tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %6 = graph.where %5, %a, %s : tensor<4xi1>, tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  func.return %6 : tensor<4xf32>
}

// CHECK-LABEL: func.func @broadcast_reduce
func.func @broadcast_reduce(%x: tensor<4xf32>, %y: tensor<4x8xf32>) -> (tensor<3x4xf32>, tensor<4x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) {
  // CHECK-NEXT: %{{.*}} = graph.broadcast_in_dim %x dims = [1] : tensor<4xf32> -> tensor<3x4xf32>
  %0 = graph.broadcast_in_dim %x dims = [1] : tensor<4xf32> -> tensor<3x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.reduce_sum %y dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %1 = graph.reduce_sum %y dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  // CHECK-NEXT: %{{.*}} = graph.reduce_mean %y dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %2 = graph.reduce_mean %y dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.reduce_max %y dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %3 = graph.reduce_max %y dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.reduce_min %y dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %4 = graph.reduce_min %y dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.reduce_prod %y dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  %5 = graph.reduce_prod %y dims = [0, 1] : tensor<4x8xf32> -> tensor<f32>
  func.return %0, %1, %2, %3, %4, %5 : tensor<3x4xf32>, tensor<4x1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @layout
func.func @layout(%x: tensor<4x8xf32>, %a: tensor<2x4xf32>, %b: tensor<3x4xf32>) -> (tensor<32xf32>, tensor<8x4xf32>, tensor<4x3xf32>, tensor<5x4xf32>) {
  // CHECK-NEXT: %{{.*}} = graph.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
  %0 = graph.reshape %x : tensor<4x8xf32> -> tensor<32xf32>
  // CHECK-NEXT: %{{.*}} = graph.permute %x perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %1 = graph.permute %x perm = [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.slice %x start = [0, 2] limit = [4, 8] stride = [1, 2] : tensor<4x8xf32> -> tensor<4x3xf32>
  %2 = graph.slice %x start = [0, 2] limit = [4, 8] stride = [1, 2] : tensor<4x8xf32> -> tensor<4x3xf32>
  // CHECK-NEXT: %{{.*}} = graph.concat %a, %b dim = 0 : tensor<2x4xf32>, tensor<3x4xf32> -> tensor<5x4xf32>
  %3 = graph.concat %a, %b dim = 0 : tensor<2x4xf32>, tensor<3x4xf32> -> tensor<5x4xf32>
  func.return %0, %1, %2, %3 : tensor<32xf32>, tensor<8x4xf32>, tensor<4x3xf32>, tensor<5x4xf32>
}

// CHECK-LABEL: func.func @extern
func.func @extern(%x: tensor<8x16xf32>, %w: tensor<4x16xf32>, %b: tensor<4xf32>, %m: tensor<2x16x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<2x8x4xf32>, tensor<8x16xf32>) {
  // CHECK-NEXT: %{{.*}} = graph.linear %x, %w bias(%b : tensor<4xf32>) : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>
  %0 = graph.linear %x, %w bias(%b : tensor<4xf32>) : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.linear %x, %w : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>
  %1 = graph.linear %x, %w : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.matmul %x, %m : tensor<8x16xf32>, tensor<2x16x4xf32> -> tensor<2x8x4xf32>
  %2 = graph.matmul %x, %m : tensor<8x16xf32>, tensor<2x16x4xf32> -> tensor<2x8x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.torch_call "aten.cumsum.default"(%x) args = ["%t0", 1 : i64] kwargs = {dtype = "dtype:float32"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  %3 = graph.torch_call "aten.cumsum.default"(%x) args = ["%t0", 1] kwargs = {dtype = "dtype:float32"} : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %0, %1, %2, %3 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<2x8x4xf32>, tensor<8x16xf32>
}

// A torch call whose first result is torch's in memory order ([B, H, T] laid out [B, T, H]) and
// whose second is as torch returns it.
// CHECK-LABEL: func.func @extern_in_memory_order
func.func @extern_in_memory_order(%q: tensor<1x4x16x8xf32>) -> (tensor<1x16x4x8xf32>, tensor<1x4x16xf32>) {
  // CHECK-NEXT: %{{.*}}, %{{.*}} = graph.torch_call "aten._scaled_dot_product_flash_attention_for_cpu.default"(%q) args = ["%t0", "%t0", "%t0"] kwargs = {} orders = [array<i64: 0, 2, 1, 3>, array<i64>] : (tensor<1x4x16x8xf32>) -> (tensor<1x16x4x8xf32>, tensor<1x4x16xf32>)
  %0, %1 = graph.torch_call "aten._scaled_dot_product_flash_attention_for_cpu.default"(%q) args = ["%t0", "%t0", "%t0"] kwargs = {} orders = [array<i64: 0, 2, 1, 3>, array<i64>] : (tensor<1x4x16x8xf32>) -> (tensor<1x16x4x8xf32>, tensor<1x4x16xf32>)
  func.return %0, %1 : tensor<1x16x4x8xf32>, tensor<1x4x16xf32>
}

// CHECK-LABEL: func.func @constants
func.func @constants() -> (tensor<f32>, tensor<2x2xi64>, tensor<3xi1>, tensor<3xf32>, tensor<f16>) {
  // CHECK-NEXT: %{{.*}} = graph.constant dense<2.000000e+00> : tensor<f32>
  %0 = graph.constant dense<2.0> : tensor<f32>
  // CHECK-NEXT: %{{.*}} = graph.constant dense<{{\[\[}}1, 2], [3, 4]]> : tensor<2x2xi64>
  %1 = graph.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  // CHECK-NEXT: %{{.*}} = graph.constant dense<[true, false, true]> : tensor<3xi1>
  %2 = graph.constant dense<[true, false, true]> : tensor<3xi1>
  // Non-finite floats print as their bits and must read back as floats, not integers.
  // CHECK-NEXT: %{{.*}} = graph.constant dense<[0xff800000, 1.500000e+00, 0x7fc00000]> : tensor<3xf32>
  %3 = graph.constant dense<[0xff800000, 1.5, 0x7fc00000]> : tensor<3xf32>
  // CHECK-NEXT: %{{.*}} = graph.constant dense<0x7c00> : tensor<f16>
  %4 = graph.constant dense<0x7c00> : tensor<f16>
  func.return %0, %1, %2, %3, %4 : tensor<f32>, tensor<2x2xi64>, tensor<3xi1>, tensor<3xf32>, tensor<f16>
}

// CHECK-LABEL: func.func @composite
func.func @composite(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>) {
  // CHECK-NEXT: %{{.*}} = graph.softmax %x dim = 1 : tensor<4x8xf32>
  %0 = graph.softmax %x dim = 1 : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.log_softmax %x dim = 0 : tensor<4x8xf32>
  %1 = graph.log_softmax %x dim = 0 : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.layer_norm %x weight(%w : tensor<8xf32>) bias(%b : tensor<8xf32>) rank = 1 eps = 1.000000e-05 : tensor<4x8xf32>
  %2 = graph.layer_norm %x weight(%w : tensor<8xf32>) bias(%b : tensor<8xf32>) rank = 1 eps = 1.0e-05 : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.layer_norm %x rank = 2 eps = 1.000000e-05 : tensor<4x8xf32>
  %3 = graph.layer_norm %x rank = 2 eps = 1.0e-05 : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.rms_norm %x weight(%w : tensor<8xf32>) rank = 1 eps = 1.000000e-06 : tensor<4x8xf32>
  %4 = graph.rms_norm %x weight(%w : tensor<8xf32>) rank = 1 eps = 1.0e-06 : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.rms_norm %x rank = 1 eps = 1.000000e-06 : tensor<4x8xf32>
  %5 = graph.rms_norm %x rank = 1 eps = 1.0e-06 : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.gelu %x approximate = "tanh" : tensor<4x8xf32>
  %6 = graph.gelu %x approximate = "tanh" : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.silu %x : tensor<4x8xf32>
  %7 = graph.silu %x : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.var %x dims = [1] correction = 1 keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %8 = graph.var %x dims = [1] correction = 1 keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  func.return %0, %1, %2, %3, %4, %5, %6, %7, %8 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x1xf32>
}

// CHECK-LABEL: func.func @arg_attrs
// CHECK-SAME: (%w: tensor<4xf32> {graph.param = "fc1.weight"}, %x: tensor<4xf32> {graph.input = "x"})
func.func @arg_attrs(%w: tensor<4xf32> {graph.param = "fc1.weight"}, %x: tensor<4xf32> {graph.input = "x"}) -> tensor<4xf32> {
  %0 = graph.add %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}

// The generic form spells out properties.
// GENERIC: "graph.broadcast_in_dim"(%{{.*}}) <{dims = array<i64: 1>}> : (tensor<4xf32>) -> tensor<3x4xf32>
// GENERIC: "graph.reduce_sum"(%{{.*}}) <{dims = array<i64: 1>, keepdim}> : (tensor<4x8xf32>) -> tensor<4x1xf32>
// GENERIC: "graph.linear"(%{{.*}}, %{{.*}}, %{{.*}}) <{operandSegmentSizes = array<i32: 1, 1, 1>}>

// CHECK-LABEL: func.func @math
func.func @math(%x: tensor<4xf32>, %i: tensor<4xi64>) -> tensor<4xf32> {
  // CHECK-NEXT: %{{.*}} = graph.floor %x : tensor<4xf32>
  %0 = graph.floor %x : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.ceil %{{.*}} : tensor<4xf32>
  %1 = graph.ceil %0 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.round %{{.*}} : tensor<4xf32>
  %2 = graph.round %1 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.trunc %i : tensor<4xi64>
  %3 = graph.trunc %i : tensor<4xi64>
  // CHECK-NEXT: %{{.*}} = graph.log1p %{{.*}} : tensor<4xf32>
  %4 = graph.log1p %2 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.expm1 %{{.*}} : tensor<4xf32>
  %5 = graph.expm1 %4 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.log2 %{{.*}} : tensor<4xf32>
  %6 = graph.log2 %5 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.log10 %{{.*}} : tensor<4xf32>
  %7 = graph.log10 %6 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.exp2 %{{.*}} : tensor<4xf32>
  %8 = graph.exp2 %7 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.asin %{{.*}} : tensor<4xf32>
  %9 = graph.asin %8 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.acos %{{.*}} : tensor<4xf32>
  %10 = graph.acos %9 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.atan %{{.*}} : tensor<4xf32>
  %11 = graph.atan %10 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.tan %{{.*}} : tensor<4xf32>
  %12 = graph.tan %11 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.sinh %{{.*}} : tensor<4xf32>
  %13 = graph.sinh %12 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.cosh %{{.*}} : tensor<4xf32>
  %14 = graph.cosh %13 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.asinh %{{.*}} : tensor<4xf32>
  %15 = graph.asinh %14 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.acosh %{{.*}} : tensor<4xf32>
  %16 = graph.acosh %15 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.atanh %{{.*}} : tensor<4xf32>
  %17 = graph.atanh %16 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.sign %{{.*}} : tensor<4xf32>
  %18 = graph.sign %17 : tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.isnan %{{.*}} : tensor<4xf32> -> tensor<4xi1>
  %19 = graph.isnan %18 : tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.isinf %{{.*}} : tensor<4xf32> -> tensor<4xi1>
  %20 = graph.isinf %18 : tensor<4xf32> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.signbit %i : tensor<4xi64> -> tensor<4xi1>
  %21 = graph.signbit %i : tensor<4xi64> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.atan2 %{{.*}}, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %22 = graph.atan2 %18, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.copysign %{{.*}}, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %23 = graph.copysign %22, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.fmax %{{.*}}, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %24 = graph.fmax %23, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.fmin %{{.*}}, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %25 = graph.fmin %24, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.hypot %{{.*}}, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %26 = graph.hypot %25, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %26 : tensor<4xf32>
}

// Logical/bitwise ops, fmod, remainder, floor division and erfc.
// CHECK-LABEL: func.func @bitwise_division
func.func @bitwise_division(%p: tensor<4xi1>, %q: tensor<4xi1>, %i: tensor<4xi64>, %j: tensor<i64>, %x: tensor<4xf32>, %s: tensor<f32>) -> (tensor<4xi1>, tensor<4xi64>, tensor<4xf32>) {
  // CHECK-NEXT: %{{.*}} = graph.bitwise_not %p : tensor<4xi1>
  %0 = graph.bitwise_not %p : tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.bitwise_and %{{.*}}, %q : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  %1 = graph.bitwise_and %0, %q : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.bitwise_or %{{.*}}, %q : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  %2 = graph.bitwise_or %1, %q : tensor<4xi1>, tensor<4xi1> -> tensor<4xi1>
  // CHECK-NEXT: %{{.*}} = graph.bitwise_xor %i, %j : tensor<4xi64>, tensor<i64> -> tensor<4xi64>
  %3 = graph.bitwise_xor %i, %j : tensor<4xi64>, tensor<i64> -> tensor<4xi64>
  // CHECK-NEXT: %{{.*}} = graph.bitwise_not %{{.*}} : tensor<4xi64>
  %4 = graph.bitwise_not %3 : tensor<4xi64>
  // CHECK-NEXT: %{{.*}} = graph.remainder %{{.*}}, %j : tensor<4xi64>, tensor<i64> -> tensor<4xi64>
  %5 = graph.remainder %4, %j : tensor<4xi64>, tensor<i64> -> tensor<4xi64>
  // CHECK-NEXT: %{{.*}} = graph.fmod %x, %s : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %6 = graph.fmod %x, %s : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.floor_divide %{{.*}}, %s : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  %7 = graph.floor_divide %6, %s : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
  // CHECK-NEXT: %{{.*}} = graph.erfc %{{.*}} : tensor<4xf32>
  %8 = graph.erfc %7 : tensor<4xf32>
  func.return %2, %5, %8 : tensor<4xi1>, tensor<4xi64>, tensor<4xf32>
}

// Index arithmetic: iota.
// CHECK-LABEL: func.func @index_ops
func.func @index_ops(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %{{.*}} = graph.iota dim = 0 start = 2 step = -3 : tensor<4xi64>
  %0 = graph.iota dim = 0 start = 2 step = -3 : tensor<4xi64>
  // CHECK-NEXT: %{{.*}} = graph.iota dim = 1 start = 0 step = 1 : tensor<4x8xi32>
  %1 = graph.iota dim = 1 start = 0 step = 1 : tensor<4x8xi32>
  // CHECK-NEXT: %{{.*}} = graph.flip %x dims = [0, 1] : tensor<4x8xf32>
  %2 = graph.flip %x dims = [0, 1] : tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.roll %{{.*}} shifts = [3, 1] dims = [1, 0] : tensor<4x8xf32>
  %3 = graph.roll %2 shifts = [3, 1] dims = [1, 0] : tensor<4x8xf32>
  func.return %3 : tensor<4x8xf32>
}

// Padding and pooling

// CHECK-LABEL: func.func @pad_pool
func.func @pad_pool(%x: tensor<4x8xf32>, %y: tensor<1x4x9x9xf32>, %i: tensor<4x8xi64>) -> (tensor<4x8xf32>, tensor<7x12xf32>, tensor<7x12xi64>, tensor<1x4x5x5xf32>, tensor<1x4x5x5xf32>) {
  // CHECK-NEXT: %{{.*}} = graph.pad %x low = [0, 1] high = [0, -1] mode = "constant" value = 0.000000e+00 : f64 : tensor<4x8xf32> -> tensor<4x8xf32>
  %0 = graph.pad %x low = [0, 1] high = [0, -1] mode = "constant" value = 0.0 : f64 : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.pad %x low = [1, 1] high = [2, 3] mode = "reflect" value = 0.000000e+00 : f64 : tensor<4x8xf32> -> tensor<7x12xf32>
  %1 = graph.pad %x low = [1, 1] high = [2, 3] mode = "reflect" value = 0.0 : f64 : tensor<4x8xf32> -> tensor<7x12xf32>
  // CHECK-NEXT: %{{.*}} = graph.pad %i low = [1, 1] high = [2, 3] mode = "constant" value = -3.000000e+00 : f64 : tensor<4x8xi64> -> tensor<7x12xi64>
  %2 = graph.pad %i low = [1, 1] high = [2, 3] mode = "constant" value = -3.0 : f64 : tensor<4x8xi64> -> tensor<7x12xi64>
  // CHECK-NEXT: %{{.*}} = graph.pad %x low = [0, 1] high = [0, 0] open_high = [1] mode = "constant" value = 1.000000e+00 : f64 : tensor<4x8xf32> -> tensor<4x14xf32>
  %pad_to = graph.pad %x low = [0, 1] high = [0, 0] open_high = [1] mode = "constant" value = 1.0 : f64 : tensor<4x8xf32> -> tensor<4x14xf32>
  // CHECK-NEXT: %{{.*}} = graph.pool %y kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<1x4x9x9xf32> -> tensor<1x4x5x5xf32>
  %3 = graph.pool %y kind = "max" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] : tensor<1x4x9x9xf32> -> tensor<1x4x5x5xf32>
  // CHECK-NEXT: %{{.*}} = graph.pool %y kind = "avg" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] count_include_pad divisor = 7 : tensor<1x4x9x9xf32> -> tensor<1x4x5x5xf32>
  %4 = graph.pool %y kind = "avg" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [1, 1] count_include_pad divisor = 7 : tensor<1x4x9x9xf32> -> tensor<1x4x5x5xf32>
  // CHECK-NEXT: %{{.*}} = graph.pool %y kind = "argmax" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [2, 1] : tensor<1x4x9x9xf32> -> tensor<1x4x4x5xi64>
  %5 = graph.pool %y kind = "argmax" kernel = [3, 3] stride = [2, 2] padding = [1, 1] dilation = [2, 1] : tensor<1x4x9x9xf32> -> tensor<1x4x4x5xi64>
  // CHECK-NEXT: %{{.*}} = graph.pool %y kind = "avg" kernel = [3, 3] stride = [1, 1] padding = [0, 0] dilation = [1, 1] adaptive : tensor<1x4x9x9xf32> -> tensor<1x4x5x7xf32>
  %6 = graph.pool %y kind = "avg" kernel = [3, 3] stride = [1, 1] padding = [0, 0] dilation = [1, 1] adaptive : tensor<1x4x9x9xf32> -> tensor<1x4x5x7xf32>
  func.return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<7x12xf32>, tensor<7x12xi64>, tensor<1x4x5x5xf32>, tensor<1x4x5x5xf32>
}
// GENERIC: "graph.pad"
// GENERIC: "graph.pool"

// convolution-matmul: a convolution's windows (im2col), one per output position.
// CHECK-LABEL: func.func @patches
func.func @patches(%x: tensor<8x4x4xf32>, %y: tensor<3x10x9xf64>) -> (tensor<2x2x8x3x3xf32>, tensor<4x2x3x5x5xf64>) {
  // CHECK-NEXT: %{{.*}} = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<8x4x4xf32> -> tensor<2x2x8x3x3xf32>
  %0 = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<8x4x4xf32> -> tensor<2x2x8x3x3xf32>
  // CHECK-NEXT: %{{.*}} = graph.patches %y kernel = [5, 5] stride = [3, 3] padding = [2, 0] : tensor<3x10x9xf64> -> tensor<4x2x3x5x5xf64>
  %1 = graph.patches %y kernel = [5, 5] stride = [3, 3] padding = [2, 0] : tensor<3x10x9xf64> -> tensor<4x2x3x5x5xf64>
  func.return %0, %1 : tensor<2x2x8x3x3xf32>, tensor<4x2x3x5x5xf64>
}
// GENERIC: "graph.patches"

// graph.gather: one index tensor, a `wrap` one, two index tensors.
// CHECK-LABEL: func.func @gather
func.func @gather(%t: tensor<10x4xf32>, %i: tensor<6x1xi64>, %j: tensor<1x3xi32>, %y: tensor<5x6x7xbf16>, %a: tensor<6x1xi64>) -> (tensor<6x4xf32>, tensor<10x3xf32>, tensor<6x7xbf16>) {
  // CHECK-NEXT: %{{.*}} = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x1xi64> -> tensor<6x4xf32>
  %0 = graph.gather %t[%i] dim = 0 : tensor<10x4xf32>, tensor<6x1xi64> -> tensor<6x4xf32>
  // CHECK-NEXT: %{{.*}} = graph.gather %t[%j] dim = 1 wrap : tensor<10x4xf32>, tensor<1x3xi32> -> tensor<10x3xf32>
  %1 = graph.gather %t[%j] dim = 1 wrap : tensor<10x4xf32>, tensor<1x3xi32> -> tensor<10x3xf32>
  // CHECK-NEXT: %{{.*}} = graph.gather %y[%a, %i] dim = 0 wrap : tensor<5x6x7xbf16>, tensor<6x1xi64>, tensor<6x1xi64> -> tensor<6x7xbf16>
  %2 = graph.gather %y[%a, %i] dim = 0 wrap : tensor<5x6x7xbf16>, tensor<6x1xi64>, tensor<6x1xi64> -> tensor<6x7xbf16>
  func.return %0, %1, %2 : tensor<6x4xf32>, tensor<10x3xf32>, tensor<6x7xbf16>
}
// GENERIC: "graph.gather"(%{{.*}}, %{{.*}}) <{dim = 1 : i64, wrap}> : (tensor<10x4xf32>, tensor<1x3xi32>) -> tensor<10x3xf32>

// argmax and argmin: i64 indices along one dim.
// CHECK-LABEL: func.func @arg_reductions
func.func @arg_reductions(%x: tensor<4x8xf32>, %i: tensor<4x8xi64>) -> (tensor<4xi64>, tensor<1x8xi64>) {
  // CHECK-NEXT: %{{.*}} = graph.argmax %x dims = [1] : tensor<4x8xf32> -> tensor<4xi64>
  %0 = graph.argmax %x dims = [1] : tensor<4x8xf32> -> tensor<4xi64>
  // CHECK-NEXT: %{{.*}} = graph.argmin %i dims = [0] keepdim : tensor<4x8xi64> -> tensor<1x8xi64>
  %1 = graph.argmin %i dims = [0] keepdim : tensor<4x8xi64> -> tensor<1x8xi64>
  func.return %0, %1 : tensor<4xi64>, tensor<1x8xi64>
}

// graph.scan: cumsum, cumprod, logcumsumexp, cummax / cummin (values and indices).
// CHECK-LABEL: func.func @scan
func.func @scan(%x: tensor<4x8xf32>, %b: tensor<5xi1>) -> (tensor<4x8xf32>, tensor<4x8xi64>, tensor<5xi1>) {
  // CHECK-NEXT: %{{.*}} = graph.scan %x dim = 1 kind = "sum" : tensor<4x8xf32> -> tensor<4x8xf32>
  %0 = graph.scan %x dim = 1 kind = "sum" : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.scan %x dim = 0 kind = "logsumexp" : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = graph.scan %x dim = 0 kind = "logsumexp" : tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK-NEXT: %{{.*}} = graph.scan %x dim = 0 kind = "argmax" : tensor<4x8xf32> -> tensor<4x8xi64>
  %2 = graph.scan %x dim = 0 kind = "argmax" : tensor<4x8xf32> -> tensor<4x8xi64>
  // CHECK-NEXT: %{{.*}} = graph.scan %b dim = 0 kind = "min" : tensor<5xi1> -> tensor<5xi1>
  %3 = graph.scan %b dim = 0 kind = "min" : tensor<5xi1> -> tensor<5xi1>
  func.return %0, %2, %3 : tensor<4x8xf32>, tensor<4x8xi64>, tensor<5xi1>
}
// GENERIC: "graph.scan"(%{{.*}}) <{dim = 1 : i64, kind = "sum"}> : (tensor<4x8xf32>) -> tensor<4x8xf32>

// A size of the call as a number: a polynomial of the function's size symbols.
// CHECK-LABEL: func.func @size_value
func.func @size_value(%x: tensor<?xi64, #graph.syms<s0>>) -> tensor<i64> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  // CHECK-NEXT: %0 = graph.size_value <2 * s0 - 1> : tensor<i64>
  %0 = graph.size_value <2 * s0 - 1> : tensor<i64>
  func.return %0 : tensor<i64>
}
// GENERIC: "graph.size_value"() <{value = #graph.size_expr<2 * s0 - 1>}> : () -> tensor<i64>
