// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// Rows of 64 f32 (16 chunks of 4), 16384 of them: 4 threads a row, 4 chunks each (64 rows per
// block of 256; a thread's chunks 64 bytes apart, its neighbours' between them), reduced
// with 2 shuffles: a warp a row would leave half its lanes idle, one chunk in flight each.

builtin.module {
  func.func @softmax(%x: memref<16384x64xf32>, %y: memref<16384x64xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 16384 : index
    %cn = arith.constant 64 : index
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    "scf.parallel"(%c0, %c4, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
    ^bb0(%i: index):
      %m = scf.for %j = %c0 to %cn step %c1 iter_args(%acc = %ninf) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<16384x64xf32>
        %n = arith.maximumf %acc, %v : f32
        scf.yield %n : f32
      }
      %s = scf.for %j = %c0 to %cn step %c1 iter_args(%acc = %zero) -> (f32) {
        %v = memref.load %x[%i, %j] : memref<16384x64xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        %n = arith.addf %acc, %e : f32
        scf.yield %n : f32
      }
      scf.for %j = %c0 to %cn step %c1 {
        %v = memref.load %x[%i, %j] : memref<16384x64xf32>
        %d = arith.subf %v, %m : f32
        %e = math.exp %d : f32
        %r = arith.divf %e, %s : f32
        memref.store %r, %y[%i, %j] : memref<16384x64xf32>
      }
      scf.reduce
    }) : (index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": 256, "kernel": "softmax", "strategy": "rows"}
// CHECK:      .visible .entry softmax(
// CHECK:      ld.global.nc.v4.b32 {{.*}}, [%[[P:rd[0-9]+]]];
// CHECK-NEXT: ld.global.nc.v4.b32 {{.*}}, [%[[P]]+64];
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 2, 31, -1;
// CHECK:      shfl.sync.bfly.b32 {{.*}}, 1, 31, -1;
// CHECK-NOT:  shfl.sync
// CHECK-NOT:  bar.sync
// CHECK:      st.global.v4.b32
