// RUN: not xfuse-opt %s --split-input-file 2>&1 | filecheck %s
// RUN: not xfuse-opt %s.missing 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: xfuse-opt %s --split-input-file --parsing-diagnostics --verify-diagnostics | filecheck %s --check-prefix=ALL

// Bad input stops xfuse-opt at the first error with one line, `file:line:col: error: ...`.

// CHECK: bad-input.mlir:[[# @LINE + 2]]:43: error: ')' expected
// CHECK-NOT: Traceback
func.func @syntax_error(%x: tensor<4xf32> -> {
  func.return
}

// -----

// ALL: bad-input.mlir:[[# @LINE + 2]]:25: error: Operation graph.frobnicate is not registered
func.func @unknown_op(%x: tensor<4xf32>) {
  %0 = graph.frobnicate %x : tensor<4xf32>
  func.return
}

// -----

// ALL: bad-input.mlir:[[# @LINE + 2]]:3: error: 'graph.add' op operand shapes [3] and [4] do not broadcast
func.func @shape_error(%x: tensor<3xf32>, %y: tensor<4xf32>) {
  %0 = graph.add %x, %y : tensor<3xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return
}

// -----

// ALL: bad-input.mlir:[[# @LINE + 2]]:3: error: tensor<*xf32> should be of base attribute tensor
func.func @unranked(%x: tensor<*xf32>) {
  %0 = graph.neg %x : tensor<*xf32>
  func.return
}

// MISSING: error: cannot read '{{.*}}bad-input.mlir.missing': No such file or directory
// MISSING-NOT: Traceback
