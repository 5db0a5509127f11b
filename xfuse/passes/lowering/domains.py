"""
The iteration space of a kernel (`Domain`): one loop variable per dim (`nd_domain`), one
flat loop over the elements (`flat_domain`), adjacent dims merged where no buffer access
divides (`collapsed_domain`), or a reduction's adjacent reduced dims looped over as one
(`merged_row_domain`); a buffer's own dims merged where that takes divisions out of its
accesses (`merged_buffer_dims`); and the leaves a kernel reads (`Leaf`: a buffer argument or a
splat constant).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.graph import Dim, dims_of, numel, shape_of
from xfuse.dialects.op_kinds import OpGroup
from xfuse.ir import dense
from xfuse.passes.fusion.kernel_loops import ROW_PLACES, OutputPlace, RowShape
from xfuse.passes.lowering.index_algebra import (
    ZERO,
    Affine,
    Clamp,
    FloorDiv,
    Index,
    LoopVar,
    Mod,
    Reflect,
    SizedClamp,
    SizedDiv,
    SizedMod,
    SizedMul,
    Within,
    delinearize,
    linearize,
    var_index,
)
from xfuse.passes.lowering.operand_index import operand_indices


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
    indexed: dict[tuple[int, ...], Index] = field(default_factory=dict[tuple[int, ...], Index])
    """The shapes of a symbolic kernel's outputs written at an index of their own
    (`symbolic_kernels.output_index`: a permute of a value of the full shape, or a shape of
    as many elements; `index_permutes`), each with the index of the element one iteration
    writes."""

    def index_permutes(self, outputs: Sequence[SSAValue]) -> bool:
        """Writes each of `outputs` of another shape than the full one at its permuted index
        (`indexed`) where it is a permute of a value of the full shape (`output_permutation`)
        and every output of its shape is permuted alike; whether every one of them is."""
        perms: dict[tuple[int, ...], set[tuple[int, ...] | None]] = {}
        for v in outputs:
            if shape_of(v) != self.full_shape:
                perms.setdefault(shape_of(v), set()).add(output_permutation(v, self.full_shape))
        for shape, found in perms.items():
            if len(found) == 1 and (perm := next(iter(found))) is not None:
                self.indexed[shape] = tuple(self.full_index[p] for p in perm)
        return all(shape in self.indexed for shape in perms)

    def row_index(self, keepdim: bool) -> Index:
        if keepdim:
            return tuple(
                ZERO if k in self.reduce_dims else e for k, e in enumerate(self.full_index)
            )
        return tuple(e for k, e in enumerate(self.full_index) if k not in self.reduce_dims)

    @property
    def rows(self) -> RowShape:
        """The row loop's shapes (`kernel_loops`: where each output is written)."""
        return RowShape(self.full_shape, self.reduce_dims)

    def writes_per_element(self, shape: tuple[int, ...]) -> bool:
        """Whether an output of `shape` is written in the innermost loop (else once per row):
        the full shape, or another shape of as many elements (a reshape of a full-shape value,
        written at the same position in memory), or one written at an index of its own
        (`indexed`)."""
        if self.flat or shape in self.indexed:
            return True
        return self.rows.output_place(shape) not in (*ROW_PLACES, None)

    def output_index(self, shape: tuple[int, ...]) -> Index:
        """The index of the output element computed by one iteration."""
        index = self.indexed.get(shape)
        if index is not None:
            return index
        place = self.rows.output_place(shape)
        if place is OutputPlace.FULL:
            return self.full_index
        if place in ROW_PLACES:
            return self.row_index(place is OutputPlace.ROW_KEEPDIM)
        return delinearize(linearize(self.full_index, self.full_shape), shape)


def output_permutation(output: SSAValue, full: tuple[Dim, ...]) -> tuple[int, ...] | None:
    """The permutation `perm` where `output` is a chain of `graph.permute`s of a value of dims
    `full` (dim k of `output` is dim perm[k] of that value); None where it is not."""
    perm = tuple(range(len(full)))
    value = output
    while dims_of(value) != full:
        op = value.owner
        if not isinstance(op, graph.PermuteOp) or len(op.permutation) != len(full):
            return None
        perm = tuple(op.permutation[k] for k in perm)
        value = op.input
    return perm


def nd_domain(
    full: tuple[int, ...],
    reduce_dims: tuple[int, ...],
    dims: Sequence[int | str] | None = None,
    loop_var: Callable[[int, Any], LoopVar] = LoopVar,
) -> Domain:
    """One loop variable per dim of extent != 1: parallel for kept dims, scf.for for reduced.
    `dims` (default `full`) are the loops' extents, size symbols among them, whose variable
    `loop_var(k, extent)` makes (a symbolic kernel's bounded by its runtime size)."""
    parallel: list[LoopVar] = []
    reduce_vars: list[LoopVar] = []
    index: list[Affine] = []
    for k, d in enumerate(full if dims is None else dims):
        if d == 1:
            index.append(ZERO)
            continue
        v = loop_var(k, d)
        (reduce_vars if k in reduce_dims else parallel).append(v)
        index.append(var_index(v))
    if not parallel:
        parallel.append(LoopVar(len(full), 1))
    return Domain(full, reduce_dims, parallel, reduce_vars, tuple(index), flat=False)


VECTOR = 16
"""Elements of the widest float vector (AVX-512's f32): a merged row loop's block is whole
vectors (`_row_blocks`)."""

ROW_LENGTH = 1.5
"""How much longer in all a merged row's loops may be than its dims' own loops. The loop IR
sums each loop's elements one by one into a partial sum of its own (`partial_sums_nest`), so
its rounding error grows with the loops' lengths added up (56 + 56 for a 56x56 row): a block
loop of 64 under a loop of 49 blocks (113) is as accurate, one loop of 3,136 is not."""


def merged_row_domain(
    full: tuple[int, ...], reduce_dims: tuple[int, ...], short_rows: int = 0
) -> Domain | None:
    """A reduction's domain (`nd_domain`'s, kept dims as there) whose adjacent reduced dims
    are looped over as one, in blocks (`_row_blocks`): a batch norm's or a squeeze's `[C, 56,
    56]` sums a channel's 3,136 elements in 49 blocks of 64 (whole vectors), where
    `nd_domain`'s 56 loops of 56 leave 8 elements of each to scalar code. The elements are read
    at `(c, (64 o + i) floordiv 56, ... mod 56)`, which `merged_buffer_dims` makes `(c, 64 o +
    i)` in a buffer whose dims merge. A run of at most `short_rows` elements is one loop (the
    builder sums it in f64: a global average pool's 7x7 in one loop of 49, which LLVM
    vectorizes, where a loop of 7 is scalar). A run no block suits loops dim by dim; None where
    no run merges."""
    kept = [k for k, d in enumerate(full) if d != 1]
    runs: Runs = []
    for k in kept:
        last = runs[-1][-1] if runs else None
        if k in reduce_dims and last in reduce_dims and _adjacent(last, k, full):
            runs[-1].append(k)
        else:
            runs.append([k])
    if all(len(run) == 1 for run in runs):
        return None
    parallel: list[LoopVar] = []
    reduce_vars: list[LoopVar] = []
    index: list[Affine] = [ZERO] * len(full)
    merged = False
    for run in runs:
        sizes = [full[k] for k in run]
        blocks = None
        if len(run) > 1:
            blocks = [numel(sizes)] if numel(sizes) <= short_rows else _row_blocks(sizes)
        merged = merged or blocks is not None
        if blocks is None:  # each dim a loop of its own, as in `nd_domain`
            loops = [LoopVar(k, d) for k, d in zip(run, sizes, strict=True)]
            (reduce_vars if run[0] in reduce_dims else parallel).extend(loops)
            for k, v in zip(run, loops, strict=True):
                index[k] = var_index(v)
            continue
        idents = [run[0], run[-1]][: len(blocks)]
        loops = [LoopVar(k, b) for k, b in zip(idents, blocks, strict=True)]
        (reduce_vars if run[0] in reduce_dims else parallel).extend(loops)
        at = linearize([var_index(v) for v in loops], blocks)
        for k, e in zip(run, delinearize(at, sizes), strict=True):
            index[k] = e
    if not merged:
        return None
    if not parallel:
        parallel.append(LoopVar(len(full), 1))
    return Domain(full, reduce_dims, parallel, reduce_vars, tuple(index), flat=False)


def _adjacent(k: int, j: int, full: tuple[int, ...]) -> bool:
    """Whether dims `k` < `j` of `full` are adjacent but for dims of extent 1 between."""
    return all(full[m] == 1 for m in range(k + 1, j))


def _row_blocks(sizes: Sequence[int]) -> list[int] | None:
    """The loops over a run of adjacent reduced dims of `sizes`, merged: `[n // b, b]` for the
    block `b` of whole `VECTOR`s dividing their `n` elements whose loops are the shortest in
    all, and no longer than `ROW_LENGTH` times the dims' own. `[49, 64]` for 56x56, `[49, 16]`
    for 28x28 (LLVM vectorizes a loop of 56 in 8 lanes, of 28 in 4, where the trip divides).
    None where the innermost dim is whole vectors already (112x112) or at most one vector
    (14x14: one masked vector), or where no block fits (7x7 in a loop of 49 would sum less
    accurately than 7 + 7)."""
    inner = sizes[-1]
    if inner <= VECTOR or inner % VECTOR == 0:
        return None
    n, budget = numel(sizes), ROW_LENGTH * sum(sizes)
    fits = [
        (length, b)
        for b in range(VECTOR, min(n, int(budget)) + 1, VECTOR)
        if n % b == 0 and (length := b + (n // b if b < n else 0)) <= budget
    ]
    if not fits:
        return None
    b = min(fits)[1]
    return [b] if b == n else [n // b, b]


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
    """The one value of a constant whose elements are all equal, else None."""
    return dense.splat_value(op.value)


def loads_are_flat(
    outputs: Sequence[SSAValue], leaves: dict[SSAValue, Leaf], full: tuple[int, ...]
) -> bool:
    """Whether, with a flat loop over `full`, every buffer is read at the loop's own position
    or at a constant one (then 1-D buffers make every access direct)."""
    dom = flat_domain(full)
    f = var_index(dom.parallel[0])
    for e in _load_offsets(dom, outputs, leaves, (graph.ConcatOp, *OpGroup.WINDOW)):
        if e is None or (e.terms and e != f):
            return False
    return True


def _load_offsets(
    dom: Domain,
    outputs: Sequence[SSAValue],
    leaves: dict[SSAValue, Leaf],
    unfollowed: tuple[type[Operation], ...],
) -> Iterator[Affine | None]:
    """The linear offset of every buffer load of an elementwise kernel over `dom`, found by
    walking back from its outputs, lazily (a caller stops at the first one it refuses); None,
    last, when an op of kind `unfollowed` is reached: one that reads its operands at indices
    this does not follow."""
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
                yield linearize(index, shape_of(v))
            continue
        op = v.owner
        assert isinstance(op, Operation)
        if isinstance(op, unfollowed):
            yield None
            return
        todo.extend(zip(op.operands, operand_indices(op, index), strict=True))


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


def divisions(e: Affine) -> int:
    """How many floor divisions and moduli computing `e` takes (a gathered index's own not
    counted: it is loaded, not computed)."""
    count = 0
    for atom, _ in e.terms:
        if isinstance(atom, FloorDiv | Mod | SizedDiv | SizedMod):
            count += 1 + divisions(atom.arg)
        elif isinstance(atom, Clamp | Reflect | Within | SizedMul | SizedClamp):
            count += divisions(atom.arg)
    return count


def _has_divmod(e: Affine) -> bool:
    """Whether computing `e` divides (a floor division or modulo anywhere in it)."""
    return divisions(e) > 0


Runs = list[list[int]]
"""Adjacent dims of a shape, in order, each run one dim of a merged shape."""


def merge_index(index: Index, shape: tuple[int, ...], runs: Runs) -> Index:
    """`index` into `shape` as an index into the shape whose dims are `runs` merged."""
    return tuple(linearize([index[k] for k in run], [shape[k] for k in run]) for run in runs)


def merged_shape(shape: tuple[int, ...], runs: Runs) -> list[int]:
    return [numel([shape[k] for k in run]) for run in runs]


def merged_buffer_dims(shape: tuple[int, ...], accesses: Sequence[Index]) -> Runs | None:
    """The runs of adjacent dims of a buffer of `shape` to merge so that its `accesses` (at
    least one) divide less: a reshape read in the kernel (a split reduction's `[C, 49, 64]` of
    a `[C, 56, 56]` buffer is at `(c, (64k + j) floordiv 56, (64k + j) mod 56)`, at `(c, 64k +
    j)` once its last two dims merge). Right to left, each adjacent pair merged where that
    takes divisions out; None where no merge does."""

    def cost(runs: Runs) -> int:
        return sum(divisions(e) for index in accesses for e in merge_index(index, shape, runs))

    runs: Runs = [[k] for k in range(len(shape))]
    least = cost(runs)
    for k in range(len(runs) - 1, 0, -1):
        if least == 0:
            break
        trial = [*runs[: k - 1], runs[k - 1] + runs[k], *runs[k + 1 :]]
        if (c := cost(trial)) < least:
            runs, least = trial, c
    return runs if len(runs) < len(shape) else None


def _offsets(
    dom: Domain, outputs: Sequence[SSAValue], leaves: dict[SSAValue, Leaf]
) -> Iterator[Affine | None]:
    """The linear offset of every buffer access of an elementwise kernel over `dom`: its
    stores, then its loads, lazily (None, last, through concat, pad, pool or gather)."""
    for v in outputs:
        yield linearize(dom.output_index(shape_of(v)), shape_of(v))
    yield from _load_offsets(
        dom, outputs, leaves, (graph.ConcatOp, graph.GatherOp, *OpGroup.WINDOW)
    )


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
        return any(e is None or _has_divmod(e) for e in offsets)

    runs = [[k] for k, d in enumerate(full) if d != 1]
    clean = not divides(runs)
    for k in range(len(runs) - 1, 0, -1):
        trial = [*runs[: k - 1], runs[k - 1] + runs[k], *runs[k + 1 :]]
        if not divides(trial):
            runs, clean = trial, True
    return merged_domain(full, runs) if clean else None
