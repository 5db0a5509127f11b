"""
`lower-to-loops`: every `fusion.group`, and every lone non-extern graph op, becomes a kernel
`func.func` of loop IR (`scf`, `memref`, `arith`, `math`) over buffers, launched from `@forward`
with `fusion.launch` (docs/contracts.md, "loop IR").

How a kernel computes its outputs:

- Indices are symbolic affine expressions of the loop variables (`Affine`), with floor division
  and modulo by constants. Layout ops (broadcast_in_dim, reshape, permute, slice) and torch
  broadcasting of operands map the index a consumer reads at to the index of the producer's
  element; nothing is copied. Simplification (`floordiv`, `mod` and the recombination of
  `x mod a + a * (x floordiv a)` into `x`) makes a reshape chain that ends where it started
  cost nothing. `concat` is an `scf.if` chain on the concatenated dim. `flip` reads element
  `n - 1 - i` (a negative coefficient), `roll` element `(i - shift) mod n`, and `iota`
  (arange) is `start + i * step` of the loop index itself: no buffer at all. `graph.gather`
  reads its table at a data-dependent index: a `Gathered` atom (the index tensor's element, loaded,
  wrapped where torch wraps, clamped to its dim and reported through the kernel's error flag,
  docs/contracts.md) takes the place of the indexed dims, so an elementwise producer of the
  table is recomputed at the gathered position; its loads stay inside their `scf.if` branch.
- `pad` and `pool` read their input at shifted positions: a position its bounds cannot place
  inside the input is loaded at a clamped (or, for reflect padding, mirrored) address and
  selected away by an `i1` test, so no load ever leaves its buffer; tests the bounds decide
  are not emitted. A pool's window is unrolled up to `UNROLL_WINDOW` elements (each position
  its own guard), else an `scf.for` nest carrying the accumulator whose loops are clipped to
  the input, as eager's kernels and Inductor's: from max(start, 0) (the first tap inside, with
  a dilation) to min(start + kernel, size), so that its loads need no guard and a window far
  larger than its input (a global pool written as `AvgPool2d(1280)`) walks the input only.
- Each value of the group is emitted as a scalar expression at an index, memoized per
  (value, index) in the innermost loop scope where it is valid; an expression that does not
  depend on an inner loop's variable is placed before that loop (a row's `rsqrt` is computed
  once per row). Code inside an `scf.if` branch stays in the branch.
- Elementwise groups: one `scf.parallel` over the output dims, or over the flattened output
  (buffers declared 1-D) when every load is either at the output's own position or at a
  constant one.
- Groups with reductions: all reductions must reduce the same dims of the same shape (the
  "full" shape); the kept dims are the parallel loop (one row per iteration), and inside it one
  `scf.for` nest per reduction phase (reductions that need another one's result come in a later
  phase) carries the accumulators (`f32` for f16/bf16 data) as `iter_args`; a last nest over the
  reduced dims writes the outputs of the full shape, and outputs of another shape with as many
  elements (a layer norm's output reshaped) at the same position in memory. Outputs of the row
  shape (keepdim or not) are written once per row. A reduction's result may only be read at its own row. A float sum
  or product accumulates with `fastmath<reassoc>` (that op only), so that LLVM may vectorize
  it into partial sums; max/min need no flag. Over several reduced dims, a float sum or
  product gives each inner loop a partial accumulator of its own (`partial_sums_nest`).
- Groups with a scan (task `scan`: cumsum, cumprod, logcumsumexp, cummax, cummin): the scan's
  other dims are the parallel loop, and one `scf.for` along its dim carries the running value
  (f32 for f16/bf16, as eager's CPU kernels) and, for cummax's / cummin's indices, its
  position; each iteration combines the next element in eager's order (no fastmath flag),
  then stores it and the outputs computed from it at that index (`emit_scan`).
- Group shapes this cannot express (reductions over different dims or shapes, outputs of other
  shapes, ops without a scalar lowering) raise `CodegenError` naming the kernel and the reason:
  the runtime compiles that group op by op (or falls back). Fusion's `loop-structure` gate
  (`xfuse.passes.fusion.legality`) keeps such groups from forming. With `keep-unsupported`, the pass instead leaves such a
  group (or op) where it is, with its reason in the `xfuse.codegen_error` attribute.

Constants: a splat `graph.constant` (inside a group, or outside feeding one) becomes an
`arith.constant` in the kernel; a non-splat constant is a buffer input (one inside a group is
moved before the launch). `graph.constant` ops outside groups stay in `@forward`.
Bool tensors are `i8` buffers (torch.bool is one byte): loads are followed by `arith.trunci` to
`i1`, stores preceded by `arith.extui`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import count, product
from math import inf as math_inf
from types import UnionType
from typing import TypeGuard, cast

from xdsl.context import Context
from xdsl.dialects import arith, func, math, memref, scf
from xdsl.dialects.builtin import (
    AnyFloat,
    FloatAttr,
    FunctionType,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StringAttr,
    UnitAttr,
    f32,
    f64,
    i1,
    i8,
    i64,
)
from xdsl.dialects.utils.fast_math import FastMathFlag
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.traits import SymbolTable
from xdsl.utils.exceptions import DiagnosticException

from xfuse.dialects import fusion, graph
from xfuse.dialects.graph import dtype_of, is_float, numel, reduced_shape, shape_of
from xfuse.errors import CodegenError
from xfuse.ir.names import CODEGEN_ERROR_ATTR, ERROR_FLAG_ATTR, KERNEL_ATTR, PARALLEL_DIMS_ATTR
from xfuse.passes.lowering.scalar_ops import (
    UnsupportedScalarOp,
    compute_type,
    emit_cast,
    emit_elementwise,
    emit_select,
    from_compute,
    has_scalar_rule,
    reduction_identity,
    to_compute,
)

ERROR_FLAG_TYPE = MemRefType(i8, [1])
"""The error flag of a kernel with `ERROR_FLAG_ATTR`: its last argument, zeroed by the caller,
set to 1 by an iteration that met an index outside its dim (every writer stores the same
byte, and nothing reads it before the kernel has finished)."""


class LoopLoweringError(CodegenError, DiagnosticException):
    """A group that one kernel cannot express: a CodegenError for the runtime (which falls
    back), a diagnostic for xfuse-opt (one line, no traceback)."""


# ---------------------------------------------------------------------------------------------
# Affine index expressions
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoopVar:
    """The induction variable of one loop, over [0, extent)."""

    ident: int
    extent: int


@dataclass(frozen=True)
class FloorDiv:
    arg: Affine
    divisor: int


@dataclass(frozen=True)
class Mod:
    arg: Affine
    modulus: int


@dataclass(frozen=True)
class Clamp:
    """min(max(arg, low), high): replicate padding, and the in-bounds address of a guarded
    load (pool task)."""

    arg: Affine
    low: int
    high: int


@dataclass(frozen=True)
class Reflect:
    """`arg` mirrored into [0, size) without repeating the edge, for arg in
    (-size, 2 * size - 1): (size - 1) - |(size - 1) - |arg|| (pool task)."""

    arg: Affine
    size: int


@dataclass(frozen=True, repr=False)
class Gathered:
    """A data-dependent index (`graph.gather`): the element of the group's value `indices`
    at `at`, wrapped when negative (`wrap`) and clamped to [0, size), so that a load at it
    never leaves its buffer (an index outside is reported through the kernel's error flag)."""

    indices: SSAValue
    at: Index
    size: int
    wrap: bool

    def __repr__(self) -> str:  # the sort key of `make_affine`: stable, cheap
        return f"Gathered({id(self.indices)}, {self.at}, {self.size}, {self.wrap})"


Atom = LoopVar | FloorDiv | Mod | Clamp | Reflect | Gathered


@dataclass(frozen=True)
class Affine:
    """const + sum(coef * atom): atoms are non-negative; a coefficient is negative only where
    an index counts down (a flipped dim's `n - 1 - i`), and the arguments of floor division
    and modulo have positive coefficients (see `floordiv`, `mod`)."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0


Index = tuple[Affine, ...]
ZERO = Affine()

index_cache = lru_cache(maxsize=1 << 16)
"""The memo of the functions of `Affine` expressions: bounded, since a `Gathered` atom holds an
SSA value of the group it was made for (an unbounded cache would keep every program alive)."""


def constant_index(c: int) -> Affine:
    return Affine((), c)


def var_index(v: LoopVar) -> Affine:
    return Affine(((v, 1),), 0)


@index_cache
def bounds(e: Affine) -> tuple[int, int]:
    """Smallest and largest value of `e` over its variables' ranges."""
    lo = hi = e.const
    for atom, k in e.terms:
        a_lo, a_hi = _atom_bounds(atom)
        lo, hi = lo + min(k * a_lo, k * a_hi), hi + max(k * a_lo, k * a_hi)
    return lo, hi


def _atom_bounds(a: Atom) -> tuple[int, int]:
    if isinstance(a, LoopVar):
        return 0, max(0, a.extent - 1)
    if isinstance(a, FloorDiv):
        lo, hi = bounds(a.arg)
        return lo // a.divisor, hi // a.divisor
    if isinstance(a, Clamp):
        lo, hi = bounds(a.arg)
        return min(max(lo, a.low), a.high), min(max(hi, a.low), a.high)
    if isinstance(a, Reflect):
        return 0, max(0, a.size - 1)
    if isinstance(a, Gathered):
        return 0, max(0, a.size - 1)
    return 0, a.modulus - 1


@index_cache
def loop_vars(e: Affine) -> frozenset[int]:
    out: set[int] = set()
    for atom, _ in e.terms:
        if isinstance(atom, LoopVar):
            out.add(atom.ident)
        elif isinstance(atom, Gathered):
            out |= index_vars(atom.at)
        else:
            out |= loop_vars(atom.arg)
    return frozenset(out)


@index_cache
def is_gathered(e: Affine) -> bool:
    """Whether `e` reads an index tensor (then it is computed only where its loads may run)."""
    return any(
        isinstance(a, Gathered) or (not isinstance(a, LoopVar) and is_gathered(a.arg))
        for a, _ in e.terms
    )


def index_vars(index: Sequence[Affine]) -> frozenset[int]:
    return frozenset().union(*(loop_vars(e) for e in index))


def make_affine(terms: dict[Atom, int], const: int = 0) -> Affine:
    terms, const = _recombine({a: k for a, k in terms.items() if k}, const)
    return Affine(tuple(sorted(terms.items(), key=lambda t: repr(t[0]))), const)


def add(*es: Affine) -> Affine:
    terms: dict[Atom, int] = {}
    const = 0
    for e in es:
        for a, k in e.terms:
            terms[a] = terms.get(a, 0) + k
        const += e.const
    return make_affine(terms, const)


def scale(e: Affine, k: int) -> Affine:
    return make_affine({a: c * k for a, c in e.terms}, e.const * k)


def floordiv(e: Affine, c: int) -> Affine:
    """floor(e / c), simplified: multiples of c leave the division, and a remainder known to
    lie in [0, c) vanishes."""
    if c == 1:
        return e
    quotient = {a: k // c for a, k in e.terms}
    whole, rest_const = divmod(e.const, c)
    rest = make_affine({a: k % c for a, k in e.terms}, rest_const)
    if bounds(rest)[1] < c:
        remainder = ZERO
    elif (
        rest.const == 0
        and len(rest.terms) == 1
        and rest.terms[0][1] == 1
        and isinstance(rest.terms[0][0], FloorDiv)
    ):
        inner = rest.terms[0][0]
        remainder = floordiv(inner.arg, inner.divisor * c)
    else:
        remainder = Affine(((FloorDiv(rest, c), 1),))
    return add(make_affine(quotient, whole), remainder)


def mod(e: Affine, c: int) -> Affine:
    """e mod c (non-negative), simplified like `floordiv`."""
    if c == 1:
        return ZERO
    rest = make_affine({a: k % c for a, k in e.terms}, e.const % c)
    if bounds(rest)[1] < c:
        return rest
    if rest.const == 0 and len(rest.terms) == 1 and rest.terms[0][1] == 1:
        inner = rest.terms[0][0]
        if isinstance(inner, Mod) and inner.modulus % c == 0:
            return mod(inner.arg, c)
    return Affine(((Mod(rest, c), 1),))


def _recombine(terms: dict[Atom, int], const: int) -> tuple[dict[Atom, int], int]:
    """Fold `k*(x mod a) + k*a*(x floordiv a)` into `k*x` and `k*(x mod a) + k*a*((x floordiv
    a) mod b)` into `k*(x mod a*b)`: what linearizing a delinearized index leaves."""
    changed = True
    while changed:
        changed = False
        for atom, k in list(terms.items()):
            if not isinstance(atom, Mod):
                continue
            x, a = atom.arg, atom.modulus
            div = FloorDiv(x, a)
            if terms.get(div) == k * a:
                del terms[atom], terms[div]
                merged = scale(x, k)
            else:
                outer = next(
                    (
                        o
                        for o, ko in terms.items()
                        if isinstance(o, Mod) and ko == k * a and o.arg == Affine(((div, 1),))
                    ),
                    None,
                )
                if outer is None:
                    continue
                del terms[atom], terms[outer]
                merged = scale(mod(x, a * outer.modulus), k)
            for t, c in merged.terms:
                terms[t] = terms.get(t, 0) + c
            const += merged.const
            changed = True
            break
    return terms, const


def strides_of(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        strides[k] = strides[k + 1] * shape[k + 1]
    return strides


def linearize(index: Sequence[Affine], shape: Sequence[int]) -> Affine:
    return add(*(scale(e, s) for e, s in zip(index, strides_of(shape), strict=True)))


def delinearize(e: Affine, shape: Sequence[int]) -> Index:
    if 0 in shape:  # no element: the loop never runs (and strides_of has zeros)
        return (ZERO,) * len(shape)
    return tuple(
        ZERO if d <= 1 else mod(floordiv(e, s), d)  # (size 0: never runs)
        for d, s in zip(shape, strides_of(shape), strict=True)
    )


# ---------------------------------------------------------------------------------------------
# Where each operand element comes from
# ---------------------------------------------------------------------------------------------

LAYOUT_OPS = (
    graph.BroadcastInDimOp
    | graph.ReshapeOp
    | graph.PermuteOp
    | graph.SliceOp
    | graph.FlipOp
    | graph.RollOp
)


def broadcast_index(index: Index, in_shape: Sequence[int], out_shape: Sequence[int]) -> Index:
    """Torch broadcasting: shapes align on the right, a size-1 dim reads element 0."""
    lead = len(out_shape) - len(in_shape)
    return tuple(ZERO if d == 1 else index[lead + k] for k, d in enumerate(in_shape))


def operand_indices(op: Operation, index: Index) -> list[Index]:
    """The index of each operand's element that the result element at `index` reads (every
    op but concat and real reductions)."""
    out_shape = shape_of(op.results[0])
    if isinstance(op, graph.BroadcastInDimOp):
        in_shape = shape_of(op.input)
        return [tuple(ZERO if in_shape[i] == 1 else index[d] for i, d in enumerate(op.dim_map))]
    if isinstance(op, graph.ReshapeOp):
        return [delinearize(linearize(index, out_shape), shape_of(op.input))]
    if isinstance(op, graph.PermuteOp):
        src = [ZERO] * len(index)
        for i, p in enumerate(op.permutation):
            src[p] = index[i]
        return [tuple(src)]
    if isinstance(op, graph.SliceOp):
        start, _, stride = op.bounds
        return [
            tuple(
                add(scale(e, k), constant_index(s))
                for e, s, k in zip(index, start, stride, strict=True)
            )
        ]
    if isinstance(op, graph.ReduceOp):  # no dims: the identity
        return [index]
    if isinstance(op, graph.FlipOp):
        return [flipped_index(index, shape_of(op.input), op.flipped)]
    if isinstance(op, graph.RollOp):
        return [rolled_index(index, shape_of(op.input), dict(op.rolled))]
    if isinstance(op, graph.GatherOp):
        return gather_indices(op, index)
    return [broadcast_index(index, shape_of(v), out_shape) for v in op.operands]


# --- task `index`: flip, roll and iota ------------------------------------------------------


def flipped_index(index: Index, shape: Sequence[int], dims: Sequence[int]) -> Index:
    """Element i of a dim of size n flipped reads element n - 1 - i."""
    return tuple(
        add(constant_index(shape[k] - 1), scale(e, -1)) if k in dims else e
        for k, e in enumerate(index)
    )


def rolled_index(index: Index, shape: Sequence[int], shifts: dict[int, int]) -> Index:
    """Element i of a dim of size n rolled by s reads element (i - s) mod n."""
    return tuple(
        mod(add(e, constant_index(-shifts[k] % shape[k])), shape[k]) if k in shifts else e
        for k, e in enumerate(index)
    )


def iota_value(b: KernelBuilder, op: graph.IotaOp, index: Index) -> SSAValue:
    """`start + i * step` of the loop index along the iota's dim, in i64 (then the result
    type), placed in the outermost scope where that index is known."""
    counted = index[op.axis]
    start, step = op.counting
    t = dtype_of(op.result)

    def compute() -> SSAValue:
        x = b.insert(arith.IndexCastOp(b.index_value(counted), i64))
        if step != 1:
            x = b.insert(arith.MuliOp(x, b.constant(step, i64)))
        if start != 0:
            x = b.insert(arith.AddiOp(x, b.constant(start, i64)))
        return x if t == i64 else b.insert(arith.TruncIOp(x, cast(IntegerType, t)))

    return b.memoized(("iota", start, step, t, counted), loop_vars(counted), True, compute)


def gather_indices(op: graph.GatherOp, index: Index) -> list[Index]:
    """The table's index (a `Gathered` atom per indexed dim) and each index tensor's."""
    table = shape_of(op.table)
    reads = [broadcast_index(index, shape_of(v), shape_of(op.result)) for v in op.indices]
    picked = [
        Affine(((Gathered(v, at, table[op.axis + j], op.wraps), 1),))
        for j, (v, at) in enumerate(zip(op.indices, reads, strict=True))
    ]
    outer = [ZERO if table[op.table_dim(m)] == 1 else e for m, e in enumerate(index)]
    return [(*outer[: op.axis], *picked, *outer[op.axis + 1 :]), *reads]


# ---------------------------------------------------------------------------------------------
# Reductions: accumulator type, initial value, combination, final value
# ---------------------------------------------------------------------------------------------

_FLOAT_COMBINE: dict[str, type[Operation]] = {
    "graph.reduce_sum": arith.AddfOp,
    "graph.reduce_mean": arith.AddfOp,
    "graph.reduce_prod": arith.MulfOp,
    "graph.reduce_max": arith.MaximumfOp,
    "graph.reduce_min": arith.MinimumfOp,
}
_INT_COMBINE: dict[str, type[Operation]] = {
    "graph.reduce_sum": arith.AddiOp,
    "graph.reduce_prod": arith.MuliOp,
    "graph.reduce_max": arith.MaxSIOp,
    "graph.reduce_min": arith.MinSIOp,
}
# torch reduces bools as integers and casts back: sum/max are `or`, prod/min are `and`.
_BOOL_COMBINE: dict[str, type[Operation]] = {
    "graph.reduce_sum": arith.OrIOp,
    "graph.reduce_prod": arith.AndIOp,
    "graph.reduce_max": arith.OrIOp,
    "graph.reduce_min": arith.AndIOp,
}


def accumulator_type(op: graph.ReduceOp) -> Attribute:
    return compute_type(dtype_of(op.input))


def reduction_init(op: graph.ReduceOp) -> float | int:
    """The identity of the reduction's combining op, for its input's element type."""
    return reduction_identity(_combiner_class(op), dtype_of(op.input))


REASSOC = arith.FastMathFlagsAttr([FastMathFlag.REASSOC])
"""The flags of a float sum/product accumulation: the reduction may be reassociated (split into
vector lanes and partial sums), which is what lets LLVM vectorize it. Only the accumulating op
carries them; max/min need none (`llvm.maximum`/`llvm.minimum` vectorize as they are, NaN
propagating like torch)."""


_ARG_COMBINE: dict[str, tuple[type[Operation], type[Operation]]] = {
    "graph.argmax": (arith.MaximumfOp, arith.MaxSIOp),
    "graph.argmin": (arith.MinimumfOp, arith.MinSIOp),
}
"""argmax/argmin (issue 15): the combiner whose identity starts the value accumulator (float,
int); the accumulation itself is `KernelBuilder._arg_step`."""


def _combiner_class(op: graph.ReduceOp) -> type[Operation]:
    t = dtype_of(op.input)
    if op.name in _ARG_COMBINE:
        return _ARG_COMBINE[op.name][0 if is_float(t) else 1]
    table = _FLOAT_COMBINE if is_float(t) else _BOOL_COMBINE if t == i1 else _INT_COMBINE
    if op.name not in table:
        raise UnsupportedScalarOp(f"'{op.name}' on {t} has no loop lowering")
    return table[op.name]


def _reassociates(phase: Sequence[graph.ReduceOp]) -> bool:
    """Whether some reduction of the phase is a float sum or product (whose rounding error
    depends on the order of its terms)."""
    return any(_combiner_class(r) in (arith.AddfOp, arith.MulfOp) for r in phase)


def reduction_combiner(op: graph.ReduceOp) -> Callable[[SSAValue, SSAValue], Operation]:
    combine = cast(Callable[..., Operation], _combiner_class(op))
    if combine in (arith.AddfOp, arith.MulfOp):
        return lambda acc, x: combine(acc, x, REASSOC)
    return combine


# ---------------------------------------------------------------------------------------------
# Analysis: the loop structure of a group
# ---------------------------------------------------------------------------------------------


def is_real_reduction(op: Operation) -> TypeGuard[graph.ReduceOp]:
    return isinstance(op, graph.ReduceOp) and bool(op.reduce_dims)


def _is_supported(op: Operation) -> bool:
    return isinstance(
        op,
        graph.ConstantOp
        | graph.ConcatOp
        | graph.ReduceOp
        | LAYOUT_OPS
        | graph.IotaOp
        | POOL_OPS
        | graph.GatherOp
        | graph.ScanOp,  # task `scan`
    ) or has_scalar_rule(op.name)


def _phases(reductions: Sequence[graph.ReduceOp]) -> list[list[graph.ReduceOp]]:
    """Reductions grouped by phase: 1 + the latest phase of a reduction their input needs."""
    depth: dict[SSAValue, int] = {}

    def depth_of(v: SSAValue) -> int:
        if v in depth:
            return depth[v]
        op = v.owner
        d = 0
        if isinstance(op, Operation):
            d = max((depth_of(o) for o in op.operands), default=0)
            if is_real_reduction(op):
                d += 1
        depth[v] = d
        return d

    phases: dict[int, list[graph.ReduceOp]] = {}
    for r in reductions:
        phases.setdefault(depth_of(r.result), []).append(r)
    return [phases[k] for k in sorted(phases)]


@dataclass
class Domain:
    """The iteration space of a kernel: the full shape, its reduced dims, and the symbolic
    index of the full shape's element in terms of the loop variables."""

    full_shape: tuple[int, ...]
    reduce_dims: tuple[int, ...]
    parallel: list[LoopVar]
    reduce_vars: list[LoopVar]
    full_index: Index
    flat: bool
    """Buffers are 1-D and read at linear offsets (`flat_domain`, `collapsed_domain`)."""

    def row_index(self, keepdim: bool) -> Index:
        if keepdim:
            return tuple(
                ZERO if k in self.reduce_dims else e for k, e in enumerate(self.full_index)
            )
        return tuple(e for k, e in enumerate(self.full_index) if k not in self.reduce_dims)

    def row_shape(self, keepdim: bool) -> tuple[int, ...]:
        return reduced_shape(self.full_shape, self.reduce_dims, keepdim)

    def is_row_shape(self, shape: tuple[int, ...]) -> bool:
        return bool(self.reduce_dims) and shape in (self.row_shape(True), self.row_shape(False))

    def writes_per_element(self, shape: tuple[int, ...]) -> bool:
        """Whether an output of `shape` is written in the innermost loop (else once per row):
        the full shape, or another shape of as many elements (a reshape of a full-shape value,
        written at the same position in memory)."""
        if self.flat or shape == self.full_shape:
            return True
        return not self.is_row_shape(shape) and numel(shape) == numel(self.full_shape)

    def output_index(self, shape: tuple[int, ...]) -> Index:
        """The index of the output element computed by one iteration."""
        if shape == self.full_shape:
            return self.full_index
        if self.is_row_shape(shape):
            return self.row_index(shape == self.row_shape(True))
        return delinearize(linearize(self.full_index, self.full_shape), shape)


def nd_domain(full: tuple[int, ...], reduce_dims: tuple[int, ...]) -> Domain:
    """One loop variable per dim of extent != 1: parallel for kept dims, scf.for for reduced."""
    parallel: list[LoopVar] = []
    reduce_vars: list[LoopVar] = []
    index: list[Affine] = []
    for k, d in enumerate(full):
        if d == 1:
            index.append(ZERO)
            continue
        v = LoopVar(k, d)
        (reduce_vars if k in reduce_dims else parallel).append(v)
        index.append(var_index(v))
    if not parallel:
        parallel.append(LoopVar(len(full), 1))
    return Domain(full, reduce_dims, parallel, reduce_vars, tuple(index), flat=False)


def flat_domain(full: tuple[int, ...]) -> Domain:
    f = LoopVar(0, numel(full))
    return Domain(full, (), [f], [], delinearize(var_index(f), full), flat=True)


@dataclass
class Leaf:
    """A value the kernel reads from a buffer (`arg` = kernel argument number) or that is a
    splat constant (`splat`)."""

    arg: int | None = None
    splat: float | int | None = None


def splat_value(op: graph.ConstantOp) -> float | int | None:
    values = op.value.get_values()
    first = values[0] if values else None
    if first is None or any(v != first for v in values):
        return None
    return first


def _loads_are_flat(
    outputs: Sequence[SSAValue], leaves: dict[SSAValue, Leaf], full: tuple[int, ...]
) -> bool:
    """Whether, with a flat loop over `full`, every buffer is read at the loop's own position
    or at a constant one (then 1-D buffers make every access direct)."""
    dom = flat_domain(full)
    f = var_index(dom.parallel[0])
    loads = _load_offsets(dom, outputs, leaves, graph.ConcatOp | POOL_OPS)
    return loads is not None and all(not e.terms or e == f for e in loads)


def _load_offsets(
    dom: Domain,
    outputs: Sequence[SSAValue],
    leaves: dict[SSAValue, Leaf],
    unfollowed: type[Operation] | UnionType,
) -> list[Affine] | None:
    """The linear offset of every buffer load of an elementwise kernel over `dom`, found by
    walking back from its outputs (None when an op of kind `unfollowed` is reached: one that
    reads its operands at indices this does not follow)."""
    found: list[Affine] = []
    seen: set[tuple[SSAValue, Index]] = set()
    todo = [(v, dom.output_index(shape_of(v))) for v in outputs]
    while todo:
        v, index = todo.pop()
        if (v, index) in seen:
            continue
        seen.add((v, index))
        leaf = leaves.get(v)
        if leaf is not None:
            if leaf.arg is not None:
                found.append(linearize(index, shape_of(v)))
            continue
        op = v.owner
        assert isinstance(op, Operation)
        if isinstance(op, unfollowed):
            return None
        todo.extend(zip(op.operands, operand_indices(op, index), strict=True))
    return found


def merged_domain(full: tuple[int, ...], runs: Sequence[Sequence[int]]) -> Domain:
    """An elementwise domain of one loop variable per run of adjacent dims of `full` (the
    runs cover its dims of extent != 1, in order), over 1-D buffers."""
    index: list[Affine] = [ZERO] * len(full)
    parallel: list[LoopVar] = []
    for run in runs:
        sizes = [full[k] for k in run]
        v = LoopVar(run[0], numel(sizes))
        parallel.append(v)
        for k, e in zip(run, delinearize(var_index(v), sizes), strict=True):
            index[k] = e
    if not parallel:
        parallel.append(LoopVar(len(full), 1))
    return Domain(full, (), parallel, [], tuple(index), flat=True)


def _has_divmod(e: Affine) -> bool:
    """Whether computing `e` divides (a floor division or modulo anywhere in it)."""
    for atom, _ in e.terms:
        if isinstance(atom, FloorDiv | Mod):
            return True
        if isinstance(atom, Clamp | Reflect) and _has_divmod(atom.arg):
            return True
    return False


def _offsets(
    dom: Domain, outputs: Sequence[SSAValue], leaves: dict[SSAValue, Leaf]
) -> list[Affine] | None:
    """The linear offset of every buffer access of an elementwise kernel over `dom`: its
    stores and its loads (None through concat, pad, pool or gather)."""
    loads = _load_offsets(dom, outputs, leaves, graph.ConcatOp | graph.GatherOp | POOL_OPS)
    if loads is None:
        return None
    return [linearize(dom.output_index(shape_of(v)), shape_of(v)) for v in outputs] + loads


MERGE_DIMS = True
"""`lower-to-loops`' `merge-dims` default (see `LowerToLoopsPass`)."""


def collapsed_domain(
    full: tuple[int, ...], outputs: Sequence[SSAValue], leaves: dict[SSAValue, Leaf]
) -> Domain | None:
    """An elementwise kernel's loops with adjacent dims merged wherever every buffer is
    still read and written without a division (NCHW batch norm: `[C, H*W]`, a long inner
    loop and the channel's values loaded once per row); None when some access divides however
    the dims are merged, or an op reads its operands at indices `_offsets` does not follow."""

    def divides(runs: list[list[int]]) -> bool:
        offsets = _offsets(merged_domain(full, runs), outputs, leaves)
        return offsets is None or any(_has_divmod(e) for e in offsets)

    runs = [[k] for k, d in enumerate(full) if d != 1]
    clean = not divides(runs)
    for k in range(len(runs) - 1, 0, -1):
        trial = [*runs[: k - 1], runs[k - 1] + runs[k], *runs[k + 1 :]]
        if not divides(trial):
            runs, clean = trial, True
    return merged_domain(full, runs) if clean else None


# ---------------------------------------------------------------------------------------------
# Kernel building
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Scope:
    """A block being filled: the loop variables it defines, what was emitted in it (valid in
    it and in nested scopes), and the open nested op (new ops go before it)."""

    block: Block
    parent: Scope | None
    var_values: dict[int, SSAValue] = field(default_factory=dict[int, SSAValue])
    memo: dict[object, SSAValue] = field(default_factory=dict[object, SSAValue])
    barrier: bool = False
    """Values may not move out of it (an scf.if branch)."""
    root: bool = False
    """The parallel loop's body: nothing but constants goes further out."""
    anchor: Operation | None = None

    def insert(self, op: Operation) -> None:
        if self.anchor is not None:
            self.block.insert_op_before(op, self.anchor)
        else:
            self.block.add_op(op)


def buffer_type(value: SSAValue, flat: bool) -> MemRefType[Attribute]:
    t = dtype_of(value)
    shape = [numel(shape_of(value))] if flat else list(shape_of(value))
    return MemRefType(i8 if t == i1 else t, shape)


class KernelBuilder:
    """Builds the kernel of one group (see the module docstring); implements
    `xfuse.dialects.facts.ScalarBuilder`."""

    def __init__(
        self,
        name: str,
        group: fusion.GroupOp,
        leaves: dict[SSAValue, Leaf],
        buffers: list[SSAValue],
        merge_dims: bool,
    ):
        self.name = name
        self.merge_dims = merge_dims
        self.group = group
        self.leaves = leaves
        self.buffers = buffers
        self.outputs = list(group.yield_op.values)
        self.row_values: dict[Operation, SSAValue] = {}
        ops = [op for op in group.block.ops if not isinstance(op, fusion.YieldOp)]
        for op in ops:
            if not _is_supported(op):
                raise self.error(f"'{op.name}' has no loop lowering")
        self.reductions: list[graph.ReduceOp] = [
            op for op in ops if isinstance(op, graph.ReduceOp) and op.reduce_dims
        ]
        self.error_flag = self._check_gathers(ops)
        self.scans = [op for op in ops if isinstance(op, graph.ScanOp)]  # task `scan`
        self.domain = self._domain()

    def error(self, reason: str) -> LoopLoweringError:
        return LoopLoweringError(f"cannot lower @{self.name} to loops: {reason}")

    def _check_gathers(self, ops: Sequence[Operation]) -> bool:
        """Whether the kernel gathers (then it takes an error flag after its outputs)."""
        gathers = [op for op in ops if isinstance(op, graph.GatherOp)]
        for op in gathers:
            table = shape_of(op.table)
            if 0 in table[op.axis : op.axis + len(op.indices)] and numel(shape_of(op.result)):
                raise self.error(
                    "'graph.gather' indexes an empty dim (every index is out of range)"
                )
        return bool(gathers)

    # -- structure -----------------------------------------------------------------------------

    def _domain(self) -> Domain:
        if self.scans:  # task `scan`
            return scan_domain(self)
        full, dims = self._full_shape()
        if not self.reductions and len({numel(shape_of(v)) for v in self.outputs}) == 1:
            # outputs of one element count: one flat loop where every access is at the
            # loop's position; else adjacent dims merged where no access divides; else one
            # flat loop for outputs of different shapes
            if _loads_are_flat(self.outputs, self.leaves, full):
                return flat_domain(full)
            same_shape = all(shape_of(v) == full for v in self.outputs)
            merged = collapsed_domain(full, self.outputs, self.leaves) if self.merge_dims else None
            loops = sum(d != 1 for d in full)  # nd_domain's
            if merged is not None and (len(merged.parallel) < loops or not same_shape):
                return merged
            if not same_shape:
                return flat_domain(full)
        allowed = {full, reduced_shape(full, dims, True), reduced_shape(full, dims, False)}
        for v in self.outputs:
            if shape_of(v) not in allowed and numel(shape_of(v)) != numel(full):
                raise self.error(
                    f"output of shape {graph.fmt_shape(shape_of(v))} is neither the group's "
                    f"full shape {graph.fmt_shape(full)}, its row shape, nor of as many elements"
                )
        return nd_domain(full, dims)

    def _full_shape(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The shape the reductions reduce and their dims (the first output's shape, no dims,
        without reductions)."""
        if not self.reductions:
            return shape_of(self.outputs[0]), ()
        first = self.reductions[0]
        full, dims = shape_of(first.input), first.reduce_dims
        for r in self.reductions[1:]:
            if (shape_of(r.input), r.reduce_dims) != (full, dims):
                raise self.error(
                    f"reductions over different dims or shapes ({graph.fmt_shape(full)} dims "
                    f"{list(dims)} and {graph.fmt_shape(shape_of(r.input))} dims "
                    f"{list(r.reduce_dims)}) do not share one row loop"
                )
        return full, dims

    def build(self) -> func.FuncOp:
        d = self.domain
        arg_types = [buffer_type(v, d.flat) for v in [*self.buffers, *self.outputs]]
        if self.error_flag:
            arg_types.append(ERROR_FLAG_TYPE)
        kernel = func.FuncOp(self.name, FunctionType.from_lists(arg_types, []))
        kernel.attributes[KERNEL_ATTR] = UnitAttr()
        if self.error_flag:
            kernel.attributes[ERROR_FLAG_ATTR] = UnitAttr()
        kernel.attributes[PARALLEL_DIMS_ATTR] = IntegerAttr(len(d.parallel), i64)
        entry = kernel.body.block
        self.args = list(entry.args)
        self.scope = Scope(entry, None)
        zero, one = self.index_constant(0), self.index_constant(1)
        body = Block(arg_types=[IndexType()] * len(d.parallel))
        loop = scf.ParallelOp(
            [zero] * len(d.parallel),
            [self.index_constant(v.extent) for v in d.parallel],
            [one] * len(d.parallel),
            Region(body),
        )
        entry.add_op(loop)
        entry.add_op(func.ReturnOp())
        self.scope.anchor = loop
        self.scope = Scope(
            body,
            self.scope,
            {v.ident: a for v, a in zip(d.parallel, body.args, strict=True)},
            root=True,
        )
        try:
            self._emit_row()
        except UnsupportedScalarOp as e:
            raise self.error(str(e)) from None
        body.add_op(scf.ReduceOp())
        return kernel

    def _emit_row(self) -> None:
        if self.scans:  # task `scan`
            return emit_scan(self)
        for phase in _phases(self.reductions):
            self._emit_phase(phase)
        d = self.domain
        full = [(v, i) for i, v in enumerate(self.outputs) if d.writes_per_element(shape_of(v))]
        for i, v in enumerate(self.outputs):
            if not d.writes_per_element(shape_of(v)):
                self.store(v, i, d.output_index(shape_of(v)))

        def write_full(_: list[SSAValue]) -> list[SSAValue]:
            for v, i in full:
                self.store(v, i, d.output_index(shape_of(v)))
            return []

        if full:
            self.for_nest(d.reduce_vars, [], write_full)

    def _emit_phase(self, phase: list[graph.ReduceOp]) -> None:
        inits: list[SSAValue] = []
        for r in phase:
            inits.append(self.constant(reduction_init(r), accumulator_type(r)))
            if isinstance(r, graph.ArgReduceOp):  # and the index of the value so far
                inits.append(self.constant(0, i64))

        def accumulate(accs: list[SSAValue]) -> list[SSAValue]:
            out: list[SSAValue] = []
            carried = iter(accs)
            for r in phase:
                x = self.value_at(r.input, self.domain.full_index)
                x = to_compute(self, x, dtype_of(r.input))
                if isinstance(r, graph.ArgReduceOp):
                    out += self._arg_step(r, next(carried), next(carried), x)
                else:
                    out.append(self.insert(reduction_combiner(r)(next(carried), x)))
            return out

        loop_vars = self.domain.reduce_vars
        arg_reduces = any(isinstance(r, graph.ArgReduceOp) for r in phase)
        if not arg_reduces and _reassociates(phase):
            accs = self.partial_sums_nest(phase, loop_vars, inits, accumulate)
        else:
            accs = self.for_nest(loop_vars, inits, accumulate)
        results = iter(accs)
        for r in phase:
            acc = next(results)
            self.row_values[r] = (
                next(results) if isinstance(r, graph.ArgReduceOp) else self._finalize(r, acc)
            )

    def _arg_step(
        self, r: graph.ArgReduceOp, acc: SSAValue, index: SSAValue, x: SSAValue
    ) -> list[SSAValue]:
        """argmax/argmin (issue 15): take x and its position where it beats the value so far
        strictly (the first of equal ones stays), or is the first NaN."""
        dim = r.reduce_dims[0]
        position = self.insert(
            arith.IndexCastOp(self.index_value(self.domain.full_index[dim]), i64)
        )
        is_max = isinstance(r, graph.ArgMaxOp)
        if is_float(x.type):
            take = self.insert(arith.CmpfOp(x, acc, "ogt" if is_max else "olt"))
            first_nan = self.insert(
                arith.AndIOp(
                    self.insert(arith.CmpfOp(x, x, "uno")),
                    self.insert(arith.CmpfOp(acc, acc, "ord")),
                )
            )
            take = self.insert(arith.OrIOp(take, first_nan))
        else:
            take = self.insert(arith.CmpiOp(x, acc, "sgt" if is_max else "slt"))
        return [
            self.insert(arith.SelectOp(take, x, acc)),
            self.insert(arith.SelectOp(take, position, index)),
        ]

    def partial_sums_nest(
        self,
        phase: list[graph.ReduceOp],
        loop_vars: Sequence[LoopVar],
        carried: list[SSAValue],
        body: Callable[[list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        """`for_nest` for accumulators of float sums or products over several reduced dims:
        each inner loop starts from the identity and its partial result is combined into the
        enclosing loop's accumulator (blocked summation, as torch's cascade sum), so that the
        rounding error grows with the sum of the extents, not their product. One carried
        accumulator through the whole nest adds a 6x33 sum's 198 values one by one; of many
        equal values its rounding errors add up (seed 70, program 87: 32 ulps; eager 0.6)."""
        if len(loop_vars) < 2:
            return self.for_nest(loop_vars, carried, body)
        identities = [self.constant(reduction_init(r), accumulator_type(r)) for r in phase]

        def outer(accs: list[SSAValue]) -> list[SSAValue]:
            partials = self.partial_sums_nest(phase, loop_vars[1:], identities, body)
            return [
                self.insert(reduction_combiner(r)(acc, partial))
                for r, acc, partial in zip(phase, accs, partials, strict=True)
            ]

        return self.for_nest(loop_vars[:1], carried, outer)

    def _finalize(self, r: graph.ReduceOp, acc: SSAValue) -> SSAValue:
        if isinstance(r, graph.ReduceMeanOp):
            count = numel([shape_of(r.input)[k] for k in r.reduce_dims])
            acc = self.insert(arith.DivfOp(acc, self.constant(float(count), acc.type)))
        return from_compute(self, acc, dtype_of(r.result))

    def for_nest(
        self,
        loop_vars: Sequence[LoopVar],
        carried: list[SSAValue],
        body: Callable[[list[SSAValue]], list[SSAValue]],
    ) -> list[SSAValue]:
        """Nested `scf.for` over `loop_vars` (outer first) carrying `carried` as iter_args;
        `body` maps the innermost iteration's carried values to the next ones."""
        if not loop_vars:
            return body(carried)
        v = loop_vars[0]
        block = Block(arg_types=[IndexType(), *(c.type for c in carried)])
        loop = scf.ForOp(
            self.index_constant(0),
            self.index_constant(v.extent),
            self.index_constant(1),
            carried,
            block,
        )
        self.scope.insert(loop)
        with self.child_scope(block, loop, {v.ident: block.args[0]}):
            results = self.for_nest(loop_vars[1:], list(block.args[1:]), body)
            self.scope.insert(scf.YieldOp(*results))
        return list(loop.results)

    # -- scopes --------------------------------------------------------------------------------

    @contextmanager
    def child_scope(
        self, block: Block, op: Operation, var_values: dict[int, SSAValue], barrier: bool = False
    ) -> Iterator[Scope]:
        """Fill `block` of `op` (already inserted in the current scope)."""
        parent = self.scope
        saved, parent.anchor = parent.anchor, op
        self.scope = Scope(block, parent, var_values, barrier=barrier)
        try:
            yield self.scope
        finally:
            self.scope, parent.anchor = parent, saved

    @contextmanager
    def in_scope(self, scope: Scope) -> Iterator[None]:
        saved, self.scope = self.scope, scope
        try:
            yield
        finally:
            self.scope = saved

    def lookup(self, key: object) -> SSAValue | None:
        s: Scope | None = self.scope
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None

    def target_scope(self, needed: frozenset[int], pure: bool) -> Scope:
        """The outermost scope where a value needing loop variables `needed` may go: the one
        defining the innermost of them, not beyond an scf.if branch unless `pure`."""
        s = self.scope
        while not (needed & s.var_values.keys() or s.root or (s.barrier and not pure)):
            assert s.parent is not None
            s = s.parent
        return s

    def memoized(
        self, key: object, needed: frozenset[int], pure: bool, compute: Callable[[], SSAValue]
    ) -> SSAValue:
        hit = self.lookup(key)
        if hit is not None:
            return hit
        target = self.target_scope(needed, pure)
        with self.in_scope(target):
            value = compute()
        target.memo[key] = value
        return value

    # -- ScalarBuilder -------------------------------------------------------------------------

    def insert(self, op: Operation) -> SSAValue:
        self.scope.insert(op)
        return op.results[0]

    def constant(self, value: float | int, type: Attribute) -> SSAValue:
        entry = self.scope
        while entry.parent is not None:
            entry = entry.parent
        key = ("constant", repr(value), type)
        if key not in entry.memo:
            attr = (
                FloatAttr(float(value), type)  # type: ignore[call-overload]
                if is_float(type)
                else IntegerAttr(int(value), type)  # type: ignore[call-overload]
            )
            op = arith.ConstantOp(attr)  # pyright: ignore[reportArgumentType]
            entry.insert(op)
            entry.memo[key] = op.result
        return entry.memo[key]

    def index_constant(self, value: int) -> SSAValue:
        return self.constant(value, IndexType())

    # -- indices -------------------------------------------------------------------------------

    def index_value(self, e: Affine) -> SSAValue:
        if not e.terms:
            return self.index_constant(e.const)
        pure = not is_gathered(e)  # an index tensor's load stays in its scf.if branch
        return self.memoized(("index", e), loop_vars(e), pure, lambda: self._compute_index(e))

    def _compute_index(self, e: Affine) -> SSAValue:
        if e.const == 0 and len(e.terms) == 1 and e.terms[0][1] == 1:
            return self._compute_atom(e.terms[0][0])
        acc: SSAValue | None = None
        for atom, k in e.terms:
            v = self.index_value(Affine(((atom, 1),)))
            if k != 1:
                v = self.insert(arith.MuliOp(v, self.index_constant(k)))
            acc = v if acc is None else self.insert(arith.AddiOp(acc, v))
        assert acc is not None
        if e.const:
            acc = self.insert(arith.AddiOp(acc, self.index_constant(e.const)))
        return acc

    def _compute_atom(self, a: Atom) -> SSAValue:
        if isinstance(a, LoopVar):
            s: Scope | None = self.scope
            while s is not None:
                if a.ident in s.var_values:
                    return s.var_values[a.ident]
                s = s.parent
            raise AssertionError(f"loop variable {a} is not defined here")
        if isinstance(a, Clamp | Reflect):
            return emit_window_index(self, a)
        if isinstance(a, Gathered):
            return self._gathered(a)
        op = arith.DivUIOp if isinstance(a, FloorDiv) else arith.RemUIOp
        c = a.divisor if isinstance(a, FloorDiv) else a.modulus
        return self.insert(op(self.index_value(a.arg), self.index_constant(c)))

    def _gathered(self, a: Gathered) -> SSAValue:
        """The index tensor's element as an index in [0, size): wrapped where torch wraps,
        clamped (to 0) when outside, which also sets the kernel's error flag."""
        i = self.insert(arith.IndexCastOp(self.value_at(a.indices, a.at), IndexType()))
        zero, size = self.index_constant(0), self.index_constant(a.size)
        if a.wrap:
            negative = self.insert(arith.CmpiOp(i, zero, "slt"))
            i = self.insert(arith.SelectOp(negative, self.insert(arith.AddiOp(i, size)), i))
        bad = self.insert(arith.CmpiOp(i, size, "uge"))  # negative ones are large unsigned
        report = Block()
        report.add_ops(
            [
                memref.StoreOp.get(self.constant(1, i8), self.args[-1], [zero]),
                scf.YieldOp(),
            ]
        )
        self.scope.insert(scf.IfOp(bad, [], Region(report)))
        return self.insert(arith.SelectOp(bad, zero, i))

    def access(self, value: SSAValue, index: Index) -> list[SSAValue]:
        """memref indices of `value`'s element at `index` in its buffer."""
        if self.domain.flat:
            return [self.index_value(linearize(index, shape_of(value)))]
        return [self.index_value(e) for e in index]

    # -- values --------------------------------------------------------------------------------

    def value_at(self, v: SSAValue, index: Index) -> SSAValue:
        """The scalar value of `v`'s element at `index`."""
        return self.memoized(
            ("value", v, index), index_vars(index), False, lambda: self._compute_value(v, index)
        )

    def _compute_value(self, v: SSAValue, index: Index) -> SSAValue:
        leaf = self.leaves.get(v)
        if leaf is not None:
            return self._leaf_at(leaf, v, index)
        op = v.owner
        assert isinstance(op, Operation)
        if isinstance(op, graph.ConcatOp):
            return self._concat_at(op, index, 0)
        if isinstance(op, POOL_OPS):
            if isinstance(op, graph.PadOp):
                return pad_value_at(self, op, index)
            if isinstance(op, graph.PatchesOp):
                return patches_value_at(self, op, index)
            return pool_value_at(self, op, index)
        if is_real_reduction(op):
            return self._row_value(op, index)
        if isinstance(op, graph.ScanOp):  # task `scan`: emit_scan sets its value at its index
            raise self.error(f"the result of '{op.name}' is read at another index than its own")
        if isinstance(op, graph.IotaOp):
            return iota_value(self, op, index)
        operands = [
            self.value_at(o, i)
            for o, i in zip(op.operands, operand_indices(op, index), strict=True)
        ]
        if isinstance(op, LAYOUT_OPS | graph.ReduceOp | graph.GatherOp):
            return operands[0]
        if isinstance(op, graph.CastOp):
            return emit_cast(self, operands[0], dtype_of(op.input), dtype_of(op.result))
        if isinstance(op, graph.WhereOp):
            return emit_select(self, *operands)
        return emit_elementwise(self, op.name, operands, dtype_of(op.operands[0]))

    def _leaf_at(self, leaf: Leaf, v: SSAValue, index: Index) -> SSAValue:
        t = dtype_of(v)
        if leaf.splat is not None:
            return self.constant(leaf.splat, t)
        assert leaf.arg is not None
        loaded = self.insert(memref.LoadOp.get(self.args[leaf.arg], self.access(v, index)))
        return self.insert(arith.TruncIOp(loaded, i1)) if t == i1 else loaded

    def _row_value(self, op: graph.ReduceOp, index: Index) -> SSAValue:
        want = self.domain.row_index(op.keeps_dims)
        for got, expected, size in zip(index, want, shape_of(op.result), strict=True):
            if size != 1 and got != expected:
                raise self.error(
                    f"the result of '{op.name}' is read at another row than its own "
                    "(one row loop cannot express it)"
                )
        return self.row_values[op]

    def _concat_at(self, op: graph.ConcatOp, index: Index, first: int) -> SSAValue:
        """`scf.if` chain over the inputs from `first` on, skipping the tests the index's
        bounds already decide."""
        axis = op.axis
        offsets = [0]
        for v in op.inputs:
            offsets.append(offsets[-1] + shape_of(v)[axis])
        lo, hi = bounds(index[axis])
        k = first
        while k < len(op.inputs) - 1 and offsets[k + 1] <= lo:  # (all empty: never runs)
            k += 1
        shifted = (
            index[:axis] + (add(index[axis], constant_index(-offsets[k])),) + index[axis + 1 :]
        )
        if k == len(op.inputs) - 1 or hi < offsets[k + 1]:
            return self.value_at(op.inputs[k], shifted)
        cond = self.insert(
            arith.CmpiOp(self.index_value(index[axis]), self.index_constant(offsets[k + 1]), "ult")
        )
        then_block, else_block = Block(), Block()
        branch = scf.IfOp(cond, [dtype_of(op.result)], Region(then_block), Region(else_block))
        self.scope.insert(branch)
        with self.child_scope(then_block, branch, {}, barrier=True):
            self.scope.insert(scf.YieldOp(self.value_at(op.inputs[k], shifted)))
        with self.child_scope(else_block, branch, {}, barrier=True):
            self.scope.insert(scf.YieldOp(self._concat_at(op, index, k + 1)))
        return branch.results[0]

    def store(self, v: SSAValue, output: int, index: Index) -> None:
        x = self.value_at(v, index)
        if dtype_of(v) == i1:
            x = self.insert(arith.ExtUIOp(x, i8))
        ref = self.args[len(self.buffers) + output]
        self.scope.insert(memref.StoreOp.get(x, ref, self.access(v, index)))


# ---------------------------------------------------------------------------------------------
# Padding and pooling (pool task)
# ---------------------------------------------------------------------------------------------

POOL_OPS = graph.PadOp | graph.PoolOp | graph.PatchesOp

UNROLL_WINDOW = 32
"""Windows of up to this many elements are unrolled (each position's guard decided or folded
at compile time, one straight-line expression: Inductor unrolls up to 25); larger ones are an
`scf.for` nest carrying the accumulator."""

_window_idents = count(1 << 20)
"""Identifiers of window loop variables (apart from the domain's, which number dims)."""


def emit_window_index(b: KernelBuilder, a: Clamp | Reflect) -> SSAValue:
    """A clamped or reflected index, with only the corrections its bounds leave open."""
    v = b.index_value(a.arg)
    lo, hi = bounds(a.arg)
    if isinstance(a, Clamp):
        if lo < a.low:
            v = b.insert(arith.MaxSIOp(v, b.index_constant(a.low)))
        if hi > a.high:
            v = b.insert(arith.MinSIOp(v, b.index_constant(a.high)))
        return v
    last = a.size - 1
    if lo < 0:  # |arg|
        v = b.insert(arith.MaxSIOp(v, b.insert(arith.SubiOp(b.index_constant(0), v))))
    if max(hi, -lo) > last:  # last - |last - v|
        t = b.insert(arith.SubiOp(b.index_constant(last), v))
        t = b.insert(arith.MaxSIOp(t, b.insert(arith.SubiOp(b.index_constant(0), t))))
        v = b.insert(arith.SubiOp(b.index_constant(last), t))
    return v


def _guarded_index(
    b: KernelBuilder, pos: Affine, size: int
) -> tuple[Affine, SSAValue | None] | None:
    """Where to load for position `pos` of a dim of `size`, and the i1 that says whether it is
    inside (None: always); None when it is never inside. The address is clamped, so that the
    load never leaves the buffer."""
    lo, hi = bounds(pos)
    if lo >= 0 and hi < size:
        return pos, None
    if hi < 0 or lo >= size or size == 0:
        return None

    def inside() -> SSAValue:
        v = b.index_value(pos)
        conds = []
        if lo < 0:
            conds.append(b.insert(arith.CmpiOp(v, b.index_constant(0), "sge")))
        if hi >= size:
            conds.append(b.insert(arith.CmpiOp(v, b.index_constant(size - 1), "sle")))
        return conds[0] if len(conds) == 1 else b.insert(arith.AndIOp(conds[0], conds[1]))

    cond = b.memoized(("inside", pos, size), loop_vars(pos), True, inside)
    return Affine(((Clamp(pos, 0, size - 1), 1),)), cond


def _all(b: KernelBuilder, conds: Sequence[SSAValue]) -> SSAValue | None:
    out: SSAValue | None = None
    for c in conds:
        out = c if out is None else b.insert(arith.AndIOp(out, c))
    return out


def _guarded_value(
    b: KernelBuilder, v: SSAValue, index: Sequence[Affine], sizes: Sequence[int]
) -> tuple[SSAValue, SSAValue | None] | None:
    """`v` at `index` (whose last len(sizes) positions may fall outside), with the i1 that
    says whether they are all inside; None when one never is."""
    lead = len(index) - len(sizes)
    src, conds = list(index[:lead]), []
    for pos, size in zip(index[lead:], sizes, strict=True):
        guarded = _guarded_index(b, pos, size)
        if guarded is None:
            return None
        src.append(guarded[0])
        if guarded[1] is not None:
            conds.append(guarded[1])
    return b.value_at(v, tuple(src)), _all(b, conds)


def _fill(b: KernelBuilder, value: float, t: Attribute) -> SSAValue:
    return b.constant(value if is_float(t) else int(bool(value)) if t == i1 else int(value), t)


def _value_or_fill(
    b: KernelBuilder,
    v: SSAValue,
    index: Sequence[Affine],
    sizes: Sequence[int],
    fill: float,
    t: Attribute,
) -> SSAValue:
    """select(inside, v[index clamped], fill) (`_guarded_value`): constant padding's value,
    and a patch's."""
    guarded = _guarded_value(b, v, index, sizes)
    if guarded is None:
        return _fill(b, fill, t)
    x, inside = guarded
    return x if inside is None else b.insert(arith.SelectOp(inside, x, _fill(b, fill, t)))


def pad_value_at(b: KernelBuilder, op: graph.PadOp, index: Index) -> SSAValue:
    """select(inside, x[clamp(i - low)], value), or x[reflect / clamp(i - low)]."""
    low, _ = op.pads
    shape, t, mode = shape_of(op.input), dtype_of(op.result), op.mode.data
    src = [add(e, constant_index(-lo)) for e, lo in zip(index, low, strict=True)]
    if mode == "reflect":
        src = [
            e if 0 <= bounds(e)[0] and bounds(e)[1] < n else Affine(((Reflect(e, n), 1),))
            for e, n in zip(src, shape, strict=True)
        ]
    elif mode == "replicate":
        src = [
            Affine(((Clamp(e, 0, n - 1), 1),))
            if not (0 <= bounds(e)[0] and bounds(e)[1] < n)
            else e
            for e, n in zip(src, shape, strict=True)
        ]
    if mode != "constant":
        return b.value_at(op.input, tuple(src))
    return _value_or_fill(b, op.input, src, shape, op.fill, t)


def patches_value_at(b: KernelBuilder, op: graph.PatchesOp, index: Index) -> SSAValue:
    """select(inside, x[c, clamp(oh * sh + i - ph), clamp(ow * sw + j - pw)], 0) at
    `[oh, ow, c, i, j]`, with only the guards the positions' bounds leave open."""
    oh, ow, c, i, j = index
    _, stride, padding = op.window
    src = [
        c,
        *(
            add(add(scale(o, s), k), constant_index(-p))
            for o, k, s, p in zip((oh, ow), (i, j), stride, padding, strict=True)
        ),
    ]
    return _value_or_fill(b, op.input, src, shape_of(op.input)[1:], 0.0, dtype_of(op.result))


def _pool_combiner(
    op: graph.PoolOp,
) -> tuple[Callable[[SSAValue, SSAValue], Operation], float | int]:
    t = dtype_of(op.input)
    if op.kind.data == "avg":
        return arith.AddfOp, 0.0
    if is_float(t):
        return arith.MaximumfOp, float("-inf")  # NaN propagates, as eager's max_pool
    return arith.MaxSIOp, -(1 << (cast(IntegerType, t).width.data - 1))


@dataclass(frozen=True)
class Window:
    """Where a pool's window for one output element lies, per window dim: its first position
    (`starts`), and for adaptive pools its end (`ends`) and how many offsets always lie
    before it (`always`)."""

    starts: list[Affine]
    ends: list[Affine | None]
    always: list[int]
    sizes: tuple[int, ...]


def pool_window(op: graph.PoolOp, index: Index) -> Window:
    kernel, stride, padding, _ = op.window
    n = len(kernel)
    sizes = shape_of(op.input)[-n:]
    if op.adaptive is None:
        starts = [
            add(scale(e, s), constant_index(-p))
            for e, s, p in zip(index[-n:], stride, padding, strict=True)
        ]
        return Window(starts, [None] * n, list(kernel), sizes)
    outs = shape_of(op.result)[-n:]
    starts = [floordiv(scale(e, i), o) for e, i, o in zip(index[-n:], sizes, outs, strict=True)]
    ends: list[Affine | None] = [
        floordiv(add(scale(e, i), constant_index(i + o - 1)), o)
        for e, i, o in zip(index[-n:], sizes, outs, strict=True)
    ]
    always = [
        min(hi - lo for lo, hi in (graph.adaptive_bounds(k, i, o) for k in range(o)))
        for i, o in zip(sizes, outs, strict=True)
    ]
    return Window(starts, ends, always, sizes)


def _window_element(
    b: KernelBuilder,
    op: graph.PoolOp,
    index: Index,
    w: Window,
    positions: Sequence[Affine],
    offsets: Sequence[Affine] | None = None,
) -> tuple[SSAValue, SSAValue | None] | None:
    """The input element at window `positions` (in the compute type) and the i1 that says
    whether it is inside the input and the window (None: always); None when it never is. An
    adaptive window's end is tested at unrolled `offsets` (a clipped loop stops there)."""
    guarded = _guarded_value(b, op.input, (*index[: -len(w.sizes)], *positions), w.sizes)
    if guarded is None:
        return None
    conds = [guarded[1]] if guarded[1] is not None else []
    for pos, off, end, always in zip(
        positions, offsets or positions, w.ends, w.always, strict=True
    ):
        if offsets is not None and end is not None and bounds(off)[1] >= always:
            conds.append(b.insert(arith.CmpiOp(b.index_value(pos), b.index_value(end), "slt")))
    return to_compute(b, guarded[0], dtype_of(op.input)), _all(b, conds)


@dataclass(frozen=True)
class WindowSpan:
    """The positions one window dim reads inside the input: `first` to `stop` (exclusive) by
    `step` (the dilation), where `var` (a loop variable over the dim's size) walks them."""

    var: LoopVar
    first: SSAValue
    stop: SSAValue
    step: int


def _clipped_index(b: KernelBuilder, e: Affine, low: int | None, high: int | None) -> SSAValue:
    """min(max(e, low), high) (None: no such side), with only the sides `e`'s bounds leave
    open: a side `e` always passes is a constant."""
    lo, hi = bounds(e)
    if low is not None and hi <= low:
        return b.index_constant(low)
    if high is not None and lo >= high:
        return b.index_constant(high)
    v = b.index_value(e)
    if low is not None and lo < low:
        v = b.insert(arith.MaxSIOp(v, b.index_constant(low)))
    if high is not None and hi > high:
        v = b.insert(arith.MinSIOp(v, b.index_constant(high)))
    return v


def _window_span(
    b: KernelBuilder, start: Affine, end: Affine | None, k: int, d: int, size: int
) -> WindowSpan:
    """A window dim clipped to the input, as eager's kernels walk it: its first position
    start + d * ceil(max(0, -start) / d) and its end min(start + (k - 1) * d + 1, size) (an
    adaptive window's own end), each corrected only where the start's bounds leave it open."""
    var = LoopVar(next(_window_idents), size)
    if end is not None:  # adaptive: the window lies inside the input
        return WindowSpan(var, b.index_value(start), b.index_value(end), 1)
    stop = _clipped_index(b, add(start, constant_index((k - 1) * d + 1)), None, size)
    if d == 1 or bounds(start)[0] >= 0:
        return WindowSpan(var, _clipped_index(b, start, 0, None), stop, d)
    # skip the taps before the input: ceil(max(0, -start) / d) of them
    before = _clipped_index(b, scale(start, -1), 0, None)
    skip = b.insert(arith.AddiOp(before, b.index_constant(d - 1)))
    skip = b.insert(arith.DivUIOp(skip, b.index_constant(d)))
    skip = b.insert(arith.MuliOp(skip, b.index_constant(d)))
    return WindowSpan(var, b.insert(arith.AddiOp(b.index_value(start), skip)), stop, d)


def _clipped_nest(
    b: KernelBuilder,
    spans: Sequence[WindowSpan],
    carried: list[SSAValue],
    body: Callable[[list[SSAValue]], list[SSAValue]],
) -> list[SSAValue]:
    """Nested `scf.for` over `spans` (outer first), each from its first position to its stop,
    carrying `carried` as iter_args; an empty span runs no iteration."""
    if not spans:
        return body(carried)
    span = spans[0]
    block = Block(arg_types=[IndexType(), *(c.type for c in carried)])
    loop = scf.ForOp(span.first, span.stop, b.index_constant(span.step), carried, block)
    b.scope.insert(loop)
    with b.child_scope(block, loop, {span.var.ident: block.args[0]}):
        results = _clipped_nest(b, spans[1:], list(block.args[1:]), body)
        b.scope.insert(scf.YieldOp(*results))
    return list(loop.results)


Element = tuple[SSAValue, SSAValue | None, list[Affine]] | None
"""A window element (`_window_element`) with its positions, or None where it never is one."""


def _walk_window(
    b: KernelBuilder,
    op: graph.PoolOp,
    index: Index,
    w: Window,
    init: list[SSAValue],
    step: Callable[[list[SSAValue], Element], list[SSAValue]],
) -> list[SSAValue]:
    """Fold `step` over the window's elements in row-major order: unrolled (each position's
    guard decided or folded at compile time), or, above `UNROLL_WINDOW` elements, an scf.for
    nest over the positions inside the input only (a window much larger than its input, as a
    global pool written with a huge kernel, costs what the input holds)."""
    kernel, dilation = op.window[0], op.window[3]
    if numel(kernel) > UNROLL_WINDOW:
        spans = [
            _window_span(b, start, end, k, d, size)
            for start, end, k, d, size in zip(
                w.starts, w.ends, kernel, dilation, w.sizes, strict=True
            )
        ]
        positions = [var_index(s.var) for s in spans]

        def body(carried: list[SSAValue]) -> list[SSAValue]:
            element = _window_element(b, op, index, w, positions)
            return step(carried, None if element is None else (*element, positions))

        return _clipped_nest(b, spans, init, body)
    carried = init
    for taps in product(*map(range, kernel)):
        offsets = [constant_index(o) for o in taps]
        at = [add(a, scale(o, d)) for a, o, d in zip(w.starts, offsets, dilation, strict=True)]
        element = _window_element(b, op, index, w, at, offsets)
        carried = step(carried, None if element is None else (*element, at))
    return carried


def pool_value_at(b: KernelBuilder, op: graph.PoolOp, index: Index) -> SSAValue:
    """The window's elements combined in torch's order (max from -inf, sum from 0), padding
    skipped; average divided by the divisor."""
    w = pool_window(op, index)
    if op.kind.data == "argmax":
        return _argmax_at(b, op, index, w)
    combine, identity = _pool_combiner(op)
    init = b.constant(identity, compute_type(dtype_of(op.input)))

    def step(carried: list[SSAValue], element: Element) -> list[SSAValue]:
        if element is None:
            return carried
        x, inside, _ = element
        if inside is not None:
            x = b.insert(arith.SelectOp(inside, x, init))
        return [b.insert(combine(carried[0], x))]

    (acc,) = _walk_window(b, op, index, w, [init], step)
    if op.kind.data == "avg":
        acc = b.insert(arith.DivfOp(acc, _pool_divisor(b, op, w, acc.type)))
    return from_compute(b, acc, dtype_of(op.result))


def _argmax_at(b: KernelBuilder, op: graph.PoolOp, index: Index, w: Window) -> SSAValue:
    """max_pool's index: walking the window in order, an element inside the input is taken
    when it is the first, greater than the maximum so far, or NaN (eager's rule); the result
    is its row-major position in the window dims."""
    t = dtype_of(op.input)
    _, identity = _pool_combiner(op)

    def step(carried: list[SSAValue], element: Element) -> list[SSAValue]:
        acc, best = carried
        if element is None:
            return carried
        x, inside, positions = element
        if is_float(t):
            greater = b.insert(arith.CmpfOp(x, acc, "ogt"))
            take = b.insert(arith.OrIOp(greater, b.insert(arith.CmpfOp(x, x, "uno"))))
        else:
            take = b.insert(arith.CmpiOp(x, acc, "sgt"))
        first = b.insert(arith.CmpiOp(best, b.constant(0, i64), "slt"))
        take = b.insert(arith.OrIOp(take, first))
        if inside is not None:
            take = b.insert(arith.AndIOp(take, inside))
        flat = b.insert(arith.IndexCastOp(b.index_value(linearize(positions, w.sizes)), i64))
        return [b.insert(arith.SelectOp(take, x, acc)), b.insert(arith.SelectOp(take, flat, best))]

    init = [b.constant(identity, compute_type(t)), b.constant(-1, i64)]
    return _walk_window(b, op, index, w, init, step)[1]


def _static_clip(e: Affine, low: int | None, high: int | None) -> int | None:
    """min(max(e, low), high) where `e`'s bounds make it one value, else None."""
    lo, hi = bounds(e)
    if low is not None:
        lo, hi = max(lo, low), max(hi, low)
    if high is not None:
        lo, hi = min(lo, high), min(hi, high)
    return lo if lo == hi else None


def _static_span(start: Affine, k: int, low: int | None, high: int) -> int | None:
    """min(start + k, high) - max(start, low) where the bounds of `start` decide it (the same
    for every window of the dim), else None."""
    end = add(start, constant_index(k))
    if bounds(end)[1] <= high and (low is None or bounds(start)[0] >= low):
        return k
    e, s = _static_clip(end, None, high), _static_clip(start, low, None)
    return None if e is None or s is None else e - s


def _pool_divisor(b: KernelBuilder, op: graph.PoolOp, w: Window, t: Attribute) -> SSAValue:
    """`divisor`, else the product over window dims of min(start + kernel, end) - max(start,
    begin): end = size + padding, begin = start itself with count_include_pad, else the
    input's [0, size) (torch's avg_pool); an adaptive window's own size."""
    if op.divisor_value is not None:
        return b.constant(float(op.divisor_value), t)
    kernel, _, padding, _ = op.window
    include = op.count_include_pad is not None
    static, spans = 1, list[SSAValue]()
    dims = zip(w.starts, w.ends, w.always, kernel, padding, w.sizes, strict=True)
    for start, stop, always, k, p, size in dims:
        if stop is not None:  # adaptive: every window of the dim as large, or its own size
            if always == k:
                static *= k
            else:
                spans.append(b.insert(arith.SubiOp(b.index_value(stop), b.index_value(start))))
            continue
        end, end_limit = add(start, constant_index(k)), size + p if include else size
        begin = None if include else 0
        known = _static_span(start, k, begin, end_limit)
        if known is not None:
            static *= known
            continue
        e = _clipped_index(b, end, None, end_limit)
        spans.append(b.insert(arith.SubiOp(e, _clipped_index(b, start, begin, None))))
    if not spans:
        return b.constant(float(static), t)
    total = b.index_constant(static)
    for span in spans:
        total = b.insert(arith.MuliOp(total, span))
    return b.insert(arith.SIToFPOp(b.insert(arith.IndexCastOp(total, i64)), cast(AnyFloat, t)))


# ---------------------------------------------------------------------------------------------
# Scans (task `scan`): cumsum, cumprod, logcumsumexp, cummax, cummin
# ---------------------------------------------------------------------------------------------
#
# A kernel with a `graph.scan` runs the parallel loop over the other dims and, inside it, one
# `scf.for` along the scan's dim carrying the value so far (and, for argmax/argmin, its
# position) in the compute type (f32 for f16/bf16, as eager's CPU kernels): each iteration
# combines the next element in, in order, and stores the result. Nothing else reads the
# scan's result (fusion's `scan` gate: it is a kernel of its own), so no other index is asked.


def scan_domain(b: KernelBuilder) -> Domain:
    """The one scan's shape, its dim the sequential loop; every output of its shape."""
    if len(b.scans) != 1 or b.reductions:
        raise b.error("a scan shares its kernel with another scan or a reduction")
    scan = b.scans[0]
    full = shape_of(scan.result)
    for v in b.outputs:
        if shape_of(v) != full:
            raise b.error(
                f"output of shape {graph.fmt_shape(shape_of(v))} is not the scan's shape "
                f"{graph.fmt_shape(full)}"
            )
    return nd_domain(full, (scan.axis,))


def _scan_init(kind: str, t: Attribute) -> float | int:
    """The value a scan's accumulator starts from: the identity of sum / prod / logsumexp;
    for max / min one that the first element always replaces (-inf, the smallest integer,
    false for max)."""
    if kind in ("sum", "prod"):
        one = int(kind == "prod")
        return float(one) if is_float(t) else one
    if kind == "logsumexp":
        return -math_inf
    is_max = kind in ("max", "argmax")
    if is_float(t):
        return -math_inf if is_max else math_inf
    if t == i1:
        return 0 if is_max else 1
    bound = 2 ** (cast(IntegerType, t).width.data - 1)
    return -bound if is_max else bound - 1


def emit_scan(b: KernelBuilder) -> None:
    """The scan loop (see above): the value at each index is the carried one after that
    element, memoized there so that the outputs read it."""
    scan, d = b.scans[0], b.domain
    src, kind = dtype_of(scan.input), scan.combines
    t = scan_accumulator_type(kind, src)
    carried = [b.constant(_scan_init(kind, t), t)]
    if kind in graph.SCAN_ARG_KINDS:
        carried.append(b.constant(0, i64))

    def step(accs: list[SSAValue]) -> list[SSAValue]:
        x = emit_cast(b, b.value_at(scan.input, d.full_index), src, t)
        new = _scan_step(b, kind, accs, x, d.full_index[scan.axis])
        value = new[1] if kind in graph.SCAN_ARG_KINDS else emit_cast(b, new[0], t, src)
        b.scope.memo[("value", scan.result, d.full_index)] = value
        for i, v in enumerate(b.outputs):
            b.store(v, i, d.full_index)
        return new

    b.for_nest(d.reduce_vars, carried, step)


def scan_accumulator_type(kind: str, src: Attribute) -> Attribute:
    """The type a scan carries its value in: eager's CPU kernels accumulate an f32 cumsum or
    cumprod in f64 (`acc_type<float, false>`), rounding each output once; f16/bf16 in f32.
    An f32 chain of 64 steps whose outputs are then summed was 22 ulps off (seed 140,
    program 11)."""
    if kind in ("sum", "prod") and src == f32:
        return f64
    return compute_type(src)


_SCAN_COMBINE: dict[tuple[str, bool], type[Operation]] = {
    ("sum", True): arith.AddfOp,
    ("sum", False): arith.AddiOp,
    ("prod", True): arith.MulfOp,
    ("prod", False): arith.MuliOp,
}
"""(kind, float) -> the op combining a sum or product scan's next element (no fastmath flag:
eager's order of the terms)."""


def _scan_step(
    b: KernelBuilder, kind: str, accs: list[SSAValue], x: SSAValue, position: Affine
) -> list[SSAValue]:
    """The carried values after element `x` (at `position` along the dim)."""
    acc = accs[0]
    float_ = is_float(x.type)
    if kind in ("sum", "prod"):
        combine = cast(Callable[[SSAValue, SSAValue], Operation], _SCAN_COMBINE[kind, float_])
        return [b.insert(combine(acc, x))]
    if kind == "logsumexp":
        return [_log_add_exp(b, x, acc)]
    take = _takes(b, kind, x, acc)
    out = [b.insert(arith.SelectOp(take, x, acc))]
    if kind in graph.SCAN_ARG_KINDS:
        here = b.insert(arith.IndexCastOp(b.index_value(position), i64))
        out.append(b.insert(arith.SelectOp(take, here, accs[1])))
    return out


def _takes(b: KernelBuilder, kind: str, x: SSAValue, acc: SSAValue) -> SSAValue:
    """cummax / cummin's test (eager's CPU kernel): x is NaN, or the value so far is not and
    x >= it (<= for min): ties and NaNs take the later element."""
    is_max = kind in ("max", "argmax")
    if is_float(x.type):
        x_nan = b.insert(arith.CmpfOp(x, x, "uno"))
        acc_ordered = b.insert(arith.CmpfOp(acc, acc, "ord"))
        beats = b.insert(arith.CmpfOp(x, acc, "oge" if is_max else "ole"))
        return b.insert(arith.OrIOp(x_nan, b.insert(arith.AndIOp(acc_ordered, beats))))
    signed = x.type != i1  # bool: true > false
    predicate = ("sge" if is_max else "sle") if signed else ("uge" if is_max else "ule")
    return b.insert(arith.CmpiOp(x, acc, predicate))


def _log_add_exp(b: KernelBuilder, x: SSAValue, acc: SSAValue) -> SSAValue:
    """Eager's `_log_add_exp_helper(x, acc)`: with lo / hi = min / max of the two (acc when
    it is NaN; std::min / std::max keep x when unordered), log1p(exp(lo - hi)) + hi when
    they differ or are finite, else x (both the same infinity)."""
    acc_nan = b.insert(arith.CmpfOp(acc, acc, "uno"))
    acc_lower = b.insert(arith.CmpfOp(acc, x, "olt"))
    x_lower = b.insert(arith.CmpfOp(x, acc, "olt"))
    lo = b.insert(arith.SelectOp(acc_nan, acc, b.insert(arith.SelectOp(acc_lower, acc, x))))
    hi = b.insert(arith.SelectOp(acc_nan, acc, b.insert(arith.SelectOp(x_lower, acc, x))))
    general = b.insert(
        arith.AddfOp(
            b.insert(math.Log1pOp(b.insert(math.ExpOp(b.insert(arith.SubfOp(lo, hi)))))), hi
        )
    )
    differ = b.insert(arith.CmpfOp(lo, hi, "une"))
    inf = b.constant(math_inf, x.type)
    finite = b.insert(arith.CmpfOp(b.insert(math.AbsFOp(lo)), inf, "one"))
    return b.insert(arith.SelectOp(b.insert(arith.OrIOp(differ, finite)), general, x))


# ---------------------------------------------------------------------------------------------
# Groups and lone ops to kernels + launches
# ---------------------------------------------------------------------------------------------


@dataclass
class LoweredGroup:
    kernel: func.FuncOp
    launch_inputs: list[SSAValue]
    hoisted: list[graph.ConstantOp]
    """Non-splat constants of the group body, to be placed before the launch."""


def lower_group(group: fusion.GroupOp, name: str, *, merge_dims: bool = MERGE_DIMS) -> LoweredGroup:
    """The kernel `@name` of `group` and the values its launch takes (raises CodegenError);
    `merge_dims` as `LowerToLoopsPass`'s."""
    leaves: dict[SSAValue, Leaf] = {}
    buffers: list[SSAValue] = []
    launch_inputs: list[SSAValue] = []
    hoisted: list[graph.ConstantOp] = []
    for arg, outer in zip(group.block.args, group.inputs, strict=True):
        owner = outer.owner
        splat = splat_value(owner) if isinstance(owner, graph.ConstantOp) else None
        if splat is not None:
            leaves[arg] = Leaf(splat=splat)
            continue
        leaves[arg] = Leaf(arg=len(buffers))
        buffers.append(arg)
        launch_inputs.append(outer)
    for op in group.block.ops:
        if isinstance(op, graph.ConstantOp):
            splat = splat_value(op)
            if splat is not None:
                leaves[op.result] = Leaf(splat=splat)
                continue
            copy = graph.ConstantOp(op.value)
            leaves[op.result] = Leaf(arg=len(buffers))
            buffers.append(op.result)
            hoisted.append(copy)
            launch_inputs.append(copy.result)
    kernel = KernelBuilder(name, group, leaves, buffers, merge_dims).build()
    return LoweredGroup(kernel, launch_inputs, hoisted)


def wrap_in_group(op: Operation) -> fusion.GroupOp:
    """A detached one-op group around a clone of `op` (its operands are `op`'s)."""
    inputs = list(dict.fromkeys(op.operands))
    block = Block(arg_types=[v.type for v in inputs])
    clone = op.clone(value_mapper=dict(zip(inputs, block.args, strict=True)))
    block.add_ops([clone, fusion.YieldOp(*clone.results)])
    return fusion.GroupOp(
        inputs,
        [r.type for r in op.results],
        Region(block),
        graph.op_kind(op),
        "lower-to-loops:lone-op",
    )


def is_lone_kernel_op(op: Operation) -> bool:
    return graph.op_kind(op) in ("elementwise", "broadcast", "injective", "reduction") and not (
        isinstance(op, graph.ConstantOp)
    )


def is_kernel(op: Operation) -> bool:
    return isinstance(op, func.FuncOp) and KERNEL_ATTR in op.attributes


@dataclass
class FunctionLowering:
    """Lowers the groups and lone ops of one function, appending kernels to `module`."""

    function: func.FuncOp
    module: ModuleOp
    keep_unsupported: bool
    merge_dims: bool
    count: int = 0
    inlined: set[graph.ConstantOp] = field(default_factory=set[graph.ConstantOp])
    """Constants of the function that kernels read as arith.constant (erased once unused)."""

    def run(self) -> None:
        for op in list(self.function.body.block.ops):
            if isinstance(op, fusion.GroupOp):
                self.lower(op, op)
            elif is_lone_kernel_op(op):
                group = wrap_in_group(op)
                try:
                    self.lower(group, op)
                finally:
                    group.erase()
        for op in self.inlined:
            if op.parent is not None and not op.result.uses:
                op.detach()
                op.erase()

    def kernel_name(self) -> str:
        while True:
            name = f"{self.function.sym_name.data}_k{self.count}"
            self.count += 1
            if SymbolTable.lookup_symbol(self.module, name) is None:
                return name

    def lower(self, group: fusion.GroupOp, replaced: Operation) -> None:
        name = self.kernel_name()
        try:
            lowered = lower_group(group, name, merge_dims=self.merge_dims)
        except CodegenError as e:
            if not self.keep_unsupported:
                raise
            replaced.attributes[CODEGEN_ERROR_ATTR] = StringAttr(str(e))
            return
        self.inlined |= {v.owner for v in group.inputs if isinstance(v.owner, graph.ConstantOp)}
        block = self.function.body.block
        for c in lowered.hoisted:
            block.insert_op_before(c, replaced)
        launch = fusion.LaunchOp(name, lowered.launch_inputs, [r.type for r in replaced.results])
        block.insert_op_before(launch, replaced)
        for old, new in zip(replaced.results, launch.results, strict=True):
            old.replace_all_uses_with(new)
        replaced.detach()
        replaced.erase()
        self.module.body.block.add_op(lowered.kernel)


@dataclass(frozen=True)
class LowerToLoopsPass(ModulePass):
    """Groups and lone graph ops to kernels of loop IR launched with `fusion.launch`."""

    name = "lower-to-loops"

    keep_unsupported: bool = False
    """Leave groups that cannot be lowered in place (reason in `xfuse.codegen_error`) instead
    of raising CodegenError."""

    merge_dims: bool = MERGE_DIMS
    """Merge adjacent dims of an elementwise kernel's loops where no buffer access divides
    (an NCHW batch norm loops over `[C, H*W]`: long inner loops for the CPU's vectorizer, the
    channel's values loaded once per row). `xfuse.compile` turns it off on CUDA, whose
    `gpu-map-parallel` flattens the loops itself and vectorizes the accesses indexed by the
    innermost loop variable."""

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        functions = [f for f in op.ops if isinstance(f, func.FuncOp) and not is_kernel(f)]
        for f in functions:
            if f.body.blocks:
                FunctionLowering(f, op, self.keep_unsupported, self.merge_dims).run()
