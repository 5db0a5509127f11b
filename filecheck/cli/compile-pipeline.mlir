// RUN: xfuse-opt %s --compile-pipeline cpu | filecheck %s --check-prefix=CPU
// RUN: xfuse-opt %s --compile-pipeline cuda | filecheck %s --check-prefix=CUDA
// RUN: xfuse-opt %s --compile-pipeline=cpu --time-passes | filecheck %s --check-prefix=CPU-PASSES
// RUN: xfuse-opt %s --compile-pipeline cuda --time-passes | filecheck %s --check-prefix=CUDA-PASSES
// RUN: xfuse-opt %s --compile-pipeline cuda -p decompose,fuse-greedy --time-passes | filecheck %s --check-prefix=SPEC
// RUN: not xfuse-opt %s --compile-pipeline tpu 2>&1 | filecheck %s --check-prefix=DEVICE
// RUN: not xfuse-opt %s --compile-pipeline cpu -p nope 2>&1 | filecheck %s --check-prefix=PASS
// RUN: env XFUSE_CHANNELS_LAST=x not xfuse-opt %s --compile-pipeline cuda 2>&1 | filecheck %s --check-prefix=ENV

// `--compile-pipeline DEVICE` runs the pipeline xfuse.compile runs on DEVICE
// (`xfuse.pipeline.compile_pipeline`) and prints the IR after it: the default fusion pipeline
// (or `-p`'s) with the device's own passes after `decompose`. On CUDA `pad-matmul` pads the
// bf16 product's 300 columns to 304 and slices the returned product back in a group of its
// own; on both the softmax and the relu after it form one group. On the CPU `channels-last`
// is in the pipeline unmeasured (`xfuse.compile` drops it where the program's convolutions
// were measured faster NCHW, and runs `convolution-matmul` instead).

// CPU-LABEL: func.func @f
// CPU-NEXT:    graph.matmul %x, %w : tensor<4x16xbf16>, tensor<16x300xbf16> -> tensor<4x300xbf16>
// CPU-NEXT:    fusion.group(%s) kind = "reduction" rule = "fuse-scored:producer-consumer"
// CPU:         graph.relu
// CPU:         fusion.yield

// CUDA-LABEL: func.func @f
// CUDA-NEXT:    graph.pad %w low = [0, 0] high = [0, 4] {{.*}} -> tensor<16x304xbf16>
// CUDA-NEXT:    graph.matmul %x, %{{.*}} : tensor<4x16xbf16>, tensor<16x304xbf16> -> tensor<4x304xbf16>
// CUDA-NEXT:    fusion.group(%{{.*}}) kind = "injective" rule = "pad-matmul:returned"
// CUDA:           graph.slice %{{.*}} limit = [4, 300]
// CUDA:         fusion.group(%s) kind = "reduction" rule = "fuse-scored:producer-consumer"

// CPU-PASSES:      // pass decompose took
// CPU-PASSES-NEXT: // pass depthwise-stencil took
// CPU-PASSES-NEXT: // pass channels-last took
// CPU-PASSES-NEXT: // pass attention-mask took
// CPU-PASSES-NEXT: // pass attention-gqa took
// CPU-PASSES-NEXT: // pass simplify took
// CPU-PASSES-NEXT: // pass split-reductions took
// CPU-PASSES-NEXT: // pass reduction-cse took
// CPU-PASSES-NEXT: // pass fuse-scored took
// CPU-PASSES-NEXT: // pass group-cleanup took
// CPU-PASSES-NEXT: // pass fold-linear took
// CPU-PASSES-NEXT: builtin.module

// CUDA-PASSES:      // pass decompose took
// CUDA-PASSES-NEXT: // pass depthwise-stencil took
// CUDA-PASSES-NEXT: // pass convolution-bias took
// CUDA-PASSES-NEXT: // pass channels-last took
// CUDA-PASSES-NEXT: // pass attention-mask took
// CUDA-PASSES-NEXT: // pass pad-matmul took
// CUDA-PASSES-NEXT: // pass simplify took
// CUDA-PASSES-NEXT: // pass split-reductions took
// CUDA-PASSES-NEXT: // pass reduction-cse took
// CUDA-PASSES-NEXT: // pass fuse-scored took
// CUDA-PASSES-NEXT: // pass group-cleanup took
// CUDA-PASSES-NEXT: // pass fold-linear took
// CUDA-PASSES-NEXT: builtin.module

// SPEC:      // pass decompose took
// SPEC-NEXT: // pass depthwise-stencil took
// SPEC-NEXT: // pass convolution-bias took
// SPEC-NEXT: // pass channels-last took
// SPEC-NEXT: // pass attention-mask took
// SPEC-NEXT: // pass pad-matmul took
// SPEC-NEXT: // pass fuse-greedy took
// SPEC-NEXT: builtin.module

// DEVICE: xfuse-opt: error: argument --compile-pipeline: invalid choice: 'tpu' (choose from 'cpu', 'cuda')
// PASS: error: unknown pass 'nope'
// ENV: error: XFUSE_CHANNELS_LAST must be 0, 1 or auto, found 'x'

func.func @f(%x: tensor<4x16xbf16>, %w: tensor<16x300xbf16>, %s: tensor<4x8xf32>) -> (tensor<4x300xbf16>, tensor<4x8xf32>) {
  %y = graph.matmul %x, %w : tensor<4x16xbf16>, tensor<16x300xbf16> -> tensor<4x300xbf16>
  %0 = graph.softmax %s dim = 1 : tensor<4x8xf32>
  %1 = graph.relu %0 : tensor<4x8xf32>
  func.return %y, %1 : tensor<4x300xbf16>, tensor<4x8xf32>
}
