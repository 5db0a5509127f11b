// RUN: xfuse-opt %s -p fuse-greedy | filecheck %s

// torch_call is opaque: a boundary. The in-place relu_ writes %x: the exp reading %x before
// it must not move below it, so %e stays apart from %y.
func.func @forward(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %e = graph.exp %x : tensor<4x8xf32>
  %r = graph.torch_call "aten.relu_.default"(%x) args = ["%t0"] kwargs = {} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = graph.torch_call "aten.cumsum.default"(%r) args = ["%t0", 1] kwargs = {} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = graph.neg %c : tensor<4x8xf32>
  %s = graph.sigmoid %n : tensor<4x8xf32>
  %y = graph.add %e, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %y, %s : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK:       %e = graph.exp %x
// CHECK-NEXT:  %r = graph.torch_call "aten.relu_.default"(%x)
// CHECK-NEXT:  %c = graph.torch_call "aten.cumsum.default"(%r)
// CHECK-NEXT:  %s = fusion.group(%c) kind = "elementwise"
// CHECK-NEXT:  ^bb0
// CHECK-NEXT:    graph.neg
// CHECK-NEXT:    graph.sigmoid
// CHECK-NEXT:    fusion.yield
// CHECK-NEXT:  }
// CHECK-NEXT:  %y = graph.add %e, %x
