// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// graph.gather: the index is loaded once per row, wrapped (`wrap`), clamped to the table's
// dim, and an index outside it sets the kernel's error flag (its last argument).

func.func @rows(%t: tensor<10x4xf32>, %i: tensor<6x1xi32>) -> tensor<6x4xf32> {
  %r = fusion.group (%t, %i) kind = "injective" rule = "test" : (tensor<10x4xf32>, tensor<6x1xi32>) -> tensor<6x4xf32> {
  ^bb0(%x: tensor<10x4xf32>, %j: tensor<6x1xi32>):
    %g = graph.gather %x[%j] dim = 0 wrap : tensor<10x4xf32>, tensor<6x1xi32> -> tensor<6x4xf32>
    %e = graph.exp %g : tensor<6x4xf32>
    fusion.yield %e : tensor<6x4xf32>
  }
  func.return %r : tensor<6x4xf32>
}

// CHECK:      func.func @rows_k0(%[[T:.*]]: memref<10x4xf32>, %[[I:.*]]: memref<6x1xi32>, %[[OUT:.*]]: memref<6x4xf32>, %[[FLAG:.*]]: memref<1xi8>) attributes {xfuse.kernel, xfuse.error_flag, xfuse.parallel_dims = 2 : i64}
// CHECK-DAG:    %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:    %[[C10:.*]] = arith.constant 10 : index
// CHECK-DAG:    %[[ONE:.*]] = arith.constant 1 : i8
// CHECK:        ^bb0(%[[R:.*]]: index, %[[C:.*]]: index):
// CHECK-NEXT:     %[[RAW:.*]] = memref.load %[[I]][%[[R]], %[[C0]]] : memref<6x1xi32>
// CHECK-NEXT:     %[[IDX:.*]] = arith.index_cast %[[RAW]] : i32 to index
// CHECK-NEXT:     %[[NEG:.*]] = arith.cmpi slt, %[[IDX]], %[[C0]] : index
// CHECK-NEXT:     %[[UP:.*]] = arith.addi %[[IDX]], %[[C10]] : index
// CHECK-NEXT:     %[[W:.*]] = arith.select %[[NEG]], %[[UP]], %[[IDX]] : index
// CHECK-NEXT:     %[[BAD:.*]] = arith.cmpi uge, %[[W]], %[[C10]] : index
// CHECK-NEXT:     scf.if %[[BAD]] {
// CHECK-NEXT:       memref.store %[[ONE]], %[[FLAG]][%[[C0]]] : memref<1xi8>
// CHECK-NEXT:     }
// CHECK-NEXT:     %[[ROW:.*]] = arith.select %[[BAD]], %[[C0]], %[[W]] : index
// CHECK-NEXT:     %[[V:.*]] = memref.load %[[T]][%[[ROW]], %[[C]]] : memref<10x4xf32>
// CHECK-NEXT:     %[[E:.*]] = math.exp %[[V]] : f32
// CHECK-NEXT:     memref.store %[[E]], %[[OUT]][%[[R]], %[[C]]] : memref<6x4xf32>
