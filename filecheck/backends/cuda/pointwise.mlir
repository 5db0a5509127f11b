// RUN: python -m xfuse.backends.cuda %s | filecheck %s
// RUN: python -m xfuse.backends.cuda %s | filecheck %s --check-prefix=STORE
// gelu(x * w + b) * sigmoid(x) with w, b broadcast over rows: a grid-stride loop, one chunk
// of 4 floats per thread and step (the default `unroll=1`), 128-bit loads of x, w, b and
// 128-bit stores; libdevice's erff inlined.

builtin.module {
  func.func @pointwise(%x: memref<256x512xf32>, %w: memref<512xf32>, %b: memref<512xf32>, %y: memref<256x512xf32>) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %c512 = arith.constant 512 : index
    "scf.parallel"(%c0, %c0, %c256, %c512, %c1, %c1) <{operandSegmentSizes = array<i32: 2, 2, 2, 0>}> ({
    ^bb0(%i: index, %j: index):
      %xv = memref.load %x[%i, %j] : memref<256x512xf32>
      %wv = memref.load %w[%j] : memref<512xf32>
      %bv = memref.load %b[%j] : memref<512xf32>
      %t = arith.mulf %xv, %wv : f32
      %u = arith.addf %t, %bv : f32
      %half = arith.constant 0.5 : f32
      %one = arith.constant 1.0 : f32
      %rs2 = arith.constant 0.70710678 : f32
      %a = arith.mulf %u, %rs2 : f32
      %er = math.erf %a : f32
      %e1 = arith.addf %er, %one : f32
      %g0 = arith.mulf %u, %half : f32
      %g = arith.mulf %g0, %e1 : f32
      %nx = arith.negf %xv : f32
      %ex = math.exp %nx : f32
      %den = arith.addf %ex, %one : f32
      %sg = arith.divf %one, %den : f32
      %r = arith.mulf %g, %sg : f32
      memref.store %r, %y[%i, %j] : memref<256x512xf32>
      scf.reduce
    }) : (index, index, index, index, index, index) -> ()
    func.return
  }
}

// CHECK:      // xfuse-launch {"block": 256, "items": 32768, "kernel": "pointwise", "strategy": "elementwise"}
// CHECK:      .visible .entry pointwise(
// CHECK-NEXT: .param .u64 .ptr .align 16 pointwise_param_0
// CHECK:      mov.u32 {{.*}}, %ctaid.x;
// CHECK-COUNT-3: ld.global.nc.v4.b32
// CHECK-NOT:  ld.global
// STORE:      st.global.v4.b32
// STORE-NOT:  st.global.b32
