"""
The steps a compiled program runs, and the pool its intermediate buffers come from.

Values live in numbered slots. A step reads the tensors of its input slots and returns the
tensors of its output slots: a kernel launch (outputs freshly allocated, contiguous), an eager
op through the reference interpreter (externs, fallbacks), or a torch view (layout ops that feed
externs, so that no copy is made).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from xdsl.ir import Operation

from xfuse.backends import Kernel
from xfuse.dialects import graph
from xfuse.interpreter import run_op

Tensor = torch.Tensor


@dataclass(frozen=True)
class BufferSpec:
    """The shape and dtype of a buffer a kernel writes."""

    shape: tuple[int, ...]
    dtype: torch.dtype


Allocate = Callable[[BufferSpec], Tensor]


class BufferPool:
    """Free intermediate buffers by (shape, dtype), reused by later kernel outputs."""

    def __init__(self) -> None:
        self._free: dict[BufferSpec, list[Tensor]] = {}
        self.allocations = 0

    def allocate(self, spec: BufferSpec) -> Tensor:
        free = self._free.get(spec)
        if free:
            return free.pop()
        self.allocations += 1
        return torch.empty(spec.shape, dtype=spec.dtype)

    def release(self, spec: BufferSpec, buffer: Tensor) -> None:
        self._free.setdefault(spec, []).append(buffer)


@dataclass
class KernelStep:
    """Launch a compiled kernel: inputs (made contiguous), then freshly allocated outputs."""

    kernel: Kernel
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[BufferSpec, ...]
    label: str
    owns_outputs: bool = field(default=True, init=False)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        buffers = [a if a.is_contiguous() else a.contiguous() for a in args]
        outs = [allocate(spec) for spec in self.out_specs]
        # A kernel over empty outputs has nothing to write (and may index nothing safely).
        if any(o.numel() for o in outs):
            self.kernel([*buffers, *outs])
        return outs


@dataclass
class EagerStep:
    """Run one op (an extern, or a fusion.group that fell back) with eager torch."""

    op: Operation
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    label: str
    owns_outputs: bool = field(default=False, init=False)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        return run_op(self.op, args)


def _reshape_view(op: Operation, x: Tensor) -> Tensor:
    return x.reshape(graph.shape_of(op.results[0]))


def _permute_view(op: Operation, x: Tensor) -> Tensor:
    assert isinstance(op, graph.PermuteOp)
    return x.permute(op.permutation)


def _slice_view(op: Operation, x: Tensor) -> Tensor:
    assert isinstance(op, graph.SliceOp)
    start, limit, stride = op.bounds
    return x[tuple(slice(s, e, k) for s, e, k in zip(start, limit, stride, strict=True))]


VIEW_IMPLS: dict[str, Callable[[Operation, Tensor], Tensor]] = {
    "graph.reshape": _reshape_view,
    "graph.permute": _permute_view,
    "graph.slice": _slice_view,
}


@dataclass
class ViewStep:
    """A layout op as a torch view of its input (no copy); kernels make it contiguous."""

    op: Operation
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    label: str
    owns_outputs: bool = field(default=False, init=False)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        return [VIEW_IMPLS[self.op.name](self.op, args[0])]


Step = KernelStep | EagerStep | ViewStep
