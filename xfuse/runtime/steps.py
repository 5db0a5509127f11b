"""
The steps a compiled program runs, and the pool its intermediate buffers come from.

Values live in numbered slots. A step reads the tensors of its input slots and returns the
tensors of its output slots: a kernel launch (outputs freshly allocated, contiguous), an eager
op through the reference interpreter (externs, fallbacks), or a torch view (layout ops that feed
externs, so that no copy is made).
"""

from __future__ import annotations

import math
import os
import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import torch
from xdsl.ir import Operation

from xfuse.backends import Kernel
from xfuse.dialects import graph
from xfuse.interpreters.graph import PreparedOp, prepare_op

Tensor = torch.Tensor


@dataclass(frozen=True)
class BufferSpec:
    """The shape and dtype of a buffer a kernel writes."""

    shape: tuple[int, ...]
    dtype: torch.dtype


Allocate = Callable[[BufferSpec], Tensor]


def _reference_counts(buffers: list[Tensor], i: int) -> tuple[int, ...]:
    """Who holds `buffers[i]`: Python references (strong and weak) to the tensor, C++
    references to its TensorImpl, Python references to its storage object, C++ references to
    its StorageImpl."""
    t = buffers[i]
    storage = t.untyped_storage()
    return (
        sys.getrefcount(t),
        weakref.getweakrefcount(t),
        t._use_count(),  # type: ignore[attr-defined]  # private torch API, not in its stubs
        sys.getrefcount(storage),
        torch._C._storage_Use_Count(storage._cdata),  # pyright: ignore[reportAttributeAccessIssue]
    )


@cache
def _unreferenced_counts() -> tuple[int, ...]:
    """`_reference_counts` of a tensor that only the list passed to it holds (measured, so that
    it holds whatever the Python and torch versions count)."""
    return _reference_counts([torch.empty(1)], 0)


def reuse_outputs_enabled() -> bool:
    """Output recycling (see `BufferPool`) is off unless `XFUSE_REUSE_OUTPUTS=1`: it judges from
    reference counts, which cannot see every holder (another process reading shared memory)."""
    return os.environ.get("XFUSE_REUSE_OUTPUTS", "0") == "1"


class BufferPool:
    """Free intermediate buffers by (shape, dtype), reused by later kernel outputs.

    CPU outputs handed to the caller are remembered (the last call's only) and reused by a
    later call once the caller holds no reference to them, their storage or a view of them: a
    fresh large buffer costs a page fault per 4 KiB page on first write, which costs more than
    the kernels that fill it (a caching allocator, as torch has for CUDA).
    """

    def __init__(self, device: torch.device | str = "cpu") -> None:
        self._free: dict[BufferSpec, list[Tensor]] = {}
        self.allocations = 0
        self.device = torch.device(device)
        self.recycle = self.device.type == "cpu" and reuse_outputs_enabled()
        self._handed_out: list[Tensor] = []
        """Outputs of the last call (kernel buffers), reusable once the caller drops them."""
        self._allocated: list[Tensor] = []
        """Buffers `allocate` gave out during this call."""

    def allocate(self, spec: BufferSpec) -> Tensor:
        free = self._free.get(spec)
        buffer = free.pop() if free else self._recycled(spec)
        if buffer is None:
            self.allocations += 1
            buffer = torch.empty(spec.shape, dtype=spec.dtype, device=self.device)
        if self.recycle:
            self._allocated.append(buffer)
        return buffer

    def release(self, spec: BufferSpec, buffer: Tensor) -> None:
        self._free.setdefault(spec, []).append(buffer)

    def _recycled(self, spec: BufferSpec) -> Tensor | None:
        """A previous call's output of this spec that nobody else references, if any."""
        handed = self._handed_out
        for i in range(len(handed)):
            t = handed[i]
            if tuple(t.shape) != spec.shape or t.dtype != spec.dtype:
                continue
            del t
            if _reference_counts(handed, i) == _unreferenced_counts():
                return handed.pop(i)
        return None

    def hand_out(self, outputs: list[Tensor]) -> None:
        """The call is over and `outputs` go to the caller: remember those that are buffers of
        this pool (for `_recycled`), forget the rest of the call's allocations."""
        if self.recycle:
            ours = {id(t) for t in self._allocated}
            self._handed_out = [t for t in outputs if id(t) in ours]
            self._allocated = []


@dataclass
class KernelStep:
    """Launch a compiled kernel: inputs (made contiguous), then freshly allocated outputs."""

    kernel: Kernel
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    out_specs: tuple[BufferSpec, ...]
    label: str
    owns_outputs: bool = field(default=True, init=False)
    writes: bool = field(init=False, repr=False)
    """Whether some output has elements: a kernel over empty outputs has nothing to write (and
    may index nothing safely), so it is not launched."""

    def __post_init__(self) -> None:
        self.writes = any(math.prod(spec.shape) for spec in self.out_specs)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        buffers = [a if a.is_contiguous() else a.contiguous() for a in args]
        outs = [allocate(spec) for spec in self.out_specs]
        if self.writes:
            buffers += outs
            self.kernel(buffers)
        return outs


@dataclass
class EagerStep:
    """Run one op (an extern, or a fusion.group that fell back) with eager torch."""

    op: Operation
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    label: str
    owns_outputs: bool = field(default=False, init=False)
    call: PreparedOp = field(init=False, repr=False)
    """The op prepared once (arguments decoded, operator resolved): operands -> results."""

    def __post_init__(self) -> None:
        self.call = prepare_op(self.op)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        return self.call(args)


View = Callable[[Tensor], Tensor]


def _reshape_view(op: Operation) -> View:
    shape = graph.shape_of(op.results[0])
    return lambda x: x.reshape(shape)


def _permute_view(op: Operation) -> View:
    assert isinstance(op, graph.PermuteOp)
    permutation = op.permutation
    return lambda x: x.permute(permutation)


def _slice_view(op: Operation) -> View:
    assert isinstance(op, graph.SliceOp)
    start, limit, stride = op.bounds
    index = tuple(slice(s, e, k) for s, e, k in zip(start, limit, stride, strict=True))
    return lambda x: x[index]


VIEW_IMPLS: dict[str, Callable[[Operation], View]] = {
    "graph.reshape": _reshape_view,
    "graph.permute": _permute_view,
    "graph.slice": _slice_view,
}
"""Layout op name -> the torch view it is, made once from the op's attributes."""


@dataclass
class ViewStep:
    """A layout op as a torch view of its input (no copy); kernels make it contiguous."""

    op: Operation
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    label: str
    owns_outputs: bool = field(default=False, init=False)
    view: View = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.view = VIEW_IMPLS[self.op.name](self.op)

    def run(self, args: list[Tensor], allocate: Allocate) -> list[Tensor]:
        return [self.view(args[0])]


Step = KernelStep | EagerStep | ViewStep
