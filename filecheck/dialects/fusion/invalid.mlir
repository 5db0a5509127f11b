// RUN: xfuse-opt %s --split-input-file --verify-diagnostics | filecheck %s

// One case per verifier message of the fusion dialect (xfuse/dialects/fusion.py), and the
// terminator check of its SingleBlockImplicitTerminator trait.

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'fusion.group' op expected the block arguments to have the input types (tensor<4xf32>), found (tensor<4xf16>)
func.func @f(%x: tensor<4xf32>) {
  %0 = fusion.group (%x) kind = "elementwise" rule = "test" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf16>):
    %b = graph.neg %a : tensor<4xf16>
    fusion.yield %b : tensor<4xf16>
  }
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'fusion.group' op expected fusion.yield to return the output types (tensor<4xf32>), found (tensor<4xf16>)
func.func @f(%x: tensor<4xf32>) {
  %0 = fusion.group (%x) kind = "elementwise" rule = "test" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %b = graph.cast %a : tensor<4xf32> to tensor<4xf16>
    fusion.yield %b : tensor<4xf16>
  }
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'fusion.group' op expected at least one output
func.func @f(%x: tensor<4xf32>) {
  fusion.group (%x) kind = "elementwise" rule = "test" : (tensor<4xf32>) -> () {
  ^bb0(%a: tensor<4xf32>):
    fusion.yield
  }
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'fusion.group' op 'fusion.group' terminates with operation test.termop instead of fusion.yield
func.func @f(%x: tensor<4xf32>) {
  %0 = fusion.group (%x) kind = "elementwise" rule = "test" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    "test.termop"() : () -> ()
  }
  func.return
}

// -----

// The group is isolated from above: its body cannot use %x directly.
// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'fusion.group' op Operation using value defined out of its IsolatedFromAbove parent
func.func @f(%x: tensor<4xf32>) {
  %0 = fusion.group () kind = "elementwise" rule = "test" : () -> tensor<4xf32> {
    %b = graph.neg %x : tensor<4xf32>
    fusion.yield %b : tensor<4xf32>
  }
  func.return
}

// -----

// CHECK: invalid.mlir:[[# @LINE + 2]]:3: error: 'fusion.yield' op {{.*}}fusion.group
func.func @f(%x: tensor<4xf32>) {
  fusion.yield %x : tensor<4xf32>
}
