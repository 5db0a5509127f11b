"""`fold-linear`: transposed-weight matmuls and their unfused bias adds become `graph.linear`,
and the program interprets as before."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from xdsl.dialects.builtin import ModuleOp

from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from xfuse import interpret
from xfuse.dialects import graph
from xfuse.frontend import import_module
from xfuse.runtime.driver import run_pipeline

FUSED = "decompose,fuse-scored,group-cleanup"


def count(module: ModuleOp, op_type: type) -> int:
    return sum(isinstance(op, op_type) for op in module.walk())


@pytest.mark.parametrize("make", [make_mlp, make_transformer_block], ids=["mlp", "transformer"])
def test_folding_keeps_the_meaning(
    make: Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor]]],
) -> None:
    model, inputs = make()
    imported = import_module(model, inputs)
    args = imported.arguments(*inputs)
    run_pipeline(FUSED, imported.module)
    before = interpret(imported.module, args)
    matmuls = count(imported.module, graph.MatmulOp)
    # (`decompose` keeps whole a linear only externs read, through views: the attention's q/k/v)
    kept = count(imported.module, graph.LinearOp)
    run_pipeline("fold-linear", imported.module)
    imported.module.verify()
    linears = count(imported.module, graph.LinearOp) - kept
    assert linears > 0 and count(imported.module, graph.MatmulOp) == matmuls - linears
    for got, expected in zip(interpret(imported.module, args), before, strict=True):
        torch.testing.assert_close(got, expected)


def test_mlp_runs_as_three_steps_like_eager() -> None:
    """Linear -> ReLU -> Linear: a GEMM with the first bias fused into the ReLU kernel, and a
    GEMM with the second bias in its epilogue (no transposed-weight copies or views)."""
    import xfuse

    model, inputs = make_mlp()
    compiled = xfuse.compile(model, inputs)
    labels = [s.label for s in compiled.default.program.steps]
    gemm = {"eager graph.linear", "onednn graph.linear"}  # torch's or oneDNN's, as timed
    assert len(labels) == 3 and {labels[0], labels[2]} <= gemm, labels
    assert labels[1] == "kernel @forward_k0 (group 0)"
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs))
