"""CUDA graphs per shape of a symbolic program (`xfuse.runtime.shape_graphs`), on the CPU: the
policy with stand-in runners (a shape's key, one runner per shape, the bound, plain launches
past it, a program that writes memory), and a `DynamicProgram` whose graphs are
`CPUGraphRunner`s (graphs that run the steps again on the CPU): each shape captures on its
second call and replays after, calls past the bound run with plain launches, and every call
matches eager. The same on a GPU: tests/test_dynamic_cuda.py."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch.export import Dim

import xfuse
from tests.runtime.runtime_fakes import CPUGraphRunner
from tests.runtime.test_symbolic_program import Block
from xfuse import dynamo
from xfuse.errors import XfuseError
from xfuse.explanation import shape_graph_status
from xfuse.ir.context import parse
from xfuse.runtime.dynamic import DynamicProgram, run_symbolic
from xfuse.runtime.shape_graphs import (
    GRAPH_SHAPES_ENV,
    MAX_GRAPH_SHAPES,
    ShapeGraphs,
    graph_shapes,
    shape_key,
)

BATCH = {"x": {0: Dim("batch", min=2, max=64)}}

WRITES_ITS_INPUT = """
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.torch_call "aten.add_.Tensor"(%x, %x) args = ["%t0", "%t1"] kwargs = {} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""

PURE = """
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = graph.relu %x : tensor<4xf32>
  func.return %0 : tensor<4xf32>
}
"""


class _Program:
    """A program as a `GraphRunner` sees it: a module and steps."""

    def __init__(self, module_text: str) -> None:
        self.module = parse(module_text)
        self.steps: list[object] = []


class _Runner:
    """A shape's runner that records what it was made for (nothing runs)."""

    def __init__(self, program: Any, run_steps: Any, device: torch.device) -> None:
        self.program, self.device = program, device
        self.captures = self.replays = 0
        self.reason: str | None = None


def _graphs(limit: int, module_text: str = PURE) -> ShapeGraphs[Any]:
    return ShapeGraphs(
        _Program(module_text),  # type: ignore[arg-type]
        lambda program, args, pool: [],
        torch.device("cpu"),
        limit=limit,
        make_runner=_Runner,  # type: ignore[arg-type]
    )


def test_each_shape_gets_one_runner_up_to_the_bound_then_plain_launches() -> None:
    graphs = _graphs(limit=2)
    first = graphs.runner_for("a")
    assert first is not None and graphs.runner_for("a") is first
    second = graphs.runner_for("b")
    assert second is not None and second is not first
    assert graphs.runner_for("c") is None and graphs.runner_for("d") is None
    assert graphs.passed == 2
    # The shapes that got a runner keep it: no shape past the bound evicts one.
    assert graphs.runner_for("a") is first and graphs.runner_for("b") is second
    assert list(graphs.runners) == ["a", "b"] and graphs.passed == 2


def test_a_bound_of_zero_captures_no_shape() -> None:
    graphs = _graphs(limit=0)
    assert graphs.runner_for("a") is None and graphs.passed == 1 and not graphs.runners


def test_a_program_that_writes_memory_captures_no_shape() -> None:
    graphs = _graphs(limit=8, module_text=WRITES_ITS_INPUT)
    assert graphs.runner_for("a") is None and not graphs.runners
    assert graphs.status() == (
        "not used: the program writes memory it does not own (graph.torch_call)"
    )


def test_threads_calling_one_new_shape_share_one_runner() -> None:
    graphs = _graphs(limit=8)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        found = list(pool.map(lambda _: graphs.runner_for((5,)), range(64)))
    assert len({id(r) for r in found}) == 1 and len(graphs.runners) == 1


def test_a_shape_is_the_sizes_and_the_strides_of_the_inputs_copied_in() -> None:
    x = torch.randn(4, 6)
    sizes = {"s0": 4, "s1": 6, "s2": 24}
    assert shape_key(sizes, [x]) == ((4, 6, 24), ((6, 1),))
    assert shape_key(sizes, [x]) == shape_key(sizes, [torch.randn(4, 6)])
    transposed = torch.randn(6, 4).t()  # the same sizes, another layout: another graph
    assert shape_key(sizes, [transposed]) != shape_key(sizes, [x])
    assert shape_key({"s0": 5, "s1": 6, "s2": 30}, [torch.randn(5, 6)]) != shape_key(sizes, [x])


def test_the_bound_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GRAPH_SHAPES_ENV, raising=False)
    assert graph_shapes() == MAX_GRAPH_SHAPES == _graphs_with_default_limit().limit
    monkeypatch.setenv(GRAPH_SHAPES_ENV, "3")
    assert graph_shapes() == 3 == _graphs_with_default_limit().limit
    monkeypatch.setenv(GRAPH_SHAPES_ENV, "0")
    assert graph_shapes() == 0
    monkeypatch.setenv(GRAPH_SHAPES_ENV, "many")
    with pytest.raises(XfuseError, match="XFUSE_CUDA_GRAPH_SHAPES must be a whole number"):
        graph_shapes()


def _graphs_with_default_limit() -> ShapeGraphs[Any]:
    return ShapeGraphs(
        _Program(PURE),  # type: ignore[arg-type]
        lambda program, args, pool: [],
        torch.device("cpu"),
        make_runner=_Runner,  # type: ignore[arg-type]
    )


def test_the_status_says_graphs_are_per_shape_and_names_the_bound() -> None:
    graphs = _graphs(limit=3)
    status = graphs.status()
    assert "captured per shape" in status and "at most 3 shapes" in status
    assert GRAPH_SHAPES_ENV in status and "other shapes run step by step" in status
    assert shape_graph_status(graphs, torch.device("cpu")) is None
    assert shape_graph_status(None, torch.device("cuda")) == (
        "off (cuda_graphs=False or XFUSE_CUDA_GRAPHS=0): steps run one by one"
    )
    assert shape_graph_status(graphs, torch.device("cuda")) == status
    for key in "abcd":
        graphs.runner_for(key)
    assert graphs.status().endswith("; shapes so far: 3, captures: 0, calls past the bound: 1")


# ---------------------------------------------------------------------------------------------
# A DynamicProgram whose graphs run on the CPU
# ---------------------------------------------------------------------------------------------


def _on_cpu_graphs(program: DynamicProgram, limit: int) -> ShapeGraphs[Any]:
    """`program`'s graphs as on a GPU, made of `CPUGraphRunner`s."""
    graphs = ShapeGraphs(
        program.compiled, run_symbolic, program.device, limit=limit, make_runner=CPUGraphRunner
    )
    program.graphs = graphs
    return graphs


def _block() -> tuple[torch.nn.Module, DynamicProgram]:
    torch.manual_seed(0)
    model = Block().eval()
    program = xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH)
    assert program.graphs is None  # on the CPU: plain launches
    return model, program


def _runner_of(graphs: ShapeGraphs[Any], batch: int) -> CPUGraphRunner:
    (runner,) = [r for key, r in graphs.runners.items() if key[0][0] == batch]  # type: ignore[index]
    assert isinstance(runner, CPUGraphRunner)
    return runner


def test_each_shape_captures_on_its_second_call_and_replays_after() -> None:
    model, program = _block()
    graphs = _on_cpu_graphs(program, limit=8)
    batches = [3, 3, 3, 5, 3, 5, 5, 9]
    # One input per batch size, held: a graph re-captures where an input it read in place
    # moved, and fresh inputs land where the allocator's state puts them.
    inputs = {batch: torch.randn(batch, 16) for batch in set(batches)}
    with torch.no_grad():
        for batch in batches:
            x = inputs[batch]
            torch.testing.assert_close(program(x), model(x))
    assert len(graphs.runners) == 3 and graphs.passed == 0
    three, five, nine = (_runner_of(graphs, b) for b in (3, 5, 9))
    assert (three.captures, three.replays) == (1, 3)  # a warm-up, then a capture and replays
    assert (five.captures, five.replays) == (1, 2)
    assert (nine.captures, nine.replays) == (0, 0)  # one call: the warm-up
    assert graphs.captures == 2 and graphs.replays == 5
    assert three.handed == three.replays  # outputs dropped at once: handed over, no copy


def test_shapes_past_the_bound_run_with_plain_launches_and_match_eager() -> None:
    model, program = _block()
    graphs = _on_cpu_graphs(program, limit=2)
    inputs = {batch: torch.randn(batch, 16) for batch in (2, 4, 6, 8)}  # held, as above
    with torch.no_grad():
        for batch in [2, 2, 4, 4, 6, 6, 8, 2, 4, 6]:
            x = inputs[batch]
            torch.testing.assert_close(program(x), model(x))
    assert sorted(key[0][0] for key in graphs.runners) == [2, 4]  # type: ignore[index]
    assert graphs.passed == 4  # batches 6, 6, 8 and 6 again
    assert graphs.captures == 2 and graphs.replays == 4


def test_kept_outputs_of_one_shape_survive_its_later_calls() -> None:
    """Every output kept (a list of results): the shape's ring of captures fills, and its last
    capture copies its outputs out, as a static program's does."""
    model, program = _block()
    graphs = _on_cpu_graphs(program, limit=8)
    xs = [torch.randn(4, 16) for _ in range(6)]
    with torch.no_grad():
        kept = [program(x) for x in xs]
        for got, x in zip(kept, xs, strict=True):
            torch.testing.assert_close(got, model(x))
    runner = _runner_of(graphs, 4)
    assert runner.captures == 3 and runner.replays == 5 and runner.handed < runner.replays


def test_parameters_are_read_in_place_and_a_moved_one_captures_anew() -> None:
    model, program = _block()
    graphs = _on_cpu_graphs(program, limit=8)
    xs = [torch.randn(3, 16) for _ in range(4)]  # held: a new address at every call
    with torch.no_grad():
        program(xs[0])
        program(xs[1])  # captured
        runner = _runner_of(graphs, 3)
        (captured,) = runner._ring
        assert len(captured.copied) == 1  # the input; the parameters are read where they are
        model.l2.bias.add_(1.0)  # updated in place: the next replay reads it
        torch.testing.assert_close(program(xs[2]), model(xs[2]))
        assert runner.captures == 1
        model.l2.weight = torch.nn.Parameter(torch.randn(8, 32))  # another tensor: capture anew
        torch.testing.assert_close(program(xs[3]), model(xs[3]))
        assert runner.captures == 2


def test_cuda_graphs_false_gives_no_graphs() -> None:
    model = Block().eval()
    program = xfuse.compile(model, (torch.randn(5, 16),), dynamic_shapes=BATCH, cuda_graphs=False)
    assert program.graphs is None and program.cuda_graphs is False


def test_static_inputs_are_read_in_place() -> None:
    """A function of its weights, its weight and bias named static: a graph reads them where
    they are and copies the input alone (a new tensor at every call)."""

    def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w.t() + b)

    x, w, b = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8)
    program = xfuse.compile(
        linear,
        (x, w, b),
        dynamic_shapes=({0: Dim("batch", min=2)}, None, None),
        static_inputs=(1, 2),
    )
    assert isinstance(program, DynamicProgram)
    graphs = _on_cpu_graphs(program, limit=8)
    xs = [x, torch.randn(4, 16), torch.randn(4, 16)]
    with torch.no_grad():
        program(xs[0], w, b)
        program(xs[1], w, b)
        w.mul_(2.0)
        torch.testing.assert_close(program(xs[2], w, b), linear(xs[2], w, b))
    (runner,) = graphs.runners.values()
    (captured,) = runner._ring
    assert captured.copied == (0,) and runner.captures == 1


def test_torch_compile_reads_the_parameters_it_lifts_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`torch.compile(dynamic=True)` passes the module's parameters as graph inputs; the
    symbolic program takes them as static inputs, so a graph would not copy them in."""
    made: list[DynamicProgram] = []
    real = dynamo.symbolic_program

    def recording(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *rest: Any) -> Any:
        program, inputs = real(gm, example_inputs, *rest)
        made.append(program)
        return program, inputs

    monkeypatch.setattr(dynamo, "symbolic_program", recording)
    torch.manual_seed(0)
    model = Block().eval()
    torch._dynamo.reset()
    try:
        compiled = torch.compile(model, backend="xfuse", dynamic=True)
        with torch.no_grad():
            x = torch.randn(6, 16)
            torch.testing.assert_close(compiled(x), model(x))
    finally:
        torch._dynamo.reset()
    (program,) = made
    names = program.program.input_names  # dynamo's placeholders: no module state of its own
    assert len(program.in_place) == len(list(model.parameters()))
    assert all("_parameters_" in names[i] for i in program.in_place)
    assert [i for i in program.copied if names[i].endswith("_x_")]  # the input is copied in
