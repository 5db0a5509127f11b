// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// A softmax group is one kernel: one row per parallel iteration, a max loop and a sum loop
// carrying their accumulators, then the loop that writes the row.

func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %r = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %m = graph.reduce_max %a dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
    %s = graph.sub %a, %m : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
    %e = graph.exp %s : tensor<4x8xf32>
    %z = graph.reduce_sum %e dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
    %o = graph.div %e, %z : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
    fusion.yield %o : tensor<4x8xf32>
  }
  func.return %r : tensor<4x8xf32>
}

// CHECK:      func.func @forward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
// CHECK-NEXT:   %r = fusion.launch @forward_k0(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT:   func.return %r : tensor<4x8xf32>
// CHECK-NEXT: }
// CHECK:      func.func @forward_k0(%[[X:.*]]: memref<4x8xf32>, %[[OUT:.*]]: memref<4x8xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
// CHECK-DAG:    %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:    %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:    %[[C4:.*]] = arith.constant 4 : index
// CHECK-DAG:    %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:    %[[NEGINF:.*]] = arith.constant 0xff800000 : f32
// CHECK-DAG:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:        "scf.parallel"(%[[C0]], %[[C4]], %[[C1]])
// CHECK-NEXT:   ^bb0(%[[I:.*]]: index):
// CHECK-NEXT:     %[[MAX:.*]] = scf.for %[[J:.*]] = %[[C0]] to %[[C8]] step %[[C1]] iter_args(%[[M:.*]] = %[[NEGINF]]) -> (f32) {
// CHECK-NEXT:       %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:       %[[M2:.*]] = arith.maximumf %[[M]], %[[V]] : f32
// CHECK-NEXT:       scf.yield %[[M2]] : f32
// CHECK-NEXT:     }
// CHECK-NEXT:     %[[SUM:.*]] = scf.for %[[J:.*]] = %[[C0]] to %[[C8]] step %[[C1]] iter_args(%[[S:.*]] = %[[ZERO]]) -> (f32) {
// CHECK-NEXT:       %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:       %[[D:.*]] = arith.subf %[[V]], %[[MAX]] : f32
// CHECK-NEXT:       %[[E:.*]] = math.exp %[[D]] : f32
// CHECK-NEXT:       %[[S2:.*]] = arith.addf %[[S]], %[[E]] fastmath<reassoc> : f32
// CHECK-NEXT:       scf.yield %[[S2]] : f32
// CHECK-NEXT:     }
// CHECK-NEXT:     scf.for %[[J:.*]] = %[[C0]] to %[[C8]] step %[[C1]] {
// CHECK-NEXT:       %[[V:.*]] = memref.load %[[X]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:       %[[D:.*]] = arith.subf %[[V]], %[[MAX]] : f32
// CHECK-NEXT:       %[[E:.*]] = math.exp %[[D]] : f32
// CHECK-NEXT:       %[[Q:.*]] = arith.divf %[[E]], %[[SUM]] : f32
// CHECK-NEXT:       memref.store %[[Q]], %[[OUT]][%[[I]], %[[J]]] : memref<4x8xf32>
// CHECK-NEXT:     }
// CHECK-NEXT:     scf.reduce
// CHECK-NEXT:   })
// CHECK-NEXT:   func.return
