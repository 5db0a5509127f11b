"""Real models end to end: ResNet-18, a GPT-2-style decoder and a model with a custom op, each
through `xfuse.compile` and `torch.compile(backend="xfuse")`, against eager PyTorch, and what
their fusion reports say."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import xfuse
from examples.custom_op import make_custom_op_model
from examples.gpt2 import make_gpt2
from examples.resnet import make_resnet18
from tests.conftest import CountCalls
from xfuse.api import Explanation
from xfuse.errors import FallbackWarning
from xfuse.report.counts import headline
from xfuse.runtime.executor import CompiledProgram

Maker = Callable[[], tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]

MODELS: dict[str, Maker] = {
    "resnet18": make_resnet18,
    "gpt2": make_gpt2,
    "custom_op": make_custom_op_model,
}


@pytest.fixture(autouse=True)
def _quiet_warnings() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning)
        warnings.filterwarnings("ignore", category=FallbackWarning, message="^(?!.*graph eagerly)")
        yield


@pytest.fixture(scope="module")
def explanations() -> dict[str, Explanation]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: xfuse.explain(*make()) for name, make in MODELS.items()}


def eager(model: Callable[..., Any], inputs: tuple[torch.Tensor, ...]) -> Any:
    with torch.no_grad():
        return model(*inputs)


@pytest.mark.parametrize("name", list(MODELS))
def test_xfuse_compile_matches_eager(name: str) -> None:
    model, inputs = MODELS[name]()
    compiled = xfuse.compile(model, inputs)
    with torch.no_grad():
        got = compiled(*inputs)
    torch.testing.assert_close(got, eager(model, inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", list(MODELS))
def test_torch_compile_backend_matches_eager(name: str, count_calls: CountCalls) -> None:
    model, inputs = MODELS[name]()
    calls = count_calls(CompiledProgram, "__call__")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="xfuse")
    with warnings.catch_warnings():
        warnings.filterwarnings("error", ".*runs this graph eagerly", FallbackWarning)
        got = eager(compiled, inputs)
    torch.testing.assert_close(got, eager(model, inputs), rtol=1e-4, atol=1e-4)
    assert calls, "torch.compile did not run the xfuse program"


def test_resnet18_convolutions_stay_extern_while_batchnorm_relu_and_adds_fuse(
    explanations: dict[str, Explanation],
) -> None:
    explanation = explanations["resnet18"]
    # 20 convolutions (17 3x3/7x7, 3 downsampling 1x1) run through torch (the max-pool is a
    # graph.pool).
    assert explanation.imported_ops.count("graph.torch_call") == 20
    assert all("graph.torch_call" not in g.ops for g in explanation.groups)
    # Every BatchNorm (20) is in a group with its ReLU or residual add: none stays alone.
    bn_groups = [g for g in explanation.groups if "graph.rsqrt" in g.ops]
    assert sum(g.ops.count("graph.rsqrt") for g in bn_groups) == 20
    assert all("graph.relu" in g.ops for g in bn_groups)
    residual = [g for g in bn_groups if g.ops.count("graph.add") >= 3]
    assert len(residual) == 8, "each BasicBlock's second BN fuses with its residual add"
    assert not any(k.group is None and "rsqrt" in k.source for k in explanation.kernels)
    summary = explanation.summary()
    assert summary.bytes_fused < summary.bytes_unfused


def test_gpt2_fuses_layernorm_gelu_and_masked_softmax(
    explanations: dict[str, Explanation],
) -> None:
    explanation = explanations["gpt2"]
    # arange (graph.iota) and the two embedding lookups (graph.gather) are imported too.
    assert explanation.ops.count("graph.torch_call") == 0
    groups = [set(g.ops) for g in explanation.groups]
    layernorms = [g for g in groups if {"graph.reduce_mean", "graph.rsqrt"} <= g]
    assert len(layernorms) == 5, "ln_1 and ln_2 of both blocks, and ln_f"
    assert sum(1 for g in groups if "graph.tanh" in g) == 2, "one GELU(tanh) MLP per block"
    assert sum(1 for g in groups if {"graph.where", "graph.exp"} <= g) == 2, "masked softmax"


def test_custom_op_runs_in_torch_and_its_neighbours_fuse(
    explanations: dict[str, Explanation],
) -> None:
    explanation = explanations["custom_op"]
    assert explanation.ops.count("graph.torch_call") == 1
    module = explanation.module
    assert module is not None
    calls = [op for op in module.walk() if op.name == "graph.torch_call"]
    assert [op.target.data for op in calls] == ["xfuse_examples.soft_clip.default"]  # pyright: ignore[reportAttributeAccessIssue]
    assert len(explanation.groups) == 3
    report = str(explanation)
    assert "extern-boundary" in report


@pytest.mark.parametrize(
    ("norm", "shape"),
    [
        (torch.nn.BatchNorm1d(4), (5, 4)),
        (torch.nn.BatchNorm2d(4), (2, 4, 3, 3)),
        (torch.nn.BatchNorm2d(4, affine=False), (2, 4, 3, 3)),
    ],
)
def test_eval_batch_norm_imports_as_elementwise_ops(
    norm: torch.nn.BatchNorm1d | torch.nn.BatchNorm2d, shape: tuple[int, ...]
) -> None:
    from xfuse.frontend import import_module

    assert norm.running_mean is not None and norm.running_var is not None
    norm.running_mean.uniform_(-0.5, 0.5)
    norm.running_var.uniform_(0.5, 1.5)
    norm.eval()
    x = torch.randn(*shape)
    imported = import_module(norm, (x,))
    names = [op.name for op in imported.module.walk()]
    assert "graph.torch_call" not in names and "graph.rsqrt" in names
    got = xfuse.interpret(imported.module, imported.arguments(x))
    torch.testing.assert_close(got[0], eager(norm, (x,)))


@pytest.mark.parametrize("name", list(MODELS))
def test_fusion_report_and_picture_of_each_model(
    name: str, explanations: dict[str, Explanation]
) -> None:
    explanation = explanations[name]
    text = str(explanation)
    counts = len(explanation.ops), len(explanation.groups), len(explanation.kernels)
    assert text.startswith(headline(*counts))
    assert "memory traffic:" in text
    dot = explanation.to_dot()
    assert dot.count("subgraph cluster_") == len(explanation.groups)
