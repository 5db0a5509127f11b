// RUN: xfuse-opt %s -p simplify | filecheck %s

// torch's group norm over two images of 8 channels reads its per-channel scale as
// `scale[8 * n + c]` through a gather: the index is the position itself, so the gather goes.
func.func @forward(%scale: tensor<16xf32>) -> tensor<16xf32> {
  %n = graph.iota dim = 0 start = 0 step = 1 : tensor<2x8xi64>
  %eight = graph.constant dense<8> : tensor<i64>
  %rows = graph.mul %n, %eight : tensor<2x8xi64>, tensor<i64> -> tensor<2x8xi64>
  %c = graph.iota dim = 1 start = 0 step = 1 : tensor<2x8xi64>
  %at = graph.add %rows, %c : tensor<2x8xi64>, tensor<2x8xi64> -> tensor<2x8xi64>
  %i = graph.reshape %at : tensor<2x8xi64> -> tensor<16xi64>
  %g = graph.gather %scale[%i] dim = 0 : tensor<16xf32>, tensor<16xi64> -> tensor<16xf32>
  func.return %g : tensor<16xf32>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:     graph.gather
// CHECK:         func.return %scale : tensor<16xf32>

// Channels in reverse: a gather that reads another element stays.
func.func @reversed(%scale: tensor<8xf32>) -> tensor<8xf32> {
  %i = graph.iota dim = 0 start = 7 step = -1 : tensor<8xi64>
  %g = graph.gather %scale[%i] dim = 0 : tensor<8xf32>, tensor<8xi64> -> tensor<8xf32>
  func.return %g : tensor<8xf32>
}

// CHECK-LABEL: func.func @reversed
// CHECK:         graph.gather %scale[%{{.*}}] dim = 0
