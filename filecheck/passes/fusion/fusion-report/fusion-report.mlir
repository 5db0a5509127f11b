// RUN: xfuse-opt %s -p fuse-greedy --fusion-report | filecheck %s
// RUN: xfuse-opt %s -p fuse-greedy --fusion-report=json | filecheck %s --check-prefix=JSON
// RUN: xfuse-opt %s -p fuse-greedy -o %t && xfuse-opt %t --fusion-report | filecheck %s --check-prefix=IR

// `--fusion-report` prints the report in place of the program text: a row per group, the lone
// ops, the totals, the memory traffic with and without fusion, how much of it is not in fused
// kernels (the matmul, an extern), and why pairs were refused.

// CHECK: 4 ops -> 1 group -> 2 kernels (estimated from the IR)
// CHECK-NEXT: unit      kind         rule                           ops  in/out  kernels  bytes unfused  bytes fused  saved        op names
// CHECK-NEXT: group 0   elementwise  fuse-greedy:producer-consumer  2    2/1     1        640 B          384 B        256 B (40%)  relu, add
// CHECK-NEXT: lone ops  -            -                              2    -       1        768 B          768 B        0 B
// CHECK-NEXT: total                                                 4            2        1.4 KiB        1.1 KiB      256 B (18%)
// CHECK-NEXT: memory traffic: 1.4 KiB read+written without fusion, 1.1 KiB with fusion (saves 256 B, 18%)
// CHECK-NEXT: not in fused kernels: 512 B of the 1.1 KiB with fusion (44%): extern 512 B
// CHECK-NEXT: 4 candidate pairs examined: 1 fused, 3 rejected
// CHECK-NEXT: rejected because    pairs  first pair
// CHECK-NEXT: extern-boundary     2      %1 graph.matmul -> %2 graph.relu
// CHECK-NEXT: would-create-cycle  1      %0 graph.exp -> %3 graph.add
// CHECK-NOT: func.func

// JSON:      "summary": {
// JSON:        "groups": [
// JSON:            "kind": "elementwise",
// JSON:            "bytes_saved": 256
// JSON:        "kernels_estimated": true,
// JSON:        "rejections": [
// JSON:            "reason": "extern-boundary",
// JSON-NEXT:       "pairs": 2,
// JSON:      "decisions": [
// JSON:          "producer": "%1 graph.matmul",
// JSON-NEXT:     "consumer": "%2 graph.relu",
// JSON-NEXT:     "fused": false,
// JSON-NEXT:     "reason": "extern-boundary",

// IR input that is already fused, with no fusion pass in the pipeline: the groups found in the
// IR, and no decision records.
// IR: 4 ops -> 1 group -> 2 kernels (estimated from the IR)
// IR: group 0   elementwise  fuse-greedy:producer-consumer  2
// IR: no fusion decisions recorded (no fusion pass ran in this pipeline)

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.exp %x : tensor<4x8xf32>
  %1 = graph.matmul %0, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %2 = graph.relu %1 : tensor<4x8xf32>
  %3 = graph.add %2, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %3 : tensor<4x8xf32>
}
