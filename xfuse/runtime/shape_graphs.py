"""
CUDA graphs for a program with symbolic sizes (`xfuse.runtime.symbolic`, run by
`xfuse.runtime.dynamic`): the program is compiled once, and each concrete shape its calls take
is captured as a static program is (`xfuse.runtime.cuda_graphs`), a few of them at most.

- A call's shape (`shape_key`) is the values of its size symbols (`SymbolicProgram.bind`) and
  the strides of the inputs a graph copies in: a graph's input buffers have the sizes and
  strides of its capture, so a transposed input at the same sizes is another shape.
- Each shape gets a `GraphRunner` of its own at its first call, which serves that shape's calls
  as a static program's runner serves its specialisation's: the first call runs step by step
  (a warm-up), the second captures and replays, later calls replay; inputs are copied into the
  graph's buffers, parameters read in place (moved ones capture anew); outputs are handed over
  while the caller drops them, copied out otherwise; a shape whose copies cost more than its
  launches (`graph_pays`), or whose capture fails, runs step by step.
- At most `limit` shapes get a runner (`MAX_GRAPH_SHAPES`, or `XFUSE_CUDA_GRAPH_SHAPES`): the
  first ones called keep theirs for the program's life, and a call of any other shape runs
  with plain launches (`passed` counts them). Not a least-recently-used cache: a caller that
  cycles through more shapes than the bound would capture at nearly every call, and a capture
  runs the steps twice besides capturing them, costing more than the launches it saves. Each
  runner holds up to `RING_SIZE` captures (one where a capture holds `RING_MEMORY_SHARE` of
  the GPU's memory), so the program's graphs hold at most `limit` times that.
- A program `why_not_capturable` refuses (it writes memory it does not own) captures no shape:
  `reason` says why, and every call runs with plain launches.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Generic

import torch

from xfuse.errors import XfuseError
from xfuse.runtime.cuda_graphs import GraphRunner, P, RunSteps, why_not_capturable

Tensor = torch.Tensor

MAX_GRAPH_SHAPES = 8
"""Shapes of one symbolic program captured as CUDA graphs at most, unless
`XFUSE_CUDA_GRAPH_SHAPES` says otherwise: a serving loop's few batch sizes, or the buckets a
caller pads its sequences to, with room for the odd shape besides."""

GRAPH_SHAPES_ENV = "XFUSE_CUDA_GRAPH_SHAPES"

ShapeKey = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]
"""(the size symbols' values, in the table's order; the strides of the inputs copied in)."""

MakeRunner = Callable[[P, RunSteps[P], torch.device], GraphRunner[P]]
"""How a shape's runner is made: `GraphRunner` itself, or a stand-in of tests."""


def graph_shapes() -> int:
    """The shapes a symbolic program captures at most: `XFUSE_CUDA_GRAPH_SHAPES` (a whole
    number; 0 captures none), else `MAX_GRAPH_SHAPES`."""
    text = os.environ.get(GRAPH_SHAPES_ENV, "").strip()
    if not text:
        return MAX_GRAPH_SHAPES
    try:
        return max(int(text), 0)
    except ValueError:
        raise XfuseError(f"{GRAPH_SHAPES_ENV} must be a whole number, found {text!r}") from None


def shape_key(sizes: Mapping[str, int], copied: Sequence[Tensor]) -> ShapeKey:
    """The shape of a call whose size symbols are `sizes` and whose inputs a graph copies in
    are `copied` (see the module docstring)."""
    return tuple(sizes.values()), tuple(tuple(t.stride()) for t in copied)


class ShapeGraphs(Generic[P]):
    """The CUDA-graph runners of a symbolic program's shapes, one per shape for at most `limit`
    shapes (see the module docstring). `runner_for` picks a call's; None: plain launches."""

    def __init__(
        self,
        program: P,
        run_steps: RunSteps[P],
        device: torch.device,
        limit: int | None = None,
        make_runner: MakeRunner[P] = GraphRunner,
    ) -> None:
        self.program = program
        self.run_steps = run_steps
        self.device = device
        self.limit = graph_shapes() if limit is None else limit
        self.make_runner = make_runner
        self.reason = why_not_capturable(program.module)
        """Why no shape is captured (the program writes memory it does not own), or None."""
        self.runners: dict[Hashable, GraphRunner[P]] = {}
        """Each shape's runner, in the order of their first calls."""
        self.passed = 0
        """Calls of shapes past the bound, run with plain launches."""
        self._lock = threading.Lock()

    def runner_for(self, key: Hashable) -> GraphRunner[P] | None:
        """The runner of the shape `key`, made at its first call while the bound allows; None
        for a call that runs with plain launches (past the bound, or no shape is captured)."""
        runner = self.runners.get(key)
        if runner is not None:
            return runner
        if self.reason is not None:
            return None
        with self._lock:  # threads may share a program: one runner per shape
            runner = self.runners.get(key)
            if runner is None and len(self.runners) < self.limit:
                runner = self.make_runner(self.program, self.run_steps, self.device)
                self.runners[key] = runner
            if runner is None:
                self.passed += 1
            return runner

    @property
    def captures(self) -> int:
        """Graphs captured over every shape."""
        return sum(r.captures for r in self.runners.values())

    @property
    def replays(self) -> int:
        """Replays over every shape."""
        return sum(r.replays for r in self.runners.values())

    def status(self) -> str:
        """How the program's calls run: `Explanation.cuda_graph` of a symbolic program."""
        if self.reason is not None:
            return f"not used: {self.reason}"
        text = (
            "captured per shape (at each shape's second call), replayed from then on, for at "
            f"most {self.limit} shapes ({GRAPH_SHAPES_ENV}); calls of other shapes run step "
            "by step"
        )
        if self.runners or self.passed:
            text += (
                f"; shapes so far: {len(self.runners)}, captures: {self.captures}, calls past "
                f"the bound: {self.passed}"
            )
        refused = sorted({r.reason for r in self.runners.values() if r.reason is not None})
        if refused:
            text += "; not used for some shapes: " + "; ".join(refused)
        return text
