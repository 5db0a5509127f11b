// RUN: xfuse-opt %s -p convert-memref-to-llvm | filecheck %s

// A load or store is a row-major element address (i * 8 + j) and an aligned access.
func.func @k(%x: memref<4x8xf32>, %i: index, %j: index) -> f32 attributes {xfuse.kernel} {
  %v = memref.load %x[%i, %j] : memref<4x8xf32>
  memref.store %v, %x[%j, %i] : memref<4x8xf32>
  func.return %v : f32
}
// CHECK:      %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT: %[[ROW:.*]] = arith.muli %i, %[[C8]] overflow<nsw> : index
// CHECK-NEXT: %[[IDX:.*]] = arith.addi %[[ROW]], %j overflow<nsw> : index
// CHECK-NEXT: %[[I64:.*]] = arith.index_cast %[[IDX]] : index to i64
// CHECK-NEXT: %[[P:.*]] = builtin.unrealized_conversion_cast %x : memref<4x8xf32> to !llvm.ptr
// CHECK-NEXT: %[[ADDR:.*]] = llvm.getelementptr inbounds %[[P]][%[[I64]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT: %v = llvm.load %[[ADDR]] {alignment = 4 : i64} : !llvm.ptr -> f32
// CHECK:      llvm.store %v, %{{.*}} {alignment = 4 : i64} : f32, !llvm.ptr
// CHECK-NOT:  memref.load

// Accesses of one block share their address arithmetic: the constants once at the top of the
// function, `i * 8` once for both loads (a thread's lanes share all but their last index), the
// data pointer once.
func.func @lanes(%x: memref<4x8xf32>, %i: index, %j: index, %k: index) -> f32 attributes {xfuse.kernel} {
  %a = memref.load %x[%i, %j] : memref<4x8xf32>
  %b = memref.load %x[%i, %k] : memref<4x8xf32>
  %s = arith.addf %a, %b : f32
  func.return %s : f32
}
// CHECK-LABEL: func.func @lanes(
// CHECK-NEXT:  %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT:  %[[ROW:.*]] = arith.muli %i, %[[C8]] overflow<nsw> : index
// CHECK-NEXT:  %[[J:.*]] = arith.addi %[[ROW]], %j overflow<nsw> : index
// CHECK-NEXT:  %[[J64:.*]] = arith.index_cast %[[J]] : index to i64
// CHECK-NEXT:  %[[P:.*]] = builtin.unrealized_conversion_cast %x : memref<4x8xf32> to !llvm.ptr
// CHECK-NEXT:  llvm.getelementptr inbounds %[[P]][%[[J64]]]
// CHECK-NEXT:  %a = llvm.load
// CHECK-NEXT:  %[[K:.*]] = arith.addi %[[ROW]], %k overflow<nsw> : index
// CHECK-NEXT:  %[[K64:.*]] = arith.index_cast %[[K]] : index to i64
// CHECK-NEXT:  llvm.getelementptr inbounds %[[P]][%[[K64]]]
// CHECK-NEXT:  %b = llvm.load
