// RUN: xfuse-opt %s --split-input-file -p fuse-greedy,lower-to-loops | filecheck %s

// A kernel of a group with symbolic sizes takes its input size symbols as index arguments
// after its buffers (`xfuse.size_args`, their hints `xfuse.size_hints`); a buffer with a
// dynamic dim is a 1-D memref<?xT> read at a linear offset; the row loop runs to the runtime
// size, the mean divides by the runtime count (here static: 8).

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %b: tensor<8xf32>) -> tensor<?xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096]>} {
  %0 = graph.add %x, %b : tensor<?x8xf32, #graph.syms<s0>>, tensor<8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.relu %0 : tensor<?x8xf32, #graph.syms<s0>>
  %2 = graph.reduce_mean %1 dims = [1] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s0>>
  func.return %2 : tensor<?xf32, #graph.syms<s0>>
}

// CHECK:      %0 = fusion.launch @forward_k0(%x, %b) : (tensor<?x8xf32, #graph.syms<s0>>, tensor<8xf32>) -> tensor<?xf32, #graph.syms<s0>>
// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<8xf32>, %2: memref<?xf32>, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [4 : i64]} {
// CHECK:        %[[C0:.*]] = arith.constant 0 : index
// CHECK:        %[[C1:.*]] = arith.constant 1 : index
// CHECK:        %[[C8:.*]] = arith.constant 8 : index
// CHECK:        "scf.parallel"(%[[C0]], %3, %[[C1]])
// CHECK-NEXT:   ^bb0(%[[ROW:.*]]: index):
// CHECK-NEXT:     %{{.*}} = scf.for %[[COL:.*]] = %[[C0]] to %[[C8]] step %[[C1]]
// CHECK-NEXT:       %[[BASE:.*]] = arith.muli %[[ROW]], %[[C8]] : index
// CHECK-NEXT:       %[[AT:.*]] = arith.addi %[[BASE]], %[[COL]] : index
// CHECK-NEXT:       %{{.*}} = memref.load %0[%[[AT]]] : memref<?xf32>
// CHECK-NEXT:       %{{.*}} = memref.load %1[%[[COL]]] : memref<8xf32>
// CHECK:          memref.store %{{.*}}, %2[%[[ROW]]] : memref<?xf32>

// -----

// A reduction over a symbolic dim: its loop runs to the size argument s1, the mean divides by
// s1 converted once in the entry block; the row stride is s1.

func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>) -> tensor<?x1xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 1) hint 6>} {
  %0 = graph.exp %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  %1 = graph.reduce_mean %0 dims = [1] keepdim : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x1xf32, #graph.syms<s0>>
  func.return %1 : tensor<?x1xf32, #graph.syms<s0>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s0", xfuse.size_hints = [4 : i64, 6 : i64]} {
// CHECK:        %[[N:.*]] = arith.index_cast %3 : index to i64
// CHECK-NEXT:   %[[COUNT:.*]] = arith.sitofp %[[N]] : i64 to f32
// CHECK-NEXT:   "scf.parallel"(%{{.*}}, %2, %{{.*}})
// CHECK-NEXT:   ^bb0(%[[ROW:.*]]: index):
// CHECK-NEXT:     %[[BASE:.*]] = arith.muli %[[ROW]], %3 : index
// CHECK-NEXT:     %[[SUM:.*]] = scf.for %[[COL:.*]] = %{{.*}} to %3 step
// CHECK-NEXT:       arith.addi %[[BASE]], %[[COL]] : index
// CHECK:          arith.divf %[[SUM]], %[[COUNT]] : f32

// -----

// A derived symbol (s2 = 8 * s0) is computed in the kernel from its input symbol; a reshape
// whose symbolic dims are leading keeps static strides and its index folds away.

func.func @forward(%y: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?xf32, #graph.syms<s2>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s2 = 8 * s0>} {
  %0 = graph.reshape %y : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s2>>
  %1 = graph.neg %0 : tensor<?xf32, #graph.syms<s2>>
  func.return %1 : tensor<?xf32, #graph.syms<s2>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s2", xfuse.size_hints = [4 : i64]} {
// CHECK:        %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[S2:.*]] = arith.muli %2, %[[C8]] : index
// CHECK-NEXT:   "scf.parallel"(%{{.*}}, %[[S2]], %{{.*}})
// CHECK-NEXT:   ^bb0(%[[I:.*]]: index):
// CHECK-NEXT:     %{{.*}} = memref.load %0[%[[I]]] : memref<?xf32>
// CHECK-NEXT:     %[[V:.*]] = arith.negf
// CHECK-NEXT:     memref.store %[[V]], %1[%[[I]]] : memref<?xf32>

// -----

// A floor division symbol (e0 = (s0 + 1) floordiv 2, a stride-2 pooling's output size) is
// computed in the kernel from its input symbol: its dividend is never negative (canonical
// form), so an unsigned division floors it.

func.func @forward(%y: tensor<?x2xf32, #graph.syms<e0>>, %x: tensor<?xf32, #graph.syms<s0>>) -> tensor<?x2xf32, #graph.syms<e0>> attributes {graph.sizes = #graph.sizes<s0 = input(1, 0) hint 9, e0 = (s0 + 1) floordiv 2>} {
  %0 = graph.neg %y : tensor<?x2xf32, #graph.syms<e0>>
  func.return %0 : tensor<?x2xf32, #graph.syms<e0>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "e0", xfuse.size_hints = [9 : i64]} {
// CHECK:        %[[C1:.*]] = arith.constant 1 : index
// CHECK-NEXT:   %[[N:.*]] = arith.addi %[[C1]], %2 : index
// CHECK-NEXT:   %[[C2:.*]] = arith.constant 2 : index
// CHECK-NEXT:   %[[E0:.*]] = arith.divui %[[N]], %[[C2]] : index
// CHECK-NEXT:   "scf.parallel"(%{{.*}}, %{{.*}}, %[[E0]], %{{.*}}

// -----

// A transpose of two symbols: the strides are the runtime sizes (s1 to read, s0 to write).

func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>) -> tensor<?x?xf32, #graph.syms<s1, s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 1) hint 6>} {
  %0 = graph.permute %x perm = [1, 0] : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x?xf32, #graph.syms<s1, s0>>
  %1 = graph.neg %0 : tensor<?x?xf32, #graph.syms<s1, s0>>
  func.return %1 : tensor<?x?xf32, #graph.syms<s1, s0>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s1", xfuse.size_hints = [4 : i64, 6 : i64]} {
// CHECK:        "scf.parallel"(%{{.*}}, %{{.*}}, %3, %2, %{{.*}}, %{{.*}})
// CHECK-NEXT:   ^bb0(%[[I:.*]]: index, %[[J:.*]]: index):
// CHECK-NEXT:     %[[R:.*]] = arith.muli %[[J]], %3 : index
// CHECK-NEXT:     %[[AT:.*]] = arith.addi %[[R]], %[[I]] : index
// CHECK-NEXT:     memref.load %0[%[[AT]]] : memref<?xf32>
// CHECK:          %[[W:.*]] = arith.muli %[[I]], %2 : index
// CHECK-NEXT:     %[[TO:.*]] = arith.addi %[[W]], %[[J]] : index
// CHECK-NEXT:     memref.store %{{.*}}, %1[%[[TO]]] : memref<?xf32>

// -----

// A concatenation along a symbolic dim: the second input's offset is the runtime size s0, the
// loop runs to s1 = s0 + 3 (computed in the entry block), and an element is read from the
// input its index falls in, at the index less the offset.

func.func @forward(%x: tensor<?x4xf32, #graph.syms<s0>>, %y: tensor<3x4xf32>) -> tensor<?x4xf32, #graph.syms<s1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 5 range [2, 64], s1 = s0 + 3>} {
  %0 = graph.exp %x : tensor<?x4xf32, #graph.syms<s0>>
  %1 = graph.concat %0, %y dim = 0 : tensor<?x4xf32, #graph.syms<s0>>, tensor<3x4xf32> -> tensor<?x4xf32, #graph.syms<s1>>
  func.return %1 : tensor<?x4xf32, #graph.syms<s1>>
}

// CHECK:      func.func @forward_k0(%0: memref<3x4xf32>, %1: memref<?xf32>, %2: memref<?xf32>, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s1", xfuse.size_hints = [5 : i64]} {
// CHECK:        %[[S1:.*]] = arith.addi %{{.*}}, %3 : index
// CHECK:        "scf.parallel"(%{{.*}}, %{{.*}}, %[[S1]],
// CHECK-NEXT:   ^bb0(%[[ROW:.*]]: index, %[[COL:.*]]: index):
// CHECK-NEXT:     %[[FIRST:.*]] = arith.cmpi ult, %[[ROW]], %3 : index
// CHECK:          %[[MINUS:.*]] = arith.muli %3, %{{.*}} : index
// CHECK-NEXT:     %[[SHIFTED:.*]] = arith.addi %[[ROW]], %[[MINUS]] : index
// CHECK-NEXT:     %{{.*}} = scf.if %[[FIRST]] -> (f32) {
// CHECK-NEXT:       %{{.*}} = memref.load %1[%{{.*}}] : memref<?xf32>
// CHECK-NEXT:       %{{.*}} = math.exp
// CHECK:          } else {
// CHECK-NEXT:       %{{.*}} = memref.load %0[%[[SHIFTED]], %[[COL]]] : memref<3x4xf32>

// -----

// A flip of a symbolic dim: element i reads element s0 - 1 - i, at the linear offset
// 8 * (s0 - 1 - i) + j of the runtime size s0.

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 64]>} {
  %0 = graph.flip %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>>
  func.return %0 : tensor<?x8xf32, #graph.syms<s0>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [4 : i64]} {
// CHECK:        %[[C8:.*]] = arith.constant 8 : index
// CHECK-NEXT:   %[[M8:.*]] = arith.constant -8 : index
// CHECK:        ^bb0(%[[ROW:.*]]: index, %[[COL:.*]]: index):
// CHECK-NEXT:     %[[DOWN:.*]] = arith.muli %[[ROW]], %[[M8]] : index
// CHECK-NEXT:     %[[A:.*]] = arith.addi %[[DOWN]], %[[COL]] : index
// CHECK-NEXT:     %[[END:.*]] = arith.muli %2, %[[C8]] : index
// CHECK-NEXT:     %[[B:.*]] = arith.addi %[[A]], %[[END]] : index
// CHECK-NEXT:     %[[AT:.*]] = arith.addi %[[B]], %[[M8]] : index
// CHECK-NEXT:     %{{.*}} = memref.load %0[%[[AT]]] : memref<?xf32>

// -----

// A reshape with a symbolic dim after the first (a flatten of [s0, s1, 2] to [s2, 2]): the
// result's element at linear offset 2 * i + j reads the input's at the same offset, the
// divisions and moduli by s1 folded back to it.

func.func @forward(%x: tensor<?x?x2xf32, #graph.syms<s0, s1>>) -> tensor<?x2xf32, #graph.syms<s2>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 1) hint 6, s2 = s0 * s1>} {
  %0 = graph.exp %x : tensor<?x?x2xf32, #graph.syms<s0, s1>>
  %1 = graph.reshape %0 : tensor<?x?x2xf32, #graph.syms<s0, s1>> -> tensor<?x2xf32, #graph.syms<s2>>
  %2 = graph.sin %1 : tensor<?x2xf32, #graph.syms<s2>>
  func.return %2 : tensor<?x2xf32, #graph.syms<s2>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index, %3: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0", "s1"], xfuse.extent = "s2", xfuse.size_hints = [4 : i64, 6 : i64]} {
// CHECK:        %[[S2:.*]] = arith.muli %2, %3 : index
// CHECK:        "scf.parallel"(%{{.*}}, %{{.*}}, %[[S2]],
// CHECK-NEXT:   ^bb0(%[[ROW:.*]]: index, %[[COL:.*]]: index):
// CHECK-NEXT:     %[[BASE:.*]] = arith.muli %[[ROW]], %{{.*}} : index
// CHECK-NEXT:     %[[AT:.*]] = arith.addi %[[BASE]], %[[COL]] : index
// CHECK-NEXT:     %{{.*}} = memref.load %0[%[[AT]]] : memref<?xf32>
// CHECK-NOT:      arith.divui
// CHECK:          memref.store %{{.*}}, %1[%[[AT]]] : memref<?xf32>

// -----

// A group that sums over its symbolic dim and yields its value transposed ([8, s0] of an
// [s0, 8] group): the loop over the column's elements writes element (i, j) at (j, i) of the
// transposed output, offset j * s0 + i, as it sums.

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> (tensor<8xf32>, tensor<8x?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096]>} {
  %0 = graph.exp %x : tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.reduce_sum %0 dims = [0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8xf32>
  %2 = graph.permute %0 perm = [1, 0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8x?xf32, #graph.syms<s0>>
  func.return %1, %2 : tensor<8xf32>, tensor<8x?xf32, #graph.syms<s0>>
}

// CHECK:      %{{.*}}, %{{.*}} = fusion.launch @forward_k0(%x) : (tensor<?x8xf32, #graph.syms<s0>>) -> (tensor<8x?xf32, #graph.syms<s0>>, tensor<8xf32>)
// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: memref<8xf32>, %3: index)
// CHECK:        "scf.parallel"
// CHECK-NEXT:   ^bb0(%[[COL:.*]]: index):
// CHECK-NEXT:     %[[BASE:.*]] = arith.muli %[[COL]], %3 : index
// CHECK-NEXT:     %[[SUM:.*]] = scf.for %[[ROW:.*]] = %{{.*}} to %3 step
// CHECK:            %[[AT:.*]] = arith.addi %[[BASE]], %[[ROW]] : index
// CHECK-NEXT:       memref.store %{{.*}}, %1[%[[AT]]] : memref<?xf32>
// CHECK:          memref.store %[[SUM]], %2[%[[COL]]] : memref<8xf32>

// -----

// A padding up to the result's dim (`open_high`: Swin's padding of s0 rows up to a multiple of
// 7, e1 = 7 * ceil(s0 / 7)): the row loop runs to e1, computed in the kernel from s0; a row
// at or past s0 reads the clamped last row and selects the fill.

func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<?x8xf32, #graph.syms<e1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 9 range [2, 4096], e0 = (6 * s0) floordiv 7, e1 = 7 * s0 - 7 * e0>} {
  %0 = graph.pad %x low = [0, 0] high = [0, 0] open_high = [0] mode = "constant" value = 0.0 : f64 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?x8xf32, #graph.syms<e1>>
  %1 = graph.exp %0 : tensor<?x8xf32, #graph.syms<e1>>
  func.return %1 : tensor<?x8xf32, #graph.syms<e1>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xf32>, %1: memref<?xf32>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "e1", xfuse.size_hints = [9 : i64]} {
// CHECK:        %[[E1:.*]] = arith.addi %{{.*}}, %{{.*}} : index
// CHECK:        "scf.parallel"(%{{.*}}, %{{.*}}, %[[E1]], %{{.*}}, %{{.*}}, %{{.*}})
// CHECK-NEXT:   ^bb0(%[[ROW:.*]]: index, %[[COL:.*]]: index):
// CHECK-NEXT:     %[[INSIDE:.*]] = arith.cmpi slt, %[[ROW]], %2 : index
// CHECK-NEXT:     %[[LAST:.*]] = arith.addi %2, %{{.*}} : index
// CHECK-NEXT:     %[[AT:.*]] = arith.minsi %[[ROW]], %[[LAST]] : index
// CHECK:          %[[X:.*]] = memref.load %0[%{{.*}}] : memref<?xf32>
// CHECK-NEXT:     %{{.*}} = arith.select %[[INSIDE]], %[[X]], %{{.*}} : f32

// -----

// A size of the call read as a number (`x >= 7 * ((s0 + 6) floordiv 7) - 7`) is computed once
// in the entry block from the size arguments, as an i64.

func.func @forward(%x: tensor<?x8xi64, #graph.syms<s0>>) -> tensor<?x8xi1, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 9 range [2, 4096], e0 = (s0 + 6) floordiv 7>} {
  %0 = graph.size_value <7 * e0 - 7> : tensor<i64>
  %1 = graph.ge %x, %0 : tensor<?x8xi64, #graph.syms<s0>>, tensor<i64> -> tensor<?x8xi1, #graph.syms<s0>>
  func.return %1 : tensor<?x8xi1, #graph.syms<s0>>
}

// CHECK:      func.func @forward_k0(%0: memref<?xi64>, %1: memref<?xi8>, %2: index) attributes {xfuse.kernel, xfuse.parallel_dims = 2 : i64, xfuse.size_args = ["s0"], xfuse.extent = "s0", xfuse.size_hints = [9 : i64]} {
// CHECK:        %[[SUM:.*]] = arith.addi %{{.*}}, %2 : index
// CHECK-NEXT:   %[[SEVEN:.*]] = arith.constant 7 : index
// CHECK-NEXT:   %[[Q:.*]] = arith.divui %[[SUM]], %[[SEVEN]] : index
// CHECK-NEXT:   %[[PADDED:.*]] = arith.muli %[[Q]], %[[SEVEN]] : index
// CHECK-NEXT:   %[[N:.*]] = arith.addi %{{.*}}, %[[PADDED]] : index
// CHECK-NEXT:   %[[VALUE:.*]] = arith.index_cast %[[N]] : index to i64
// CHECK-NEXT:   "scf.parallel"
// CHECK:          %[[X:.*]] = memref.load %0[%{{.*}}] : memref<?xi64>
// CHECK-NEXT:     arith.cmpi sge, %[[X]], %[[VALUE]] : i64
