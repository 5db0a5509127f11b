// RUN: xfuse-opt %s -p lower-to-llvm | filecheck %s
// RUN: xfuse-opt %s -p "lower-to-llvm{contract=true}" | filecheck %s --check-prefix=CONTRACT

// The first parallel dim runs over [lo, hi); the rest become loops; memrefs are noalias pointers.
func.func @forward(%t: memref<4x8xf32>) {
  func.return
}
// CHECK:      func.func @forward(%t: memref<4x8xf32>) {

func.func @scale(%x: memref<4x8xf32>, %w: memref<8xf32>, %out: memref<4x8xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  "scf.parallel"(%c0, %c0, %c4, %c8, %c1, %c1) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
  ^bb0(%i: index, %j: index):
    %a = memref.load %x[%i, %j] : memref<4x8xf32>
    %b = memref.load %w[%j] : memref<8xf32>
    %m = arith.mulf %a, %b : f32
    %r = math.sqrt %m : f32
    memref.store %r, %out[%i, %j] : memref<4x8xf32>
    scf.reduce
  }) : (index, index, index, index, index, index) -> ()
  func.return
}

// CHECK:      llvm.func @scale(%lo: i64, %hi: i64, %x: !llvm.ptr {llvm.noalias}, %w: !llvm.ptr {llvm.noalias}, %out: !llvm.ptr {llvm.noalias}) {
// CHECK:        llvm.br ^bb1(%lo : i64)
// CHECK-NEXT: ^bb1(%i: i64):
// CHECK-NEXT:   %{{.*}} = llvm.icmp "slt" %i, %hi : i64
// CHECK:      ^bb3(%j: i64):
// CHECK:        %[[ROW:.*]] = llvm.mul %i, %{{.*}} overflow<nsw> : i64
// CHECK-NEXT:   %[[LIN:.*]] = llvm.add %[[ROW]], %j overflow<nsw> : i64
// CHECK-NEXT:   %[[PX:.*]] = llvm.getelementptr inbounds %x[%[[LIN]]] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK-NEXT:   %a = llvm.load %[[PX]] {alignment = 4 : i64} : !llvm.ptr -> f32
// CHECK:        %m = llvm.fmul %a, %b : f32
// CONTRACT:     %m = llvm.fmul %a, %b {fastmathFlags = #llvm.fastmath<contract>} : f32
// CHECK-NEXT:   %r = llvm.call_intrinsic "llvm.sqrt.f32"(%m) : (f32) -> f32
// CHECK:        llvm.store %r, %{{.*}} {alignment = 4 : i64} : f32, !llvm.ptr
// CHECK:        llvm.return
// CHECK:      llvm.mlir.global external constant @scale.extent(4 : i64) {addr_space = 0 : i32} : i64
// CHECK-NEXT: llvm.mlir.global external constant @scale.arity(3 : i64) {addr_space = 0 : i32} : i64
