// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// An NCHW batch norm: the channel's values broadcast over H and W. H and W merge into one loop
// (every buffer is still read without a division), the channel stays a loop of its own, so
// its values are loaded once per row of H*W elements; buffers are 1-D.
func.func @channels(%x: tensor<1x4x3x5xf32>, %m: tensor<4x1x1xf32>) -> tensor<1x4x3x5xf32> {
  %r = fusion.group (%x, %m) kind = "injective" rule = "test" : (tensor<1x4x3x5xf32>, tensor<4x1x1xf32>) -> tensor<1x4x3x5xf32> {
  ^bb0(%a: tensor<1x4x3x5xf32>, %b: tensor<4x1x1xf32>):
    %t = graph.sub %a, %b : tensor<1x4x3x5xf32>, tensor<4x1x1xf32> -> tensor<1x4x3x5xf32>
    fusion.yield %t : tensor<1x4x3x5xf32>
  }
  func.return %r : tensor<1x4x3x5xf32>
}

// CHECK:      func.func @channels_k0(%[[X:.*]]: memref<60xf32>, %[[M:.*]]: memref<4xf32>, %[[OUT:.*]]: memref<60xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
// CHECK-DAG:    %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:    %[[C15:.*]] = arith.constant 15 : index
// CHECK:        "scf.parallel"(%{{.*}}, %{{.*}}, %[[C4]], %[[C15]], %{{.*}}, %{{.*}})
// CHECK-NEXT:   ^bb0(%[[C:.*]]: index, %[[P:.*]]: index):
// CHECK-NEXT:     %[[ROW:.*]] = arith.muli %[[C]], %[[C15]] : index
// CHECK-NEXT:     %[[AT:.*]] = arith.addi %[[ROW]], %[[P]] : index
// CHECK-NEXT:     %[[XV:.*]] = memref.load %[[X]][%[[AT]]] : memref<60xf32>
// CHECK-NEXT:     %[[MV:.*]] = memref.load %[[M]][%[[C]]] : memref<4xf32>
// CHECK-NEXT:     %[[T:.*]] = arith.subf %[[XV]], %[[MV]] : f32
// CHECK-NEXT:     memref.store %[[T]], %[[OUT]][%[[AT]]] : memref<60xf32>
// CHECK-NOT:    arith.divui
// CHECK-NOT:    arith.remui

// Two outputs of one element count, one a reshape of the other (a product's operand seen as
// [C, H*W]): the first output's shape with H and W merged, not one flat loop (whose channel
// index would divide at every element).
func.func @reshaped(%x: tensor<1x4x3x5xf32>, %m: tensor<4x1x1xf32>) -> (tensor<1x4x3x5xf32>, tensor<4x15xf32>) {
  %r:2 = fusion.group (%x, %m) kind = "injective" rule = "test" : (tensor<1x4x3x5xf32>, tensor<4x1x1xf32>) -> (tensor<1x4x3x5xf32>, tensor<4x15xf32>) {
  ^bb0(%a: tensor<1x4x3x5xf32>, %b: tensor<4x1x1xf32>):
    %t = graph.mul %a, %b : tensor<1x4x3x5xf32>, tensor<4x1x1xf32> -> tensor<1x4x3x5xf32>
    %v = graph.reshape %t : tensor<1x4x3x5xf32> -> tensor<4x15xf32>
    fusion.yield %t, %v : tensor<1x4x3x5xf32>, tensor<4x15xf32>
  }
  func.return %r#0, %r#1 : tensor<1x4x3x5xf32>, tensor<4x15xf32>
}

// CHECK:      func.func @reshaped_k0(%{{.*}}: memref<60xf32>, %{{.*}}: memref<4xf32>, %{{.*}}: memref<60xf32>, %{{.*}}: memref<60xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
// CHECK-NOT:    arith.divui
// CHECK-NOT:    arith.remui
// CHECK:        func.return

// A value broadcast along H only: H and W cannot merge (its offset would divide by W); the
// channel and H can (nothing reads them apart).
func.func @rows(%x: tensor<1x4x3x5xf32>, %r: tensor<1x4x3x1xf32>) -> tensor<1x4x3x5xf32> {
  %g = fusion.group (%x, %r) kind = "injective" rule = "test" : (tensor<1x4x3x5xf32>, tensor<1x4x3x1xf32>) -> tensor<1x4x3x5xf32> {
  ^bb0(%a: tensor<1x4x3x5xf32>, %b: tensor<1x4x3x1xf32>):
    %t = graph.add %a, %b : tensor<1x4x3x5xf32>, tensor<1x4x3x1xf32> -> tensor<1x4x3x5xf32>
    fusion.yield %t : tensor<1x4x3x5xf32>
  }
  func.return %g : tensor<1x4x3x5xf32>
}

// CHECK:      func.func @rows_k0(%{{.*}}: memref<60xf32>, %{{.*}}: memref<12xf32>, %{{.*}}: memref<60xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
// CHECK-DAG:    %[[C12:.*]] = arith.constant 12 : index
// CHECK-DAG:    %[[C5:.*]] = arith.constant 5 : index
// CHECK:        "scf.parallel"(%{{.*}}, %{{.*}}, %[[C12]], %[[C5]], %{{.*}}, %{{.*}})
// CHECK-NOT:    arith.divui
// CHECK:        func.return
