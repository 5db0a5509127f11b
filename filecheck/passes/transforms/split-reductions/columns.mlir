// RUN: xfuse-opt %s -p split-reductions | filecheck %s
// RUN: xfuse-opt %s -p 'split-reductions{min-column-length=100000}' | filecheck %s --check-prefix=SHORT
// RUN: xfuse-opt %s -p 'split-reductions{column-parallelism=16384}' | filecheck %s --check-prefix=FEWER

// A reduction over the leading dims with few results (a column reduction) reads its input as
// [B, C, ...kept]: stage 1 reduces C (B x K partial results, about `column-parallelism`), stage
// 2 reduces B. A GPU then has B times as many threads to walk the columns.

func.func @columns(%x: tensor<16384x16384xf32>) -> tensor<16384xf32> {
  %y = graph.reduce_sum %x dims = [0] : tensor<16384x16384xf32> -> tensor<16384xf32>
  func.return %y : tensor<16384xf32>
}

// CHECK-LABEL: func.func @columns
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %x : tensor<16384x16384xf32> -> tensor<32x512x16384xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[R]] dims = [1] : tensor<32x512x16384xf32> -> tensor<32x16384xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<32x16384xf32> -> tensor<16384xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<16384xf32>

// SHORT-LABEL: func.func @columns
// SHORT-NEXT:    graph.reduce_sum %x dims = [0]

// FEWER-LABEL: func.func @columns
// FEWER-NEXT:    graph.reduce_sum %x dims = [0]

// Two leading dims, keepdim, f16 and a prime length: 8190 rows as 90 x 91 (a divisor of 8190
// near 2^19 / 15, capped at sqrt(8191)), the last row on its own; the mean accumulates in f32
// and divides once.

func.func @prime_mean(%x: tensor<8191x1x3x5xf16>) -> tensor<1x1x3x5xf16> {
  %y = graph.reduce_mean %x dims = [0, 1] keepdim : tensor<8191x1x3x5xf16> -> tensor<1x1x3x5xf16>
  func.return %y : tensor<1x1x3x5xf16>
}

// CHECK-LABEL: func.func @prime_mean
// CHECK-NEXT:    %[[FLAT:.*]] = graph.reshape %x : tensor<8191x1x3x5xf16> -> tensor<8191x3x5xf16>
// CHECK-NEXT:    %[[MAIN:.*]] = graph.slice %[[FLAT]] start = [0, 0, 0] limit = [8190, 3, 5] stride = [1, 1, 1] : tensor<8191x3x5xf16> -> tensor<8190x3x5xf16>
// CHECK-NEXT:    %[[R:.*]] = graph.reshape %[[MAIN]] : tensor<8190x3x5xf16> -> tensor<90x91x3x5xf16>
// CHECK-NEXT:    %[[W:.*]] = graph.cast %[[R]] : tensor<90x91x3x5xf16> to tensor<90x91x3x5xf32>
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %[[W]] dims = [1] : tensor<90x91x3x5xf32> -> tensor<90x3x5xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[P]] dims = [0] : tensor<90x3x5xf32> -> tensor<3x5xf32>
// CHECK:         %[[REST:.*]] = graph.slice %{{.*}} start = [8190, 0, 0] limit = [8191, 3, 5] stride = [1, 1, 1] : tensor<8191x3x5xf16> -> tensor<1x3x5xf16>
// CHECK-NEXT:    %[[RW:.*]] = graph.cast %[[REST]] : tensor<1x3x5xf16> to tensor<1x3x5xf32>
// CHECK-NEXT:    %[[T:.*]] = graph.reduce_sum %[[RW]] dims = [0] : tensor<1x3x5xf32> -> tensor<3x5xf32>
// CHECK-NEXT:    %[[SUM:.*]] = graph.add %[[S]], %[[T]] : tensor<3x5xf32>, tensor<3x5xf32> -> tensor<3x5xf32>
// CHECK-NEXT:    %[[N:.*]] = graph.constant dense<8.191000e+03> : tensor<f32>
// CHECK-NEXT:    %[[M:.*]] = graph.div %[[SUM]], %[[N]] : tensor<3x5xf32>, tensor<f32> -> tensor<3x5xf32>
// CHECK-NEXT:    %[[H:.*]] = graph.cast %[[M]] : tensor<3x5xf32> to tensor<3x5xf16>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[H]] : tensor<3x5xf16> -> tensor<1x1x3x5xf16>
// CHECK-NEXT:    func.return %[[Y]] : tensor<1x1x3x5xf16>

// Many results are parallel enough already: left alone.

func.func @wide(%x: tensor<4096x300000xf32>) -> tensor<300000xf32> {
  %y = graph.reduce_max %x dims = [0] : tensor<4096x300000xf32> -> tensor<300000xf32>
  func.return %y : tensor<300000xf32>
}

// CHECK-LABEL: func.func @wide
// CHECK-NEXT:    %[[Y:.*]] = graph.reduce_max %x dims = [0] : tensor<4096x300000xf32> -> tensor<300000xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<300000xf32>

// Consecutive inner dims with few results (a channels-last image's spatial mean, `[N, H, W, C]`
// over H and W) split the same way beside the dims kept before them: stage 1 reduces C of
// [N, B, C, K], stage 2 B.

func.func @inner(%x: tensor<2x112x112x32xf32>) -> tensor<2x1x1x32xf32> {
  %y = graph.reduce_sum %x dims = [1, 2] keepdim : tensor<2x112x112x32xf32> -> tensor<2x1x1x32xf32>
  func.return %y : tensor<2x1x1x32xf32>
}

// CHECK-LABEL: func.func @inner
// CHECK-NEXT:    %[[P:.*]] = graph.reduce_sum %x dims = [2] : tensor<2x112x112x32xf32> -> tensor<2x112x32xf32>
// CHECK-NEXT:    %[[S:.*]] = graph.reduce_sum %[[P]] dims = [1] : tensor<2x112x32xf32> -> tensor<2x32xf32>
// CHECK-NEXT:    %[[Y:.*]] = graph.reshape %[[S]] : tensor<2x32xf32> -> tensor<2x1x1x32xf32>
// CHECK-NEXT:    func.return %[[Y]] : tensor<2x1x1x32xf32>
