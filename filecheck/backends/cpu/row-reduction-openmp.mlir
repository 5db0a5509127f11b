// RUN: python -m xfuse.backends.cpu %s --emit=opt-llvm | filecheck %s

// RMSNorm's kernel (as lower-to-loops makes it): the row's sum of squares is a vector
// reduction (reassoc adds of <N x float>), the write loop is vectorized, and the OpenMP entry
// hands chunks of rows to torch's OpenMP threads (GOMP_parallel; chunks taken atomically).
func.func @rms(%w: memref<256xf32>, %x: memref<64x256xf32>, %out: memref<64x256xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %rows = arith.constant 64 : index
  %cols = arith.constant 256 : index
  %zero = arith.constant 0.000000e+00 : f32
  %n = arith.constant 2.560000e+02 : f32
  %eps = arith.constant 1.000000e-06 : f32
  "scf.parallel"(%c0, %rows, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %sum = scf.for %j = %c0 to %cols step %c1 iter_args(%acc = %zero) -> (f32) {
      %a = memref.load %x[%i, %j] : memref<64x256xf32>
      %sq = arith.mulf %a, %a : f32
      %next = arith.addf %acc, %sq fastmath<reassoc> : f32
      scf.yield %next : f32
    }
    %mean = arith.divf %sum, %n : f32
    %shifted = arith.addf %mean, %eps : f32
    %r = math.rsqrt %shifted : f32
    scf.for %j = %c0 to %cols step %c1 {
      %a = memref.load %x[%i, %j] : memref<64x256xf32>
      %s = arith.mulf %a, %r : f32
      %g = memref.load %w[%j] : memref<256xf32>
      %y = arith.mulf %s, %g : f32
      memref.store %y, %out[%i, %j] : memref<64x256xf32>
    }
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}

// CHECK:       define void @rms(i64 %.1, i64 %.2, ptr noalias readonly {{.*}}%.3, ptr noalias readonly {{.*}}%.4, ptr noalias writeonly {{.*}}%.5)
// CHECK:       fadd reassoc {{.*}}<[[N:[0-9]+]] x float>
// CHECK:       llvm.vector.reduce.fadd
// CHECK:       store <{{[0-9]+}} x float>
// CHECK:       define internal void @rms.chunks(ptr {{.*}}%.1)
// CHECK:       atomicrmw add ptr %.1, i64 1 monotonic
// CHECK:       call void @rms(
// CHECK:       declare void @GOMP_parallel(ptr, ptr, i32, i32)
// CHECK:       define void @rms.parallel(i64 %.1, i64 %.2, ptr %.3, ptr %.4, ptr %.5)
// CHECK:       call void @GOMP_parallel(ptr nonnull @rms.chunks, ptr nonnull %{{.*}}, i32 %{{.*}}, i32 0)
