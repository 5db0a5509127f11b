// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// Elementwise groups: broadcasts, permutes and reshapes are index arithmetic, never copies.
// Same-shape (or scalar) operands give one flat loop over 1-D buffers.

func.func @flat(%x: tensor<2x3x4xf32>, %y: tensor<6x4xf32>, %s: tensor<f32>) -> tensor<2x3x4xf32> {
  %r = fusion.group (%x, %y, %s) kind = "injective" rule = "test" : (tensor<2x3x4xf32>, tensor<6x4xf32>, tensor<f32>) -> tensor<2x3x4xf32> {
  ^bb0(%a: tensor<2x3x4xf32>, %b: tensor<6x4xf32>, %c: tensor<f32>):
    %br = graph.reshape %b : tensor<6x4xf32> -> tensor<2x3x4xf32>
    %t = graph.add %a, %br : tensor<2x3x4xf32>, tensor<2x3x4xf32> -> tensor<2x3x4xf32>
    %u = graph.mul %t, %c : tensor<2x3x4xf32>, tensor<f32> -> tensor<2x3x4xf32>
    fusion.yield %u : tensor<2x3x4xf32>
  }
  func.return %r : tensor<2x3x4xf32>
}

func.func @bias_and_transpose(%x: tensor<4x8xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %r = fusion.group (%x, %w, %b) kind = "injective" rule = "test" : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %v: tensor<8x4xf32>, %c: tensor<8xf32>):
    %vt = graph.permute %v perm = [1, 0] : tensor<8x4xf32> -> tensor<4x8xf32>
    %cb = graph.broadcast_in_dim %c dims = [1] : tensor<8xf32> -> tensor<4x8xf32>
    %t = graph.mul %a, %vt : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %u = graph.add %t, %cb : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    fusion.yield %u : tensor<4x8xf32>
  }
  func.return %r : tensor<4x8xf32>
}

// CHECK:      func.func @flat(
// CHECK-NEXT:   %r = fusion.launch @flat_k0(%x, %y, %s) : (tensor<2x3x4xf32>, tensor<6x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>

// CHECK:      func.func @flat_k0(%[[A:.*]]: memref<24xf32>, %[[B:.*]]: memref<24xf32>, %[[S:.*]]: memref<1xf32>, %[[OUT:.*]]: memref<24xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
// CHECK-DAG:    %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:    %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:    %[[C24:.*]] = arith.constant 24 : index
// CHECK:        "scf.parallel"(%[[C0]], %[[C24]], %[[C1]])
// CHECK-NEXT:   ^bb0(%[[F:.*]]: index):
// CHECK-NEXT:     %[[X:.*]] = memref.load %[[A]][%[[F]]] : memref<24xf32>
// CHECK-NEXT:     %[[Y:.*]] = memref.load %[[B]][%[[F]]] : memref<24xf32>
// CHECK-NEXT:     %[[T:.*]] = arith.addf %[[X]], %[[Y]] : f32
// CHECK-NEXT:     %[[SV:.*]] = memref.load %[[S]][%[[C0]]] : memref<1xf32>
// CHECK-NEXT:     %[[U:.*]] = arith.mulf %[[T]], %[[SV]] : f32
// CHECK-NEXT:     memref.store %[[U]], %[[OUT]][%[[F]]] : memref<24xf32>
// CHECK-NEXT:     scf.reduce

// CHECK:      func.func @bias_and_transpose_k0(%[[A:.*]]: memref<4x8xf32>, %[[W:.*]]: memref<8x4xf32>, %[[B:.*]]: memref<8xf32>, %[[OUT:.*]]: memref<4x8xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
// CHECK-NOT:    memref.alloc
// CHECK:        "scf.parallel"
// CHECK-NEXT:   ^bb0(%[[I:.*]]: index, %[[J:.*]]: index):
// CHECK-NEXT:     %[[X:.*]] = memref.load %[[A]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:     %[[WT:.*]] = memref.load %[[W]][%[[J]], %[[I]]] : memref<8x4xf32>
// CHECK-NEXT:     %[[T:.*]] = arith.mulf %[[X]], %[[WT]] : f32
// CHECK-NEXT:     %[[BJ:.*]] = memref.load %[[B]][%[[J]]] : memref<8xf32>
// CHECK-NEXT:     %[[U:.*]] = arith.addf %[[T]], %[[BJ]] : f32
// CHECK-NEXT:     memref.store %[[U]], %[[OUT]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:     scf.reduce
// CHECK-NOT:    memref.copy
