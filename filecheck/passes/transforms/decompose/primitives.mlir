// RUN: xfuse-opt %s -p decompose | filecheck %s

// Primitive ops are left as they are.

func.func @primitives(%x: tensor<4x8xf32>, %y: tensor<8xf32>) -> tensor<4xf32> {
  %s = graph.add %x, %y : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %m = graph.reduce_max %s dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  func.return %m : tensor<4xf32>
}

// CHECK-LABEL: func.func @primitives
// CHECK-NEXT:    %s = graph.add %x, %y : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
// CHECK-NEXT:    %m = graph.reduce_max %s dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
// CHECK-NEXT:    func.return %m : tensor<4xf32>
