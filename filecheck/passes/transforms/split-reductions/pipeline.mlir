// RUN: xfuse-opt %s -p decompose,split-reductions,fuse-scored,group-cleanup | filecheck %s
// RUN: xfuse-opt %s -p decompose,split-reductions,fuse-scored,group-cleanup,lower-to-loops,gpu-map-parallel | filecheck %s --check-prefix=GPU

// After fusion, stage 1 (with its prologue) is one group whose input is a view of the argument
// as [B, C], and the two stage 2 sums (with mean's division) another, merged horizontally: a
// row kernel over B parallel rows, then one small row. On the GPU both map to the `rows`
// strategy.

func.func @forward(%x: tensor<30000000xf32>) -> (tensor<f32>, tensor<f32>) {
  %a = graph.abs %x : tensor<30000000xf32>
  %s = graph.reduce_sum %a dims = [0] : tensor<30000000xf32> -> tensor<f32>
  %m = graph.reduce_mean %x dims = [0] : tensor<30000000xf32> -> tensor<f32>
  func.return %s, %m : tensor<f32>, tensor<f32>
}

// CHECK:      %[[V:.*]] = graph.reshape %x : tensor<30000000xf32> -> tensor<6000x5000xf32>
// CHECK-NEXT: %[[S1:.*]], %[[M1:.*]] = fusion.group(%[[V]]) kind = "reduction"
// CHECK-NEXT: ^bb0(%[[IN:.*]]: tensor<6000x5000xf32>):
// CHECK-NEXT:   %[[A:.*]] = graph.abs %[[IN]] : tensor<6000x5000xf32>
// CHECK-NEXT:   graph.reduce_sum %[[A]] dims = [1] : tensor<6000x5000xf32> -> tensor<6000xf32>
// CHECK-NEXT:   graph.reduce_sum %[[IN]] dims = [1] : tensor<6000x5000xf32> -> tensor<6000xf32>
// CHECK:      %m, %s = fusion.group(%[[M1]], %[[S1]]) kind = "reduction" rule = "fuse-scored:horizontal"
// CHECK:        graph.reduce_sum %{{.*}} dims = [0] : tensor<6000xf32> -> tensor<f32>
// CHECK:        graph.reduce_sum %{{.*}} dims = [0] : tensor<6000xf32> -> tensor<f32>
// CHECK-NEXT:   graph.div

// GPU:      func.func @forward_k1(%{{.*}}: memref<6000x5000xf32>, %{{.*}}: memref<6000xf32>, %{{.*}}: memref<6000xf32>)
// GPU-SAME:   xfuse.gpu.strategy = "rows"
// GPU:      func.func @forward_k2(%{{.*}}: memref<6000xf32>, %{{.*}}: memref<6000xf32>, %{{.*}}: memref<f32>, %{{.*}}: memref<f32>)
// GPU-SAME:   xfuse.gpu.strategy = "rows"
