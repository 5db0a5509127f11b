"""CUDA graphs (`xfuse.runtime.cuda_graphs`): replays match eager, outputs the caller keeps
survive later calls, moved parameters capture anew, programs that write memory are never
captured (and say why), and launches go to whatever stream torch is on."""

from __future__ import annotations

import pytest
import torch

import xfuse
from examples.mlp import make_mlp
from examples.transformer import make_transformer_block
from xfuse.ir.context import parse
from xfuse.runtime.cuda_graphs import GraphRunner, graph_pays, why_not_capturable


def _has_gpu() -> bool:
    try:
        import pycuda.driver  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


gpu = pytest.mark.skipif(not _has_gpu(), reason="needs an NVIDIA GPU and pycuda")


def _runner(compiled: xfuse.api.CompiledProgram) -> GraphRunner:
    graphs = compiled.default.graphs
    assert graphs is not None
    return graphs


def test_a_program_that_writes_memory_is_not_capturable() -> None:
    module = parse(
        """
        func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
          %0 = graph.torch_call "aten.add_.Tensor"(%x, %x) args = ["%t0", "%t1"] kwargs = {} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
          func.return %0 : tensor<4xf32>
        }
        """
    )
    reason = why_not_capturable(module)
    assert reason is not None and "writes memory it does not own (graph.torch_call)" in reason


def test_a_pure_program_is_capturable() -> None:
    compiled = xfuse.compile(lambda x: torch.relu(x) * 2, (torch.randn(8),), quiet=True)
    assert why_not_capturable(compiled.default.program.module) is None
    assert (
        xfuse.explain(lambda x: torch.relu(x) * 2, (torch.randn(8),), quiet=True).cuda_graph is None
    )


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("make", [make_mlp, make_transformer_block], ids=["mlp", "transformer"])
def test_replays_match_eager_and_kept_outputs_survive(make: object) -> None:
    model, (example,) = make()  # type: ignore[operator]
    model = model.cuda().eval()
    with torch.no_grad():
        compiled = xfuse.compile(model, (example.cuda(),), device="cuda", quiet=True)
        inputs = [torch.randn_like(example).cuda() for _ in range(5)]
        kept = [compiled(x) for x in inputs]  # warm-up, capture, then replays
        expected = [model(x) for x in inputs]
    runner = _runner(compiled)
    assert runner.reason is None and runner.captures == 1 and runner.replays == 4
    for got, want in zip(kept, expected, strict=True):
        torch.testing.assert_close(got, want)  # each kept output is still its call's value
    assert len({t.data_ptr() for t in kept}) == len(kept)


@gpu
@pytest.mark.gpu
def test_a_reassigned_parameter_is_seen_and_captured_anew() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU()).cuda().eval()
    x = torch.randn(4, 16, device="cuda")
    with torch.no_grad():
        compiled = xfuse.compile(model, (x,), device="cuda", quiet=True)
        for _ in range(3):
            compiled(x)
        model[0].weight = torch.nn.Parameter(torch.randn(16, 16, device="cuda"))
        torch.testing.assert_close(compiled(x), model(x))
    assert _runner(compiled).captures == 2


def test_graphs_pay_for_small_copies_only() -> None:
    assert graph_pays(1 << 20, 1)  # a MiB in and out: 0.5 us of copies, 4 us of launch
    assert graph_pays(64 << 20, 20)  # 34 us of copies, 80 us of launches
    assert not graph_pays(2 << 30, 6)  # a 1 GiB input and output: a millisecond of copies


@gpu
@pytest.mark.gpu
def test_a_program_of_large_tensors_runs_step_by_step() -> None:
    """Copying a 1 GiB input into the graph and its output out would cost 1 ms at every call,
    more than the launches a graph saves: the program runs without one, and says why."""
    x = torch.randn(1 << 28, device="cuda")
    compiled = xfuse.compile(lambda t: torch.sigmoid(t) * 2, (x,), device="cuda", quiet=True)
    for _ in range(3):
        y = compiled(x)
    runner = _runner(compiled)
    assert runner.captures == 0 and runner.reason is not None
    assert "copying its inputs and outputs (2048.0 MiB)" in runner.reason
    torch.testing.assert_close(y, torch.sigmoid(x) * 2)


@gpu
@pytest.mark.gpu
def test_graphs_can_be_turned_off() -> None:
    x = torch.randn(32, device="cuda")
    compiled = xfuse.compile(torch.sigmoid, (x,), device="cuda", quiet=True, cuda_graphs=False)
    assert compiled.default.graphs is None
    torch.testing.assert_close(compiled(x), torch.sigmoid(x))


@gpu
@pytest.mark.gpu
def test_kernels_run_on_a_user_stream() -> None:
    x = torch.randn(1 << 16, device="cuda")
    compiled = xfuse.compile(
        lambda t: torch.tanh(t) * 3, (x,), device="cuda", quiet=True, cuda_graphs=False
    )
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        y = compiled(x)
    stream.synchronize()
    torch.testing.assert_close(y, torch.tanh(x) * 3)


@gpu
@pytest.mark.gpu
def test_an_expanded_input_is_captured_and_replays_match_eager() -> None:
    """An input that overlaps itself (stride 0) cannot be `copy_`-ed into the graph's buffer:
    the memory it spans is copied instead, so the program still runs as a graph."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 2, dim=-1) + x

    def expanded(seed: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(seed)
        return torch.randn(8, 2, 1, generator=gen).cuda().expand(8, 2, 16)[1:]

    compiled = xfuse.compile(fn, (expanded(0),), device="cuda", quiet=True)
    inputs = [expanded(seed) for seed in range(4)]
    kept = [compiled(x) for x in inputs]
    runner = _runner(compiled)
    assert runner.reason is None and runner.captures == 1 and runner.replays == 3
    for got, x in zip(kept, inputs, strict=True):
        torch.testing.assert_close(got, fn(x))
