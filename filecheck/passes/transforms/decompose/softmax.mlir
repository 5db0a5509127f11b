// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @softmax(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.softmax %x dim = 1 : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @softmax
// CHECK-NEXT:    %[[MAX:.*]] = graph.reduce_max %x dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[SHIFT:.*]] = graph.sub %x, %[[MAX]] : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %[[EXP:.*]] = graph.exp %[[SHIFT]] : tensor<4x8xf32>
// CHECK-NEXT:    %[[SUM:.*]] = graph.reduce_sum %[[EXP]] dims = [1] keepdim : tensor<4x8xf32> -> tensor<4x1xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.div %[[EXP]], %[[SUM]] : tensor<4x8xf32>, tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<4x8xf32>
// CHECK-NOT:     graph.softmax
