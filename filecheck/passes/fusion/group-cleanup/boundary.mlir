// RUN: xfuse-opt %s -p group-cleanup | filecheck %s

// An output that passes an input through is replaced by the input; duplicate outputs become
// one; a group nothing reads is erased.
func.func @forward(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %p, %n1, %n2 = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %n = graph.neg %a : tensor<4xf32>
    fusion.yield %a, %n, %n : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  %dead = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %e = graph.exp %a : tensor<4xf32>
    fusion.yield %e : tensor<4xf32>
  }
  func.return %p, %n1, %n2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// CHECK:       %[[G:.*]] = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> tensor<4xf32> {
// CHECK-NEXT:  ^bb0(%[[A:.*]]: tensor<4xf32>):
// CHECK-NEXT:    %[[N:.*]] = graph.neg %[[A]]
// CHECK-NEXT:    fusion.yield %[[N]] : tensor<4xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  func.return %x, %[[G]], %[[G]]

// With an op that may write memory in the function, tensors are not shared between outputs:
// only dead code and unused inputs/outputs go.
func.func @mutating(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %n1, %n2 = fusion.group(%x) kind = "elementwise" rule = "fuse-greedy:sibling" : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  ^bb0(%a: tensor<4xf32>):
    %n = graph.neg %a : tensor<4xf32>
    %m = graph.neg %a : tensor<4xf32>
    fusion.yield %n, %m : tensor<4xf32>, tensor<4xf32>
  }
  %r = graph.torch_call "aten.relu_.default"(%n1) args = ["%t0"] kwargs = {} : (tensor<4xf32>) -> tensor<4xf32>
  func.return %r, %n2 : tensor<4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @mutating
// CHECK:         graph.neg
// CHECK-NEXT:    graph.neg
// CHECK-NEXT:    fusion.yield %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<4xf32>
