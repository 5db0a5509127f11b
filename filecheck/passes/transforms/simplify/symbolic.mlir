// RUN: xfuse-opt %s -p simplify | filecheck %s

// Symbolic sizes (docs/dynamic-shapes.md): rows of a symbolic count, classes static. The
// selected value is broadcast from [s0, 1] and the factor is a scalar; without keepdim, the
// [s0, 1] result is reshaped to [s0].
func.func @forward(%label: tensor<?x1xi64, #graph.syms<s0>>, %a: tensor<?x1xf32, #graph.syms<s0>>, %w: tensor<f32>) -> tensor<?xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %iota = graph.iota dim = 1 start = 0 step = 1 : tensor<?x37xi64, #graph.syms<s0>>
  %eq = graph.eq %label, %iota : tensor<?x1xi64, #graph.syms<s0>>, tensor<?x37xi64, #graph.syms<s0>> -> tensor<?x37xi1, #graph.syms<s0>>
  %ab = graph.broadcast_in_dim %a dims = [0, 1] : tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x37xf32, #graph.syms<s0>>
  %h = graph.where %eq, %ab, %zero : tensor<?x37xi1, #graph.syms<s0>>, tensor<?x37xf32, #graph.syms<s0>>, tensor<f32> -> tensor<?x37xf32, #graph.syms<s0>>
  %m = graph.mul %w, %h : tensor<f32>, tensor<?x37xf32, #graph.syms<s0>> -> tensor<?x37xf32, #graph.syms<s0>>
  %s = graph.reduce_sum %m dims = [1] : tensor<?x37xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s0>>
  func.return %s : tensor<?xf32, #graph.syms<s0>>
}

// CHECK-LABEL: func.func @forward
// CHECK-NOT:     graph.iota
// CHECK:         %[[IN:.*]] = graph.bitwise_and %{{.*}}, %{{.*}} : tensor<?x1xi1, #graph.syms<s0>>, tensor<?x1xi1, #graph.syms<s0>> -> tensor<?x1xi1, #graph.syms<s0>>
// CHECK-NEXT:    %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PICK:.*]] = graph.where %[[IN]], %a, %[[ZERO]] : tensor<?x1xi1, #graph.syms<s0>>, tensor<?x1xf32, #graph.syms<s0>>, tensor<f32> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT:    %[[T:.*]] = graph.mul %w, %[[PICK]] : tensor<f32>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT:    %[[Z:.*]] = graph.mul %w, %[[ZERO]] : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT:    %[[NAN:.*]] = graph.add %[[T]], %[[Z]]
// CHECK-NEXT:    %[[PLUS:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[S:.*]] = graph.add %[[NAN]], %[[PLUS]] : tensor<?x1xf32, #graph.syms<s0>>, tensor<f32> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %[[S]] : tensor<?x1xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s0>>
// CHECK-NEXT:    func.return %[[R]] : tensor<?xf32, #graph.syms<s0>>

// The one-hot as torch's scatter (the importer's call where the count of labels is symbolic),
// over a symbolic count of classes: -1 at each label, times the row's weight. The scatter
// stays (it raises for a label outside the classes); the sum is -1 * w + 0 * w + 0.
func.func @scatter(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %label: tensor<?x1xi64, #graph.syms<s0>>, %w: tensor<?x1xf32, #graph.syms<s0>>) -> tensor<?x1xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 8, s1 = input(0, 1) hint 37>} {
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %zeros = graph.broadcast_in_dim %zero dims = [] : tensor<f32> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %h = graph.torch_call "aten.scatter.value"(%zeros, %label) args = ["%t0", 1 : i64, "%t1", -1.000000e+00 : f64] kwargs = {} : (tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x1xi64, #graph.syms<s0>>) -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %m = graph.mul %h, %w : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %s = graph.reduce_sum %m dims = [1] keepdim : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x1xf32, #graph.syms<s0>>
  func.return %s : tensor<?x1xf32, #graph.syms<s0>>
}

// CHECK-LABEL: func.func @scatter
// CHECK:         graph.torch_call "aten.scatter.value"
// CHECK-NEXT:    %[[V:.*]] = graph.constant dense<-1.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[T:.*]] = graph.mul %[[V]], %w : tensor<f32>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT:    %[[Z:.*]] = graph.mul %[[ZERO]], %w : tensor<f32>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x1xf32, #graph.syms<s0>>
// CHECK-NEXT:    %[[NAN:.*]] = graph.add %[[T]], %[[Z]]
// CHECK-NEXT:    %[[PLUS:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[S:.*]] = graph.add %[[NAN]], %[[PLUS]]
// CHECK-NEXT:    func.return %[[S]] : tensor<?x1xf32, #graph.syms<s0>>
