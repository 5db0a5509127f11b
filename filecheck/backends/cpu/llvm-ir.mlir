// RUN: python -m xfuse.backends.cpu %s --emit=llvm | filecheck %s
// RUN: python -m xfuse.backends.cpu %s --emit=opt-llvm | filecheck %s --check-prefix=OPT

// LLVM IR for the host: noalias pointers, range arguments, a vectorized loop without libm calls.
func.func @k(%x: memref<1024xf32>, %out: memref<1024xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  "scf.parallel"(%c0, %n, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %a = memref.load %x[%i] : memref<1024xf32>
    %e = math.exp %a : f32
    memref.store %e, %out[%i] : memref<1024xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}

// CHECK:      @"k.extent" = constant i64 1024
// CHECK:      @"k.arity" = constant i64 2
// CHECK:      define void @"k"(i64 %".1", i64 %".2", ptr noalias %".3", ptr noalias %".4")
// CHECK-NOT:  call float @expf
// CHECK:      load float, ptr

// OPT:        define void @k(i64 %.1, i64 %.2, ptr noalias readonly {{.*}}%.3, ptr noalias writeonly {{.*}}%.4)
// OPT:        <{{[0-9]+}} x float>
// OPT-NOT:    @expf
