// RUN: xfuse-opt %s -p "lower-to-llvm{contract=true}" | filecheck %s

// f16 stays half in memory and is extended; bf16 travels as i16 bits; f16 arithmetic runs in f32
// and is rounded back after each op. With `contract` (off by default), an op rounded back still
// gets none: LLVM narrows it to a native f16 op on CPUs that have them (AVX512-FP16) and would
// fuse mul+add into one rounding.
func.func @k(%h: memref<8xf16>, %b: memref<8xbf16>, %out: memref<8xbf16>) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  "scf.parallel"(%c0, %c8, %c1) <{operandSegmentSizes = array<i32: 1, 1, 1, 0>}> ({
  ^bb0(%i: index):
    %hv = memref.load %h[%i] : memref<8xf16>
    %hh = arith.addf %hv, %hv : f16
    %hm = arith.mulf %hh, %hv : f16
    %hs = arith.addf %hm, %hv : f16
    %bv = memref.load %b[%i] : memref<8xbf16>
    %bw = arith.extf %bv : bf16 to f32
    %hw = arith.extf %hs : f16 to f32
    %s = arith.addf %bw, %hw : f32
    %r = arith.truncf %s : f32 to bf16
    memref.store %r, %out[%i] : memref<8xbf16>
    scf.reduce
  }) : (index, index, index) -> ()
  func.return
}

// CHECK:      %hv = llvm.load %{{.*}} {alignment = 2 : i64} : !llvm.ptr -> f16
// CHECK-NEXT: %[[H1:.*]] = llvm.fpext %hv : f16 to f32
// CHECK-NEXT: %[[H2:.*]] = llvm.fpext %hv : f16 to f32
// CHECK-NEXT: %[[SUM:.*]] = llvm.fadd %[[H1]], %[[H2]] : f32
// CHECK-NEXT: %hh = llvm.fptrunc %[[SUM]] : f32 to f16
// CHECK:      %[[PROD:.*]] = llvm.fmul %{{.*}}, %{{.*}} : f32
// CHECK-NEXT: %hm = llvm.fptrunc %[[PROD]] : f32 to f16
// CHECK:      %[[SUM2:.*]] = llvm.fadd %{{.*}}, %{{.*}} : f32
// CHECK-NEXT: %hs = llvm.fptrunc %[[SUM2]] : f32 to f16
// CHECK:      %bv = llvm.load %{{.*}} {alignment = 2 : i64} : !llvm.ptr -> i16
// CHECK-NEXT: %[[WIDE:.*]] = llvm.zext %bv : i16 to i32
// CHECK:      %[[SHIFTED:.*]] = llvm.shl %[[WIDE]], %{{.*}} : i32
// CHECK-NEXT: %bw = llvm.bitcast %[[SHIFTED]] : i32 to f32
// CHECK:      %s = llvm.fadd %bw, %hw {fastmathFlags = #llvm.fastmath<contract>} : f32
// CHECK:      %[[NAN:.*]] = llvm.fcmp "uno" %s, %s : f32
// CHECK:      %r = llvm.trunc %{{.*}} : i32 to i16
// CHECK:      llvm.store %r, %{{.*}} {alignment = 2 : i64} : i16, !llvm.ptr
