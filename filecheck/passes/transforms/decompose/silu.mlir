// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @silu(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %y = graph.silu %x : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @silu
// CHECK-NEXT:    %[[S:.*]] = graph.sigmoid %x : tensor<4x8xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %x, %[[S]] : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    func.return %[[Y]]
// CHECK-NOT:     graph.silu
