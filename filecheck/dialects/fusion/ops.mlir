// RUN: xfuse-opt %s | xfuse-opt | filecheck %s
// RUN: xfuse-opt %s --print-op-generic | xfuse-opt | filecheck %s
// RUN: xfuse-opt %s --print-op-generic | filecheck %s --check-prefix=GENERIC

// fusion.group (one and several outputs, extra provenance attributes), fusion.yield and
// fusion.launch, printed in their custom form and read back (also from the generic form).

// CHECK-LABEL: func.func @one_output
func.func @one_output(%x: tensor<4xf32>, %w: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: %{{.*}} = fusion.group(%x, %w) kind = "elementwise" rule = "fuse-greedy:producer-consumer" : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-NEXT: ^{{.*}}(%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>):
  // CHECK-NEXT:   %[[S:.*]] = graph.add %[[A]], %[[B]] : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  // CHECK-NEXT:   %[[R:.*]] = graph.relu %[[S]] : tensor<4xf32>
  // CHECK-NEXT:   fusion.yield %[[R]] : tensor<4xf32>
  // CHECK-NEXT: }
  %0 = fusion.group (%x, %w) kind = "elementwise" rule = "fuse-greedy:producer-consumer" : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>, %b: tensor<4xf32>):
    %s = graph.add %a, %b : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %r = graph.relu %s : tensor<4xf32>
    fusion.yield %r : tensor<4xf32>
  }
  func.return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @two_outputs
func.func @two_outputs(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  // CHECK-NEXT: %{{.*}}, %{{.*}} = fusion.group(%x) kind = "reduction" rule = "fuse-scored:shared-input" {fusion.score = 3 : i64} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  // CHECK:        fusion.yield %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x1xf32>
  // CHECK-NEXT: }
  %0:2 = fusion.group (%x) kind = "reduction" rule = "fuse-scored:shared-input" {fusion.score = 3 : i64} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>) {
  ^bb0(%a: tensor<4x8xf32>):
    %e = graph.exp %a : tensor<4x8xf32>
    %s = graph.reduce_sum %e dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
    fusion.yield %e, %s : tensor<4x8xf32>, tensor<4x1xf32>
  }
  func.return %0#0, %0#1 : tensor<4x8xf32>, tensor<4x1xf32>
}

// CHECK-LABEL: func.func @launch
func.func @launch(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK-NEXT: %{{.*}} = fusion.launch @kernel_0(%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = fusion.launch @kernel_0(%x, %w) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  func.return %0 : tensor<4x8xf32>
}

// GENERIC: "fusion.group"(%x, %w) <{kind = "elementwise", rule = "fuse-greedy:producer-consumer"}> ({
// GENERIC: "fusion.yield"(%{{.*}}) : (tensor<4xf32>) -> ()
// GENERIC: "fusion.launch"(%x, %w) <{callee = @kernel_0}> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
