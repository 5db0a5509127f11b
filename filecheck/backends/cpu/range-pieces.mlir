// RUN: python -m xfuse.backends.cpu %s --emit=llvm | filecheck %s
// RUN: python -m xfuse.backends.cpu %s --emit=opt-llvm | filecheck %s --check-prefix=OPT

// A sum over a concat of two rows of 96 (lower-to-loops's concat: `scf.if` on the index) is
// cut into a loop per operand (`xfuse.passes.llvm.range_pieces`), no branch left in either.
// Both run 96 trips, the second from 96 to 192: each keeps its loop for the vectorizer
// (`llvm.loop.unroll.disable`, `xfuse.backends.loop_hints` counting trips from the start),
// and each sums in vector lanes.
func.func @concat_sum(%a: memref<96xf32>, %b: memref<96xf32>, %out: memref<f32>) attributes {xfuse.kernel, xfuse.parallel_dims = 0 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c96 = arith.constant 96 : index
  %n = arith.constant 192 : index
  %m96 = arith.constant -96 : index
  %zero = arith.constant 0.000000e+00 : f32
  %s = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %in_a = arith.cmpi ult, %i, %c96 : index
    %j = arith.addi %i, %m96 : index
    %x = scf.if %in_a -> (f32) {
      %v = memref.load %a[%i] : memref<96xf32>
      scf.yield %v : f32
    } else {
      %v = memref.load %b[%j] : memref<96xf32>
      scf.yield %v : f32
    }
    %next = arith.addf %acc, %x fastmath<reassoc> : f32
    scf.yield %next : f32
  }
  memref.store %s, %out[] : memref<f32>
  func.return
}

// CHECK-LABEL: define void @"concat_sum"
// CHECK-NOT:   icmp ult
// CHECK:       icmp slt i64 %{{.*}}, 96
// CHECK:       fadd reassoc float
// CHECK:       br label %{{.*}}, !llvm.loop !{{[0-9]+}}
// CHECK:       icmp slt i64 %{{.*}}, 192
// CHECK:       fadd reassoc float
// CHECK:       br label %{{.*}}, !llvm.loop !{{[0-9]+}}

// OPT-LABEL: define void @concat_sum
// OPT:       fadd reassoc <{{[0-9]+}} x float>
// OPT:       llvm.vector.reduce.fadd
// OPT:       fadd reassoc <{{[0-9]+}} x float>
// OPT:       llvm.vector.reduce.fadd
