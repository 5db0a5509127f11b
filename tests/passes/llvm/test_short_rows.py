"""Short rows of symbolic kernels (`xfuse.passes.llvm.short_rows`): an innermost loop to a
runtime bound is versioned on its trip count, the short copy bounded so that LLVM runs it as one
masked vector (`loop_hints.widen_bounded_rows`), and both copies give torch's values at every
row length, the boundary between them included."""

from __future__ import annotations

import re

import torch
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import ModuleOp

from xfuse.backends.cpu import CPUBackend
from xfuse.backends.loop_hints import PREDICATE, WIDTH
from xfuse.ir.context import parse
from xfuse.ir.functions import kernel_functions
from xfuse.passes.llvm.lower_to_llvm import prepare_cpu_kernels
from xfuse.passes.llvm.short_rows import SHORT_TRIP
from xfuse.pipeline import pipeline

# rows of a symbolic length: y = sin(x) * w + b, one output element per input element
ROWS = """
func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>, %w: tensor<f32>) -> tensor<?x?xf32, #graph.syms<s0, s1>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 1) hint 8>} {
  %0 = graph.sin %x : tensor<?x?xf32, #graph.syms<s0, s1>>
  %1 = graph.mul %0, %w : tensor<?x?xf32, #graph.syms<s0, s1>>, tensor<f32> -> tensor<?x?xf32, #graph.syms<s0, s1>>
  func.return %1 : tensor<?x?xf32, #graph.syms<s0, s1>>
}
"""

# a sum over a symbolic row: its loop carries a value and is left alone
SUMS = """
func.func @forward(%x: tensor<?x?xf32, #graph.syms<s0, s1>>) -> tensor<?xf32, #graph.syms<s0>> attributes {graph.sizes = #graph.sizes<s0 = input(0, 0) hint 4, s1 = input(0, 1) hint 8>} {
  %0 = graph.reduce_sum %x dims = [1] : tensor<?x?xf32, #graph.syms<s0, s1>> -> tensor<?xf32, #graph.syms<s0>>
  func.return %0 : tensor<?xf32, #graph.syms<s0>>
}
"""


def _lowered(text: str) -> tuple[ModuleOp, str]:
    module = pipeline("fuse-greedy,lower-to-loops")(parse(text))
    (kernel,) = kernel_functions(module)
    return module, kernel.sym_name.data


def _versions(module: ModuleOp) -> list[scf.IfOp]:
    """The `scf.if`s that choose between a short row's copy and its loop."""
    prepared = module.clone()
    prepare_cpu_kernels(prepared)
    found = []
    for branch in prepared.walk():
        if not isinstance(branch, scf.IfOp):
            continue
        cond = branch.cond.owner
        if isinstance(cond, arith.CmpiOp) and cond.predicate.value.data == 3:  # sle
            found.append(branch)
    return found


def test_a_runtime_row_is_versioned_on_its_trip_count() -> None:
    module, _ = _lowered(ROWS)
    (branch,) = _versions(module)
    short = [o for o in branch.true_region.walk() if isinstance(o, scf.ForOp)]
    long = [o for o in branch.false_region.walk() if isinstance(o, scf.ForOp)]
    assert len(short) == len(long) == 1
    assert isinstance(short[0].ub.owner, arith.MinSIOp)
    assert not isinstance(long[0].ub.owner, arith.MinSIOp)


def test_a_loop_that_carries_a_sum_is_not_versioned() -> None:
    module, _ = _lowered(SUMS)
    assert _versions(module) == []


def test_the_short_copy_alone_is_marked_for_one_masked_vector() -> None:
    module, name = _lowered(ROWS)
    ir = CPUBackend().llvm_ir(module, name)
    marked = re.findall(rf'!"{WIDTH}", i32 (\d+)', ir)
    assert marked == [str(SHORT_TRIP)]
    assert f'!"{PREDICATE}", i1 1' in ir
    optimized = str(CPUBackend().optimized(module, name))
    assert f"<{SHORT_TRIP} x float>" in optimized and "masked.load" in optimized


def test_both_copies_give_torchs_values_at_every_row_length() -> None:
    module, name = _lowered(ROWS)
    backend = CPUBackend()
    kernel = backend.load(backend.compile(module, name), name)
    w = torch.tensor(0.7)
    for length in range(2, 3 * SHORT_TRIP):
        x = torch.randn(3, length)
        guarded = torch.full((3 * length + 8,), float("nan"))  # 8 elements past the rows
        out = guarded[: 3 * length].view(3, length)
        kernel.launch_sized([w, x, out], [3, length], 3)  # the kernel's buffers: w, x, out
        torch.testing.assert_close(out, torch.sin(x) * w)
        assert guarded[3 * length :].isnan().all(), f"written past the rows at {length}"
