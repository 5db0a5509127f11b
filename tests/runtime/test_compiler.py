"""A kernel's canonical module (`canonical_kernel_module`), the text its cache key is made of:
the same whether it copies the kernel's loops or takes them (as `lower_ahead` does)."""

from __future__ import annotations

import torch

from xfuse.dialects import fusion
from xfuse.frontend.export import import_for_xfuse
from xfuse.pipeline import DEFAULT_PIPELINE
from xfuse.runtime.compiler import (
    canonical_kernel_module,
    kernel_functions,
    lower_to_loops,
    wrap_unit,
)
from xfuse.runtime.driver import run_pipeline


def _program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(torch.relu(x @ w) * 2, (16,)).sum(dim=0)


def test_a_canonical_module_that_takes_the_loops_prints_as_one_that_copies_them() -> None:
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    module = import_for_xfuse(_program, (x, w), {}).program.module
    run_pipeline(DEFAULT_PIPELINE, module)
    units = [op for op in module.walk() if isinstance(op, fusion.GroupOp)]
    assert units
    for unit in units:
        lowered = wrap_unit(unit)
        lower_to_loops(lowered)
        for kernel in kernel_functions(lowered):
            copied = str(canonical_kernel_module(kernel))
            assert kernel.body.blocks  # copying leaves the kernel as it was
            taken = canonical_kernel_module(kernel, take_body=True)
            assert str(taken) == copied
            assert not kernel.body.blocks
            taken.verify()
