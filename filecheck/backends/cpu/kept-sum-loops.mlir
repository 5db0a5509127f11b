// RUN: python -m xfuse.backends.cpu %s --emit=llvm | filecheck %s
// RUN: python -m xfuse.backends.cpu %s --emit=opt-llvm | filecheck %s --check-prefix=OPT

// A float sum over a constant trip LLVM would unroll fully (64) keeps its loop for the
// vectorizer (`llvm.loop.unroll.disable`): partial sums in vector lanes, not one serial chain
// of 64 adds. A trip of 8 (shorter than a vector) keeps LLVM's own choice; so does a loop of
// max, whose order does not round. A trip of 1024, which LLVM does not unroll before it
// vectorizes, keeps its vector loop after (`llvm.loop.vectorize.followup_vectorized`, a long
// row: `keep_long_rows`): 16 trips of 4 vectors, not 64 loads in one block.
func.func @sum64(%x: memref<64xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 64 : index
  %zero = arith.constant 0.000000e+00 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%i] : memref<64xf32>
    %next = arith.addf %acc, %a fastmath<reassoc> : f32
    scf.yield %next : f32
  }
  memref.store %s, %out[] : memref<f32>
  func.return
}

func.func @sum8(%x: memref<8xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 8 : index
  %zero = arith.constant 0.000000e+00 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%i] : memref<8xf32>
    %next = arith.addf %acc, %a fastmath<reassoc> : f32
    scf.yield %next : f32
  }
  memref.store %s, %out[] : memref<f32>
  func.return
}

func.func @sum1024(%x: memref<1024xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 1024 : index
  %zero = arith.constant 0.000000e+00 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%i] : memref<1024xf32>
    %next = arith.addf %acc, %a fastmath<reassoc> : f32
    scf.yield %next : f32
  }
  memref.store %s, %out[] : memref<f32>
  func.return
}

func.func @max64(%x: memref<64xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 64 : index
  %low = arith.constant 0xFF800000 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %low) -> (f32) {
    %a = memref.load %x[%i] : memref<64xf32>
    %next = arith.maximumf %acc, %a : f32
    scf.yield %next : f32
  }
  memref.store %s, %out[] : memref<f32>
  func.return
}

// CHECK-LABEL: define void @"sum64"
// CHECK:       fadd reassoc float
// CHECK-NEXT:  add i64
// CHECK-NEXT:  br label %{{.*}}, !llvm.loop ![[LOOP:[0-9]+]]
// CHECK:       ![[DISABLE:[0-9]+]] = !{ !"llvm.loop.unroll.disable" }
// CHECK-NEXT:  ![[LOOP]] = !{ ![[LOOP]], ![[DISABLE]] }
// CHECK-LABEL: define void @"sum8"
// CHECK-NOT:   !llvm.loop
// CHECK-LABEL: define void @"sum1024"
// CHECK:       br label %{{.*}}, !llvm.loop ![[LONG:[0-9]+]]
// CHECK:       ![[KEEP:[0-9]+]] = !{ !"llvm.loop.unroll.disable" }
// CHECK-NEXT:  ![[FOLLOWUP:[0-9]+]] = !{ !"llvm.loop.vectorize.followup_vectorized", ![[KEEP]] }
// CHECK-NEXT:  ![[LONG]] = !{ ![[LONG]], ![[FOLLOWUP]] }
// CHECK-LABEL: define void @"max64"
// CHECK-NOT:   !llvm.loop

// OPT-LABEL: define void @sum64
// OPT:       fadd reassoc <{{[0-9]+}} x float>
// OPT:       llvm.vector.reduce.fadd
// OPT-LABEL: define void @sum1024
// OPT:       vector.body:
// OPT-COUNT-4: fadd reassoc <{{8|16}} x float>
// OPT-NOT:   fadd reassoc <{{8|16}} x float> %vec.phi
// OPT:       br i1 %{{.*}}, label %{{.*}}, label %vector.body, !llvm.loop ![[VECTOR_LOOP:[0-9]+]]
// OPT:       llvm.vector.reduce.fadd
// OPT:       ![[VECTOR_LOOP]] = distinct !{![[VECTOR_LOOP]], ![[UNROLL_OFF:[0-9]+]]}
// OPT-NEXT:  ![[UNROLL_OFF]] = !{!"llvm.loop.unroll.disable"}

// A column's sum (a stride of 32 elements a trip) is no loop the vectorizer takes well: LLVM's
// own choice stands.
func.func @column64(%x: memref<64x32xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant 64 : index
  %zero = arith.constant 0.000000e+00 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %a = memref.load %x[%i, %c0] : memref<64x32xf32>
    %next = arith.addf %acc, %a fastmath<reassoc> : f32
    scf.yield %next : f32
  }
  memref.store %s, %out[] : memref<f32>
  func.return
}

// CHECK-LABEL: define void @"column64"
// CHECK-NOT:   !llvm.loop
