// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// An output at every element that reads no reduction's result (a squeeze-excitation's
// activation beside its channel sum) is written by the reductions' loop over the row: each
// element is read and computed once. One that reads the result (a normalization's output)
// gets a loop of its own after it.

func.func @act_and_sum(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
  %y, %s = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4x8xf32>):
    %g = graph.sigmoid %a : tensor<4x8xf32>
    %m = graph.mul %a, %g : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
    %r = graph.reduce_sum %m dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
    fusion.yield %m, %r : tensor<4x8xf32>, tensor<4xf32>
  }
  func.return %y, %s : tensor<4x8xf32>, tensor<4xf32>
}

func.func @centred(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %m = graph.reduce_mean %a dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
    %d = graph.sub %a, %m : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
    fusion.yield %d : tensor<4x8xf32>
  }
  func.return %y : tensor<4x8xf32>
}

// CHECK:      func.func @act_and_sum_k0(%[[X:.*]]: memref<4x8xf32>, %[[Y:.*]]: memref<4x8xf32>, %[[S:.*]]: memref<4xf32>)
// CHECK:        ^bb0(%[[I:.*]]: index):
// CHECK-NEXT:     %[[SUM:.*]] = scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[ACC:.*]] = %{{.*}}) -> (f32) {
// CHECK-NEXT:       %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK:            %[[M:.*]] = arith.mulf %[[V]], %{{.*}} : f32
// CHECK-NEXT:       %[[ACC2:.*]] = arith.addf %[[ACC]], %[[M]] fastmath<reassoc> : f32
// CHECK-NEXT:       memref.store %[[M]], %[[Y]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:       scf.yield %[[ACC2]] : f32
// CHECK-NEXT:     }
// CHECK-NEXT:     memref.store %[[SUM]], %[[S]][%[[I]]] : memref<4xf32>
// CHECK-NEXT:     scf.reduce

// CHECK:      func.func @centred_k0(%[[X:.*]]: memref<4x8xf32>, %[[Y:.*]]: memref<4x8xf32>)
// CHECK:        ^bb0(%[[I:.*]]: index):
// CHECK-NEXT:     %[[SUM:.*]] = scf.for
// CHECK-NOT:        memref.store
// CHECK:          scf.for %[[J:.*]] = {{.*}} {
// CHECK:            memref.store %{{.*}}, %[[Y]][%[[I]], %[[J]]] : memref<4x8xf32>
