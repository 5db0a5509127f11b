// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @log_softmax(%x: tensor<2x3x5xf32>) -> tensor<2x3x5xf32> {
  %y = graph.log_softmax %x dim = 0 : tensor<2x3x5xf32>
  func.return %y : tensor<2x3x5xf32>
}

// CHECK-LABEL: func.func @log_softmax
// CHECK-NEXT:    %[[MAX:.*]] = graph.reduce_max %x dims = [0] keepdim : tensor<2x3x5xf32> -> tensor<1x3x5xf32>
// CHECK-NEXT:    %[[SHIFT:.*]] = graph.sub %x, %[[MAX]]
// CHECK-NEXT:    %[[EXP:.*]] = graph.exp %[[SHIFT]]
// CHECK-NEXT:    %[[SUM:.*]] = graph.reduce_sum %[[EXP]] dims = [0] keepdim
// CHECK-NEXT:    %[[LOG:.*]] = graph.log %[[SUM]] : tensor<1x3x5xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.sub %[[SHIFT]], %[[LOG]] : tensor<2x3x5xf32>, tensor<1x3x5xf32> -> tensor<2x3x5xf32>
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-NOT:     graph.log_softmax
