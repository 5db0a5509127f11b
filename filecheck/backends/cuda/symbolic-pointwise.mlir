// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// RUN: python -m xfuse.backends.cuda %s | filecheck %s --check-prefix=NODIV
// gelu(x + b) * 2 over x: [s0, s1, 8] (sizes s0 and s1 at run time), b: [8]: a kernel with
// symbolic sizes takes them as i64 parameters after its buffers. A grid-stride loop over the
// flattened index space, 4 f32 of the static innermost dim a thread and step (128-bit loads
// and stores of x, b and the output, whose first lanes are 16-byte aligned), whose length is
// computed in the kernel from the sizes (a thread divides its first position and the grid's
// stride into indices once; each step adds the stride's indices with carries, so the loop
// divides nothing). x and the output are read and written at the loop's position (their
// index is the iteration's flattened one), b at the innermost index alone: the outer indices
// and their divisions by s1 are dead, and the kernel divides by nothing at run time. The loop
// is there once, in 64-bit arithmetic (its chunks, 2 * s0 * s1, may pass 2^31), the thread's
// position and the grid's stride computed in 32-bit (the runtime launches at most 2^27
// threads), with no branch on the sizes choosing an index width. The launch
// line says how the launch computes the work items (`items = (8 * s0 * s1) floordiv 4`, in
// the size syntax of a `graph.sizes` table) from the size arguments, named as
// `xfuse.size_args` names them, per call.

builtin.module {
  func.func @forward_k0(%0: memref<?xf32>, %1: memref<8xf32>, %2: memref<?xf32>, %3: index, %4: index) attributes {xfuse.kernel, xfuse.parallel_dims = 3 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s0", xfuse.size_hints = [4 : i64, 6 : i64]} {
    %5 = arith.constant 0 : index
    %6 = arith.constant 1 : index
    %7 = arith.constant 8 : index
    %8 = arith.muli %4, %7 : index
    %9 = arith.constant 5.000000e-01 : f32
    %10 = arith.constant 0.707106769 : f32
    %11 = arith.constant 1.000000e+00 : f32
    %12 = arith.constant 2.000000e+00 : f32
    "scf.parallel"(%5, %5, %5, %3, %4, %7, %6, %6, %6) <{operandSegmentSizes = array<i32: 3, 3, 3, 0>}> ({
    ^bb0(%13: index, %14: index, %15: index):
      %16 = arith.muli %13, %8 : index
      %17 = arith.muli %14, %7 : index
      %18 = arith.addi %16, %17 : index
      %19 = arith.addi %18, %15 : index
      %20 = memref.load %0[%19] : memref<?xf32>
      %21 = memref.load %1[%15] : memref<8xf32>
      %22 = arith.addf %20, %21 : f32
      %23 = arith.mulf %22, %9 : f32
      %24 = arith.mulf %22, %10 : f32
      %25 = math.erf %24 : f32
      %26 = arith.addf %25, %11 : f32
      %27 = arith.mulf %23, %26 : f32
      %28 = arith.mulf %27, %12 : f32
      memref.store %28, %2[%19] : memref<?xf32>
      scf.reduce
    }) : (index, index, index, index, index, index, index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": -1, "items_sizes": "items = (8 * s0 * s1) floordiv 4", "kernel": "forward_k0", "size_args": ["s0", "s1"], "strategy": "elementwise"}
// CHECK:      .visible .entry forward_k0(
// CHECK-NEXT:   .param .u64 .ptr .align 16 forward_k0_param_0,
// CHECK-NEXT:   .param .u64 .ptr .align 16 forward_k0_param_1,
// CHECK-NEXT:   .param .u64 .ptr .align 16 forward_k0_param_2,
// CHECK-NEXT:   .param .u64 forward_k0_param_3,
// CHECK-NEXT:   .param .u64 forward_k0_param_4
// CHECK-NEXT: )
// CHECK:      .maxntid 256
// CHECK-DAG:  ld.param.b64 %[[S1:rd[0-9]+]], [forward_k0_param_4];
// CHECK-DAG:  ld.param.b64 %[[S0:rd[0-9]+]], [forward_k0_param_3];
// CHECK:      mul.lo.s64 %[[S01:rd[0-9]+]], %[[S0]], %[[S1]];
// CHECK-NEXT: shl.b64 %[[N:rd[0-9]+]], %[[S01]], 1;
// CHECK:      mad.lo.s32 %[[GTID:r[0-9]+]], %{{r[0-9]+}}, %{{r[0-9]+}}, %{{r[0-9]+}};
// CHECK-NEXT: cvt.u64.u32 %[[POS:rd[0-9]+]], %[[GTID]];
// CHECK-NEXT: setp.le.s64 %{{p[0-9]+}}, %[[N]], %[[POS]];
// CHECK:      mov.u32 %{{r[0-9]+}}, %nctaid.x;
// CHECK-NEXT: mul.lo.s32 %{{r[0-9]+}}, %{{r[0-9]+}}, %{{r[0-9]+}};
// CHECK:      st.global.v4.b32
// CHECK:      setp.lt.s64 %{{p[0-9]+}}, %{{rd[0-9]+}}, %[[N]];
// CHECK:      ld.global.nc.v4.b32
// CHECK:      ld.global.nc.v4.b32
// CHECK-NOT:  st.global

// NODIV-NOT:  {{div|rem}}.
// NODIV-NOT:  2147483647
