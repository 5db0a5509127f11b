// RUN: xfuse-opt %s -p lower-to-loops | filecheck %s

// A constant pad is a select between the element, loaded at a clamped address (no
// read outside the buffer ever), and the fill; only the sides an index can leave are tested.
// A pool's window is unrolled: each position's guard is decided at compile time where it can
// be (the middle element of this window is always inside), max starts from -inf.

// CHECK-LABEL: func.func @pad_k0
// CHECK:         %[[I:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK-NEXT:    %[[LO:.*]] = arith.cmpi sge, %[[I]], %{{.*}} : index
// CHECK-NEXT:    %[[HI:.*]] = arith.cmpi sle, %[[I]], %{{.*}} : index
// CHECK-NEXT:    %[[IN:.*]] = arith.andi %[[LO]], %[[HI]] : i1
// CHECK-NEXT:    %[[A:.*]] = arith.maxsi %[[I]], %{{.*}} : index
// CHECK-NEXT:    %[[B:.*]] = arith.minsi %[[A]], %{{.*}} : index
// CHECK-NEXT:    %[[X:.*]] = memref.load %{{.*}}[%{{.*}}, %[[B]]] : memref<4x6xf32>
// CHECK-NEXT:    %{{.*}} = arith.select %[[IN]], %[[X]], %{{.*}} : f32
func.func @pad(%x: tensor<4x6xf32>) -> tensor<4x9xf32> {
  %0 = graph.pad %x low = [0, 2] high = [0, 1] mode = "constant" value = 0.0 : f64 : tensor<4x6xf32> -> tensor<4x9xf32>
  func.return %0 : tensor<4x9xf32>
}

// CHECK-LABEL: func.func @maxpool_k0
// CHECK:         %[[NEGINF:.*]] = arith.constant 0xff800000 : f32
// CHECK:         arith.cmpi sge
// CHECK-NEXT:    arith.maxsi
// CHECK-NEXT:    memref.load
// CHECK-NEXT:    %[[S:.*]] = arith.select %{{.*}}, %{{.*}}, %[[NEGINF]] : f32
// CHECK-NEXT:    %[[M0:.*]] = arith.maximumf %[[NEGINF]], %[[S]] : f32
// CHECK-NEXT:    arith.muli
// CHECK-NEXT:    %[[X1:.*]] = memref.load
// CHECK-NEXT:    %[[M1:.*]] = arith.maximumf %[[M0]], %[[X1]] : f32
// CHECK-NOT:     arith.select
// CHECK:         arith.maximumf %[[M1]], %{{.*}} : f32
func.func @maxpool(%x: tensor<2x6xf32>) -> tensor<2x3xf32> {
  %0 = graph.pool %x kind = "max" kernel = [3] stride = [2] padding = [1] dilation = [1] : tensor<2x6xf32> -> tensor<2x3xf32>
  func.return %0 : tensor<2x3xf32>
}

// A window of more than 32 elements is an scf.for nest carrying the accumulator; the average
// divides by the window clipped to the input (count_include_pad off): only its start
// can leave the input here.
// CHECK-LABEL: func.func @avgpool_k0
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             arith.addf
// CHECK-NOT:     arith.minsi
// CHECK:         arith.maxsi
// CHECK:         arith.subi
// CHECK:         arith.sitofp
// CHECK:         arith.divf
func.func @avgpool(%x: tensor<2x12x12xf32>) -> tensor<2x3x3xf32> {
  %0 = graph.pool %x kind = "avg" kernel = [6, 6] stride = [4, 4] padding = [2, 2] dilation = [1, 1] : tensor<2x12x12xf32> -> tensor<2x3x3xf32>
  func.return %0 : tensor<2x3x3xf32>
}

// convolution-matmul's patches: element [oh, ow, c, i, j] is x[c, 2*oh + i - 1, 2*ow + j - 1],
// loaded at a clamped address and selected against 0; a window of stride 2 over 4 rows never
// passes the last one (2*1 + 2 - 1 = 3), so only the low side is tested.
// CHECK-LABEL: func.func @patches_k0
// CHECK:         ^bb0(%[[OH:.*]]: index, %[[OW:.*]]: index, %[[C:.*]]: index, %[[I:.*]]: index, %[[J:.*]]: index):
// CHECK-NEXT:      %[[A:.*]] = arith.muli %[[OH]], %{{.*}} : index
// CHECK-NEXT:      %[[B:.*]] = arith.addi %[[A]], %[[I]] : index
// CHECK-NEXT:      %[[H:.*]] = arith.addi %[[B]], %{{.*}} : index
// CHECK-NEXT:      %[[HIN:.*]] = arith.cmpi sge, %[[H]], %{{.*}} : index
// CHECK:           %[[WIN:.*]] = arith.cmpi sge, %{{.*}}, %{{.*}} : index
// CHECK-NOT:       arith.cmpi sle
// CHECK:           %[[X:.*]] = memref.load %{{.*}}[%[[C]], %{{.*}}, %{{.*}}] : memref<2x4x4xf32>
// CHECK-NEXT:      %[[IN:.*]] = arith.andi %[[HIN]], %[[WIN]] : i1
// CHECK-NEXT:      %[[V:.*]] = arith.select %[[IN]], %[[X]], %{{.*}} : f32
// CHECK-NEXT:      memref.store %[[V]], %{{.*}}[%[[OH]], %[[OW]], %[[C]], %[[I]], %[[J]]] : memref<2x2x2x3x3xf32>
func.func @patches(%x: tensor<2x4x4xf32>) -> tensor<2x2x2x3x3xf32> {
  %0 = graph.patches %x kernel = [3, 3] stride = [2, 2] padding = [1, 1] : tensor<2x4x4xf32> -> tensor<2x2x2x3x3xf32>
  func.return %0 : tensor<2x2x2x3x3xf32>
}

// A looped window walks the input's positions only, as eager's kernels do: each window loop
// runs from max(start, 0) to min(start + kernel, size), and its loads need no guard. A window
// larger than the input (AvgPool2d(40, ceil_mode=True) over 2x3) loops over the input, and
// its divisor (clipped to the input) is a constant.
// CHECK-LABEL: func.func @window_over_input_k0
// CHECK-DAG:     %[[C2:.*]] = arith.constant 2 : index
// CHECK-DAG:     %[[C3:.*]] = arith.constant 3 : index
// CHECK-DAG:     %[[SIX:.*]] = arith.constant 6.000000e+00 : f32
// CHECK:         scf.for %{{.*}} = %{{.*}} to %[[C2]]
// CHECK:           scf.for %{{.*}} = %{{.*}} to %[[C3]]
// CHECK-NOT:         arith.select
// CHECK:             memref.load
// CHECK:         arith.divf %{{.*}}, %[[SIX]]
func.func @window_over_input(%x: tensor<2x8x2x3xf32>) -> tensor<2x8x1x1xf32> {
  %0 = graph.pool %x kind = "avg" kernel = [40, 40] stride = [40, 40] padding = [0, 0] dilation = [1, 1] : tensor<2x8x2x3xf32> -> tensor<2x8x1x1xf32>
  func.return %0 : tensor<2x8x1x1xf32>
}

// With a dilation, the first position is the first tap inside the input:
// start + d * ceil(max(0, -start) / d), stepping by d up to min(start + (k - 1) * d + 1, size).
// CHECK-LABEL: func.func @dilated_window_k0
// CHECK-DAG:     %[[C2:.*]] = arith.constant 2 : index
// CHECK:         %[[SKIP:.*]] = arith.divui %{{.*}}, %[[C2]]
// CHECK:         scf.for
// CHECK:           scf.for %{{.*}} = %{{.*}} to %{{.*}} step %[[C2]] iter_args
// CHECK-NOT:         arith.select
// CHECK:             arith.maximumf
func.func @dilated_window(%x: tensor<1x9x10xf32>) -> tensor<1x4x2xf32> {
  %0 = graph.pool %x kind = "max" kernel = [6, 6] stride = [3, 3] padding = [3, 2] dilation = [1, 2] : tensor<1x9x10xf32> -> tensor<1x4x2xf32>
  func.return %0 : tensor<1x4x2xf32>
}
