// RUN: xfuse-opt %s -p fuse-greedy --emit=dot | filecheck %s
// RUN: xfuse-opt %s --emit=dot | filecheck %s --check-prefix=PLAIN
// RUN: not xfuse-opt %s --emit=dot --fusion-report 2>&1 | filecheck %s --check-prefix=BOTH

// `--emit=dot` prints a Graphviz picture instead of IR: the group is a cluster coloured by its
// kind whose label says the bytes it saves, edges carry tensor types, and the pairs the fusion
// pass refused are dashed edges named by the reason.

// CHECK: digraph "xfuse" {
// CHECK-DAG: [[X:n[0-9]+]] [label="%x\n4x8xf32"
// CHECK-DAG: [[MM:n[0-9]+]] [label="%1 matmul", shape="box3d"
// CHECK: subgraph cluster_{{n[0-9]+}} {
// CHECK-NEXT: label="group 0: elementwise\nfuse-greedy:producer-consumer\n2 ops, saves 256 B (640 B -> 384 B)"; style=filled; fillcolor="#cfe2ff";
// CHECK-NEXT: [[RELU:n[0-9]+]] [label="%{{[0-9]+}} relu"
// CHECK-NEXT: [[ADD:n[0-9]+]] [label="%{{[0-9]+}} add"
// CHECK-NEXT: }
// CHECK-DAG: [[MM]] -> [[RELU]] [label="4x8xf32"];
// CHECK-DAG: [[X]] -> [[ADD]] [label="4x8xf32"];
// CHECK-DAG: [[MM]] -> [[RELU]] [label="extern-boundary", style="dashed"
// CHECK: }

// Without a fusion pass there are no clusters and no refused pairs.
// PLAIN: digraph "xfuse" {
// PLAIN-NOT: cluster
// PLAIN-NOT: dashed
// PLAIN: }

// BOTH: error: --emit=dot and --fusion-report both replace the output: pick one

func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = graph.exp %x : tensor<4x8xf32>
  %1 = graph.matmul %0, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %2 = graph.relu %1 : tensor<4x8xf32>
  %3 = graph.add %2, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  func.return %3 : tensor<4x8xf32>
}
