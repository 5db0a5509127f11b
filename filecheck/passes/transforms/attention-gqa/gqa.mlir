// RUN: xfuse-opt %s -p attention-gqa | filecheck %s

// Llama's repeat_kv: two key/value heads, each repeated twice for four query heads. The
// attention reads the heads themselves and the copies go.
func.func @repeated(%q: tensor<1x4x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> tensor<1x4x16x8xf32> {
  %k5 = graph.reshape %k : tensor<1x2x16x8xf32> -> tensor<1x2x1x16x8xf32>
  %kb = graph.broadcast_in_dim %k5 dims = [0, 1, 2, 3, 4] : tensor<1x2x1x16x8xf32> -> tensor<1x2x2x16x8xf32>
  %kr = graph.reshape %kb : tensor<1x2x2x16x8xf32> -> tensor<1x4x16x8xf32>
  %v5 = graph.reshape %v : tensor<1x2x16x8xf32> -> tensor<1x2x1x16x8xf32>
  %vb = graph.broadcast_in_dim %v5 dims = [0, 1, 2, 3, 4] : tensor<1x2x1x16x8xf32> -> tensor<1x2x2x16x8xf32>
  %vr = graph.reshape %vb : tensor<1x2x2x16x8xf32> -> tensor<1x4x16x8xf32>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %kr, %vr) args = ["%t0", "%t1", "%t2"] kwargs = {scale = 2.500000e-01 : f64} : (tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x16x8xf32>
  func.return %o : tensor<1x4x16x8xf32>
}

// CHECK-LABEL: func.func @repeated
// CHECK-NEXT:    %[[O:.*]] = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2"] kwargs = {scale = 2.500000e-01 : f64, enable_gqa = true} : (tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> tensor<1x4x16x8xf32>
// CHECK-NEXT:    func.return %[[O]]

// The repeated keys are returned too: the attention still reads the heads, the copy stays for
// the other reader.
func.func @also_returned(%q: tensor<1x4x16x8xf32>, %k: tensor<1x2x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> (tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>) {
  %k5 = graph.reshape %k : tensor<1x2x16x8xf32> -> tensor<1x2x1x16x8xf32>
  %kb = graph.broadcast_in_dim %k5 dims = [0, 1, 2, 3, 4] : tensor<1x2x1x16x8xf32> -> tensor<1x2x2x16x8xf32>
  %kr = graph.reshape %kb : tensor<1x2x2x16x8xf32> -> tensor<1x4x16x8xf32>
  %v5 = graph.reshape %v : tensor<1x2x16x8xf32> -> tensor<1x2x1x16x8xf32>
  %vb = graph.broadcast_in_dim %v5 dims = [0, 1, 2, 3, 4] : tensor<1x2x1x16x8xf32> -> tensor<1x2x2x16x8xf32>
  %vr = graph.reshape %vb : tensor<1x2x2x16x8xf32> -> tensor<1x4x16x8xf32>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %kr, %vr) args = ["%t0", "%t1", "%t2"] kwargs = {} : (tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>) -> tensor<1x4x16x8xf32>
  func.return %o, %kr : tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>
}

// CHECK-LABEL: func.func @also_returned
// CHECK:         %[[KR:.*]] = graph.reshape %{{.*}} : tensor<1x2x2x16x8xf32> -> tensor<1x4x16x8xf32>
// CHECK-NOT:     graph.broadcast_in_dim
// CHECK:         %[[O:.*]] = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) {{.*}} kwargs = {enable_gqa = true}
// CHECK-NEXT:    func.return %[[O]], %[[KR]]

// Keys repeated twice and values three times (no torch call takes that): left alone.
func.func @unequal(%q: tensor<1x6x16x8xf32>, %k: tensor<1x3x16x8xf32>, %v: tensor<1x2x16x8xf32>) -> tensor<1x6x16x8xf32> {
  %k5 = graph.reshape %k : tensor<1x3x16x8xf32> -> tensor<1x3x1x16x8xf32>
  %kb = graph.broadcast_in_dim %k5 dims = [0, 1, 2, 3, 4] : tensor<1x3x1x16x8xf32> -> tensor<1x3x2x16x8xf32>
  %kr = graph.reshape %kb : tensor<1x3x2x16x8xf32> -> tensor<1x6x16x8xf32>
  %v5 = graph.reshape %v : tensor<1x2x16x8xf32> -> tensor<1x2x1x16x8xf32>
  %vb = graph.broadcast_in_dim %v5 dims = [0, 1, 2, 3, 4] : tensor<1x2x1x16x8xf32> -> tensor<1x2x3x16x8xf32>
  %vr = graph.reshape %vb : tensor<1x2x3x16x8xf32> -> tensor<1x6x16x8xf32>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %kr, %vr) args = ["%t0", "%t1", "%t2"] kwargs = {} : (tensor<1x6x16x8xf32>, tensor<1x6x16x8xf32>, tensor<1x6x16x8xf32>) -> tensor<1x6x16x8xf32>
  func.return %o : tensor<1x6x16x8xf32>
}

// CHECK-LABEL: func.func @unequal
// CHECK:         graph.broadcast_in_dim
// CHECK:         graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %kr, %vr) args = ["%t0", "%t1", "%t2"] kwargs = {} :
