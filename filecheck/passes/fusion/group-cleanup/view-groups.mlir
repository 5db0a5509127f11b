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

// Heads split from a linear's row-major product as `nn.MultiheadAttention` splits them
// (unflatten, a permute that brings q/k/v first, a slice, a reshape into heads): torch can only
// run that reshape as a copy. The group stays and writes the reshape's result; the heads'
// transpose after it is a torch view of the group's output.
func.func @mha_heads(%x: tensor<10x2x64xf32>, %w: tensor<192x64xf32>) -> tensor<8x10x16xf32> {
  %y = graph.linear %x, %w : tensor<10x2x64xf32>, tensor<192x64xf32> -> tensor<10x2x192xf32>
  %q = fusion.group(%y) kind = "injective" rule = "fuse-scored:producer-consumer" : (tensor<10x2x192xf32>) -> tensor<8x10x16xf32> {
  ^bb0(%a: tensor<10x2x192xf32>):
    %u = graph.reshape %a : tensor<10x2x192xf32> -> tensor<10x2x3x64xf32>
    %p = graph.permute %u perm = [2, 0, 1, 3] : tensor<10x2x3x64xf32> -> tensor<3x10x2x64xf32>
    %s = graph.slice %p start = [0, 0, 0, 0] limit = [1, 10, 2, 64] stride = [1, 1, 1, 1] : tensor<3x10x2x64xf32> -> tensor<1x10x2x64xf32>
    %h = graph.reshape %s : tensor<1x10x2x64xf32> -> tensor<10x8x16xf32>
    %t = graph.permute %h perm = [1, 0, 2] : tensor<10x8x16xf32> -> tensor<8x10x16xf32>
    fusion.yield %t : tensor<8x10x16xf32>
  }
  %o = graph.torch_call "aten.relu.default"(%q) args = ["%t0"] kwargs = {} : (tensor<8x10x16xf32>) -> tensor<8x10x16xf32>
  func.return %o : tensor<8x10x16xf32>
}

// CHECK-LABEL: func.func @mha_heads
// CHECK:       %[[G:.*]] = fusion.group(%{{.*}}) {{.*}} -> tensor<10x8x16xf32> {
// CHECK:         %[[H:.*]] = graph.reshape %{{.*}} : tensor<1x10x2x64xf32> -> tensor<10x8x16xf32>
// CHECK-NEXT:    fusion.yield %[[H]] : tensor<10x8x16xf32>
// CHECK-NEXT:  }
// CHECK-NEXT:  %[[T:.*]] = graph.permute %[[G]] perm = [1, 0, 2] : tensor<10x8x16xf32> -> tensor<8x10x16xf32>
// CHECK-NEXT:  graph.torch_call "aten.relu.default"(%[[T]])
