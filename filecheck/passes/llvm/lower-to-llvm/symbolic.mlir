// RUN: xfuse-opt %s -p lower-to-llvm | filecheck %s
// RUN: python -m xfuse.backends.cpu %s --emit=opt-llvm | filecheck %s --check-prefix=OPT

// A kernel with symbolic sizes (as lower-to-loops makes it): its size arguments become i64s
// after the pointers, its split loop runs over [lo, hi) as a static kernel's, `@k.extent` is
// -1 (the runtime computes it from the sizes) and `@k.sizes` counts the size arguments. A
// memref<?xf32> is its data pointer, indexed at the kernel's offset. The loop over a runtime
// row length is vectorized with a scalar remainder. (Where the process has torch's OpenMP
// runtime the module also has the entry `@k.parallel`: tests/backends/test_cpu_openmp.py.)

func.func @k(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s0"} {
  %4 = arith.constant 0 : index
  %5 = arith.constant 1 : index
  %6 = arith.constant 0.000000e+00 : f32
  "scf.parallel"(%4, %2, %5) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%7: index):
    %8 = arith.muli %7, %3 : index
    %9 = scf.for %10 = %4 to %3 step %5 iter_args(%11 = %6) -> (f32) {
      %12 = arith.addi %8, %10 : index
      %13 = memref.load %0[%12] : memref<?xf32>
      %14 = arith.addf %11, %13 fastmath<reassoc> : f32
      scf.yield %14 : f32
    }
    memref.store %9, %1[%7] : memref<?xf32>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}

// CHECK:      llvm.func @k(%lo: i64, %hi: i64, %0: !llvm.ptr {llvm.noalias}, %1: !llvm.ptr {llvm.noalias}, %2: i64, %3: i64) {
// CHECK:        llvm.icmp "slt" %{{.*}}, %hi : i64
// CHECK:        %[[ROW:.*]] = llvm.mul %{{.*}}, %3 : i64
// CHECK:        llvm.icmp "slt" %{{.*}}, %3 : i64
// CHECK:        llvm.add %[[ROW]], %{{.*}} : i64
// CHECK:        llvm.getelementptr inbounds %0[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, f32
// CHECK:      llvm.mlir.global external constant @k.extent(-1 : i64)
// CHECK:      llvm.mlir.global external constant @k.arity(2 : i64)
// CHECK:      llvm.mlir.global external constant @k.sizes(2 : i64)

// OPT:     define void @k(i64 %{{.*}}, i64 %{{.*}}, ptr noalias {{.*}}, ptr noalias {{.*}}, i64 %{{.*}}, i64 %{{.*}})
// OPT:     vector.body:
// OPT:     fadd reassoc <{{[0-9]+}} x float>
// OPT:     middle.block:
