"""
The attribute names that more than one level of xfuse writes or reads, each defined once.

    func.func @forward_k0(...) attributes {xfuse.kernel, xfuse.parallel_dims = 1 : i64}
"""

from __future__ import annotations

# --- graph IR ---------------------------------------------------------------------------------

SIZES_ATTR = "graph.sizes"
"""The table of size symbols of a `func.func` with dynamic dims (a `#graph.sizes<...>`,
xfuse/dialects/graph/sizes.py; docs/dynamic-shapes.md)."""

CHANNELS_LAST_ATTR = "graph.channels_last"
"""On an argument or result of `@forward` of rank 4: the tensor a call passes, or eager's
result, lies in channels-last memory (`[N, C, H, W]` stored as `[N, H, W, C]`). The importer
marks them (static strides only); the `channels-last` pass reads such an argument as NHWC
memory where it is, and returns such a result as a view of the NHWC value a kernel wrote.

    func.func @forward(%x: tensor<1x8x4x4xf32> {graph.input = "x", graph.channels_last}) -> (tensor<1x8x4x4xf32> {graph.channels_last})
"""

# --- kernels (lower-to-loops writes them; the LLVM passes, backends and runtime read them) ---

KERNEL_ATTR = "xfuse.kernel"
"""A `func.func` that is a kernel (one per fused group)."""

PARALLEL_DIMS_ATTR = "xfuse.parallel_dims"
"""How many dims of a kernel's outer `scf.parallel` its threads or blocks divide."""

CODEGEN_ERROR_ATTR = "xfuse.codegen_error"
"""Left on a group that lower-to-loops could not lower: why (the runtime runs it eagerly)."""

ERROR_FLAG_ATTR = "xfuse.error_flag"
"""A kernel whose last argument is a `memref<1xi8>` error flag after its outputs (it gathers):
the caller zeroes it, the kernel sets it to 1 on an index out of range, the caller raises."""

SIZE_ARGS_ATTR = "xfuse.size_args"
"""A kernel with symbolic sizes (docs/dynamic-shapes.md): the names of its trailing `index`
arguments, input size symbols of the function's `graph.sizes` table, in the table's order."""

SIZE_HINTS_ATTR = "xfuse.size_hints"
"""A kernel with symbolic sizes: each size argument's hint (the example's size), in the order
of `xfuse.size_args`; the GPU mapping chooses its block shape for these sizes (a shape valid
for every size)."""

EXTENT_ATTR = "xfuse.extent"
"""A kernel with symbolic sizes whose outer parallel loop runs over a size symbol: that
symbol's name (the runtime splits `[0, extent)` at the call's size)."""

RANGE_ARGS_ATTR = "xfuse.range_args"
"""A CPU kernel whose first two arguments are the `[lo, hi)` range of its parallel loop."""

TIES_KEEP_FIRST_ATTR = "xfuse.ties_keep_first"
"""On an `arith.maximumf` / `arith.minimumf` of an elementwise op (relu, maximum, minimum, and
so clamp, hardtanh, relu6): where eager's CPU kernel keeps its first operand when the two tie
(-0.0 and +0.0); the CPU lowering honours it (`lower-to-llvm`), CUDA's eager kernels are
IEEE's maximum and minimum, as the op is."""

# --- GPU mapping (gpu-map-parallel writes them; lower-to-nvvm and the CUDA backend read them) --

STRATEGY_ATTR = "xfuse.gpu.strategy"
BLOCK_ATTR = "xfuse.gpu.block"
ITEMS_ATTR = "xfuse.gpu.items"
ITEMS_SIZES_ATTR = "xfuse.gpu.items_sizes"
"""A GPU kernel with symbolic sizes: its work items (`xfuse.gpu.items` is -1) as derived size
symbols of its size arguments, written as a `graph.sizes` table's entries (`q0 = (s0 + 7)
floordiv 8, items = q0`; the last is the work items), which the launch evaluates per call."""
ALIGN_ATTR = "xfuse.gpu.align"
LANE_ATTR = "xfuse.gpu.lane"
