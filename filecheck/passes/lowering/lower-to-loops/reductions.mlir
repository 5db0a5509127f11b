// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// Reductions: parallel over the kept dims, scf.for with iter_args over the reduced ones
// (f32 accumulators for f16); row values such as rsqrt(mean + eps) are computed once per row.

func.func @middle(%x: tensor<2x5x3xf16>) -> tensor<2x3xf16> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<2x5x3xf16>) -> tensor<2x3xf16> {
  ^bb0(%a: tensor<2x5x3xf16>):
    %e = graph.exp %a : tensor<2x5x3xf16>
    %s = graph.reduce_sum %e dims = [1] : tensor<2x5x3xf16> -> tensor<2x3xf16>
    fusion.yield %s : tensor<2x3xf16>
  }
  func.return %r : tensor<2x3xf16>
}

func.func @rms_norm(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %r = fusion.group (%x, %w) kind = "reduction" rule = "test" : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %g: tensor<8xf32>):
    %eps = graph.constant dense<1.0e-06> : tensor<f32>
    %sq = graph.mul %a, %a : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %ms = graph.reduce_mean %sq dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
    %v = graph.add %ms, %eps : tensor<4x1xf32>, tensor<f32> -> tensor<4x1xf32>
    %rs = graph.rsqrt %v : tensor<4x1xf32>
    %n = graph.mul %a, %rs : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
    %o = graph.mul %n, %g : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
    fusion.yield %o : tensor<4x8xf32>
  }
  func.return %r : tensor<4x8xf32>
}

// CHECK:      func.func @middle_k0(%[[X:.*]]: memref<2x5x3xf16>, %[[OUT:.*]]: memref<2x3xf16>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
// CHECK:        "scf.parallel"
// CHECK-NEXT:   ^bb0(%[[I:.*]]: index, %[[K:.*]]: index):
// CHECK-NEXT:     %[[SUM:.*]] = scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK-NEXT:       %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]], %[[K]]] : memref<2x5x3xf16>
// CHECK-NEXT:       %[[W:.*]] = arith.extf %[[V]] : f16 to f32
// CHECK-NEXT:       %[[E:.*]] = math.exp %[[W]] : f32
// CHECK-NEXT:       %[[EH:.*]] = arith.truncf %[[E]] : f32 to f16
// CHECK-NEXT:       %[[EW:.*]] = arith.extf %[[EH]] : f16 to f32
// CHECK-NEXT:       %[[ACC2:.*]] = arith.addf %[[ACC]], %[[EW]] fastmath<reassoc> : f32
// CHECK-NEXT:       scf.yield %[[ACC2]] : f32
// CHECK-NEXT:     }
// CHECK-NEXT:     %[[R:.*]] = arith.truncf %[[SUM]] : f32 to f16
// CHECK-NEXT:     memref.store %[[R]], %[[OUT]][%[[I]], %[[K]]] : memref<2x3xf16>

// CHECK:      func.func @rms_norm_k0(%[[X:.*]]: memref<4x8xf32>, %[[G:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<4x8xf32>)
// CHECK-DAG:    %[[N:.*]] = arith.constant 8.000000e+00 : f32
// CHECK-DAG:    %[[EPS:.*]] = arith.constant 1.000000e-06 : f32
// CHECK:        ^bb0(%[[I:.*]]: index):
// CHECK-NEXT:     %[[SUM:.*]] = scf.for
// CHECK:            arith.mulf
// CHECK-NEXT:       arith.addf {{.*}} fastmath<reassoc>
// CHECK-NEXT:       scf.yield
// CHECK-NEXT:     }
// CHECK-NEXT:     %[[MEAN:.*]] = arith.divf %[[SUM]], %[[N]] : f32
// CHECK-NEXT:     %[[V:.*]] = arith.addf %[[MEAN]], %[[EPS]] : f32
// CHECK-NEXT:     %[[RS:.*]] = math.rsqrt %[[V]] : f32
// CHECK-NEXT:     scf.for %[[J:.*]] = {{.*}} {
// CHECK-NEXT:       %[[XV:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:       %[[NV:.*]] = arith.mulf %[[XV]], %[[RS]] : f32
// CHECK-NEXT:       %[[GV:.*]] = memref.load %[[G]][%[[J]]] : memref<8xf32>
// CHECK-NEXT:       %[[O:.*]] = arith.mulf %[[NV]], %[[GV]] : f32
// CHECK-NEXT:       memref.store %[[O]], %[[OUT]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:     }
