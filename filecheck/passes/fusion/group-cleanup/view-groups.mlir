// RUN: xfuse-opt %s -p group-cleanup | filecheck %s

// A group of layout ops only externs read (attention's output, transposed back for the output
// projection) is dissolved: the runtime runs a permute and a reshape as torch views of the
// extern's real output, with no kernel.
func.func @attention_out(%o: tensor<1x4x16x16xf32>, %w: tensor<64x64xf32>) -> tensor<1x16x64xf32> {
  %r = fusion.group(%o) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<1x4x16x16xf32>) -> tensor<1x16x64xf32> {
  ^bb0(%a: tensor<1x4x16x16xf32>):
    %p = graph.permute %a perm = [0, 2, 1, 3] : tensor<1x4x16x16xf32> -> tensor<1x16x4x16xf32>
    %s = graph.reshape %p : tensor<1x16x4x16xf32> -> tensor<1x16x64xf32>
    fusion.yield %s : tensor<1x16x64xf32>
  }
  %y = graph.linear %r, %w : tensor<1x16x64xf32>, tensor<64x64xf32> -> tensor<1x16x64xf32>
  func.return %y : tensor<1x16x64xf32>
}

// CHECK-LABEL: func.func @attention_out
// CHECK-NOT:   fusion.group
// CHECK:       %[[P:.*]] = graph.permute %o perm = [0, 2, 1, 3]
// CHECK-NEXT:  %[[S:.*]] = graph.reshape %[[P]]
// CHECK-NEXT:  %[[Y:.*]] = graph.linear %[[S]], %w

// The same group read by a kernel op (an exp) stays: the kernel reads the layout directly.
func.func @kernel_reader(%o: tensor<1x4x16x16xf32>) -> tensor<1x16x64xf32> {
  %r = fusion.group(%o) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<1x4x16x16xf32>) -> tensor<1x16x64xf32> {
  ^bb0(%a: tensor<1x4x16x16xf32>):
    %p = graph.permute %a perm = [0, 2, 1, 3] : tensor<1x4x16x16xf32> -> tensor<1x16x4x16xf32>
    %s = graph.reshape %p : tensor<1x16x4x16xf32> -> tensor<1x16x64xf32>
    fusion.yield %s : tensor<1x16x64xf32>
  }
  %e = graph.exp %r : tensor<1x16x64xf32>
  func.return %e : tensor<1x16x64xf32>
}

// CHECK-LABEL: func.func @kernel_reader
// CHECK:       fusion.group
// CHECK:       graph.permute
