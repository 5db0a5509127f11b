// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @var(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %y = graph.var %x dims = [1] correction = 1 : tensor<4x8xf32> -> tensor<4xf32>
  func.return %y : tensor<4xf32>
}

func.func @var_keepdim(%x: tensor<2x3x5xf32>) -> tensor<1x3x1xf32> {
  %y = graph.var %x dims = [0, 2] correction = 0 keepdim : tensor<2x3x5xf32> -> tensor<1x3x1xf32>
  func.return %y : tensor<1x3x1xf32>
}

// x - mean is corrected by its own mean c; the squares of the corrected values sum to
// sum(d^2) - N c^2, so that both reductions read d in one pass.
// CHECK-LABEL: func.func @var
// CHECK-NEXT:    %[[MEAN:.*]] = graph.reduce_mean %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[D:.*]] = graph.sub %x, %[[MEAN]]
// CHECK-NEXT:    %[[ERR:.*]] = graph.reduce_mean %[[D]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[SQ:.*]] = graph.mul %[[D]], %[[D]]
// CHECK-NEXT:    %[[SUM:.*]] = graph.reduce_sum %[[SQ]] dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[ERR2:.*]] = graph.mul %[[ERR]], %[[ERR]]
// CHECK-NEXT:    %[[N:.*]] = graph.constant dense<8.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[DRIFT:.*]] = graph.mul %[[ERR2]], %[[N]]
// CHECK-NEXT:    %[[FLAT:.*]] = graph.reshape %[[DRIFT]] : tensor<4x1xf32> -> tensor<4xf32>
// CHECK-NEXT:    %[[DIFF:.*]] = graph.sub %[[SUM]], %[[FLAT]]
// CHECK-NEXT:    %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[TOTAL:.*]] = graph.maximum %[[DIFF]], %[[ZERO]]
// CHECK-NEXT:    %[[N1:.*]] = graph.constant dense<7.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[Y:.*]] = graph.div %[[TOTAL]], %[[N1]] : tensor<4xf32>, tensor<f32> -> tensor<4xf32>
// CHECK-NEXT:    func.return %[[Y]]

// CHECK-LABEL: func.func @var_keepdim
// CHECK:         graph.reduce_sum %{{.*}} dims = [0, 2] keepdim : tensor<2x3x5xf32> -> tensor<1x3x1xf32>
// CHECK:         graph.constant dense<1.000000e+01> : tensor<f32>
// CHECK-NOT:     graph.var

// Over a dim of a runtime size (correction 0): mean(d^2) - c^2, the means dividing by the
// call's count; no constant count.
func.func @var_symbolic(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<8xf32> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %y = graph.var %x dims = [0] correction = 0 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// CHECK-LABEL: func.func @var_symbolic
// CHECK:         %[[D:.*]] = graph.sub %x, %{{.*}}
// CHECK:         %[[ERR:.*]] = graph.reduce_mean %[[D]] dims = [0] keepdim
// CHECK:         %[[SQ:.*]] = graph.mul %[[D]], %[[D]]
// CHECK-NEXT:    %[[MSQ:.*]] = graph.reduce_mean %[[SQ]] dims = [0] keepdim : tensor<?x8xf32, #graph.syms<s0>> -> tensor<1x8xf32>
// CHECK-NEXT:    %[[ERR2:.*]] = graph.mul %[[ERR]], %[[ERR]]
// CHECK-NEXT:    %[[DIFF:.*]] = graph.sub %[[MSQ]], %[[ERR2]]
// CHECK:         %[[VAR:.*]] = graph.maximum %[[DIFF]], %{{.*}}
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[VAR]] : tensor<1x8xf32> -> tensor<8xf32>
// CHECK-NEXT:    func.return %[[Y]]

// Correction 1 over a dim of a runtime size: the population variance times N / max(0, N - 1),
// N the call's count, the largest index of an iota along the dim plus one.
func.func @var_symbolic_unbiased(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<8xf32> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %y = graph.var %x dims = [0] correction = 1 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8xf32>
  func.return %y : tensor<8xf32>
}

// CHECK-LABEL: func.func @var_symbolic_unbiased
// CHECK:         %[[VAR:.*]] = graph.maximum %{{.*}}, %{{.*}} : tensor<1x8xf32>, tensor<f32> -> tensor<1x8xf32>
// CHECK-NEXT:    %[[I:.*]] = graph.iota dim = 0 start = 0 step = 1 : tensor<?x1xi64, #graph.syms<s0>>
// CHECK-NEXT:    %[[LAST:.*]] = graph.reduce_max %[[I]] dims = [0] keepdim : tensor<?x1xi64, #graph.syms<s0>> -> tensor<1x1xi64>
// CHECK-NEXT:    %[[LASTF:.*]] = graph.cast %[[LAST]] : tensor<1x1xi64> to tensor<1x1xf32>
// CHECK-NEXT:    %[[ONE:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[N:.*]] = graph.add %[[LASTF]], %[[ONE]]
// CHECK-NEXT:    %[[C:.*]] = graph.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[NC:.*]] = graph.sub %[[N]], %[[C]]
// CHECK:         %[[DIV:.*]] = graph.maximum %[[NC]], %{{.*}}
// CHECK-NEXT:    %[[RATIO:.*]] = graph.div %[[N]], %[[DIV]]
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %[[VAR]], %[[RATIO]] : tensor<1x8xf32>, tensor<1x1xf32> -> tensor<1x8xf32>
// CHECK-NEXT:    graph.reshape %[[Y]] : tensor<1x8xf32> -> tensor<8xf32>
