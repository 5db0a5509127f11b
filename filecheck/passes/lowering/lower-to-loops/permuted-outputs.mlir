// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s
// RUN: xfuse-opt %s -p 'lower-to-loops{merge_dims=false}' | filecheck %s --check-prefix=FLAT

// Outputs of one element count whose shapes differ by a permute (attention's key in
// [B, H, T, D] beside its query in [B, T, H, D]) loop over each dim of the first output's
// shape, the query stored at the permuted index: no division. With `merge-dims` off (as on
// CUDA, whose `gpu-map-parallel` flattens loops itself) one flat loop finds each output's
// coordinates by dividing.

func.func @heads(%x: tensor<1x5x16xf32>) -> (tensor<1x2x5x4xf32>, tensor<1x5x2x4xf32>) {
  %r:2 = fusion.group (%x) kind = "injective" rule = "test" : (tensor<1x5x16xf32>) -> (tensor<1x2x5x4xf32>, tensor<1x5x2x4xf32>) {
  ^bb0(%a: tensor<1x5x16xf32>):
    %s = graph.add %a, %a : tensor<1x5x16xf32>, tensor<1x5x16xf32> -> tensor<1x5x16xf32>
    %k = graph.slice %s start = [0, 0, 8] limit = [1, 5, 16] stride = [1, 1, 1] : tensor<1x5x16xf32> -> tensor<1x5x8xf32>
    %kr = graph.reshape %k : tensor<1x5x8xf32> -> tensor<1x5x2x4xf32>
    %kp = graph.permute %kr perm = [0, 2, 1, 3] : tensor<1x5x2x4xf32> -> tensor<1x2x5x4xf32>
    %q = graph.slice %s start = [0, 0, 0] limit = [1, 5, 8] stride = [1, 1, 1] : tensor<1x5x16xf32> -> tensor<1x5x8xf32>
    %qr = graph.reshape %q : tensor<1x5x8xf32> -> tensor<1x5x2x4xf32>
    %qp = graph.permute %qr perm = [0, 2, 1, 3] : tensor<1x5x2x4xf32> -> tensor<1x2x5x4xf32>
    %qb = graph.permute %qp perm = [0, 2, 1, 3] : tensor<1x2x5x4xf32> -> tensor<1x5x2x4xf32>
    fusion.yield %kp, %qb : tensor<1x2x5x4xf32>, tensor<1x5x2x4xf32>
  }
  func.return %r#0, %r#1 : tensor<1x2x5x4xf32>, tensor<1x5x2x4xf32>
}

// CHECK-LABEL: func.func @heads_k0(
// CHECK-SAME:    %{{.*}}: memref<1x5x16xf32>, %[[K:[0-9]+]]: memref<1x2x5x4xf32>, %[[Q:[0-9]+]]: memref<1x5x2x4xf32>)
// CHECK-NOT:     arith.divui
// CHECK:         ^bb0(%[[H:[0-9]+]]: index, %[[T:[0-9]+]]: index, %[[D:[0-9]+]]: index):
// CHECK-NOT:     arith.divui
// CHECK:         memref.store %{{.*}}, %[[K]][%{{.*}}, %[[H]], %[[T]], %[[D]]] : memref<1x2x5x4xf32>
// CHECK-NOT:     arith.divui
// CHECK:         memref.store %{{.*}}, %[[Q]][%{{.*}}, %[[T]], %[[H]], %[[D]]] : memref<1x5x2x4xf32>

// FLAT-LABEL: func.func @heads_k0(%{{.*}}: memref<80xf32>, %{{.*}}: memref<40xf32>, %{{.*}}: memref<40xf32>)
// FLAT:         arith.divui

// A row kernel's output of as many elements as its full shape, a permute of a value of it
// (ConvNeXt's last block in NHWC, returned NCHW beside its pooled mean), is written at the
// permuted index by the loop that sums the row: each element computed once, no division.
// With `merge-dims` off it is written at the iteration's position in memory, its elements
// computed again at divided indices.

func.func @pooled(%x: tensor<1x2x3x8xf32>) -> (tensor<1x8x2x3xf32>, tensor<1x8xf32>) {
  %r:2 = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<1x2x3x8xf32>) -> (tensor<1x8x2x3xf32>, tensor<1x8xf32>) {
  ^bb0(%a: tensor<1x2x3x8xf32>):
    %s = graph.add %a, %a : tensor<1x2x3x8xf32>, tensor<1x2x3x8xf32> -> tensor<1x2x3x8xf32>
    %p = graph.permute %s perm = [0, 3, 1, 2] : tensor<1x2x3x8xf32> -> tensor<1x8x2x3xf32>
    %m = graph.reduce_sum %s dims = [1, 2] : tensor<1x2x3x8xf32> -> tensor<1x8xf32>
    fusion.yield %p, %m : tensor<1x8x2x3xf32>, tensor<1x8xf32>
  }
  func.return %r#0, %r#1 : tensor<1x8x2x3xf32>, tensor<1x8xf32>
}

// The buffers are declared with the reduced dims merged (`merged_buffer_dims`).
// CHECK-LABEL: func.func @pooled_k0(
// CHECK-SAME:    %{{.*}}: memref<1x6x8xf32>, %[[P:[0-9]+]]: memref<1x8x6xf32>, %{{.*}}: memref<1x8xf32>)
// CHECK-NOT:     arith.divui
// CHECK:         ^bb0(%[[C:[0-9]+]]: index):
// CHECK:         scf.for %[[HW:[0-9]+]] =
// CHECK-NOT:     arith.divui
// CHECK:         memref.store %{{.*}}, %[[P]][%{{.*}}, %[[C]], %[[HW]]] : memref<1x8x6xf32>

// FLAT-LABEL: func.func @pooled_k0(
// FLAT:         arith.divui
