// RUN: xfuse-opt %s -p split-reductions | filecheck %s

// A mean is a sum in both stages, divided by the full length once at the end; an f16 mean
// is computed in f32 and rounded once (lower-to-loops accumulates f16 in f32 too).

func.func @mean(%x: tensor<65536xf32>) -> tensor<f32> {
  %y = graph.reduce_mean %x dims = [0] : tensor<65536xf32> -> tensor<f32>
  func.return %y : tensor<f32>
}

func.func @mean_f16(%x: tensor<65536xf16>) -> tensor<f16> {
  %y = graph.reduce_mean %x dims = [0] : tensor<65536xf16> -> tensor<f16>
  func.return %y : tensor<f16>
}

// CHECK-LABEL: func.func @mean
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<65536xf32> -> tensor<256x256xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [1] : tensor<256x256xf32> -> tensor<256xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<256xf32> -> tensor<f32>
// CHECK-NEXT:    %[[N:.*]] = graph.constant dense<6.553600e+04> : tensor<f32>
// CHECK-NEXT:    %[[Y:.*]] = graph.div %[[S]], %[[N]] : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f32>

// CHECK-LABEL: func.func @mean_f16
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<65536xf16> -> tensor<256x256xf16>
// CHECK-NEXT:    %[[X:.*]] = graph.cast %[[R]] : tensor<256x256xf16> to tensor<256x256xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[X]] dims = [1] : tensor<256x256xf32> -> tensor<256xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<256xf32> -> tensor<f32>
// CHECK-NEXT:    %[[N:.*]] = graph.constant dense<6.553600e+04> : tensor<f32>
// CHECK-NEXT:    %[[M:.*]] = graph.div %[[S]], %[[N]] : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT:    %[[Y:.*]] = graph.cast %[[M]] : tensor<f32> to tensor<f16>
// CHECK-NEXT:    func.return %[[Y]] : tensor<f16>
