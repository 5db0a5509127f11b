"""
What one kernel's row loop can compute, written once: `lower-to-loops` builds a group's loops
by these rules (`xfuse.passes.lowering.kernel_builder`), and fusion's `loop-structure` gate
checks a merged group against them (`legality.loop_structure`), so that fusion forms only
groups that lower.

A group with reductions runs as one row loop: its reductions reduce one full shape over the
same dims (`RowShape.holds`), each iteration computes one row, a reduction's result is known
only at the iteration's own row (`reads_own_row`), and each output is of the full shape, of a
row shape (keepdim or not), or of another shape with as many elements, written at the same
memory position (`RowShape.output_place`; any other shape is refused). Such an output that
reshapes a value of the full shape inside the group is that value, computed at the iteration's
own element and stored at its memory position (`written_value`): the reshape's index
arithmetic, which may cut the row's dims, is never followed.

Within a row, the kernel makes one loop over the row per phase of its reductions, then one
that writes the outputs stored at every element, where one of them reads the last phase's
results; else the last phase's loop writes them (`RowPasses`): `lower-to-loops` emits these
loops, and fusion's `row-recompute` gate counts them (`legality.row_recompute`), since each
loop computes again the values it reads from the group's inputs.

A group with a `graph.scan` runs as the scan's loop (`ScanLoop`): `lower-to-loops` builds it
(`xfuse.passes.lowering.scans`) and fusion's `scan` gate checks a merged group against it
(`legality.scan_merge`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph


class OutputPlace(Enum):
    """Where a row loop writes an output of a given shape."""

    FULL = "full"
    """At every element of the full shape (in the innermost loop)."""
    ROW_KEEPDIM = "row-keepdim"
    """Once per row, the reduced dims kept as size 1."""
    ROW = "row"
    """Once per row, the reduced dims dropped."""
    SAME_ELEMENTS = "same-elements"
    """At every element, as a shape of as many elements as the full one (a reshape of a value
    of the full shape), at the same memory position."""


ROW_PLACES = frozenset({OutputPlace.ROW_KEEPDIM, OutputPlace.ROW})
"""The places written once per row; the others are written at every element."""


@dataclass(frozen=True)
class RowShape:
    """The row loop of a group: `full` is the shape its reductions reduce, `dims` the dims
    they fold (none: a loop over the elements)."""

    full: tuple[int, ...]
    dims: tuple[int, ...]

    def row_shape(self, keepdim: bool) -> tuple[int, ...]:
        return graph.reduced_shape(self.full, self.dims, keepdim)

    def output_place(self, shape: tuple[int, ...]) -> OutputPlace | None:
        """Where an output of `shape` is written; None when one row loop cannot write it."""
        if shape == self.full:
            return OutputPlace.FULL
        if shape == self.row_shape(True):
            return OutputPlace.ROW_KEEPDIM
        if shape == self.row_shape(False):
            return OutputPlace.ROW
        if graph.numel(shape) == graph.numel(self.full):
            return OutputPlace.SAME_ELEMENTS
        return None

    def holds(self, full: tuple[int, ...], dims: Sequence[int]) -> bool:
        """Whether a reduction of `full` over `dims` runs in this row loop."""
        return (full, tuple(dims)) == (self.full, self.dims)

    def written_value(self, output: SSAValue, inside: Callable[[Operation], bool]) -> SSAValue:
        """The value an output of `OutputPlace.SAME_ELEMENTS` stores: through reshapes that
        `inside` holds, the first value of the full shape, else the output itself."""
        value = output
        while graph.shape_of(value) != self.full:
            owner = value.owner
            if not isinstance(owner, graph.ReshapeOp) or not inside(owner):
                return output
            value = owner.input
        return value


@dataclass(frozen=True)
class RowPasses:
    """The loops a row kernel makes over each row, in order: one per phase of its reductions
    (`phases`: the reductions each loop folds), then, when it writes an output at every
    element that reads the last phase's results (`writes`), one that writes the outputs. Where
    none does (`y = f(x)` and `y.sum(-1)`), the last phase's loop writes them (`in_last`)."""

    phases: tuple[tuple[graph.ReduceOp, ...], ...]
    writes: bool
    in_last: bool = False

    @classmethod
    def of(
        cls,
        ops: Iterable[Operation],
        reductions: Sequence[graph.ReduceOp],
        written: Iterable[SSAValue],
    ) -> RowPasses:
        """The passes of a kernel computing `ops` (in program order), of which `reductions`
        (in program order) reduce over some dims, and writing `written` at every element:
        each reduction is in the phase after the latest phase of a reduction of `ops` its
        input depends on (one that depends on none: the first)."""
        folds = set(reductions)
        depth: dict[SSAValue, int] = {}
        for op in ops:
            d = max((depth.get(v, 0) for v in op.operands), default=0) + (op in folds)
            if d:
                for res in op.results:
                    depth[res] = d
        phases: dict[int, list[graph.ReduceOp]] = {}
        for r in reductions:
            phases.setdefault(depth[r.result], []).append(r)
        last = max(phases, default=0)
        needs = [depth.get(v, 0) for v in written]
        writes = any(d >= last for d in needs)
        in_last = bool(needs) and not writes
        return cls(tuple(tuple(phases[k]) for k in sorted(phases)), writes, in_last)

    @property
    def count(self) -> int:
        """How many loops over a row the kernel makes."""
        return len(self.phases) + self.writes


T = TypeVar("T")


def reads_own_row(index: Sequence[T], row: Sequence[T], shape: Sequence[int]) -> bool:
    """Whether a reduction's result of `shape`, read at `index`, is read at the iteration's
    own row `row` (the index of its row in the result; a dim of size 1 is read at 0)."""
    return all(size == 1 or got == want for got, want, size in zip(index, row, shape, strict=True))


@dataclass(frozen=True)
class ScanLoop:
    """The loop of a group with a `graph.scan`: a parallel loop over the scan's other dims and,
    inside it, a sequential one along its dim `axis` carrying the value so far; every other op
    is computed at the scan's index. So such a group holds one scan and no reduction
    (`computes`), and each output is of the scan's shape `shape` (`writes`)."""

    shape: tuple[int, ...]
    axis: int

    @classmethod
    def of(cls, scan: graph.ScanOp) -> ScanLoop:
        return cls(graph.shape_of(scan.result), scan.axis)

    @staticmethod
    def computes(scans: int, reductions: int) -> bool:
        """Whether one scan loop computes a group of `scans` scans and `reductions`
        reductions: each other scan, and a reduction's row loop, is a loop of its own."""
        return scans == 1 and reductions == 0

    def writes(self, shape: tuple[int, ...]) -> bool:
        """Whether this loop writes an output of `shape`: at the scan's own index only."""
        return shape == self.shape
