// RUN: xfuse-opt %s -p decompose | filecheck %s

func.func @gelu(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = graph.gelu %x approximate = "none" : tensor<4xf32>
  func.return %y : tensor<4xf32>
}

func.func @gelu_tanh(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = graph.gelu %x approximate = "tanh" : tensor<4xf32>
  func.return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @gelu
// CHECK-NEXT:    %[[K:.*]] = graph.constant dense<0.707106769> : tensor<f32>
// CHECK-NEXT:    %[[XK:.*]] = graph.mul %x, %[[K]]
// CHECK-NEXT:    %[[ERF:.*]] = graph.erf %[[XK]]
// CHECK-NEXT:    %[[ONE:.*]] = graph.constant dense<1.000000e+00>
// CHECK-NEXT:    %[[P:.*]] = graph.add %[[ERF]], %[[ONE]]
// CHECK-NEXT:    %[[HALF:.*]] = graph.constant dense<5.000000e-01>
// CHECK-NEXT:    %[[HX:.*]] = graph.mul %x, %[[HALF]]
// CHECK-NEXT:    %[[Y:.*]] = graph.mul %[[HX]], %[[P]]
// CHECK-NEXT:    func.return %[[Y]]

// CHECK-LABEL: func.func @gelu_tanh
// CHECK:         graph.constant dense<4.471500e-02>
// CHECK:         graph.constant dense<0.797884583>
// CHECK:         graph.tanh
// CHECK-NOT:     graph.erf
// CHECK-NOT:     graph.gelu
