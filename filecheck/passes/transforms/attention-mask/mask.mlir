// RUN: xfuse-opt %s -p attention-mask | filecheck %s

// A causal mask built from iotas, as transformers builds it when traced: attention runs with
// is_causal = true, and the mask's ops go.
func.func @causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %i = graph.iota dim = 0 start = 0 step = 1 : tensor<4xi64>
  %row = graph.reshape %i : tensor<4xi64> -> tensor<1x4xi64>
  %col = graph.reshape %i : tensor<4xi64> -> tensor<4x1xi64>
  %m = graph.le %row, %col : tensor<1x4xi64>, tensor<4x1xi64> -> tensor<4x4xi1>
  %m4 = graph.reshape %m : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m4) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {scale = 2.500000e-01 : f64} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @causal
// CHECK-NEXT:    %[[O:.*]] = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2", none] kwargs = {scale = 2.500000e-01 : f64, is_causal = true} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
// CHECK-NEXT:    func.return %[[O]]

// A mask that hides nothing (every key visible, as BERT's without padding): no mask.
func.func @all_visible(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %i = graph.iota dim = 0 start = 0 step = 1 : tensor<4xi64>
  %row = graph.reshape %i : tensor<4xi64> -> tensor<1x4xi64>
  %m = graph.ge %row, %row : tensor<1x4xi64>, tensor<1x4xi64> -> tensor<1x4xi1>
  %m4 = graph.reshape %m : tensor<1x4xi1> -> tensor<1x1x1x4xi1>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m4) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x1x4xi1>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @all_visible
// CHECK-NEXT:    %[[O:.*]] = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2", none] kwargs = {} :
// CHECK-NEXT:    func.return %[[O]]

// A mask that hides the diagonal too (lt, not le) is not is_causal's: left alone.
func.func @strictly_below(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %i = graph.iota dim = 0 start = 0 step = 1 : tensor<4xi64>
  %row = graph.reshape %i : tensor<4xi64> -> tensor<1x4xi64>
  %col = graph.reshape %i : tensor<4xi64> -> tensor<4x1xi64>
  %m = graph.lt %row, %col : tensor<1x4xi64>, tensor<4x1xi64> -> tensor<4x4xi1>
  %m4 = graph.reshape %m : tensor<4x4xi1> -> tensor<1x1x4x4xi1>
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m4) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @strictly_below
// CHECK:         graph.lt
// CHECK:         graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %{{.*}}) args = ["%t0", "%t1", "%t2", "%t3"]

// A mask that the call computes (from an argument): left alone.
func.func @from_an_argument(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32> {
  %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32>
  func.return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @from_an_argument
// CHECK-NEXT:    graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m) args = ["%t0", "%t1", "%t2", "%t3"]
