// RUN: xfuse-opt %s -p decompose,split-reductions | filecheck %s
// RUN: xfuse-opt %s -p 'decompose,split-reductions{normalization-rows=0}' | filecheck %s --check-prefix=ALL
// RUN: xfuse-opt %s -p 'decompose,split-reductions{target=cuda}' | filecheck %s --check-prefix=ALL

// A normalization (the reduction's result meets its input again: softmax, layer/RMS norm)
// with at least `normalization-rows` rows (the target's: 8 on the CPU, 132 on CUDA) is left
// alone: fusion makes it one row kernel whose rows are parallel already. With fewer rows it is
// split like any other reduction.

func.func @softmax_8_rows(%x: tensor<8x131072xf32>) -> tensor<8x131072xf32> {
  %y = graph.softmax %x dim = 1 : tensor<8x131072xf32>
  func.return %y : tensor<8x131072xf32>
}

func.func @rms_norm_8_rows(%x: tensor<8x131072xf32>) -> tensor<8x131072xf32> {
  %y = graph.rms_norm %x rank = 1 eps = 1.0e-05 : tensor<8x131072xf32>
  func.return %y : tensor<8x131072xf32>
}

func.func @softmax_one_row(%x: tensor<1x131072xf32>) -> tensor<1x131072xf32> {
  %y = graph.softmax %x dim = 1 : tensor<1x131072xf32>
  func.return %y : tensor<1x131072xf32>
}

// CHECK-LABEL: func.func @softmax_8_rows
// CHECK-NOT:     graph.reshape
// CHECK:         graph.reduce_max %x dims = [1] keepdim : tensor<8x131072xf32> -> tensor<8x1xf32>
// CHECK-NOT:     graph.reshape
// CHECK:         graph.reduce_sum %{{.*}} dims = [1] keepdim : tensor<8x131072xf32> -> tensor<8x1xf32>

// CHECK-LABEL: func.func @rms_norm_8_rows
// CHECK:         graph.reduce_mean %{{.*}} dims = [1] keepdim : tensor<8x131072xf32> -> tensor<8x1xf32>

// CHECK-LABEL: func.func @softmax_one_row
// CHECK:         graph.reduce_max %{{.*}} dims = [2] : tensor<1x512x256xf32> -> tensor<1x512xf32>
// CHECK-NEXT:    graph.reduce_max %{{.*}} dims = [1] : tensor<1x512xf32> -> tensor<1xf32>
// CHECK:         graph.reduce_sum %{{.*}} dims = [2] : tensor<1x512x256xf32> -> tensor<1x512xf32>
// CHECK-NEXT:    graph.reduce_sum %{{.*}} dims = [1] : tensor<1x512xf32> -> tensor<1xf32>

// ALL-LABEL: func.func @softmax_8_rows
// ALL:         graph.reduce_max %{{.*}} dims = [2] : tensor<8x512x256xf32> -> tensor<8x512xf32>
// ALL-LABEL: func.func @rms_norm_8_rows
// ALL:         graph.reduce_sum %{{.*}} dims = [2] : tensor<8x512x256xf32> -> tensor<8x512xf32>
