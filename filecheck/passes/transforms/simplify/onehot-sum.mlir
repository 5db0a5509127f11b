// RUN: xfuse-opt %s -p simplify | filecheck %s

// The cross-entropy backward as AOTAutograd gives it: nll_loss's gradient, a one-hot of -1 at
// each row's label times the row's weight, summed over the classes by log_softmax's backward.
func.func @cross_entropy(%label: tensor<6x1xi64>, %w: tensor<6x1xf32>) -> tensor<6x1xf32> {
  %zeros = graph.constant dense<0.000000e+00> : tensor<6x37xf32>
  %minus = graph.constant dense<-1.000000e+00> : tensor<6x1xf32>
  %i = graph.broadcast_in_dim %label dims = [0, 1] : tensor<6x1xi64> -> tensor<6x37xi64>
  %iota = graph.iota dim = 1 start = 0 step = 1 : tensor<6x37xi64>
  %eq = graph.eq %i, %iota : tensor<6x37xi64>, tensor<6x37xi64> -> tensor<6x37xi1>
  %a = graph.broadcast_in_dim %minus dims = [0, 1] : tensor<6x1xf32> -> tensor<6x37xf32>
  %h = graph.where %eq, %a, %zeros : tensor<6x37xi1>, tensor<6x37xf32>, tensor<6x37xf32> -> tensor<6x37xf32>
  %t = graph.mul %h, %w : tensor<6x37xf32>, tensor<6x1xf32> -> tensor<6x37xf32>
  %s = graph.reduce_sum %t dims = [1] keepdim : tensor<6x37xf32> -> tensor<6x1xf32>
  func.return %s : tensor<6x1xf32>
}

// CHECK-LABEL: func.func @cross_entropy
// CHECK:         %[[MINUS:.*]] = graph.constant dense<-1.000000e+00> : tensor<6x1xf32>
// CHECK-NEXT:    %[[LO:.*]] = graph.constant dense<0> : tensor<i64>
// CHECK-NEXT:    %[[GE:.*]] = graph.ge %label, %[[LO]] : tensor<6x1xi64>, tensor<i64> -> tensor<6x1xi1>
// CHECK-NEXT:    %[[HI:.*]] = graph.constant dense<36> : tensor<i64>
// CHECK-NEXT:    %[[LE:.*]] = graph.le %label, %[[HI]] : tensor<6x1xi64>, tensor<i64> -> tensor<6x1xi1>
// CHECK-NEXT:    %[[IN:.*]] = graph.bitwise_and %[[GE]], %[[LE]] : tensor<6x1xi1>, tensor<6x1xi1> -> tensor<6x1xi1>
// CHECK-NEXT:    %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PICK:.*]] = graph.where %[[IN]], %[[MINUS]], %[[ZERO]] : tensor<6x1xi1>, tensor<6x1xf32>, tensor<f32> -> tensor<6x1xf32>
// CHECK-NEXT:    %[[T:.*]] = graph.mul %[[PICK]], %w : tensor<6x1xf32>, tensor<6x1xf32> -> tensor<6x1xf32>
// CHECK-NEXT:    %[[Z:.*]] = graph.mul %[[ZERO]], %w : tensor<f32>, tensor<6x1xf32> -> tensor<6x1xf32>
// CHECK-NEXT:    %[[NAN:.*]] = graph.add %[[T]], %[[Z]] : tensor<6x1xf32>, tensor<6x1xf32> -> tensor<6x1xf32>
// CHECK-NEXT:    %[[PLUS:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[S:.*]] = graph.add %[[NAN]], %[[PLUS]] : tensor<6x1xf32>, tensor<f32> -> tensor<6x1xf32>
// CHECK-NEXT:    func.return %[[S]] : tensor<6x1xf32>
// CHECK-NOT:     graph.reduce_sum

// Without keepdim: an iota of its own [V], counting from 3, on the left of the eq; the label
// broadcasts to the classes implicitly. No factor: the sum is the selected value, +0 for -0.
func.func @bare(%label: tensor<6x1xi64>, %a: tensor<6x1xf32>) -> tensor<6xf32> {
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %iota = graph.iota dim = 0 start = 3 step = 1 : tensor<37xi64>
  %eq = graph.eq %iota, %label : tensor<37xi64>, tensor<6x1xi64> -> tensor<6x37xi1>
  %h = graph.where %eq, %a, %zero : tensor<6x37xi1>, tensor<6x1xf32>, tensor<f32> -> tensor<6x37xf32>
  %s = graph.reduce_sum %h dims = [1] : tensor<6x37xf32> -> tensor<6xf32>
  func.return %s : tensor<6xf32>
}

// CHECK-LABEL: func.func @bare
// CHECK-NEXT:    %[[LO:.*]] = graph.constant dense<3> : tensor<i64>
// CHECK-NEXT:    %[[GE:.*]] = graph.ge %label, %[[LO]]
// CHECK-NEXT:    %[[HI:.*]] = graph.constant dense<39> : tensor<i64>
// CHECK-NEXT:    %[[LE:.*]] = graph.le %label, %[[HI]]
// CHECK-NEXT:    %[[IN:.*]] = graph.bitwise_and %[[GE]], %[[LE]]
// CHECK-NEXT:    %[[ZERO:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[PICK:.*]] = graph.where %[[IN]], %a, %[[ZERO]] : tensor<6x1xi1>, tensor<6x1xf32>, tensor<f32> -> tensor<6x1xf32>
// CHECK-NEXT:    %[[PLUS:.*]] = graph.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT:    %[[T:.*]] = graph.add %[[PICK]], %[[PLUS]]
// CHECK-NEXT:    %[[S:.*]] = graph.reshape %[[T]] : tensor<6x1xf32> -> tensor<6xf32>
// CHECK-NEXT:    func.return %[[S]] : tensor<6xf32>

// Left alone: the selected value varies along the classes (a gather), the iota counts by 2,
// and the sum runs over both dims.
func.func @kept(%label: tensor<6x1xi64>, %a: tensor<6x1xf32>, %x: tensor<6x37xf32>) -> (tensor<6x1xf32>, tensor<6x1xf32>, tensor<f32>) {
  %zero = graph.constant dense<0.000000e+00> : tensor<f32>
  %iota = graph.iota dim = 1 start = 0 step = 1 : tensor<6x37xi64>
  %eq = graph.eq %label, %iota : tensor<6x1xi64>, tensor<6x37xi64> -> tensor<6x37xi1>
  %g = graph.where %eq, %x, %zero : tensor<6x37xi1>, tensor<6x37xf32>, tensor<f32> -> tensor<6x37xf32>
  %s1 = graph.reduce_sum %g dims = [1] keepdim : tensor<6x37xf32> -> tensor<6x1xf32>
  %iota2 = graph.iota dim = 1 start = 0 step = 2 : tensor<6x37xi64>
  %eq2 = graph.eq %label, %iota2 : tensor<6x1xi64>, tensor<6x37xi64> -> tensor<6x37xi1>
  %h2 = graph.where %eq2, %a, %zero : tensor<6x37xi1>, tensor<6x1xf32>, tensor<f32> -> tensor<6x37xf32>
  %s2 = graph.reduce_sum %h2 dims = [1] keepdim : tensor<6x37xf32> -> tensor<6x1xf32>
  %h = graph.where %eq, %a, %zero : tensor<6x37xi1>, tensor<6x1xf32>, tensor<f32> -> tensor<6x37xf32>
  %s3 = graph.reduce_sum %h dims = [0, 1] : tensor<6x37xf32> -> tensor<f32>
  func.return %s1, %s2, %s3 : tensor<6x1xf32>, tensor<6x1xf32>, tensor<f32>
}

// CHECK-LABEL: func.func @kept
// CHECK:         graph.reduce_sum %{{.*}} dims = [1] keepdim
// CHECK:         graph.reduce_sum %{{.*}} dims = [1] keepdim
// CHECK:         graph.reduce_sum %{{.*}} dims = [0, 1]
