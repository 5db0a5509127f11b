// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s
// RUN: xfuse-opt %s -p 'lower-to-loops{merge_dims=false}' | filecheck %s --check-prefix=ND

// A reduction's adjacent reduced dims loop as one, in blocks, over a buffer whose dims merge:
// a channel's 28x28 elements in 49 blocks of 16, its 56x56 in 49 blocks of 64 (whole vectors,
// where LLVM vectorizes loops of 28 in 4 lanes and of 56 in 8), each block's sum added to the
// row's, the loops no longer in all than 1.5x the dims' own. With `merge-dims` off (as on
// CUDA) each dim is a loop of its own.

func.func @mean_of_28x28(%x: tensor<8x28x28xf32>) -> tensor<8x1x1xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<8x28x28xf32>) -> tensor<8x1x1xf32> {
  ^bb0(%a: tensor<8x28x28xf32>):
    %s = graph.reduce_mean %a dims = [1, 2] keepdim : tensor<8x28x28xf32> -> tensor<8x1x1xf32>
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

// CHECK-LABEL: func.func @mean_of_28x28_k0(%{{.*}}: memref<8x784xf32>
// CHECK-DAG:     %[[BLOCKS28:.*]] = arith.constant 49 : index
// CHECK-DAG:     %[[BLOCK28:.*]] = arith.constant 16 : index
// CHECK:         scf.for %[[O28:.*]] = %{{.*}} to %[[BLOCKS28]] step
// CHECK-NEXT:      scf.for %{{.*}} = %{{.*}} to %[[BLOCK28]] step
// CHECK-NEXT:        arith.muli %[[O28]], %[[BLOCK28]] : index
// CHECK-NEXT:        arith.addi
// CHECK-NEXT:        memref.load %{{.*}} : memref<8x784xf32>

// CHECK-LABEL: func.func @sum_of_56x56_k0(%{{.*}}: memref<8x3136xf32>
// CHECK-DAG:     %[[BLOCKS:.*]] = arith.constant 49 : index
// CHECK-DAG:     %[[BLOCK:.*]] = arith.constant 64 : index
// CHECK:         scf.for %[[O:.*]] = %{{.*}} to %[[BLOCKS]] step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK-NEXT:      %[[PART:.*]] = scf.for %[[I:.*]] = %{{.*}} to %[[BLOCK]] step
// CHECK-NEXT:        %[[AT:.*]] = arith.muli %[[O]], %[[BLOCK]] : index
// CHECK-NEXT:        %[[K:.*]] = arith.addi %[[AT]], %[[I]] : index
// CHECK-NEXT:        memref.load %{{.*}}[%{{.*}}, %[[K]]] : memref<8x3136xf32>
// CHECK:           arith.addf %[[ACC]], %[[PART]] fastmath<reassoc> : f32

// ND-LABEL: func.func @mean_of_28x28_k0(%{{.*}}: memref<8x28x28xf32>
// ND:         scf.for
// ND-NEXT:      scf.for
// ND-LABEL: func.func @sum_of_56x56_k0(%{{.*}}: memref<8x56x56xf32>
