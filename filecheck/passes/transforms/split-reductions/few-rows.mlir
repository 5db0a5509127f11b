// RUN: xfuse-opt %s -p 'split-reductions{target=cuda}' | filecheck %s --check-prefix=CUDA
// RUN: xfuse-opt %s -p split-reductions | filecheck %s --check-prefix=CPU
// RUN: xfuse-opt %s -p 'split-reductions{target=cuda few-rows-min-length=65536}' | filecheck %s --check-prefix=CPU

// On CUDA a reduction with fewer rows than SMs (132) is split from `few-rows-min-length`
// (the target's: 8192): each row of a row kernel is one block. The CPU splits from
// `min-length` (65536) whatever the rows.

func.func @one_row(%x: tensor<1x25088xf32>) -> tensor<1xf32> {
  %y = graph.reduce_sum %x dims = [1] : tensor<1x25088xf32> -> tensor<1xf32>
  func.return %y : tensor<1xf32>
}

func.func @many_rows(%x: tensor<132x25088xf32>) -> tensor<132xf32> {
  %y = graph.reduce_sum %x dims = [1] : tensor<132x25088xf32> -> tensor<132xf32>
  func.return %y : tensor<132xf32>
}

// CUDA-LABEL: func.func @one_row
// CUDA-NEXT:    graph.reshape %x : tensor<1x25088xf32> -> tensor<1x{{[0-9]+}}x{{[0-9]+}}xf32>
// CUDA-NEXT:    graph.reduce_sum %{{.*}} dims = [2]
// CUDA-NEXT:    graph.reduce_sum %{{.*}} dims = [1]
// CUDA-LABEL: func.func @many_rows
// CUDA-NEXT:    graph.reduce_sum %x dims = [1] : tensor<132x25088xf32> -> tensor<132xf32>
// CUDA-NEXT:    func.return

// CPU-LABEL: func.func @one_row
// CPU-NEXT:    graph.reduce_sum %x dims = [1] : tensor<1x25088xf32> -> tensor<1xf32>
// CPU-NEXT:    func.return
// CPU-LABEL: func.func @many_rows
// CPU-NEXT:    graph.reduce_sum %x dims = [1] : tensor<132x25088xf32> -> tensor<132xf32>
// CPU-NEXT:    func.return
