"""
Named sets of graph ops, as tinygrad's `GroupOp`: an op's fusion kind (`Kind`, read from its
kind trait) and the kind sets fusion and lowering decide by (`KindGroup`), and the op classes
that several passes treat alike (`OpGroup`). A pass asks `kind_of(op) in KindGroup.FUSABLE` or
`isinstance(op, OpGroup.WINDOW)`, never compares a kind's name or lists classes of its own.
"""

from __future__ import annotations

from enum import StrEnum

from xdsl.ir import Operation

from xfuse.dialects import graph


class Kind(StrEnum):
    """The fusion kind of an op (`graph.op_kind`'s name: reports and group attributes print
    it)."""

    ELEMENTWISE = "elementwise"
    BROADCAST = "broadcast"
    INJECTIVE = "injective"
    REDUCTION = "reduction"
    EXTERN = "extern"
    COMPOSITE = "composite"
    OPAQUE = "opaque"


class KindGroup:
    """Sets of kinds."""

    FUSABLE: tuple[Kind, ...] = (Kind.ELEMENTWISE, Kind.BROADCAST, Kind.INJECTIVE, Kind.REDUCTION)
    """Kinds that may join a group (and that `lower-to-loops` makes a kernel of), weakest
    first: a group's kind is the strongest inside."""

    BOUNDARY = frozenset({Kind.EXTERN, Kind.COMPOSITE})
    """Kinds that never join a group: library or eager calls, and ops `decompose` rewrites."""

    NON_REDUCING = frozenset({Kind.ELEMENTWISE, Kind.BROADCAST, Kind.INJECTIVE})
    """Fusable kinds that reduce nothing: each element is computed from elements at positions
    its own index gives."""

    CHEAP = frozenset({Kind.ELEMENTWISE, Kind.BROADCAST})
    """Kinds of single ops cheap enough to recompute in every reader (as Inductor inlines
    pointwise buffers)."""


KIND_RANK: dict[str, int] = {kind: rank for rank, kind in enumerate(KindGroup.FUSABLE)}
"""A fusable kind's strength (`KindGroup.FUSABLE`'s order)."""

_KIND_OF_TYPE: dict[type[Operation], Kind] = {}


def kind_of(op: Operation) -> Kind:
    """The kind of `op` (`Kind.OPAQUE` for an op of no kind), cached per op class: trait
    lookups are slow and fusion asks often."""
    kind = _KIND_OF_TYPE.get(type(op))
    if kind is None:
        kind = _KIND_OF_TYPE[type(op)] = Kind(graph.op_kind(op))
    return kind


def stronger_kind(a: str, b: str) -> str:
    """The stronger of two kinds (`KIND_RANK`; a kind outside it is the weakest)."""
    return a if KIND_RANK.get(a, -1) >= KIND_RANK.get(b, -1) else b


class OpGroup:
    """Op classes that passes treat alike (tuples, for `isinstance`)."""

    WINDOW: tuple[type[Operation], ...] = graph.WINDOW_OPS
    """Ops that read their input at shifted, clamped windows of positions (pad, pool,
    patches)."""

    LAYOUT: tuple[type[Operation], ...] = graph.INDEX_MAP_OPS
    """Ops whose element is one element of their input, at an index computed from theirs."""

    MOVING: tuple[type[Operation], ...] = (
        graph.ReshapeOp,
        graph.SliceOp,
        graph.PermuteOp,
        graph.BroadcastInDimOp,
    )
    """Ops whose values are their input's, moved: a consumer that recomputes them reads memory
    and computes nothing."""

    GATHER: tuple[type[Operation], ...] = (graph.SliceOp, graph.ConcatOp, graph.GatherOp)
    """Ops that read their input at positions other than their own (shifted or computed)."""

    SLICE: tuple[type[Operation], ...] = (graph.SliceOp, graph.ConcatOp)
    """Ops that read their input at their own positions, shifted."""

    TRANSCENDENTAL: tuple[type[Operation], ...] = (
        graph.ExpOp, graph.Exp2Op, graph.Expm1Op, graph.LogOp, graph.Log1pOp, graph.Log2Op,
        graph.Log10Op, graph.TanhOp, graph.SigmoidOp, graph.SiluOp, graph.GeluOp, graph.ErfOp,
        graph.ErfcOp, graph.PowOp, graph.SinOp, graph.CosOp, graph.AsinOp, graph.AcosOp,
        graph.AtanOp, graph.Atan2Op, graph.SinhOp, graph.CoshOp, graph.AsinhOp, graph.AcoshOp,
        graph.AtanhOp,
    )  # fmt: skip
    """Ops whose element is a polynomial approximation or a library call (dozens of
    instructions)."""

    DIVIDING: tuple[type[Operation], ...] = (
        graph.DivOp,
        graph.RemainderOp,
        graph.FloorDivideOp,
        graph.SqrtOp,
        graph.RsqrtOp,
    )
    """Ops whose element takes a division or a square root."""
