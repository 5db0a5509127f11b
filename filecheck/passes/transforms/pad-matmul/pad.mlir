// RUN: xfuse-opt %s -p 'pad-matmul{min-columns=8}' | filecheck %s

// A language model's head (x @ w^T, decomposed): its 13-row bf16 weight is padded as it lies
// to 16 rows, one linear reads it, and the result is sliced back to 13 columns. The program
// returns it: the slice is a group of its own, whose kernel writes the rows row-major.
func.func @head(%x: tensor<4x16xbf16>, %w: tensor<13x16xbf16>) -> tensor<4x13xbf16> {
  %wt = graph.permute %w perm = [1, 0] : tensor<13x16xbf16> -> tensor<16x13xbf16>
  %y = graph.matmul %x, %wt : tensor<4x16xbf16>, tensor<16x13xbf16> -> tensor<4x13xbf16>
  func.return %y : tensor<4x13xbf16>
}

// CHECK-LABEL: func.func @head
// CHECK-NEXT:    %[[P:.*]] = graph.pad %w low = [0, 0] high = [3, 0] mode = "constant" value = 0.000000e+00 : f64 : tensor<13x16xbf16> -> tensor<16x16xbf16>
// CHECK-NEXT:    %[[Y:.*]] = graph.linear %x, %[[P]] : tensor<4x16xbf16>, tensor<16x16xbf16> -> tensor<4x16xbf16>
// CHECK-NEXT:    %[[S:.*]] = fusion.group(%[[Y]]) kind = "injective" rule = "pad-matmul:returned" : (tensor<4x16xbf16>) -> tensor<4x13xbf16> {
// CHECK-NEXT:    ^bb0(%[[A:.*]]: tensor<4x16xbf16>):
// CHECK-NEXT:      %[[C:.*]] = graph.slice %[[A]] start = [0, 0] limit = [4, 13] stride = [1, 1] : tensor<4x16xbf16> -> tensor<4x13xbf16>
// CHECK-NEXT:      fusion.yield %[[C]]
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return %[[S]]

// A plain right-hand side gets zero columns; a linear's weight and bias get zero rows. Read
// by other ops, the products are sliced back by plain slices (which fuse with their readers).
func.func @plain(%x: tensor<2x4x16xf16>, %v: tensor<16x10xf16>, %w: tensor<10x16xf16>, %b: tensor<10xf16>) -> (tensor<2x4x10xf16>, tensor<2x4x10xf16>) {
  %y = graph.matmul %x, %v : tensor<2x4x16xf16>, tensor<16x10xf16> -> tensor<2x4x10xf16>
  %z = graph.linear %x, %w bias(%b : tensor<10xf16>) : tensor<2x4x16xf16>, tensor<10x16xf16> -> tensor<2x4x10xf16>
  %ry = graph.relu %y : tensor<2x4x10xf16>
  %rz = graph.relu %z : tensor<2x4x10xf16>
  func.return %ry, %rz : tensor<2x4x10xf16>, tensor<2x4x10xf16>
}

// CHECK-LABEL: func.func @plain
// CHECK-NEXT:    %[[P:.*]] = graph.pad %v low = [0, 0] high = [0, 6] {{.*}} -> tensor<16x16xf16>
// CHECK-NEXT:    %[[Y:.*]] = graph.matmul %x, %[[P]] : tensor<2x4x16xf16>, tensor<16x16xf16> -> tensor<2x4x16xf16>
// CHECK-NEXT:    %[[YS:.*]] = graph.slice %[[Y]] start = [0, 0, 0] limit = [2, 4, 10] stride = [1, 1, 1]
// CHECK-NEXT:    %[[PW:.*]] = graph.pad %w low = [0, 0] high = [6, 0] {{.*}} -> tensor<16x16xf16>
// CHECK-NEXT:    %[[PB:.*]] = graph.pad %b low = [0] high = [6] {{.*}} -> tensor<16xf16>
// CHECK-NEXT:    %[[Z:.*]] = graph.linear %x, %[[PW]] bias(%[[PB]] : tensor<16xf16>) : tensor<2x4x16xf16>, tensor<16x16xf16> -> tensor<2x4x16xf16>
// CHECK-NEXT:    %[[ZS:.*]] = graph.slice %[[Z]] start = [0, 0, 0] limit = [2, 4, 10] stride = [1, 1, 1]
// CHECK-NEXT:    %[[RY:.*]] = graph.relu %[[YS]]
// CHECK-NEXT:    %[[RZ:.*]] = graph.relu %[[ZS]]
// CHECK-NEXT:    func.return %[[RY]], %[[RZ]]

// Left alone: f32 (any row length runs fast), rows already a multiple of 8, rows shorter than
// min-columns.
func.func @kept(%x: tensor<4x16xf32>, %v: tensor<16x13xf32>, %x2: tensor<4x16xbf16>, %a: tensor<16x24xbf16>, %s: tensor<16x5xbf16>) -> (tensor<4x13xf32>, tensor<4x24xbf16>, tensor<4x5xbf16>) {
  %y = graph.matmul %x, %v : tensor<4x16xf32>, tensor<16x13xf32> -> tensor<4x13xf32>
  %z = graph.matmul %x2, %a : tensor<4x16xbf16>, tensor<16x24xbf16> -> tensor<4x24xbf16>
  %u = graph.matmul %x2, %s : tensor<4x16xbf16>, tensor<16x5xbf16> -> tensor<4x5xbf16>
  func.return %y, %z, %u : tensor<4x13xf32>, tensor<4x24xbf16>, tensor<4x5xbf16>
}

// CHECK-LABEL: func.func @kept
// CHECK-NOT:     graph.pad
// CHECK:         func.return
