"""Kernels with symbolic sizes on the CPU (docs/dynamic-shapes.md): one compiled kernel runs at
every size of its symbols and matches torch; its loops stay vectorized."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp

from xfuse.backends.cpu import CPUBackend
from xfuse.ir.context import parse
from xfuse.ir.functions import kernel_functions
from xfuse.passes.llvm.lower_to_llvm import SYMBOLIC_EXTENT
from xfuse.pipeline import pipeline

# rows of a [s0, s1] input: softmax(x * w) over a symbolic row length, and the row's mean
SOFTMAX = """
func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %w: tensor<f32>) -> (tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?xf32, #graph.syms<s0>>) attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4 range [2, 4096], s1 = input(0, 1) hint 32>} {
  %0 = graph.mul %x, %w : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<f32> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %1 = graph.reduce_max %0 dims = [1] keepdim : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x1xf32, #graph.syms<s0>>
  %2 = graph.sub %0, %1 : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %3 = graph.exp %2 : tensor<?x?xf32, #graph.syms<s0, s1>>
  %4 = graph.reduce_sum %3 dims = [1] keepdim : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?x1xf32, #graph.syms<s0>>
  %5 = graph.div %3, %4 : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?x1xf32, #graph.syms<s0>> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  %6 = graph.reduce_mean %0 dims = [1] : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?xf32, #graph.syms<s0>>
  func.return %5, %6 : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<?xf32, #graph.syms<s0>>
}
"""

# a derived size: the flattened [s0 * 8] view of an [s0, 8] input, plus a bias per column
FLAT = """
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>, %b: tensor<8xf32>) -> tensor<?xf32, #graph.syms<s1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = 8 * s0>} {
  %0 = graph.add %x, %b : tensor<?x8xf32, #graph.syms<s0>>, tensor<8xf32> -> tensor<?x8xf32, #graph.syms<s0>>
  %1 = graph.reshape %0 : tensor<?x8xf32, #graph.syms<s0>> -> tensor<?xf32, #graph.syms<s1>>
  %2 = graph.tanh %1 : tensor<?xf32, #graph.syms<s1>>
  func.return %2 : tensor<?xf32, #graph.syms<s1>>
}
"""

# a sum over the symbolic rows of an [s0, 8] input: the split loop runs over the 8 columns
COLUMNS = """
func.func @forward(%x: tensor<?x8xf32, #graph.syms<s0>>) -> tensor<8xf32> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4>} {
  %0 = graph.reduce_sum %x dims = [0] : tensor<?x8xf32, #graph.syms<s0>> -> tensor<8xf32>
  func.return %0 : tensor<8xf32>
}
"""


def lowered(text: str) -> tuple[CPUBackend, ModuleOp, str]:
    """The module's one kernel, lowered to loops."""
    module = pipeline("fuse-greedy,lower-to-loops")(parse(text))
    (kernel,) = kernel_functions(module)
    return CPUBackend(), module, kernel.sym_name.data


def test_one_softmax_kernel_runs_at_every_size() -> None:
    backend, module, name = lowered(SOFTMAX)
    kernel = backend.load(backend.compile(module, name), name)
    assert (kernel.arity, kernel.sizes, kernel.extent) == (4, 2, SYMBOLIC_EXTENT)
    w = torch.tensor(0.7)
    for rows, cols in [(2, 2), (3, 17), (5, 64), (64, 3), (7, 1000)]:
        x = torch.randn(rows, cols)
        probs, mean = torch.empty(rows, cols), torch.empty(rows)
        kernel.launch_sized([x, w, probs, mean], [rows, cols], rows)
        torch.testing.assert_close(probs, torch.softmax(x * w, dim=1))
        torch.testing.assert_close(mean, (x * w).mean(dim=1))


def test_derived_size_is_computed_from_the_input_symbol() -> None:
    backend, module, name = lowered(FLAT)
    kernel = backend.load(backend.compile(module, name), name)
    assert kernel.sizes == 1
    b = torch.randn(8)
    for rows in (2, 9, 300):
        x = torch.randn(rows, 8)
        out = torch.empty(rows * 8)
        kernel.launch_sized([x, b, out], [rows], rows * 8)  # the extent is s1 = 8 * s0
        torch.testing.assert_close(out, torch.tanh(x + b).reshape(-1))


def test_a_static_extent_is_the_kernels_own() -> None:
    backend, module, name = lowered(COLUMNS)
    kernel = backend.load(backend.compile(module, name), name)
    assert (kernel.sizes, kernel.extent) == (1, 1)  # its 8 columns one block (column_blocks)
    for rows in (2, 9, 300):
        x = torch.randn(rows, 8)
        out = torch.empty(8)
        kernel.launch_sized([x, out], [rows], None)
        torch.testing.assert_close(out, x.sum(dim=0))


def test_a_symbolic_extent_is_passed() -> None:
    backend, module, name = lowered(FLAT)
    kernel = backend.load(backend.compile(module, name), name)
    with pytest.raises(ValueError, match="pass its extent"):
        kernel.launch_sized([torch.randn(2, 8), torch.randn(8), torch.empty(16)], [2], None)


def test_a_symbolic_kernel_is_not_called_without_its_sizes() -> None:
    backend, module, name = lowered(FLAT)
    kernel = backend.load(backend.compile(module, name), name)
    with pytest.raises(ValueError, match="takes 1 sizes"):
        kernel([torch.randn(2, 8), torch.randn(8), torch.empty(16)])


@pytest.mark.parametrize("text", [SOFTMAX, FLAT])
def test_symbolic_loops_vectorize(text: str) -> None:
    """The loop over a runtime size gets LLVM's vector body and scalar remainder, as the
    static kernels' loops do."""
    backend, module, name = lowered(text)
    ir = str(backend.optimized(module, name))
    assert "x float>" in ir, "no vector code"
    assert "middle.block" in ir or "vec.epilog" in ir, "no remainder after the vector loop"
