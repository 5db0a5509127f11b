"""
What fusion knows of one op, decided by its class (and for `graph.torch_call`, its target):
the iteration space it runs, whether it is a scalar constant, a gather (slice or concat) or a
window op, or may write memory (its kind is `xfuse.dialects.op_kinds.kind_of`'s). Each is
cached per op class: fusion asks for every pair it looks at. `legality` decides on pairs of
nodes from these facts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from functools import cache, lru_cache

from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.facts import MAX_PATCH_READS, MAX_WINDOW_READS
from xfuse.dialects.op_kinds import OpGroup

# Facts that an op's class decides, cached per class: `isinstance` on an op class goes
# through `ABCMeta`, and fusion asks for every pair it looks at.


class OpClass(Enum):
    """A class of ops that fusion's gates treat alike (`op_classes`). A fusion node keeps the
    classes of the ops it holds (`graph.Node.classes`), so that a gate that only concerns
    some class skips the walk over a node's ops when it holds none."""

    CONSTANT = "constant"
    """`graph.constant`."""
    GATHER = "gather"
    """`OpGroup.GATHER`: a slice, concat or gather (see `gather_mismatch`)."""
    SLICE = "slice"
    """`OpGroup.SLICE`: a slice or concat, reading its input at its own positions, shifted."""
    WINDOW = "window"
    """`OpGroup.WINDOW`: a pad, pool or patches (see `legality.window_recompute`)."""


_CLASS_OPS: tuple[tuple[OpClass, type[Operation] | tuple[type[Operation], ...]], ...] = (
    (OpClass.CONSTANT, graph.ConstantOp),
    (OpClass.GATHER, OpGroup.GATHER),
    (OpClass.SLICE, OpGroup.SLICE),
    (OpClass.WINDOW, OpGroup.WINDOW),
)


@cache
def _classes_of_class(cls: type[Operation]) -> frozenset[OpClass]:
    return frozenset(c for c, ops in _CLASS_OPS if issubclass(cls, ops))


def op_classes(op: Operation) -> frozenset[OpClass]:
    """The classes `op` belongs to, cached per op class."""
    return _classes_of_class(type(op))


def is_constant_op(op: Operation) -> bool:
    """`isinstance(op, graph.ConstantOp)`, cached per op class."""
    return OpClass.CONSTANT in _classes_of_class(type(op))


def is_inlinable_constant(value: SSAValue) -> bool:
    """Scalar constants are copied into the groups that use them instead of becoming inputs,
    and so are iotas (arange: a kernel computes them from the loop index, cheaper than a
    load) and sizes of the call (from the kernel's size arguments)."""
    owner = value.owner
    if isinstance(owner, graph.IotaOp | graph.SizeValueOp):
        return True
    return isinstance(owner, graph.ConstantOp) and graph.numel(graph.shape_of(value)) <= 1


# ---------------------------------------------------------------------------------------------
# Iteration spaces
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Space:
    """The loop nest a node runs: `domain` is the iterated shape, `reduced` the dims of it that
    a reduction folds (empty when the node reduces nothing)."""

    domain: tuple[int, ...]
    reduced: frozenset[int] = frozenset()

    def __str__(self) -> str:
        text = graph.fmt_shape(self.domain)
        if self.reduced:
            text += " reducing " + ",".join(str(d) for d in sorted(self.reduced))
        return text


def space_of_op(op: Operation) -> Space:
    if isinstance(op, graph.ReduceOp):
        return Space(graph.shape_of(op.input), frozenset(op.reduce_dims))
    return Space(graph.shape_of(op.results[0]))


def _drops_dims(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """`small` is `big` with some dims deleted (the shape of a reduction over it)."""
    rest = iter(big)
    return all(any(d == b for b in rest) for d in small)


def fits_inside(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """`small` can be computed inside a loop nest over `big`: broadcast, or a reduced shape."""
    return graph.broadcast_shapes(small, big) == big or _drops_dims(small, big)


def combine_spaces(a: Space, b: Space) -> Space | None:
    """`spaces_combined`, remembered for static spaces (fusion asks for the same few pairs of
    spaces again and again). A symbolic domain is left out: it equals the plain tuple of its
    ints, but hashes and prints otherwise."""
    if a == b:
        return a
    if type(a.domain) is tuple and type(b.domain) is tuple:
        return _static_spaces_combined(a, b)
    return spaces_combined(a, b)


@lru_cache(maxsize=4096)
def _static_spaces_combined(a: Space, b: Space) -> Space | None:
    return spaces_combined(a, b)


def spaces_combined(a: Space, b: Space) -> Space | None:
    """The space of a group holding both, or None when the spaces are unrelated.

    Equal spaces combine; a smaller space that broadcasts into a larger one, or is a reduced
    form of it, runs inside the larger loop nest; a reduction absorbs ops over its domain, over
    its reduced shape and over shapes of as many elements (a layer norm's output reshaped into
    heads; whether its rows stay rows is `legality.loop_structure`'s to say); two reductions
    combine only over the same domain and dims; two spaces of equal size combine when no
    reduction is involved (a reshape or permute between them is index arithmetic).
    """
    if a == b:
        return a
    if a.reduced and b.reduced:
        return None
    if b.reduced:
        a, b = b, a
    if a.reduced:
        fits = fits_inside(b.domain, a.domain)
        return a if fits or graph.numel(b.domain) == graph.numel(a.domain) else None
    if fits_inside(b.domain, a.domain):
        return a
    if fits_inside(a.domain, b.domain):
        return b
    if graph.numel(a.domain) == graph.numel(b.domain):
        return a if len(a.domain) >= len(b.domain) else b
    return None


def is_gather_op(op: Operation) -> bool:
    """`isinstance(op, OpGroup.GATHER)`, cached per op class (`op_classes`)."""
    return OpClass.GATHER in _classes_of_class(type(op))


def _is_slice(op: Operation) -> bool:
    """A slice or concat: it reads its input at its own positions, shifted."""
    return OpClass.SLICE in _classes_of_class(type(op))


def gather_mismatch(
    readers: Iterable[tuple[Operation, SSAValue]],
    producer_reduces: bool = False,
    inline_slices: bool = False,
) -> str | None:
    """A slice or concat reading a value of another shape cannot fold its producer: the kernel
    iterates the slice's output, not the producer's. Returns a detail when that happens.
    With `inline_slices` (a producer that reduces nothing and that only the slicing node reads,
    `legality.edge_gather_mismatch`), slices and concats compute it where they read it.
    `graph.gather` reads its index tensors elementwise (the usual rules) and its table at
    computed positions: like a slice for the table's shape, and never from a producer that
    reduces (a reduction's value exists for one row at a time; recomputing an elementwise
    producer at a gathered position is fine)."""
    for reader, value in readers:
        if isinstance(reader, graph.GatherOp) and value != reader.table:
            continue  # an index tensor
        if isinstance(reader, graph.GatherOp) and producer_reduces:
            return (
                "graph.gather reads its table at computed indices, not at the row a "
                "reduction's value exists for"
            )
        if is_gather_op(reader) and not (inline_slices and _is_slice(reader)):
            out, src = graph.shape_of(reader.results[0]), graph.shape_of(value)
            if out != src:
                return f"{reader.name} reads {graph.fmt_shape(src)} into {graph.fmt_shape(out)}"
    return None


# ---------------------------------------------------------------------------------------------
# Windowed ops: pad, pool and patches read their input at shifted, clamped positions
# ---------------------------------------------------------------------------------------------


def is_window_op(op: Operation) -> bool:
    """`isinstance(op, OpGroup.WINDOW)`, cached per op class (`op_classes`)."""
    return OpClass.WINDOW in _classes_of_class(type(op))


def max_window_reads(op: Operation) -> float:
    """How many times a windowed op may read each element of a producer it absorbs."""
    return MAX_PATCH_READS if isinstance(op, graph.PatchesOp) else MAX_WINDOW_READS


def window_reads(op: Operation) -> float:
    """How many times a windowed op reads each element of its input, on average. A pool counts
    only its window positions inside the input (a window larger than its input, a global
    pool written as `AvgPool2d(1280)`, reads each element once)."""
    if isinstance(op, graph.PoolOp):
        return _pool_reads(op)
    n_in = graph.numel(graph.shape_of(op.operands[0]))
    return graph.numel(graph.shape_of(op.results[0])) / max(n_in, 1)


def _pool_reads(op: graph.PoolOp) -> float:
    kernel, stride, padding, dilation = op.window
    n = len(kernel)
    shape, out = graph.shape_of(op.input), graph.shape_of(op.result)
    reads = graph.numel(out[:-n])
    for k, st, p, d, size, o_size in zip(
        kernel, stride, padding, dilation, shape[-n:], out[-n:], strict=True
    ):
        if op.adaptive is not None:
            spans: Iterable[int] = (
                hi - lo
                for lo, hi in (graph.adaptive_bounds(o, size, o_size) for o in range(o_size))
            )
        else:
            spans = (
                sum(1 for t in range(k) if 0 <= o * st - p + t * d < size) for o in range(o_size)
            )
        reads *= sum(spans)
    return reads / max(graph.numel(shape), 1)
