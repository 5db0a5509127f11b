// RUN: xfuse-opt %s -p fuse-scored | filecheck %s

// Decomposed layer norm and RMS norm (reductions without keepdim, brought back with
// broadcast_in_dim, and with keepdim): each is ONE group with its affine weight and bias.
func.func @layer_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %mu = graph.reduce_mean %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %mub = graph.broadcast_in_dim %mu dims = [0] : tensor<4xf32> -> tensor<4x8xf32>
  %xc = graph.sub %x, %mub : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %sq = graph.mul %xc, %xc : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %var = graph.reduce_mean %sq dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
  %eps = graph.constant dense<1.0e-05> : tensor<f32>
  %ve = graph.add %var, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
  %r = graph.rsqrt %ve : tensor<4x1xf32>
  %n = graph.mul %xc, %r : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
  %nw = graph.mul %n, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %y = graph.add %nw, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @layer_norm
// CHECK-NEXT:    %y = fusion.group({{.*}}) kind = "reduction" rule = "fuse-scored:producer-consumer"
// CHECK-NOT:     fusion.group
// CHECK:         graph.broadcast_in_dim
// CHECK:         graph.reduce_mean
// CHECK:         graph.rsqrt
// CHECK:         fusion.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %y

func.func @rms_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %sq = graph.mul %x, %x : tensor<2x3x8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  %ms = graph.reduce_mean %sq dims = [2] keepdim : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %eps = graph.constant dense<1.0e-06> : tensor<f32>
  %a = graph.add %ms, %eps : tensor<2x3x1xf32>, tensor<f32> -> tensor<2x3x1xf32>
  %r = graph.rsqrt %a : tensor<2x3x1xf32>
  %n = graph.mul %x, %r : tensor<2x3x8xf32>, tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %y = graph.mul %n, %w : tensor<2x3x8xf32>, tensor<8xf32> -> tensor<2x3x8xf32>
  func.return %y : tensor<2x3x8xf32>
}

// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT:    %y = fusion.group({{.*}}) kind = "reduction"
// CHECK-NOT:     fusion.group
// CHECK:         func.return %y
