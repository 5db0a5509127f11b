// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// Rows of 16384: a block of 256 threads per row, 64 elements each kept in registers as sixteen
// 128-bit loads (one load per element for the max, the sum and the output), warp shuffles then
// shared memory; the division by the sum is a multiplication by its reciprocal.

builtin.module {
  func.func @softmax(%x: memref<8x16384xf32>, %y: memref<8x16384xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 8 : index
    %cn = arith.constant 16384 : index
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %m = scf.for %j = %c0 to %cn step %c1 iter_args(%acc = %ninf) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<8x16384xf32>
        %n = arith.maximumf %acc, %v : f32
        scf.yield %n : f32
      }
      %s = scf.for %j = %c0 to %cn step %c1 iter_args(%acc = %zero) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<8x16384xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        %n = arith.addf %acc, %e : f32
        scf.yield %n : f32
      }
      scf.for %j = %c0 to %cn step %c1 {
        %v = memref.load %x[%i, %j] : memref<8x16384xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        %r = arith.divf %e, %s : f32
        memref.store %r, %y[%i, %j] : memref<8x16384xf32>
      }
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": 8, "kernel": "softmax", "strategy": "rows"}
// CHECK:      .visible .entry softmax(
// CHECK:      .maxntid 256
// CHECK-NOT:  .minnctapersm
// CHECK:      .shared .align 4 .b8 __xfuse_smem_softmax_0[128];
// CHECK-COUNT-16: ld.global.nc.v4.b32
// CHECK-NOT:  ld.global
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 16, 31, -1;
// CHECK:      st.shared.b32
// CHECK:      bar.sync 0;
// CHECK:      shfl.sync.bfly.b32
// CHECK:      bar.sync 0;
// CHECK:      rcp.rn.f32
// CHECK-NOT:  div.rn.f32
// CHECK-COUNT-16: st.global.v4.b32
