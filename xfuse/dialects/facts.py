"""
What every level knows of one `graph` op, declared once on its dialect class (`FACTS`).

Each level builds its table from these declarations instead of keeping its own row per op:
- the reference interpreter (`xfuse.interpreters.graph.OP_IMPLS`) calls `torch`, a dotted
  name looked up lazily (this module and the dialect import no torch);
- the importer (`xfuse.frontend.aten.CONVERTERS`) maps each overload in `aten` to the op with
  the converter of its family (unary, binary, comparison, reduction) or the op's own;
- `lower-to-loops` (`xfuse.passes.lowering.scalar_ops.SCALAR_RULES`) computes one element with
  `scalar`; the `math` ops a rule emits name their CPU intrinsic and CUDA libdevice function
  in `passes/llvm` (keyed by math op, shared by every graph op that uses it);
- the random program generators (`xfuse.testing.fuzz`, `xfuse.testing.random_graph`) draw
  the op as `fuzz` says;
- fusion (`xfuse.passes.fusion.legality`) leaves a transpose a view of its producer where its
  readers have `reads_transposed`.

A structural op (layout, windows) declares the same three in its own terms, as plain functions
beside its class: `torch_args` (its attributes as its `torch` function takes them), `convert`
(its aten overloads' arguments as the op, through an `OpBuilder`) and `Fuzz.kind` (the torch
code a generator method draws for it). Only its lowering lives elsewhere.

An op without one of these facts says why in `without` (fact name -> reason); the test
`tests/dialects/test_op_registry.py` fails for an op that has neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any, Literal, Protocol

from xdsl.dialects import arith
from xdsl.ir import Attribute, Operation, SSAValue

FACT_NAMES = ("torch", "aten", "scalar", "fuzz")
"""The facts an op declares in `OpFacts` (or explains in `OpFacts.without`)."""


MAX_WINDOW_READS = 4.0
"""A windowed op (pad, pool, patches) absorbs its producers into its kernel (computing them at
each position it reads) only when it reads each input element at most this many times on
average: a 3x3 / stride-2 max pool reads 2.25 times; a 5x5 / stride-1 pool (25 times) reads a
buffer instead. Fusion applies it (`legality.window_absorbs`)."""

MAX_PATCH_READS = 9.0
"""The same for `graph.patches` (a 3x3 window of stride 1 reads each element 9 times): each
patch element is multiplied by every output channel's weight next, so recomputing a producer's
few elementwise ops at each read costs little beside the product. `convolution-matmul` makes
patches of a value the program makes only where it holds (so that they add no kernel)."""


# ---------------------------------------------------------------------------------------------
# Scalar rules: one element of an elementwise op as arith / math ops
# ---------------------------------------------------------------------------------------------


class ScalarBuilder(Protocol):
    """Where scalar ops go: the kernel builder of `lower-to-loops` implements this."""

    def insert(self, op: Operation) -> SSAValue:
        """Insert `op` at the current point and return its (single) result."""
        ...

    def constant(self, value: float | int, type: Attribute) -> SSAValue:
        """An `arith.constant` of `type` (shared by every use in the kernel)."""
        ...


ScalarFn = Callable[[ScalarBuilder, Sequence[SSAValue], Attribute], SSAValue]
"""(builder, operands, compute type) -> result."""


@dataclass(frozen=True)
class ScalarRule:
    """How one graph op computes an element, per element-type class."""

    float_fn: ScalarFn | None = None
    int_fn: ScalarFn | None = None
    bool_fn: ScalarFn | None = None
    compare: bool = False
    """The result is i1 (a comparison): no rounding back to f16/bf16."""


def unary(op: Callable[[SSAValue], Operation]) -> ScalarFn:
    """One unary arith/math op: `unary(math.ExpOp)`."""
    return lambda b, xs, t: b.insert(op(xs[0]))


def binary(op: Callable[[SSAValue, SSAValue], Operation]) -> ScalarFn:
    """One binary arith/math op: `binary(arith.AddfOp)`."""
    return lambda b, xs, t: b.insert(op(xs[0], xs[1]))


def cmpf(predicate: str) -> ScalarFn:
    return lambda b, xs, t: b.insert(arith.CmpfOp(xs[0], xs[1], predicate))


def cmpi(predicate: str) -> ScalarFn:
    return lambda b, xs, t: b.insert(arith.CmpiOp(xs[0], xs[1], predicate))


# ---------------------------------------------------------------------------------------------
# Fuzzing: how the random program generators draw an op
# ---------------------------------------------------------------------------------------------

FuzzPool = Literal["unary", "binary", "compare", "reduction"]

FuzzDraw = Callable[[Random, str, tuple[int, ...]], str | None]
"""(the generator's random source, an operand's name, its shape) -> the torch expression of
the op on it, or None where the op cannot take that operand."""


@dataclass(frozen=True)
class Fuzz:
    """How `xfuse-fuzz` (and the property tests' `random_graph`) draw an op.

    An op in a `pool` is drawn by that pool's generator from its eager spelling (`torch.neg`
    for unary ops, an operator or function for binary ops, a method name for reductions), in
    the pool's order of `xfuse.testing.fuzz.draw_order`. Any other op names the generator method
    of `xfuse.testing.fuzz` that writes the torch code that imports as it (`by`)."""

    spelling: str = ""
    pool: FuzzPool | None = None
    by: str | None = None
    kind: str = ""
    """The op's name among the kinds of the generator method `by` (`Fuzz.drawn_in`)."""
    draw: FuzzDraw | None = None
    """The torch code that method writes for the op (`Fuzz.drawn_in`)."""
    exact: bool = False
    """Exact inputs give an exact result (compared bit for bit)."""
    positive: bool = False
    """Drawn on a positive operand (log, sqrt, ...)."""
    weight: int = 1
    """How many entries of the pool it takes."""
    random_graph: bool = False
    """Also drawn by `random_graph`'s programs (unary, binary and reduction pools)."""
    exact_operands: bool = False
    """Drawn on exact operands only: the op jumps where an operand crosses a point (fmod's
    and remainder's multiples of the divisor) and amplifies its divisor's rounding by the
    quotient, or (prod) adds up its n operands' relative errors, which are correlated where an
    operand repeats a value: a one-ulp difference of an inexact operand (xfuse's expm1 against
    eager's) comes out n ulps apart, and no tolerance can judge it."""

    @staticmethod
    def unary(
        spelling: str, *, exact: bool = False, positive: bool = False, random_graph: bool = False
    ) -> Fuzz:
        return Fuzz(spelling, "unary", exact=exact, positive=positive, random_graph=random_graph)

    @staticmethod
    def binary(
        spelling: str,
        *,
        exact: bool = False,
        random_graph: bool = False,
        exact_operands: bool = False,
    ) -> Fuzz:
        return Fuzz(
            spelling,
            "binary",
            exact=exact,
            random_graph=random_graph,
            exact_operands=exact_operands,
        )

    @staticmethod
    def compare(spelling: str) -> Fuzz:
        return Fuzz(spelling, "compare", exact=True)

    @staticmethod
    def reduction(
        spelling: str,
        *,
        exact: bool = False,
        weight: int = 1,
        random_graph: bool = False,
        exact_operands: bool = False,
    ) -> Fuzz:
        return Fuzz(
            spelling,
            "reduction",
            exact=exact,
            weight=weight,
            random_graph=random_graph,
            exact_operands=exact_operands,
        )

    @staticmethod
    def drawn_by(method: str) -> Fuzz:
        return Fuzz(by=method)

    @staticmethod
    def drawn_in(method: str, kind: str, draw: FuzzDraw) -> Fuzz:
        """One of the kinds the generator method `method` draws from (in the order of its
        table, a new kind after those it lists): `draw` writes the op's torch code."""
        return Fuzz(by=method, kind=kind, draw=draw)


# ---------------------------------------------------------------------------------------------
# Importing a structural op: what its converter asks of the importer
# ---------------------------------------------------------------------------------------------


class OpBuilder(Protocol):
    """What a structural op's `convert` asks of the importer (`xfuse.frontend.builder`'s
    `ImportBuilder` implements it)."""

    def tensor(self, node: Any) -> SSAValue:
        """The value of a tensor argument of the aten node."""
        ...

    def emit(self, op: Operation) -> SSAValue:
        """Append `op` to the program; its (single) result."""
        ...

    def reshape(self, value: SSAValue, shape: Sequence[int]) -> SSAValue:
        """`value` with `shape` (itself where it has it)."""
        ...


OpConverter = Callable[[OpBuilder, Mapping[str, Any]], SSAValue | None]
"""(importer, the aten node's arguments by name) -> the node's value, or None to leave the
node to `graph.torch_call` (an argument the op cannot take)."""


# ---------------------------------------------------------------------------------------------
# The facts of one op
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpFacts:
    """Everything the levels above the dialect know of one graph op (see the module doc)."""

    torch: str | None = None
    """The eager torch function (`"torch.neg"`) that the op's family implementation calls in
    the interpreter; None where the interpreter has the op's own implementation."""
    torch_args: Callable[[Any], tuple[Any, ...]] | None = None
    """A structural op's attributes as its `torch` function takes them after its operands:
    the interpreter calls `torch(*operands, *torch_args(op))` (reading them once for an op it
    prepares: they depend on the op alone, not on a call's sizes)."""
    aten: tuple[str, ...] = ()
    """The aten overloads (`str(OpOverload)`) the importer maps one to one to this op."""
    convert: OpConverter | None = None
    """A structural op's converter of its `aten` overloads (where no family's fits)."""
    scalar: ScalarRule | None = None
    """One element of an elementwise op, for `lower-to-loops`."""
    fuzz: Fuzz | None = None
    reads_transposed: bool = False
    """The op reads an operand whose last two dims are swapped (a transposed view of a
    row-major tensor) in place, at no cost beside a contiguous one: a matrix product hands it
    to the library as its transposed operand. Fusion leaves such a transpose a view of its
    producer where only these ops read it (`legality.transposed_for_readers`)."""
    without: Mapping[str, str] = field(default_factory=dict[str, str])
    """Fact name -> why the op has none of it, or where it lives instead."""

    def has(self, fact: str) -> bool:
        return getattr(self, fact) not in (None, ()) or fact in self.without
