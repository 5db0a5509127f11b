// RUN: xfuse-opt %s -p depthwise-stencil | filecheck %s
// RUN: xfuse-opt %s -p depthwise-stencil,fuse-greedy,lower-to-loops | filecheck %s --check-prefix=LOOPS

// A batch of any size: the pad leaves the symbolic batch unpadded (its size symbol stays),
// the window slices keep it whole. The pad's kernel reads the batch at its own position and
// guards only the padded height and width (two compares each); the taps' kernel reads it.
func.func @forward(%x: tensor<?x4x6x6xf32, #graph.syms<s0>>, %w: tensor<4x1x3x3xf32>) -> tensor<?x4x6x6xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 2 range [2, 64]>} {
  %y = graph.torch_call "aten.convolution.default"(%x, %w) args = ["%t0", "%t1", none, [1 : i64, 1 : i64], [1 : i64, 1 : i64], [1 : i64, 1 : i64], false, [0 : i64, 0 : i64], 4 : i64] kwargs = {} : (tensor<?x4x6x6xf32, #graph.syms<s0>>, tensor<4x1x3x3xf32>) -> tensor<?x4x6x6xf32, #graph.syms<s0>>
  func.return %y : tensor<?x4x6x6xf32, #graph.syms<s0>>
}

// CHECK-LABEL: func.func @forward
// CHECK:         %[[P:.*]] = graph.pad %x low = [0, 0, 1, 1] high = [0, 0, 1, 1] mode = "constant" value = 0.000000e+00 : f64 : tensor<?x4x6x6xf32, #graph.syms<s0>> -> tensor<?x4x8x8xf32, #graph.syms<s0>>
// CHECK:         graph.slice %[[P]] start = [0, 0, 0, 0] limit = [-1, 4, 6, 6] stride = [1, 1, 1, 1] : tensor<?x4x8x8xf32, #graph.syms<s0>> -> tensor<?x4x6x6xf32, #graph.syms<s0>>
// CHECK:         func.return %{{.*}} : tensor<?x4x6x6xf32, #graph.syms<s0>>
// CHECK-NOT:     graph.torch_call

// LOOPS:       func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index) attributes {xfuse.kernel
// LOOPS-SAME:    xfuse.size_args = ["s0"]
// LOOPS-COUNT-4: arith.cmpi
// LOOPS-NOT:     arith.cmpi
// LOOPS:         arith.select
// LOOPS:       func.func @forward_k1(%0: memref<?xf32>, %1: memref<4x1x3x3xf32>, %2: memref<?xf32>, %3: index)
// LOOPS-NOT:     graph.
