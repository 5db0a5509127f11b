"""CUDA graphs per shape of a symbolic program (`xfuse.runtime.shape_graphs`), on the CPU: the
policy with stand-in runners (a shape's key, one runner per shape, the bound, plain launches
past it, a program that writes memory)."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import pytest
import torch

from xfuse.errors import XfuseError
from xfuse.explanation import shape_graph_status
from xfuse.ir.context import parse
from xfuse.runtime.shape_graphs import (
    GRAPH_SHAPES_ENV,
    MAX_GRAPH_SHAPES,
    ShapeGraphs,
    graph_shapes,
    shape_key,
)

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
