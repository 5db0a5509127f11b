// RUN: not xfuse-opt %s -p 'fuse-scored{window=-1}' 2>&1 | filecheck %s --check-prefix=WINDOW
// RUN: not xfuse-opt %s -p 'fuse-greedy{max-fusions=-2}' 2>&1 | filecheck %s --check-prefix=FUSIONS
// RUN: not xfuse-opt %s -p 'split-reductions{min-length=true}' 2>&1 | filecheck %s --check-prefix=BOOL
// RUN: not xfuse-opt %s -p 'fuse-greedy{fusable=1}' 2>&1 | filecheck %s --check-prefix=CALLABLE
// RUN: not xfuse-opt %s -p lower-to-llvm 2>&1 | filecheck %s --check-prefix=LLVM
// RUN: xfuse-opt %s -p 'fuse-scored{max-fusions=-1 max-rounds=0},split-reductions{min-length=1}' | filecheck %s --check-prefix=OK

// Option values a pass cannot use, and input a pass cannot lower: one line each, non-zero exit.

// WINDOW: error: pass 'fuse-scored': option 'window' must be a positive integer, found -1
// WINDOW-NOT: Traceback
// FUSIONS: error: pass 'fuse-greedy': option 'max-fusions' must be a non-negative integer, or -1 for no limit, found -2
// BOOL: error: pass 'split-reductions': option 'min-length' must be an integer, found true
// CALLABLE: error: pass 'fuse-greedy': option 'fusable' is a Python callable and has no textual form
// LLVM: error: pass 'lower-to-llvm' failed: the input has 1 op it cannot lower (graph.exp): not loop IR yet; run lower-to-loops first
// LLVM-NOT: Traceback
// OK: graph.exp

func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.exp %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
