// RUN: xfuse-opt %s -p fuse-scored | filecheck %s

// A vertical chain with bias and scalar operands becomes one group over a few rounds.
func.func @forward(%x: tensor<4x8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %c = graph.constant dense<2.0> : tensor<f32>
  %0 = graph.add %x, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %1 = graph.mul %0, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %2 = graph.tanh %1 : tensor<4x8xf32>
  %3 = graph.relu %2 : tensor<4x8xf32>
  func.return %3 : tensor<4x8xf32>
}

// CHECK:       %[[G:.*]] = fusion.group({{.*}}) kind = "elementwise" rule = "fuse-scored:producer-consumer" {fusion.score = {{[0-9]+}} : i64}
// CHECK:         graph.constant dense<2.000000e+00> : tensor<f32>
// CHECK:         fusion.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %[[G]]
