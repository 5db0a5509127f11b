// RUN: xfuse-opt %s -p reduction-cse | filecheck %s

// A one-group GroupNorm after `split-reductions`: its mean's two stages, twice (`var_mean`'s
// mean, and the one `decompose` computes the var with), each through a reshape of its own. The
// second copy goes with its reshape; the division of each copy stays (fusion recomputes it).
func.func @group_norm_mean(%x: tensor<1x62720xf32>) -> (tensor<1xf32>, tensor<1xf32>) {
  %r1 = graph.reshape %x : tensor<1x62720xf32> -> tensor<1x256x245xf32>
  %p1 = graph.reduce_sum %r1 dims = [2] : tensor<1x256x245xf32> -> tensor<1x256xf32>
  %s1 = graph.reduce_sum %p1 dims = [1] : tensor<1x256xf32> -> tensor<1xf32>
  %n1 = graph.constant dense<6.272000e+04> : tensor<f32>
  %m1 = graph.div %s1, %n1 : tensor<1xf32>, tensor<f32> -> tensor<1xf32>
  %r2 = graph.reshape %x : tensor<1x62720xf32> -> tensor<1x256x245xf32>
  %p2 = graph.reduce_sum %r2 dims = [2] : tensor<1x256x245xf32> -> tensor<1x256xf32>
  %s2 = graph.reduce_sum %p2 dims = [1] : tensor<1x256xf32> -> tensor<1xf32>
  %n2 = graph.constant dense<6.272000e+04> : tensor<f32>
  %m2 = graph.div %s2, %n2 : tensor<1xf32>, tensor<f32> -> tensor<1xf32>
  func.return %m1, %m2 : tensor<1xf32>, tensor<1xf32>
}

// CHECK-LABEL: func.func @group_norm_mean
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [2]
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[P]] dims = [1]
// CHECK-NEXT:    %[[N1:.*]] = graph.constant dense<6.272000e+04>
// CHECK-NEXT:    %[[M1:.*]] = graph.div %[[S]], %[[N1]]
// CHECK-NEXT:    %[[N2:.*]] = graph.constant dense<6.272000e+04>
// CHECK-NEXT:    %[[M2:.*]] = graph.div %[[S]], %[[N2]]
// CHECK-NEXT:    func.return %[[M1]], %[[M2]]

// Reductions that differ stay: other dims, another op, keepdim.
func.func @different(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4x1xf32>) {
  %a = graph.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %b = graph.reduce_sum %x dims = [0] : tensor<4x8xf32> -> tensor<8xf32>
  %c = graph.reduce_max %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %d = graph.reduce_sum %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  func.return %a, %b, %c, %d : tensor<4xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4x1xf32>
}

// CHECK-LABEL: func.func @different
// CHECK-NEXT:    graph.reduce_sum %x dims = [1] :
// CHECK-NEXT:    graph.reduce_sum %x dims = [0] :
// CHECK-NEXT:    graph.reduce_max %x dims = [1] :
// CHECK-NEXT:    graph.reduce_sum %x dims = [1] keepdim :
// CHECK-NEXT:    func.return

// An in-place op in the block (`relu_` writes %x between the two sums): both sums stay.
func.func @mutated(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = graph.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %w = graph.torch_call "aten.relu_.default"(%x) args = ["%t0"] kwargs = {} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %b = graph.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  func.return %a, %b : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @mutated
// CHECK-NEXT:    %[[A:.*]] = graph.reduce_sum %x dims = [1]
// CHECK-NEXT:    graph.torch_call "aten.relu_.default"
// CHECK-NEXT:    %[[B:.*]] = graph.reduce_sum %x dims = [1]
// CHECK-NEXT:    func.return %[[A]], %[[B]]
