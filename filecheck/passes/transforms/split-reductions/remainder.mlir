// RUN: xfuse-opt %s -p split-reductions | filecheck %s

// A length without a divisor near its square root (a prime): B rows of C = round(sqrt(L))
// elements, and the L - B * C remaining elements reduced on their own and combined with the
// result (the identity-padded alternative would put a branch in every row's loop).

func.func @sum_prime(%x: tensor<2x65537xf32>) -> tensor<2xf32> {
  %y = graph.reduce_sum %x dims = [1] : tensor<2x65537xf32> -> tensor<2xf32>
  func.return %y : tensor<2xf32>
}

func.func @max_prime(%x: tensor<65537xf32>) -> tensor<f32> {
  %y = graph.reduce_max %x dims = [0] : tensor<65537xf32> -> tensor<f32>
  func.return %y : tensor<f32>
}

// CHECK-LABEL: func.func @sum_prime
// CHECK-NEXT:    %[[MAIN:.*]] = graph.slice %x start = [0, 0] limit = [2, 65536] stride = [1, 1] : tensor<2x65537xf32> -> tensor<2x65536xf32>
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %[[MAIN]] : tensor<2x65536xf32> -> tensor<2x256x256xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [2] : tensor<2x256x256xf32> -> tensor<2x256xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[P]] dims = [1] : tensor<2x256xf32> -> tensor<2xf32>
// CHECK-NEXT:    %[[REST:.*]] = graph.slice %x start = [0, 65536] limit = [2, 65537] stride = [1, 1] : tensor<2x65537xf32> -> tensor<2x1xf32>
// CHECK-NEXT:    %[[T:.*]] = graph.reduce_sum %[[REST]] dims = [1] : tensor<2x1xf32> -> tensor<2xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.add %[[S]], %[[T]] : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<2xf32>

// CHECK-LABEL: func.func @max_prime
// CHECK:         graph.reduce_max %{{.*}} dims = [1] : tensor<256x256xf32> -> tensor<256xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_max %{{.*}} dims = [0] : tensor<256xf32> -> tensor<f32>
// CHECK-NEXT:    %[[REST:.*]] = graph.slice %x start = [65536] limit = [65537] stride = [1] : tensor<65537xf32> -> tensor<1xf32>
// CHECK-NEXT:    %[[T:.*]] = graph.reduce_max %[[REST]] dims = [0] : tensor<1xf32> -> tensor<f32>
// CHECK-NEXT:    %[[Y:.*]] = graph.maximum %[[S]], %[[T]] : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f32>
