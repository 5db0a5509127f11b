// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s
// RUN: xfuse-opt %s -p 'lower-to-loops{merge_dims=false}' | filecheck %s --check-prefix=ND

// A reduction's adjacent reduced dims loop as one, over a buffer whose dims merge: a
// channel's 14x14 elements in one loop of 196 (14 loops of 14 would be too short for the
// CPU's vectors), its 56x56 in 4 blocks of 784 (each a loop of whole vectors, its sum added to
// the row's). With `merge-dims` off (as on CUDA) each dim is a loop of its own.

func.func @mean_of_14x14(%x: tensor<8x14x14xf32>) -> tensor<8x1x1xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<8x14x14xf32>) -> tensor<8x1x1xf32> {
  ^bb0(%a: tensor<8x14x14xf32>):
    %s = graph.reduce_mean %a dims = [1, 2] keepdim : tensor<8x14x14xf32> -> tensor<8x1x1xf32>
    fusion.yield %s : tensor<8x1x1xf32>
  }
  func.return %r : tensor<8x1x1xf32>
}

func.func @sum_of_56x56(%x: tensor<8x56x56xf32>) -> tensor<8xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<8x56x56xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8x56x56xf32>):
    %s = graph.reduce_sum %a dims = [1, 2] : tensor<8x56x56xf32> -> tensor<8xf32>
    fusion.yield %s : tensor<8xf32>
  }
  func.return %r : tensor<8xf32>
}

// CHECK-LABEL: func.func @mean_of_14x14_k0(%{{.*}}: memref<8x196xf32>
// CHECK:         %[[N:.*]] = arith.constant 196 : index
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %[[N]] step
// CHECK-NEXT:      memref.load %{{.*}}[%{{.*}}, %[[I]]] : memref<8x196xf32>
// CHECK-NOT:     scf.for

// CHECK-LABEL: func.func @sum_of_56x56_k0(%{{.*}}: memref<8x3136xf32>
// CHECK-DAG:     %[[BLOCKS:.*]] = arith.constant 4 : index
// CHECK-DAG:     %[[BLOCK:.*]] = arith.constant 784 : index
// CHECK:         scf.for %[[O:.*]] = %{{.*}} to %[[BLOCKS]] step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK-NEXT:      %[[PART:.*]] = scf.for %[[I:.*]] = %{{.*}} to %[[BLOCK]] step
// CHECK-NEXT:        %[[AT:.*]] = arith.muli %[[O]], %[[BLOCK]] : index
// CHECK-NEXT:        %[[K:.*]] = arith.addi %[[AT]], %[[I]] : index
// CHECK-NEXT:        memref.load %{{.*}}[%{{.*}}, %[[K]]] : memref<8x3136xf32>
// CHECK:           arith.addf %[[ACC]], %[[PART]] fastmath<reassoc> : f32

// ND-LABEL: func.func @mean_of_14x14_k0(%{{.*}}: memref<8x14x14xf32>
// ND:         scf.for
// ND-NEXT:      scf.for
// ND-LABEL: func.func @sum_of_56x56_k0(%{{.*}}: memref<8x56x56xf32>
