// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// A float sum over several reduced dims: each inner loop starts from 0 and its partial sum is
// added to the enclosing loop's accumulator (blocked summation), so that the rounding error
// grows with 6 + 33, not 6 * 33. A max needs no partials. (The reduced dims are not adjacent:
// adjacent ones loop as one, merged-rows.mlir.)

func.func @sum_of_two_dims(%x: tensor<6x4x33xf32>) -> tensor<4xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<6x4x33xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<6x4x33xf32>):
    %s = graph.reduce_sum %a dims = [0, 2] : tensor<6x4x33xf32> -> tensor<4xf32>
    fusion.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

func.func @max_of_two_dims(%x: tensor<6x4x33xf32>) -> tensor<4xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<6x4x33xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<6x4x33xf32>):
    %s = graph.reduce_max %a dims = [0, 2] : tensor<6x4x33xf32> -> tensor<4xf32>
    fusion.yield %s : tensor<4xf32>
  }
  func.return %r : tensor<4xf32>
}

// CHECK-LABEL: func.func @sum_of_two_dims_k0(
// CHECK:         %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         %[[TOTAL:.*]] = scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:      %[[ROW:.*]] = scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[PART:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:        %[[V:.*]] = memref.load %{{.*}}[%[[I]], %{{.*}}, %[[J]]] : memref<6x4x33xf32>
// CHECK-NEXT:        %[[NEXT:.*]] = arith.addf %[[PART]], %[[V]] fastmath<reassoc> : f32
// CHECK-NEXT:        scf.yield %[[NEXT]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[SUM:.*]] = arith.addf %[[ACC]], %[[ROW]] fastmath<reassoc> : f32
// CHECK-NEXT:      scf.yield %[[SUM]] : f32
// CHECK-NEXT:    }
// CHECK-NEXT:    memref.store %[[TOTAL]], %{{.*}}[%{{.*}}] : memref<4xf32>

// CHECK-LABEL: func.func @max_of_two_dims_k0(
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK-NEXT:      scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %[[ACC]]) -> (f32) {
