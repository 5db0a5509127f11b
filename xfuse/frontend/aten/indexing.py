"""Converters of indexing with computed indices: gathers (embedding, index_select, gather,
advanced indexing) and scatters (slice/select/diagonal scatters, copy, scatter, scatter_add,
scatter_reduce, index_put)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import torch.fx
from xdsl.dialects.builtin import BFloat16Type, Float16Type, IntegerType, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _rank
from xfuse.frontend.aten.layout import _permute_dims, _slice_dim
from xfuse.frontend.builder import ImportBuilder, Value, out_type

# ---------------------------------------------------------------------------------------------
# Gather: embedding, index_select, gather and advanced indexing are `graph.gather` between
# reshapes and broadcasts (index arithmetic in a kernel: nothing is copied).
# ---------------------------------------------------------------------------------------------


def _index_tensor(value: SSAValue) -> bool:
    return str(graph.dtype_of(value)) in graph.INDEX_DTYPES


def _column(lw: ImportBuilder, indices: SSAValue, rank: int, dim: int) -> SSAValue:
    """The indices flattened into dim `dim` of a rank-`rank` tensor (size 1 elsewhere)."""
    n = graph.numel(graph.shape_of(indices))
    return lw.reshape(indices, [n if k == dim else 1 for k in range(rank)])


def _expand_to(lw: ImportBuilder, x: SSAValue, shape: Sequence[graph.Dim]) -> SSAValue:
    """`x` broadcast to `shape` (ints, or the symbols of dynamic dims) as torch broadcasts
    (aligned on the right)."""
    if graph.shape_of(x) == tuple(shape) or graph.dims_of(x) == tuple(shape):
        return x
    dims = range(len(shape) - _rank(x), len(shape))
    return lw.emit(graph.BroadcastInDimOp(x, shape, list(dims)))


def _gather_dim(
    lw: ImportBuilder, table: SSAValue, indices: SSAValue, dim: int, wrap: bool = False
) -> SSAValue:
    """`table` with dim `dim` replaced by the (already shaped) indices' size there."""
    shape = list(graph.shape_of(table))
    shape[dim] = graph.shape_of(indices)[dim]
    return lw.emit(graph.GatherOp(table, [indices], dim, shape, wrap))


def _embedding(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    weight, indices = lw.tensor(a["weight"]), lw.tensor(a["indices"])
    if _rank(weight) != 2 or not _index_tensor(indices):
        return None
    if graph.is_symbolic(indices) or graph.is_symbolic(weight):
        # 0-d indices of a symbolic table would need a reshape of a symbolic row: torch's call
        return _symbolic_embedding(lw, weight, indices) if _rank(indices) else None
    rows = _gather_dim(lw, weight, _column(lw, indices, 2, 0), 0)
    return lw.reshape(rows, out_type(node).get_shape())


def _symbolic_embedding(lw: ImportBuilder, weight: SSAValue, indices: SSAValue) -> SSAValue:
    """An embedding where the indices or the weight have symbolic sizes, without flattening
    the indices (that would be a reshape whose index divides by a symbol): the weight `[V, D]`
    broadcast to `[1, .., 1, V, D]` is gathered along its `V` dim by the indices broadcast to
    `[*I, 1]`, giving `[*I, D]` with the indices' and the weight's own size symbols (the
    indices of rank 1 or more)."""
    dims = graph.dims_of(indices)
    rank = len(dims)
    width = graph.dims_of(weight)[1]
    table = _with_ones(lw, weight, 0, rank - 1, 0)
    column = lw.emit(graph.BroadcastInDimOp(indices, [*dims, 1], list(range(rank))))
    return lw.emit(graph.GatherOp(table, [column], rank - 1, [*dims, width]))


def _index_select(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x, indices = lw.tensor(a["self"]), lw.tensor(a["index"])
    if not _index_tensor(indices):
        return None
    rank = max(_rank(x), 1)  # a 0-d input is read as [1]
    dim = a["dim"] % rank
    if _rank(indices) and (graph.is_symbolic(x) or graph.is_symbolic(indices)):
        return _symbolic_index_select(lw, x, indices, dim)
    rows = _gather_dim(
        lw, lw.reshape(x, [1]) if not _rank(x) else x, _column(lw, indices, rank, dim), dim
    )
    return lw.reshape(rows, out_type(node).get_shape())


def _symbolic_index_select(lw: ImportBuilder, x: SSAValue, indices: SSAValue, dim: int) -> Value:
    """`index_select` where `x` or the indices `[n]` have symbolic sizes: the indices laid out
    along `dim` (size 1 elsewhere, a broadcast that keeps their symbol) gather `x` there."""
    rank = _rank(x)
    column = _with_ones(lw, indices, 0, dim, rank)
    dims = list(graph.dims_of(x))
    dims[dim] = graph.dims_of(indices)[0]
    return lw.emit(graph.GatherOp(x, [column], dim, dims))


def _torch_gather(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x, indices = lw.tensor(a["self"]), lw.tensor(a["index"])
    shape = out_type(node).get_shape()
    if not _index_tensor(indices) or max(_rank(x), 1) != max(_rank(indices), 1):
        return None
    if _rank(x) == 0 or _rank(indices) == 0:  # 0-d tensors are read as [1]
        x, indices = (
            lw.reshape(x, [1] * max(_rank(x), 1)),
            lw.reshape(indices, [1] * max(_rank(indices), 1)),
        )
        return lw.reshape(_gather_dim(lw, x, indices, 0), shape)
    dim = a["dim"] % _rank(x)
    return lw.emit(graph.GatherOp(x, [indices], dim, shape))


def _advanced_index(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`x[..., i0, i1, ...]` (aten.index.Tensor): the index tensors broadcast to one shape B,
    flattened to N elements, pick the indexed dims (one dim of N in their place), and a
    reshape makes N into B. Indices split by a slice put B first, as torch does (the indexed
    dims are permuted to the front). Boolean masks (data-dependent shapes) stay torch_calls."""
    x = lw.tensor(a["self"])
    entries: list[Any] = list(a["indices"])
    positions = [k for k, e in enumerate(entries) if e is not None]
    if not positions or _rank(x) == 0:
        return None
    tensors = [lw.tensor(entries[k]) for k in positions]
    if not all(_index_tensor(t) for t in tensors):
        return None
    shape = graph.broadcast_shapes(*(graph.shape_of(t) for t in tensors))
    if shape is None:
        return None
    if positions != list(range(positions[0], positions[-1] + 1)):
        rest = [k for k in range(_rank(x)) if k not in positions]
        x = _permute_dims(lw, x, positions + rest)
        positions = list(range(len(positions)))
    first, k = positions[0], len(positions)
    if graph.is_symbolic(x) or any(graph.is_symbolic(t) for t in tensors):
        return _symbolic_advanced_index(lw, x, tensors, first)
    table = graph.shape_of(x)
    rank = len(table) - k + 1
    columns = [_column(lw, _expand_to(lw, t, shape), rank, first) for t in tensors]
    out = [*table[:first], graph.numel(shape), *table[first + k :]]
    value = lw.emit(graph.GatherOp(x, columns, first, out, wrap=True))
    return lw.reshape(value, out_type(node).get_shape())


def _broadcast_dims(shapes: Sequence[tuple[graph.Dim, ...]]) -> tuple[graph.Dim, ...] | None:
    """Torch broadcasting of shapes with size symbols (aligned on the right; 1 against a size
    is that size, equal sizes are themselves), None where two differ."""
    rank = max(len(s) for s in shapes)
    out: list[graph.Dim] = []
    for k in range(rank):
        sizes = {s[k - rank + len(s)] for s in shapes if k - rank + len(s) >= 0} - {1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _with_ones(lw: ImportBuilder, x: SSAValue, before: int, ones: int, after: int) -> SSAValue:
    """`x` with `ones` dims of size 1 before its dims from `before` on (a broadcast, which
    keeps its size symbols), then padded with 1s to `after` dims after those."""
    dims = graph.dims_of(x)
    shape = [*dims[:before], *[1] * ones, *dims[before:]]
    shape += [1] * (after - len(shape))
    if len(shape) == len(dims):
        return x
    mapping = [k if k < before else k + ones for k in range(len(dims))]
    return lw.emit(graph.BroadcastInDimOp(x, shape, mapping))


def _symbolic_advanced_index(
    lw: ImportBuilder, x: SSAValue, tensors: list[SSAValue], first: int
) -> Value:
    """`x[..., i0, .., ik-1, ...]` (indexed dims `first`..`first+k-1`) with size symbols,
    without flattening the indices (a reshape that would divide by a symbol): the index
    tensors broadcast to `B` (rank r), the table gets r - 1 dims of size 1 before the indexed
    ones, each index is laid out as `[1] * first + B + [1] * rest`, and one gather along the
    last of the new dims gives `x`'s dims before, `B`, and `x`'s dims after, as torch does."""
    shape = _broadcast_dims([graph.dims_of(t) for t in tensors])
    if shape is None:
        return None
    k, r = len(tensors), len(shape)
    dims = graph.dims_of(x)
    rest = len(dims) - first - k
    table = _with_ones(lw, x, first, r - 1, 0)
    columns = [
        _with_ones(lw, t, 0, first + r - len(graph.dims_of(t)), first + r + rest) for t in tensors
    ]
    out = [*dims[:first], *shape, *dims[first + k :]]
    return lw.emit(graph.GatherOp(table, columns, first + r - 1, out, wrap=True))


_INDEXING: dict[str, Converter] = {
    "aten.embedding.default": _embedding,
    "aten.index_select.default": _index_select,
    "aten.gather.default": _torch_gather,
    "aten.index.Tensor": _advanced_index,
}


def _indexing(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return _INDEXING[str(node.target)](lw, node, a)


# ---------------------------------------------------------------------------------------------
# Scatters with affine indices: slice_scatter, select_scatter and diagonal_scatter write `src`
# into a strided region of `self`: `where(region, src spread into place, self)`, where both the
# region (a splat of True) and `src` are padded into place, stride > 1 spreading each element
# with stride - 1 padding after it (a reshape). In the loop nest that is index arithmetic with a
# select, exact and fusable like an elementwise op; nothing is copied. `copy` (functionalised
# `x[...] = y`) is `src` cast and broadcast to `self`.
# ---------------------------------------------------------------------------------------------


def _spread(lw: ImportBuilder, x: SSAValue, dim: int, start: int, step: int, size: int) -> SSAValue:
    """`x` along `dim` of length `size`: element k at `start + k * step`, zero (False)
    elsewhere."""
    dims = list(graph.dims_of(x))  # the other dims may be symbolic (kept whole)
    rank, m = len(dims), int(dims[dim])
    if step > 1:  # [.., m, ..] -> [.., m, step, ..] (padded after) -> [.., m * step, ..]
        x = lw.reshape(x, [*dims[: dim + 1], 1, *dims[dim + 1 :]])
        after = [0] * (rank + 1)
        after[dim + 1] = step - 1
        x = lw.emit(graph.PadOp(x, [0] * (rank + 1), after))
        dims[dim] = m * step
        x = lw.reshape(x, dims)
    low, high = [0] * rank, [0] * rank
    low[dim], high[dim] = start, size - start - int(dims[dim])  # (negative: crops the tail)
    if not low[dim] and not high[dim]:
        return x
    return lw.emit(graph.PadOp(x, low, high))


def _emit_slice_scatter(
    lw: ImportBuilder, x: SSAValue, src: SSAValue, dim: int, start: int, end: int, step: int
) -> SSAValue | None:
    """`x` with `x[.., start:end:step, ..] = src` along `dim` (torch's clamping of start and
    end); None where the shapes do not fit (eager raises)."""
    shape = graph.shape_of(x)
    size = shape[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    m = len(range(start, end, step)) if step > 0 else -1
    written = tuple(m if k == dim else d for k, d in enumerate(graph.dims_of(x)))
    if graph.dims_of(src) != written:  # size symbols compared by name
        return None
    src = lw.cast(src, graph.dtype_of(x))
    if graph.numel(graph.shape_of(src)) == 0:
        return x  # nothing written
    if m == size:  # every element written
        return src
    region = lw.constant(True, i1, [m if k == dim else 1 for k in range(len(shape))])
    return lw.emit(
        graph.WhereOp(
            _spread(lw, region, dim, start, step, size),
            _spread(lw, src, dim, start, step, size),
            x,
        )
    )


def _slice_scatter(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    start, end, step = a.get("start"), a.get("end"), a.get("step", 1)
    if _rank(x) == 0 or not all(v is None or isinstance(v, int) for v in (start, end, step)):
        return None
    dim = a.get("dim", 0) % _rank(x)
    size = graph.shape_of(x)[dim]
    if size < 0:
        return None  # a symbolic dim: torch runs it, and raises where `src` does not fit
    return _emit_slice_scatter(
        lw,
        x,
        lw.tensor(a["src"]),
        dim,
        0 if start is None else start,
        size if end is None else end,
        1 if step is None else step,
    )


def _select_scatter(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    if _rank(x) == 0 or not isinstance(a["index"], int):
        return None
    dim = a["dim"] % _rank(x)
    shape = graph.shape_of(x)
    if not -shape[dim] <= a["index"] < shape[dim]:
        return None  # eager raises
    index = a["index"] % shape[dim]
    dims = graph.dims_of(x)  # the other dims may be symbolic
    src = lw.reshape(lw.tensor(a["src"]), [1 if k == dim else d for k, d in enumerate(dims)])
    return _emit_slice_scatter(lw, x, src, dim, index, index + 1, 1)


def _diagonal_scatter(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """The slice of stride m + 1 that `_diagonal` reads, written: dim1 and dim2 moved last and
    flattened, a slice scatter there, and back."""
    x, src = lw.tensor(a["self"]), lw.tensor(a["src"])
    rank, offset = _rank(x), a.get("offset", 0)
    if rank < 2 or not isinstance(offset, int) or _rank(src) != rank - 1:
        return None
    d1, d2 = a.get("dim1", 0) % rank, a.get("dim2", 1) % rank
    if d1 == d2:
        return None
    shape = graph.shape_of(x)
    rest = [d for d in range(rank) if d not in (d1, d2)]
    n, m = shape[d1], shape[d2]
    if n < 0 or m < 0:
        return None  # a symbolic dim: torch runs it, and raises where `src` does not fit
    diagonal = max(min(n, m - offset) if offset >= 0 else min(n + offset, m), 0)
    dims = graph.dims_of(x)  # size symbols compared by name
    if graph.dims_of(src) != (*(dims[d] for d in rest), diagonal):
        return None  # src is not the diagonal's shape (at some calls): torch's call checks it
    length = diagonal
    if length == 0 or graph.numel(shape) == 0:
        return x
    perm = [*rest, d1, d2]
    flat = lw.reshape(_permute_dims(lw, x, perm), [shape[d] for d in rest] + [n * m])
    start = offset if offset >= 0 else -offset * m
    limit = start + (length - 1) * (m + 1) + 1
    out = _emit_slice_scatter(lw, flat, src, len(rest), start, limit, m + 1)
    if out is None:
        return None
    out = lw.reshape(out, [shape[d] for d in perm])
    return _permute_dims(lw, out, [perm.index(k) for k in range(rank)])


def _copy(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """aten.copy (functional copy_): `src` cast to `self`'s dtype and broadcast to its shape."""
    x = lw.tensor(a["self"])
    src = lw.cast(lw.tensor(a["src"]), graph.dtype_of(x))
    if graph.broadcast_shapes(graph.shape_of(src), graph.shape_of(x)) != graph.shape_of(x):
        return None
    return _expand_to(lw, src, graph.shape_of(x))


# ---------------------------------------------------------------------------------------------
# Scatters with computed indices: scatter, scatter_add, scatter_reduce and index_put (and
# index_add, index_copy and index_fill, kept whole for their own index checks) are a search, not
# a store: every output element compares its position with the K source positions that may
# write it (the index's length along the scattered dim, or the broadcast index tensors' element
# count) and combines the matches in source order, unrolled over K (up to SEARCH_LIMIT) as
# elementwise selects: no indirect store, so no race and no atomics; duplicates combine in
# eager's own order (the last match wins without accumulation: eager's CPU result). Each index
# passes through a `graph.gather` of an iota: out of range raises like eager (IndexError on the
# CPU, a trap on CUDA), and negative indices wrap where torch wraps them (index_put,
# index_fill).
# ---------------------------------------------------------------------------------------------


SEARCH_LIMIT = 16
"""The most source positions one output element searches (unrolled); larger scatters stay
eager (the search reads K indices per output element: an indirect store would read each
once)."""


SCATTER_REDUCTIONS = ("copy", "sum", "prod", "mean", "amax", "amin")


def _positions(lw: ImportBuilder, index: SSAValue, n: graph.Dim, wrap: bool) -> SSAValue:
    """`index` as i64 positions in [0, n) (`n` a size or a size symbol), checked (and wrapped
    if `wrap`) as `graph.gather` checks its indices."""
    shape = graph.shape_of(index)
    count = graph.numel(shape)
    flat = lw.reshape(index, [count])
    table = lw.emit(graph.IotaOp(graph.tensor_of(i64, [n])))
    return lw.reshape(lw.emit(graph.GatherOp(table, [flat], 0, [count], wrap)), shape)


def _lowest(dtype: Attribute, highest: bool = False) -> float | int:
    if dtype == i1:
        return int(highest)
    if graph.is_float(dtype):
        return float("inf") if highest else float("-inf")
    width = cast(IntegerType, dtype).width.data
    return 2 ** (width - 1) - 1 if highest else -(2 ** (width - 1))


def _rounds_like_eager(dtype: Attribute, reduce: str, count: int) -> bool:
    """Eager accumulates f16/bf16 scatters in their own type, rounding after every source
    element (and a mean again after its division); a kernel keeps f32 between fused ops and
    rounds once. They stay eager where an element may take more than one rounding."""
    half = isinstance(dtype, Float16Type | BFloat16Type)
    if not half or reduce not in ("sum", "mean", "prod"):
        return True
    return count <= 1 and reduce != "mean"


_COMBINE: dict[str, type[graph.BinaryOp]] = {
    "sum": graph.AddOp,
    "mean": graph.AddOp,
    "prod": graph.MulOp,
    "amax": graph.MaximumOp,
    "amin": graph.MinimumOp,
}


def _scatter_search(
    lw: ImportBuilder,
    x: SSAValue,
    keys: Sequence[tuple[SSAValue, int]],
    src: SSAValue,
    reduce: str,
    include_self: bool = True,
) -> SSAValue:
    """`x` where each element combines, in source order, the `src` values of the source
    positions whose `keys` (positions, and the dim of x each gives) all equal its own
    index: every tensor broadcasts to `[*x.shape, K]`, source positions last. Unrolled over
    K, in eager's own sequence: a copy takes the last match, a reduction starts from `x`
    (include_self) or from its identity where anything matches. Dims of `x` that no key
    gives may be symbolic."""
    shape = graph.dims_of(x)
    rank, t = len(shape), graph.dtype_of(x)
    count = graph.shape_of(keys[0][0])[-1]
    src = lw.cast(src, t)
    here = {d: lw.emit(graph.IotaOp(graph.tensor_of(i64, shape), d)) for _, d in keys}

    def at(v: SSAValue, k: int) -> SSAValue:
        """Source position k of `v` (or its only one), broadcast to x's shape."""
        k = k if graph.shape_of(v)[-1] > 1 else 0
        picked = _slice_dim(lw, v, rank, k, k + 1)
        return _expand_to(lw, lw.reshape(picked, graph.dims_of(picked)[:-1]), shape)

    matches: list[SSAValue] = []
    for k in range(count):
        eqs = [lw.emit(graph.EqOp(at(positions, k), here[d])) for positions, d in keys]
        while len(eqs) > 1:
            eqs = [lw.emit(graph.BitwiseAndOp(eqs[0], eqs[1])), *eqs[2:]]
        matches.append(eqs[0])
    if reduce == "copy":
        acc = x
        for k, m in enumerate(matches):
            acc = lw.emit(graph.WhereOp(m, at(src, k), acc))
        return acc
    written = matches[0]
    for m in matches[1:]:
        written = lw.emit(graph.BitwiseOrOp(written, m))
    acc = x
    if not include_self:  # eager first sets the written elements to the identity
        identity: float | int = _lowest(t, highest=True) if reduce == "amin" else 0
        if reduce in ("prod", "amax"):
            identity = 1 if reduce == "prod" else _lowest(t)
        acc = lw.emit(graph.WhereOp(written, lw.constant(identity, t), x))
    combine = _COMBINE[reduce]
    for k, m in enumerate(matches):
        acc = lw.emit(graph.WhereOp(m, lw.emit(combine(acc, at(src, k))), acc))
    if reduce == "mean":
        total: SSAValue = lw.constant(int(include_self), i64)
        for m in matches:
            total = lw.emit(graph.AddOp(total, lw.cast(m, i64)))
        acc = lw.emit(graph.WhereOp(written, lw.emit(graph.DivOp(acc, lw.cast(total, t))), acc))
    return acc


def _torch_scatter(reduce: str | None) -> Converter:
    """scatter (src and value, and their deprecated `reduce` forms), scatter_add,
    scatter_reduce.two (0-d tensors read as [1])."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x, index = lw.tensor(a["self"]), lw.tensor(a["index"])
        how = str(reduce or {"add": "sum", "multiply": "prod"}.get(a["reduce"], a["reduce"]))
        value = a.get("src", a.get("value"))
        src = lw.tensor(value) if isinstance(value, torch.fx.Node) else value
        include_self = bool(a.get("include_self", True))
        if _rank(x) or _rank(index) or (isinstance(src, SSAValue) and _rank(src)):
            return _scatter_along(lw, x, a["dim"], index, src, how, include_self)
        if isinstance(src, SSAValue):
            src = lw.reshape(src, [1])
        x1, index1 = lw.reshape(x, [1]), lw.reshape(index, [1])
        out = _scatter_along(lw, x1, 0, index1, src, how, include_self)
        return None if out is None else lw.reshape(out, [])

    return convert


def _scatter_along(
    lw: ImportBuilder,
    x: SSAValue,
    dim: int,
    index: SSAValue,
    value: Any,
    how: str,
    include_self: bool,
) -> SSAValue | None:
    """`index` (of x's rank, no larger than x outside `dim` and than src) moved last along
    `dim`, padded with -1 (never matches) to x's size in the other dims; so is the source."""
    shape, ishape = graph.shape_of(x), graph.shape_of(index)
    rank, t = len(shape), graph.dtype_of(x)
    if rank == 0 or len(ishape) != rank or not _index_tensor(index):
        return None
    if graph.is_symbolic(index):
        return None  # a symbolic count of indices: torch's own call, at each call's sizes
    dim %= rank
    if how not in SCATTER_REDUCTIONS or any(
        i > s for k, (i, s) in enumerate(zip(ishape, shape, strict=True)) if k != dim
    ):
        return None
    if (how != "copy" and t == i1) or (how == "mean" and not graph.is_float(t)):
        return None
    if graph.numel(ishape) == 0:
        return x
    if ishape[dim] > SEARCH_LIMIT or shape[dim] == 0:
        return None
    if not _rounds_like_eager(t, how, ishape[dim]):
        return None
    if isinstance(value, SSAValue):
        src = value
        if len(graph.shape_of(src)) != rank or any(
            i > s for i, s in zip(ishape, graph.shape_of(src), strict=True)
        ):
            return None
        for k, n in enumerate(ishape):
            src = _slice_dim(lw, src, k, 0, n)
        src = lw.cast(src, t)
    elif isinstance(value, bool | int | float):
        src = lw.constant(bool(value) if t == i1 else value, t, ishape)
    else:
        return None
    positions = _positions(lw, index, shape[dim], wrap=False)
    perm = [*(k for k in range(rank) if k != dim), dim]
    last = [*(1 if k == dim else n for k, n in enumerate(ishape)), ishape[dim]]
    high = [*(s - i for s, i in zip(shape, ishape, strict=True)), 0]
    high[dim] = 0

    def searched(v: SSAValue, fill: float) -> SSAValue:
        v = lw.reshape(_permute_dims(lw, v, perm), last)
        return lw.emit(graph.PadOp(v, [0] * (rank + 1), high, value=fill)) if any(high) else v

    keys = [(searched(positions, -1), dim)]
    return _scatter_search(lw, x, keys, searched(src, 0), how, include_self)


def _index_put(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """x[i0, .., ik-1] = values (or +=): integer index tensors (broadcast to B, flattened to
    K, wrapped where negative) on adjacent dims or not (then B leads the values, as torch
    puts it), or one boolean mask (a select: no search). Index tensors of symbolic sizes stay
    torch's call (the search unrolls over a static K)."""
    x, values = lw.tensor(a["self"]), lw.tensor(a["values"])
    accumulate = bool(a.get("accumulate", False))
    shape = graph.shape_of(x)
    rank, t = len(shape), graph.dtype_of(x)
    entries: list[Any] = list(a["indices"])
    if rank == 0 or (accumulate and t == i1) or len(entries) > rank:
        return None
    values = lw.cast(values, t)
    tensors = {k: lw.tensor(e) for k, e in enumerate(entries) if e is not None}
    if not tensors:
        return None
    if len(tensors) == 1 and graph.dtype_of(next(iter(tensors.values()))) == i1:
        return _masked_put(lw, x, *next(iter(tensors.items())), values, accumulate)
    if not all(_index_tensor(v) for v in tensors.values()):
        return None
    if any(graph.is_symbolic(v) for v in tensors.values()):
        return None  # a symbolic count of indices: torch's own call, at each call's sizes
    b = graph.broadcast_shapes(*(graph.shape_of(v) for v in tensors.values()))
    if b is None:
        return None
    count, dims = graph.numel(b), sorted(tensors)
    sizes = graph.dims_of(x)  # sizes, or the symbols of dynamic dims
    if count > SEARCH_LIMIT or any(sizes[d] == 0 for d in dims):
        return None
    if not _rounds_like_eager(t, "sum" if accumulate else "copy", count):
        return None
    if count == 0 or 0 in sizes:
        return x
    keys: list[tuple[SSAValue, int]] = []
    for d in dims:
        flat = lw.reshape(_expand_to(lw, tensors[d], b), [count])
        positions = lw.reshape(_positions(lw, flat, sizes[d], wrap=True), [1] * rank + [count])
        keys.append((positions, d))
    rest = [k for k in range(rank) if k not in dims]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    lead = dims[0] if adjacent else 0  # where B sits among the values' dims
    target = [*(sizes[k] for k in rest[:lead]), *b, *(sizes[k] for k in rest[lead:])]
    if graph.broadcast_shapes(graph.dims_of(values), target) != tuple(target):
        return None
    v = lw.reshape(
        _expand_to(lw, values, target), [*target[:lead], count, *target[lead + len(b) :]]
    )
    v = _permute_dims(lw, v, [*(k for k in range(len(rest) + 1) if k != lead), lead])
    v = lw.reshape(v, [*(1 if k in dims else sizes[k] for k in range(rank)), count])
    return _scatter_search(lw, x, keys, v, "sum" if accumulate else "copy")


def _index_along(reduce: str) -> Converter:
    """index_add (`alpha` scales the source), index_copy and index_fill, kept whole: index_add
    and index_copy reject negative indices, unlike index_put, which they decompose into, and
    index_fill (which wraps them) decomposes into index_copy."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x, index = lw.tensor(a["self"]), lw.tensor(a["index"])
        dims = graph.dims_of(x)  # sizes, or the symbols of dynamic dims
        rank, t = len(dims), graph.dtype_of(x)
        if rank == 0 or not _index_tensor(index) or (reduce == "sum" and t == i1):
            return None
        if graph.is_symbolic(index):
            return None  # a symbolic count of indices: torch's own call, at each call's sizes
        dim, count = a["dim"] % rank, graph.numel(graph.shape_of(index))
        sized = [*(1 if k == dim else n for k, n in enumerate(dims)), count]
        if reduce == "fill":
            value = a["value"]
            if isinstance(value, torch.fx.Node):
                src = lw.reshape(lw.cast(lw.tensor(value), t), [1] * (rank + 1))
            elif isinstance(value, bool | int | float):
                src = lw.constant(bool(value) if t == i1 else value, t, [1] * (rank + 1))
            else:
                return None
        else:
            src = lw.tensor(a["source"])
            if graph.dims_of(src) != tuple(count if k == dim else n for k, n in enumerate(dims)):
                return None
        if count == 0 or 0 in dims:
            return x
        if count > SEARCH_LIMIT or not _rounds_like_eager(t, reduce, count):
            return None
        positions = _positions(lw, index, dims[dim], wrap=reduce == "fill")
        positions = lw.reshape(positions, [1] * rank + [count])
        if reduce != "fill":
            src = lw.cast(src, t)
            alpha = a.get("alpha", 1)
            if alpha != 1:
                src = lw.emit(graph.MulOp(src, lw.constant(alpha, t)))
            src = _permute_dims(lw, src, [*(k for k in range(rank) if k != dim), dim])
            src = lw.reshape(src, sized)
        how = "sum" if reduce == "sum" else "copy"
        return _scatter_search(lw, x, [(positions, dim)], src, how)

    return convert


def _masked_put(
    lw: ImportBuilder, x: SSAValue, first: int, mask: SSAValue, values: SSAValue, accumulate: bool
) -> Value:
    """x[.., mask] = values with a boolean mask on dims first.. (torch.export keeps its shape
    static): a select, where values do not depend on which masked element they go to (they
    broadcast to the dims after the mask)."""
    shape, mshape = graph.shape_of(x), graph.shape_of(mask)
    after = first + len(mshape)
    if after > len(shape) or tuple(shape[first:after]) != mshape:
        return None
    vshape = list(graph.shape_of(values))
    while vshape and vshape[0] == 1 and len(vshape) > len(shape) - after:
        vshape.pop(0)
    if len(vshape) > len(shape) - after:
        return None
    values = lw.reshape(values, vshape)
    if graph.broadcast_shapes(vshape, shape[after:]) != tuple(shape[after:]):
        return None
    mask = lw.reshape(mask, [*([1] * first), *mshape, *([1] * (len(shape) - after))])
    if accumulate:
        values = lw.emit(graph.AddOp(x, values))
    return lw.cast(lw.emit(graph.WhereOp(mask, values, x)), graph.dtype_of(x))


SCATTER_CONVERTERS: dict[str, Converter] = {
    "aten.slice_scatter.default": _slice_scatter,
    "aten.select_scatter.default": _select_scatter,
    "aten.diagonal_scatter.default": _diagonal_scatter,
    "aten.copy.default": _copy,
    "aten.scatter.src": _torch_scatter("copy"),
    "aten.scatter.value": _torch_scatter("copy"),
    "aten.scatter_add.default": _torch_scatter("sum"),
    "aten.scatter_reduce.two": _torch_scatter(None),
    "aten.scatter.reduce": _torch_scatter(None),  # reduce="add" / "multiply" (deprecated)
    "aten.scatter.value_reduce": _torch_scatter(None),
    "aten.index_put.default": _index_put,
    "aten.index_add.default": _index_along("sum"),
    "aten.index_copy.default": _index_along("copy"),
    "aten.index_fill.int_Scalar": _index_along("fill"),
    "aten.index_fill.int_Tensor": _index_along("fill"),
}


SCATTER_KEPT_COMPOSITES = (
    "aten.select_scatter.default",  # torch's decomposition lays the result out as `src`
    "aten.index_add.default",
    "aten.index_copy.default",
    "aten.index_fill.int_Scalar",
    "aten.index_fill.int_Tensor",
)


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.GatherOp: _indexing,
}

FORMULAS: dict[str, Converter] = {
    **SCATTER_CONVERTERS,
}
"""Aten ops that are formulas of gathers and selects: the scatters."""
