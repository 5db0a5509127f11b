"""
Where each operand element comes from: the index of the element of each operand that a
result element at a given index reads. Layout ops (broadcast_in_dim, reshape, permute, slice,
flip, roll) and torch broadcasting map the index; `graph.gather` reads its table at a
`Gathered` index (the index tensor's element) in place of the indexed dims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.graph import Dim, dims_of, shape_of
from xfuse.passes.lowering.index_algebra import (
    UNBOUNDED,
    ZERO,
    Affine,
    Gathered,
    Index,
    LoopVar,
    SizedDiv,
    SizedMod,
    SizedMul,
    add,
    bounds,
    constant_index,
    delinearize,
    floordiv,
    linearize,
    mod,
    scale,
)


def broadcast_index(index: Index, in_shape: Sequence[int], out_shape: Sequence[int]) -> Index:
    """Torch broadcasting: shapes align on the right, a size-1 dim reads element 0."""
    lead = len(out_shape) - len(in_shape)
    return tuple(ZERO if d == 1 else index[lead + k] for k, d in enumerate(in_shape))


SizeOf = Callable[[Dim], Affine]
"""A dim's size as an index: a constant, or a symbol's runtime size (a symbolic kernel's)."""


def static_size(d: Dim) -> Affine:
    assert isinstance(d, int), f"the size of symbolic dim {d} outside a symbolic kernel"
    return constant_index(d)


Factors = Callable[[str], tuple[Dim, ...] | None]
"""A size symbol's factors (a number and size symbols) where its polynomial is one product
(`e0 = s0 * s53`, a flattened map), else None: a symbolic kernel's size table's."""


def no_factors(d: str) -> None:
    return None


def operand_indices(
    op: Operation, index: Index, size_of: SizeOf = static_size, factors: Factors = no_factors
) -> list[Index]:
    """The index of each operand's element that the result element at `index` reads (every
    op but concat and real reductions); `size_of` gives the size of a dim a flip counts down
    from (a symbolic one's at run time), `factors` the factors of a reshape's symbolic dims."""
    out_shape = shape_of(op.results[0])
    if isinstance(op, graph.BroadcastInDimOp):
        in_shape = shape_of(op.input)
        return [tuple(ZERO if in_shape[i] == 1 else index[d] for i, d in enumerate(op.dim_map))]
    if isinstance(op, graph.ReshapeOp):
        return [reshaped_index(index, dims_of(op.result), dims_of(op.input), size_of, factors)]
    if isinstance(op, graph.PermuteOp):
        src = [ZERO] * len(index)
        for i, p in enumerate(op.permutation):
            src[p] = index[i]
        return [tuple(src)]
    if isinstance(op, graph.SliceOp):
        start, _, stride = op.bounds
        dims = dims_of(op.input)
        return [
            tuple(
                add(scale(e, k), constant_index(s))
                if s >= 0
                else add(scale(e, k), size_of(d), constant_index(s + 1))  # `size - k`
                for e, s, k, d in zip(index, start, stride, dims, strict=True)
            )
        ]
    if isinstance(op, graph.ReduceOp):  # no dims: the identity
        return [index]
    if isinstance(op, graph.FlipOp):
        return [flipped_index(index, dims_of(op.input), op.flipped, size_of)]
    if isinstance(op, graph.RollOp):
        return [rolled_index(index, shape_of(op.input), dict(op.rolled))]
    if isinstance(op, graph.GatherOp):
        return gather_indices(op, index)
    return [broadcast_index(index, shape_of(v), out_shape) for v in op.operands]


def reshaped_index(
    index: Index,
    src: tuple[Dim, ...],
    dst: tuple[Dim, ...],
    size_of: SizeOf = static_size,
    factors: Factors = no_factors,
) -> Index:
    """The index in a row-major tensor of `dst` of the element at `index` of one of `src` (as
    many elements; a reshape's input element that its result element at `index` reads): dim by
    dim where it only adds or drops dims of size 1 (`unit_dims_index`), run by run where the
    symbolic dims stay themselves (`symbol_runs`), or do once each side's products of symbols
    are split into their factors (`factored_index`), through runtime divisions where a symbol
    is after the first dim of either side, else the static arithmetic."""
    unit = unit_dims_index(index, src, dst)
    if unit is not None:
        return unit
    runs = symbol_runs(dst, src)
    if runs is not None:
        return run_reshape_index(index, runs)
    factored = factored_index(index, src, dst, size_of, factors)
    if factored is not None:
        return factored
    if any(isinstance(d, str) for d in (*src[1:], *dst[1:])):
        flat = sized_linearize(index, src, size_of)
        return sized_delinearize(flat, dst, size_of)
    return delinearize(linearize(index, _static(src)), _static(dst))


def unit_dims_index(index: Index, src: tuple[Dim, ...], dst: tuple[Dim, ...]) -> Index | None:
    """`reshaped_index` of a reshape that only adds or drops dims of size 1 (`[e1, 1]` to
    `[e1]`): each other dim reads its own index, whatever its size. None for any other."""
    kept_src = [k for k, d in enumerate(src) if d != 1]
    kept_dst = [k for k, d in enumerate(dst) if d != 1]
    if [src[k] for k in kept_src] != [dst[k] for k in kept_dst]:
        return None
    out = [ZERO] * len(dst)
    for a, b in zip(kept_src, kept_dst, strict=True):
        out[b] = index[a]
    return tuple(out)


def factored_index(
    index: Index,
    src: tuple[Dim, ...],
    dst: tuple[Dim, ...],
    size_of: SizeOf,
    factors: Factors,
) -> Index | None:
    """`reshaped_index` where a symbolic dim of either side is a product of symbols
    (`factors`: `[2, 1, 16, e0]` to `[2, 16, s53, s0]`, `e0 = s53 * s0`, a group norm's
    flattened map): each such dim split into its factors (its index divided and reduced by
    their runtime sizes), the two sides mapped run by run (`symbol_runs`), and the split dims
    of `dst` joined again. The row index of a reduction over the flattened map is then its
    own row where the map is read unflattened. None where no dim splits or the split sides
    have no runs."""
    for numbers_first in (True, False):
        split_dst = _split_dims(dst, src, factors, numbers_first)
        split_src = _split_dims(src, dst, factors, numbers_first)
        if all(len(parts) == 1 for parts in (*split_src, *split_dst)):
            return None
        runs = symbol_runs(_flat(split_dst), _flat(split_src))
        if runs is not None:
            break
    else:
        return None
    at: list[Affine] = []
    for e, parts in zip(index, split_src, strict=True):
        at.extend(sized_delinearize(e, parts, size_of) if len(parts) > 1 else (e,))
    out = run_reshape_index(tuple(at), runs)
    joined: list[Affine] = []
    for parts in split_dst:
        here, out = out[: len(parts)], out[len(parts) :]
        joined.append(sized_linearize(here, parts, size_of) if len(parts) > 1 else here[0])
    return tuple(joined)


def _split_dims(
    dims: tuple[Dim, ...], other: tuple[Dim, ...], factors: Factors, numbers_first: bool = True
) -> list[tuple[Dim, ...]]:
    """Each of `dims` as its factors (`factors`; itself where it has none): the number first
    (or, without `numbers_first`, where `other` holds it: `4 * s0` of `[s0, 4, ...]` is
    `(s0, 4)`), then the symbols in the order `other` (its dims, split the same way) holds
    them."""
    order: dict[Dim, int] = {}
    for d in other:
        for f in (factors(d) or (d,)) if isinstance(d, str) else (d,):
            order.setdefault(f, len(order))

    def place(f: Dim) -> int:
        return -1 if numbers_first and isinstance(f, int) else order.get(f, 1 << 30)

    out: list[tuple[Dim, ...]] = []
    for d in dims:
        found = factors(d) if isinstance(d, str) else None
        if found is None:
            out.append((d,))
            continue
        out.append(tuple(sorted(found, key=place)))
    return out


def _flat(parts: list[tuple[Dim, ...]]) -> tuple[Dim, ...]:
    return tuple(d for p in parts for d in p)


def _static(dims: tuple[Dim, ...]) -> tuple[int, ...]:
    """`dims` with a symbol as DYNAMIC_INDEX (`shape_of`'s ints)."""
    return tuple(DYNAMIC_INDEX if isinstance(d, str) else d for d in dims)


Run = tuple[tuple[int, ...], tuple[int, ...], tuple[Dim, ...], tuple[Dim, ...]]
"""Positions of a run of dims in a reshape's input and result, and their sizes."""


def _split_at_symbols(dims: tuple[Dim, ...]) -> list[tuple[int, ...]]:
    """Positions of `dims` as alternating runs: static dims (maybe none), one symbolic dim,
    static dims, ..., ending with a run of static dims."""
    runs: list[tuple[int, ...]] = []
    static: list[int] = []
    for k, d in enumerate(dims):
        if isinstance(d, str):
            runs += [tuple(static), (k,)]
            static = []
        else:
            static.append(k)
    return [*runs, tuple(static)]


def symbol_runs(src: tuple[Dim, ...], dst: tuple[Dim, ...]) -> list[Run] | None:
    """A reshape of symbolic dims after the first as runs that map on their own: each
    symbolic dim of the result is the same symbol of the input, in the same order, and the
    static dims between two of them have the same product on both sides (`[2, s, 64]` to `[2,
    s, 2, 32]`). None where that does not hold, or where no dim after the first is symbolic
    (the static index arithmetic serves)."""
    if all(isinstance(d, int) for d in (*src[1:], *dst[1:])):
        return None
    a, b = _split_at_symbols(src), _split_at_symbols(dst)
    if len(a) != len(b):
        return None
    runs: list[Run] = []
    for ra, rb in zip(a, b, strict=True):
        da, db = tuple(src[k] for k in ra), tuple(dst[k] for k in rb)
        if len(ra) == 1 and isinstance(da[0], str) or len(rb) == 1 and isinstance(db[0], str):
            if da != db:
                return None
        elif math.prod(cast("tuple[int, ...]", da)) != math.prod(cast("tuple[int, ...]", db)):
            return None
        runs.append((ra, rb, da, db))
    return runs


def run_reshape_index(index: Index, runs: list[Run]) -> Index:
    """The input index of a reshape's result element at `index`, run by run (`symbol_runs`):
    a symbolic dim reads its own index, static runs the static reshape's."""
    src: dict[int, Affine] = {}
    for ra, rb, da, db in runs:
        if not ra:
            continue
        if isinstance(da[0], str):
            src[ra[0]] = index[rb[0]]
            continue
        static_in, static_out = cast("tuple[int, ...]", da), cast("tuple[int, ...]", db)
        flat = linearize([index[k] for k in rb], static_out) if rb else ZERO
        src.update(zip(ra, delinearize(flat, static_in), strict=True))
    return tuple(src[k] for k in range(len(src)))


def _product_bounds(dims: Sequence[Dim], size_of: SizeOf) -> tuple[int, int]:
    low = high = 1
    for d in dims:
        lo, hi = bounds(size_of(d))
        low, high = low * lo, min(high * hi, UNBOUNDED)
    return low, high


def sized_linearize(index: Index, dims: Sequence[Dim], size_of: SizeOf) -> Affine:
    """The linear offset of `index` in a row-major tensor of `dims`, whose strides hold size
    symbols: each such term a `SizedMul` by the runtime product."""
    terms: list[Affine] = []
    for k, e in enumerate(index):
        after = tuple(dims[k + 1 :])
        if e == ZERO:
            continue
        if all(isinstance(d, int) for d in after):
            terms.append(scale(e, math.prod(cast(tuple[int, ...], after))))
        else:
            low, high = _product_bounds(after, size_of)
            terms.append(Affine(((SizedMul(e, after, low, high), 1),)))
    return add(*terms)


def sized_delinearize(e: Affine, dims: Sequence[Dim], size_of: SizeOf) -> Index:
    """The index of the element at linear offset `e` of a row-major tensor of `dims` with size
    symbols after the first: the index `e` linearizes where it is one's linearization by the
    same dims (`unlinearized`), else divisions and moduli by runtime products (`SizedDiv`,
    `SizedMod`) where a symbol is among the sizes; the first dim's without a modulo (`e` is
    less than the element count)."""
    found = unlinearized(e, dims)
    if found is not None:
        return found
    out: list[Affine] = []
    for k, d in enumerate(dims):
        after = tuple(dims[k + 1 :])
        if all(isinstance(x, int) for x in after):
            q = floordiv(e, math.prod(cast(tuple[int, ...], after)))
        else:
            q = Affine(((SizedDiv(e, after), 1),))
        if k == 0:
            out.append(q)
        elif isinstance(d, int):
            out.append(ZERO if d <= 1 else mod(q, d))
        else:
            out.append(Affine(((SizedMod(q, (d,), bounds(size_of(d))[1]), 1),)))
    return tuple(out)


def unlinearized(e: Affine, dims: Sequence[Dim]) -> Index | None:
    """The index that `sized_linearize` over `dims` made `e` of, where each dim after the
    first is read by a loop over that dim's symbol (so its index is below it): `SizedMul(i,
    (s0,)) + j` over `[s1, s0]` is `(i, j)` for a loop `j` over `s0` (an element's index that
    a reshape to a product of symbols linearized, split again by the same dims). None for any
    other `e`."""
    if len(dims) < 2:
        return None
    terms = dict(e.terms)
    out: list[Affine] = []
    for k in range(len(dims) - 1):
        after = tuple(dims[k + 1 :])
        muls = [a for a, c in terms.items() if isinstance(a, SizedMul) and a.factor == after]
        if len(muls) != 1 or terms.pop(muls[0]) != 1:
            return None
        out.append(muls[0].arg)
    out.append(Affine(tuple(terms.items()), e.const))
    for at, d in zip(out[1:], dims[1:], strict=True):
        if not (at.const == 0 and len(at.terms) == 1 and at.terms[0][1] == 1):
            return None
        loop = at.terms[0][0]
        if not (isinstance(loop, LoopVar) and isinstance(d, str) and loop.size == d):
            return None
    return tuple(out)


def flipped_index(
    index: Index, shape: Sequence[Dim], dims: Sequence[int], size_of: SizeOf = static_size
) -> Index:
    """Element i of a dim of size n flipped reads element n - 1 - i (n static, or a symbol's
    runtime size: `size_of`)."""
    return tuple(
        add(size_of(shape[k]), constant_index(-1), scale(e, -1)) if k in dims else e
        for k, e in enumerate(index)
    )


def rolled_index(index: Index, shape: Sequence[int], shifts: dict[int, int]) -> Index:
    """Element i of a dim of size n rolled by s reads element (i - s) mod n."""
    return tuple(
        mod(add(e, constant_index(-shifts[k] % shape[k])), shape[k]) if k in shifts else e
        for k, e in enumerate(index)
    )


def _gathered(indices: SSAValue, at: Index, size: Dim, wrap: bool) -> Gathered:
    """The data-dependent index into a table dim of `size` (a symbolic one: checked against
    its runtime size, bounded by `UNBOUNDED` for the index algebra)."""
    if isinstance(size, str):
        return Gathered(indices, at, UNBOUNDED, wrap, size)
    return Gathered(indices, at, size, wrap)


def gather_indices(op: graph.GatherOp, index: Index) -> list[Index]:
    """The table's index (a `Gathered` atom per indexed dim) and each index tensor's."""
    table = shape_of(op.table)
    dims = dims_of(op.table)
    reads = [broadcast_index(index, shape_of(v), shape_of(op.result)) for v in op.indices]
    picked = [
        Affine(((_gathered(v, at, dims[op.axis + j], op.wraps), 1),))
        for j, (v, at) in enumerate(zip(op.indices, reads, strict=True))
    ]
    outer = [ZERO if table[op.table_dim(m)] == 1 else e for m, e in enumerate(index)]
    return [(*outer[: op.axis], *picked, *outer[op.axis + 1 :]), *reads]
