// RUN: xfuse-opt %s -p 'lower-to-loops{keep-unsupported=true}' | filecheck %s
// RUN: not xfuse-opt %s -p lower-to-loops 2>&1 | filecheck %s --check-prefix=ERROR

// Two reductions over different dims cannot share one row loop: the group stays (with its
// reason) for the runtime's fallback, or the pass fails naming the kernel.

func.func @forward(%x: tensor<3x4xf32>) -> (tensor<4xf32>, tensor<3xf32>) {
  %r:2 = fusion.group (%x) kind = "reduction" rule = "test" : (tensor<3x4xf32>) -> (tensor<4xf32>, tensor<3xf32>) {
  ^bb0(%a: tensor<3x4xf32>):
    %c = graph.reduce_sum %a dims = [0] : tensor<3x4xf32> -> tensor<4xf32>
    %r = graph.reduce_sum %a dims = [1] : tensor<3x4xf32> -> tensor<3xf32>
    fusion.yield %c, %r : tensor<4xf32>, tensor<3xf32>
  }
  func.return %r#0, %r#1 : tensor<4xf32>, tensor<3xf32>
}

// CHECK:      fusion.group(%x) kind = "reduction" rule = "test" {xfuse.codegen_error = "cannot lower @forward_k0 to loops: reductions over different dims or shapes ([3, 4] dims [0] and [3, 4] dims [1]) do not share one row loop"}
// CHECK-NOT:  xfuse.kernel

// ERROR: cannot lower @forward_k0 to loops: reductions over different dims
// ERROR-NOT: Traceback
