"""`reduction-cse`: a repeated reduction is computed once (a one-group GroupNorm's mean), never
across an op that may write memory, and the program's values stay the same."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, given, settings
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block

import xfuse
from xfuse import interpret
from xfuse.collector import collector_paused
from xfuse.dialects import graph
from xfuse.frontend.decompositions import one_group_norm
from xfuse.ir.context import make_context
from xfuse.passes.transforms.reduction_cse import ReductionCSEPass
from xfuse.pipeline import DEFAULT_PIPELINE, PipelineOptions, compile_pipeline
from xfuse.runtime.driver import import_for_xfuse, run_pipeline
from xfuse.testing import RandomProgram, programs

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reductions(module: ModuleOp) -> int:
    return sum(isinstance(op, graph.ReduceOp) for op in module.walk())


def cse(module: ModuleOp) -> ModuleOp:
    out = module.clone()
    ReductionCSEPass().apply(make_context(), out)
    out.verify()
    return out


class OneGroupNorm(nn.Module):
    """GroupNorm(1, C) as the importer decomposes it on CUDA (`one_group_norm`)."""

    def __init__(self, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(1, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return one_group_norm(x, self.norm.weight, self.norm.bias, self.norm.eps)[0]


NORMS: dict[str, Callable[[int], nn.Module]] = {
    "torch-decomposition": lambda c: nn.GroupNorm(1, c),
    "one-group": OneGroupNorm,
}

# The sums of one norm: the mean, the mean of the centered values (the corrected two-pass
# variance), the sum of their squares; on CUDA each of PoolFormer's 62,720 elements is split
# in two stages (`split-reductions`).
SUMS = {"cuda": 3 * 2, "cpu": 3}


@pytest.mark.parametrize("norm", sorted(NORMS))
@pytest.mark.parametrize("device", sorted(SUMS))
def test_one_group_norm_reduces_each_sum_once(norm: str, device: str) -> None:
    """The norm's `var_mean` gives its mean twice (its own, and the var's); the fused program
    of PoolFormer's last stage sums each once."""
    model = NORMS[norm](320).to(torch.bfloat16).eval()
    x = torch.randn(1, 320, 14, 14, dtype=torch.bfloat16)
    with torch.no_grad(), collector_paused():
        module = import_for_xfuse(model, (x,), None, False).program.module
        run_pipeline(compile_pipeline(device, PipelineOptions()), module)
    assert reductions(module) == SUMS[device]


def test_runs_after_split_reductions() -> None:
    """Both stages of a repeated split sum go: the pass sees them split."""
    assert "split-reductions,reduction-cse," in DEFAULT_PIPELINE


REPEATED = """
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = graph.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %c1 = graph.cast %x : tensor<4x8xf32> to tensor<4x8xf64>
  %s1 = graph.reduce_sum %c1 dims = [1] : tensor<4x8xf64> -> tensor<4xf64>
  %t1 = graph.cast %s1 : tensor<4xf64> to tensor<4xf32>
  %mid = graph.relu %x : tensor<4x8xf32>
  %b = graph.reduce_sum %x dims = [1] : tensor<4x8xf32> -> tensor<4xf32>
  %c2 = graph.cast %x : tensor<4x8xf32> to tensor<4x8xf64>
  %s2 = graph.reduce_sum %c2 dims = [1] : tensor<4x8xf64> -> tensor<4xf64>
  %t2 = graph.cast %s2 : tensor<4xf64> to tensor<4xf32>
  %u = graph.add %a, %t1 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %v = graph.add %b, %t2 : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  func.return %u, %v : tensor<4xf32>, tensor<4xf32>
}
"""


def test_repeated_reductions_of_repeated_casts_go() -> None:
    """A sum of a repeated cast repeats: it goes with its cast; the casts after the sums
    (cheap, for fusion to recompute) stay."""
    module = xfuse.parse(REPEATED)
    out = cse(module)
    assert reductions(out) == 2
    names = [op.name for op in out.walk()]
    assert names.count("graph.cast") == 3  # one before the sums, two after
    x = torch.randn(4, 8)
    for got, want in zip(interpret(out, [x]), interpret(module, [x]), strict=True):
        assert torch.equal(got, want)


def test_repeats_across_an_in_place_op_stay() -> None:
    """`relu_` writes %x between two equal sums: the second sums other values, and stays."""
    module = xfuse.parse(
        REPEATED.replace(
            "%mid = graph.relu %x : tensor<4x8xf32>",
            '%mid = graph.torch_call "aten.relu_.default"(%x) args = ["%t0"] kwargs = {} '
            ": (tensor<4x8xf32>) -> tensor<4x8xf32>",
        )
    )
    out = cse(module)
    assert reductions(out) == reductions(module) == 4
    x = torch.randn(4, 8)
    got, want = interpret(out, [x.clone()]), interpret(module, [x.clone()])
    assert not torch.equal(want[0], want[1])  # the in-place op made the repeats differ
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)


def with_repeated_reductions(program: RandomProgram) -> ModuleOp:
    """`program` with a copy of each reduction right after it, half its readers reading the
    copy."""
    module = program.module.clone()
    rng = random.Random(program.seed)
    function = module.body.block.first_op
    assert function is not None
    body: Block = function.regions[0].block
    for op in [op for op in body.ops if isinstance(op, graph.ReduceOp)]:
        copy = op.clone()
        body.insert_op_after(copy, op)
        for use in list(op.result.uses):
            if rng.random() < 0.5:
                use.operation.operands[use.index] = copy.result
    module.verify()
    return module


def assert_same_values(module: ModuleOp, original: ModuleOp, program: RandomProgram) -> None:
    got = interpret(module, program.inputs())
    want = interpret(original, program.inputs())
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=0, atol=0)


@SETTINGS
@given(programs(max_ops=20, rows=True))
def test_keeps_the_values(program: RandomProgram) -> None:
    module = with_repeated_reductions(program)
    out = cse(module)
    assert reductions(out) <= reductions(program.module)
    assert_same_values(out, module, program)


@SETTINGS
@given(programs(max_ops=20, rows=True, mutation=True))
def test_keeps_the_values_with_in_place_ops(program: RandomProgram) -> None:
    module = with_repeated_reductions(program)
    assert_same_values(cse(module), module, program)
