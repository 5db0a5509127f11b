"""Converters of layout ops (reshape, expand, permute, slices, split, cat), index arithmetic
(arange, flip, repeat, diagonal) and strided views taken as a gather (as_strided, unfold).
`graph.roll` declares its converter with its class (its `convert` fact)."""

from __future__ import annotations

from collections.abc import Sequence

import torch.fx
from xdsl.dialects.builtin import BFloat16Type, Float16Type, TensorType, f32, f64, i1, i64
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _each, _is_number, _norm_dims, _rank
from xfuse.frontend.builder import (
    SIZE_SYMBOLS,
    ImportBuilder,
    Value,
    decided_size,
    is_size_node,
    lowest_size,
    out_type,
    result_types,
    row_major_at_every_size,
    size_dim,
)

# ---------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------


def _reshape(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x, t = lw.tensor(a["self"]), out_type(node)
    undone = _round_trip(x, t)
    return undone if undone is not None else lw.reshape(x, graph.dims_of(t))


def _round_trip(x: SSAValue, t: TensorType[Attribute]) -> SSAValue | None:
    """Where `x` has symbolic sizes and is a reshape of a value of `t`'s dims: that value (a
    reshape there and back is no op; through a dim merged with a symbol, two reshapes the
    loops cannot lower)."""
    owner = x.owner
    if not (isinstance(owner, graph.ReshapeOp) and graph.is_symbolic(x)):
        return None
    return owner.input if graph.dims_of(owner.input) == graph.dims_of(t) else None


def _expand(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x, shape = lw.tensor(a["self"]), tuple(out_type(node).get_shape())
    if graph.shape_of(x) == shape:
        return x
    dims = range(len(shape) - _rank(x), len(shape))
    return lw.emit(graph.BroadcastInDimOp(x, shape, list(dims)))


def _permute_dims(lw: ImportBuilder, x: SSAValue, perm: Sequence[int]) -> SSAValue:
    if list(perm) == list(range(len(perm))):
        return x
    return lw.emit(graph.PermuteOp(x, perm))


def _permute(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    return _permute_dims(lw, x, [d % _rank(x) for d in a["dims"]])


def _transpose(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    rank = _rank(x)
    if rank < 2:
        return x
    d0, d1 = a.get("dim0", 0) % rank, a.get("dim1", 1) % rank
    perm = list(range(rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _permute_dims(lw, x, perm)


UNBOUNDED_END = 1 << 62
"""An end at or past which a slice of a symbolic dim reaches its end (torch writes `x[a:]` as
an end of 2^63 - 1)."""


def _slice_dim(
    lw: ImportBuilder,
    x: SSAValue,
    dim: int,
    start: int,
    end: int,
    step: int = 1,
    dims: Sequence[graph.Dim] | None = None,
) -> SSAValue:
    """x[..., start:end:step, ...] along `dim`, with torch's clamping of start and end. A
    symbolic dim (size unknown here) is taken whole, or within its first or last elements
    that every size has (its symbol's lowest size, `lowest_size`: `MIN_SIZE`, or more where
    torch's guards raised its range; a negative start, and an end to the dim's end or
    negative, count from its end), or, given the result's `dims`, from a start within those
    first elements to its end by any step (`x[:, 0::2]`: `(s + 1) // 2` long); the other
    dims of `x` may be symbolic (a `graph.slice` keeps them whole)."""
    shape = graph.shape_of(x)
    size = shape[dim]
    if size < 0:
        lowest = lowest_size(graph.dims_of(x)[dim])
        if start == 0 and end >= UNBOUNDED_END and step == 1:
            return x
        if dims is not None and 0 <= start < lowest and end >= UNBOUNDED_END:
            return _emit_slice(lw, x, dim, start, -1, step, dims)
        if -lowest <= start < 0 and (end >= UNBOUNDED_END or start < end < 0):
            limit = -1 if end >= UNBOUNDED_END else end - 1  # `-1 - k` for `size - k`
            return _emit_slice(lw, x, dim, start - 1, limit, step)
        if not 0 <= start <= end <= lowest:
            raise ValueError(f"a slice {start}:{end}:{step} of symbolic dim {dim}")
        return _emit_slice(lw, x, dim, start, end, step)
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    if (start, end, step) == (0, size, 1):
        return x
    return _emit_slice(lw, x, dim, start, end, step)


def _emit_slice(
    lw: ImportBuilder,
    x: SSAValue,
    dim: int,
    start: int,
    end: int,
    step: int,
    dims: Sequence[graph.Dim] | None = None,
) -> SSAValue:
    """A `graph.slice` of `dim`, the other dims whole (`dims`: the result's, where the
    slice's length is a symbol of the table)."""
    shape = graph.shape_of(x)
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[dim], limits[dim], strides[dim] = start, end, step
    return lw.emit(graph.SliceOp(x, starts, limits, strides, dims))


def _slice(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    if _rank(x) == 0:
        return None
    a = {**a, "start": decided_size(a["start"]), "end": decided_size(a["end"])}
    dim, t = a["dim"] % _rank(x), out_type(node)
    found = _offset_slice(lw, x, dim, a, t)
    if found is None:
        found = _sized_start_slice(lw, node, x, dim, a, t)
    if found is not None:
        return found
    same = graph.dims_of(t)[dim] == graph.dims_of(x)[dim]
    if same and a["step"] == 1:  # a unit-step run as long as the dim is all of it: `x[:, :n]`
        return x  # of `x` n long, `x[..., -4095:]` where the trace's guards keep it <= 4095
    if not all(_is_number(a[k]) or a[k] is None for k in ("start", "end")):
        return None
    size = graph.shape_of(x)[dim]
    start = 0 if a["start"] is None else a["start"]
    whole = size if size >= 0 else UNBOUNDED_END  # a symbolic dim's end
    end = whole if a["end"] is None else a["end"]
    return _slice_dim(lw, x, dim, start, end, a["step"], graph.dims_of(t))


def _offset_slice(
    lw: ImportBuilder, x: SSAValue, dim: int, a: Args, t: TensorType[Attribute]
) -> SSAValue | None:
    """A unit-step slice whose result dim is a symbol other than its input's (`x[:, 1:]` of
    `s + 1` is `s`, `x[:, :s]` of `s + 1` too; `p[:, :s]` of a static dim, a table of
    positions cut to the call's length): a gather of `start + i` along `dim`, its length the
    result type's symbol (torch's end, a number or a size, is what sized it, and the trace's
    guards keep it within the dim). From a start within `MIN_SIZE` of a symbolic dim (which
    every size has, so torch never clamps it), or within a static dim. None for any other
    slice."""
    start = 0 if a["start"] is None else a["start"]
    size, result = graph.dims_of(x)[dim], graph.dims_of(t)[dim]
    if not isinstance(result, str) or result == size:
        return None
    highest = graph.MIN_SIZE if isinstance(size, str) else size
    if a["step"] != 1 or not _is_number(start) or not 0 <= start <= highest:
        return None
    return _run_from(lw, x, dim, int(start), t)


def _sized_start_slice(
    lw: ImportBuilder, node: torch.fx.Node, x: SSAValue, dim: int, a: Args, t: TensorType[Attribute]
) -> SSAValue | None:
    """A unit-step slice from a start that is a size of the call to an end as far past it as
    the result is long (`g[s:2 * s]` of a `3 * s` long gradient, `g[s:s + 1]`: AOTAutograd's
    backward of a concatenation after a part of symbolic length; `y[y.shape[0] - n:]` and
    `table[..., 2048 - n:]` to the dim's end): a gather of `start + i` along `dim`. A result `end - start` long is one torch clamped at neither end (the trace's
    guards keep it so wherever the program runs). None for any other slice."""
    symbols = SIZE_SYMBOLS.get()
    start, end = a["start"], a["end"]
    if symbols is None or a["step"] != 1 or not is_size_node(start):
        return None
    out, whole = node.meta.get("val"), a["self"].meta.get("val")
    if not (isinstance(out, torch.Tensor) and isinstance(whole, torch.Tensor)):
        return None
    if end is None or (_is_number(end) and end >= UNBOUNDED_END):
        last = symbols.size_polynomial(whole.shape[dim])
    elif is_size_node(end) or _is_number(end):
        last = symbols.size_polynomial(end.meta["val"] if is_size_node(end) else end)
    else:
        return None
    first = symbols.size_polynomial(start.meta["val"])
    length = symbols.size_polynomial(out.shape[dim])
    if first is None or length is None or last is None or first + length != last:
        return None
    return _run_from(lw, x, dim, lw.cast(lw.size_value(start), i64), t)


def _run_from(
    lw: ImportBuilder, x: SSAValue, dim: int, start: int | SSAValue, t: TensorType[Attribute]
) -> SSAValue:
    """The elements `start + i` of `dim` of `x` (a number, or a 0-d i64 value computed at the
    call), as many as `t`'s dim: a gather of an iota."""
    index: list[graph.Dim] = [1] * _rank(x)
    index[dim] = graph.dims_of(t)[dim]
    offset = start if isinstance(start, int) else 0
    positions = lw.emit(graph.IotaOp(graph.tensor_of(i64, index), dim, offset))
    if not isinstance(start, int):
        positions = lw.emit(graph.AddOp(positions, start))
    return lw.emit(graph.GatherOp(x, [positions], dim, graph.dims_of(t)))


def _select(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    dim = a["dim"] % _rank(x)
    size = graph.shape_of(x)[dim]
    index = a["index"] if size < 0 else a["index"] % size
    # from a symbolic dim's end: `index` to `index + 1`, or to its end for the last element
    end = UNBOUNDED_END if index == -1 else index + 1
    sliced = _slice_dim(lw, x, dim, index, end)
    return lw.reshape(sliced, out_type(node).get_shape())


def _narrow(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    dim = a["dim"] % _rank(x)
    start = a["start"] % graph.shape_of(x)[dim] if a["start"] < 0 else a["start"]
    return _slice_dim(lw, x, dim, start, start + a["length"])


def _split(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """split / split_with_sizes: one slice per piece."""
    x = lw.tensor(a["self"])
    dim = a["dim"] % _rank(x)
    sizes = [int(t.get_shape()[dim]) for t in result_types(node)]
    pieces: list[SSAValue | None] = []
    start = 0
    for size in sizes:
        pieces.append(_slice_dim(lw, x, dim, start, start + size))
        start += size
    return pieces


def _unbind(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    dim = a["dim"] % _rank(x)
    shape = [d for i, d in enumerate(graph.shape_of(x)) if i != dim]
    return [
        lw.reshape(_slice_dim(lw, x, dim, i, i + 1), shape) for i in range(graph.shape_of(x)[dim])
    ]


def _cat(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    t = out_type(node)
    rank = len(t.get_shape())
    # torch.cat skips legacy empty 1-D tensors of shape [0].
    inputs = [
        lw.operand(n, t.element_type)
        for n in a["tensors"]
        if not (rank != 1 and tuple(n.meta["val"].shape) == (0,))
    ]
    if len(inputs) == 1:
        return inputs[0]
    dim = a["dim"] % rank
    # The result's size along `dim` as torch's type names it: the table's symbol of the sum
    # where an input is symbolic there (the op alone cannot name it).
    size = graph.dims_of(t)[dim] if graph.is_symbolic(t) else None
    return lw.emit(graph.ConcatOp(inputs, dim, size))


# ---------------------------------------------------------------------------------------------
# Index arithmetic: arange, flip, repeat, diagonal
# ---------------------------------------------------------------------------------------------


def _arange_compute_type(dtype: Attribute, node: torch.fx.Node) -> Attribute:
    """The type eager's float arange computes `start + step * i` in (its `acc_type` for the
    device): f64 on the CPU for f32 and f64, f32 for f16/bf16 and on CUDA (f64 stays f64)."""
    if dtype == f64:
        return f64
    val = node.meta.get("val")
    on_cuda = isinstance(val, torch.Tensor) and val.device.type == "cuda"
    return f32 if on_cuda or isinstance(dtype, Float16Type | BFloat16Type) else f64


def _arange(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """arange as a `graph.iota` (its length is the exported shape's). Integer dtypes count in
    i64 from start and step truncated to integers, as eager does; float dtypes compute
    `start + step * i` in eager's accumulation type and round once. A start that is a size of
    the call (`arange(s, -s, -1)`, relative positions) is a `graph.size_value` added to an
    iota from 0."""
    t = out_type(node)
    dtype, (n,) = t.element_type, t.get_shape()
    start, step = a.get("start", 0), a.get("step", 1)
    sized = is_size_node(start)
    if not ((_is_number(start) or sized) and _is_number(step)) or dtype == i1:
        return None
    if not graph.is_float(dtype):
        if int(step) == 0:
            return None
        if not sized:
            return lw.emit(graph.IotaOp(t, 0, int(start), int(step)))
        counted = lw.emit(graph.IotaOp(TensorType(i64, [n], t.encoding), 0, 0, int(step)))
        origin = lw.cast(lw.size_value(start), i64)
        return lw.cast(lw.emit(graph.AddOp(counted, origin)), dtype)
    compute = _arange_compute_type(dtype, node)
    index = lw.cast(lw.emit(graph.IotaOp(TensorType(i64, [n], t.encoding))), compute)
    scaled = lw.emit(graph.MulOp(index, lw.constant(step, compute)))
    origin = lw.cast(lw.size_value(start), compute) if sized else lw.constant(start, compute)
    return lw.cast(lw.emit(graph.AddOp(origin, scaled)), dtype)


def _flip(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    sizes = graph.shape_of(x)  # a symbolic dim (negative here) is longer than 1
    dims = [d for d in _norm_dims(a["dims"], _rank(x)) if sizes[d] > 1 or sizes[d] < 0]
    if not a["dims"] or not dims:
        return x
    return lw.emit(graph.FlipOp(x, dims))


def _repeat(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """repeat (and tile): the input broadcast along a new dim before each repeated dim, then
    reshaped to the result: index arithmetic, no copy. A count may be a size of the call
    (`x.repeat(batch, 1, 1)`: the new dim is its symbol)."""
    x = lw.tensor(a["self"])
    found = [size_dim(r, node) for r in a["repeats"]]
    repeats = [r for r in found if r is not None]
    if len(repeats) != len(found) or len(repeats) < _rank(x):
        return None
    if len(repeats) > _rank(x):  # new leading dims of 1 (a symbolic dim keeps its symbol)
        x = lw.emit(graph.ReshapeOp(x, (1,) * (len(repeats) - _rank(x)) + graph.dims_of(x)))
    spread: list[graph.Dim] = []
    dims: list[int] = []
    for r, d in zip(repeats, graph.dims_of(x), strict=True):
        if r != 1:
            spread.append(r)
        dims.append(len(spread))
        spread.append(d)
    if len(spread) != len(dims):
        x = lw.emit(graph.BroadcastInDimOp(x, spread, dims))
    return lw.reshape(x, out_type(node).get_shape())


def _diagonal(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """diagonal: dim1 and dim2 moved last and flattened, then a slice of stride m + 1 from
    the first element of the diagonal (a returned diagonal is still a view of its base: the
    runtime replays the view, docs/contracts.md)."""
    x = lw.tensor(a["self"])
    rank, offset = _rank(x), a["offset"]
    if rank < 2 or not isinstance(offset, int):
        return None
    d1, d2 = a["dim1"] % rank, a["dim2"] % rank
    dims = graph.dims_of(x)
    n, m = dims[d1], dims[d2]
    if d1 == d2 or not isinstance(n, int) or not isinstance(m, int):
        return None  # (a symbolic diagonal's length is a minimum of sizes: refused)
    rest = [d for d in range(rank) if d not in (d1, d2)]
    x = _permute_dims(lw, x, [*rest, d1, d2])
    x = lw.emit(graph.ReshapeOp(x, [dims[d] for d in rest] + [n * m]))
    length = out_type(node).get_shape()[-1]
    start = offset if offset >= 0 else -offset * m
    if length == 0:
        start = limit = 0
    else:
        limit = start + (length - 1) * (m + 1) + 1
    _, to_end, _ = graph.WHOLE_SYMBOLIC_DIM
    whole = [d if isinstance(d, int) else to_end for d in (dims[k] for k in rest)]
    starts, limits = [0] * len(rest) + [start], [*whole, limit]
    return lw.emit(graph.SliceOp(x, starts, limits, [1] * len(rest) + [m + 1]))


# ---------------------------------------------------------------------------------------------
# Strided views: as_strided and unfold as a gather from the flattened input at computed
# offsets (`offset + sum_k i_k * stride_k`)
# ---------------------------------------------------------------------------------------------


def _strided_gather(
    lw: ImportBuilder,
    node: torch.fx.Node,
    x: SSAValue,
    size: Sequence[int],
    stride: Sequence[int],
    offset: int,
) -> Value:
    """The elements of `x` (contiguous, of `n` elements) at `offset + sum_k i_k * stride_k`
    for every index `i` of `size`, as a tensor of `size`; None (torch runs it) when `x` is not
    contiguous in eager (its storage is not its logical order) or an offset leaves `[0, n)`."""
    val = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not val.is_contiguous() or val.storage_offset() != 0:
        return None
    n = graph.numel(graph.shape_of(x))
    count = graph.numel(size)
    last = offset + sum((k - 1) * s for k, s in zip(size, stride, strict=True) if k > 0)
    if count == 0 or n == 0 or min(stride, default=0) < 0 or not 0 <= offset <= last < n:
        return None
    shape = list(size)
    index: SSAValue | None = None
    for dim, step in enumerate(stride):
        if shape[dim] == 1 or step == 0:
            continue
        along = lw.emit(graph.IotaOp(TensorType(i64, shape), dim, 0, step))
        index = along if index is None else lw.emit(graph.AddOp(index, along))
    if index is None:
        index = lw.constant(offset, i64, shape)
    elif offset:
        index = lw.emit(graph.AddOp(index, lw.constant(offset, i64)))
    flat_index = lw.reshape(index, [count])
    rows = lw.emit(graph.GatherOp(lw.reshape(x, [n]), [flat_index], 0, [count]))
    return lw.reshape(rows, out_type(node).get_shape())


def _as_strided(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    offset = a.get("storage_offset") or 0
    if not all(isinstance(v, int) for v in [*a["size"], *a["stride"], offset]):
        return _symbolic_as_strided(lw, node, a)
    return _strided_gather(lw, node, lw.tensor(a["self"]), a["size"], a["stride"], offset)


def _symbolic_as_strided(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """An `as_strided` through sizes of the call that is a reshape: of an input row-major at
    every size and at offset 0, to the same dims other than 1 in the same order, row-major at
    every size (`mean(x, -1, keepdim=True)` of `[s, c, n]` seen as `[s, c, 1, 1]`, as torch
    decomposes an adaptive pooling); None (refused) for any other."""
    x, val, out = lw.tensor(a["self"]), a["self"].meta.get("val"), node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor):
        return None
    offsets = (a.get("storage_offset") or 0, val.storage_offset())
    if any(type(o) is not int or o != 0 for o in offsets):
        return None
    if not (row_major_at_every_size(val) and row_major_at_every_size(out)):
        return None
    t = out_type(node)
    if [d for d in graph.dims_of(t) if d != 1] != [d for d in graph.dims_of(x) if d != 1]:
        return None
    return lw.reshape(x, t.get_shape())


def _unfold(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """Windows of `size` every `step` along `dim`, as a new last dim (contiguous strides)."""
    x = lw.tensor(a["self"])
    shape = list(graph.shape_of(x)) or [1]
    dim, step = a["dimension"] % len(shape), a["step"]
    strides = [graph.numel(shape[k + 1 :]) for k in range(len(shape))]
    out = list(out_type(node).get_shape())
    if not graph.shape_of(x):  # a 0-d input: one window of its one element
        return lw.reshape(x, out)
    new_stride = [*strides[:dim], strides[dim] * step, *strides[dim + 1 :], strides[dim]]
    return _strided_gather(lw, node, x, out, new_stride, 0)


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.BroadcastInDimOp: _expand,
    graph.ReshapeOp: _reshape,
    graph.PermuteOp: _permute,
    graph.SliceOp: _slice,
    graph.ConcatOp: _cat,
    graph.IotaOp: _arange,
    graph.FlipOp: _flip,
}

FORMULAS: dict[str, Converter] = {
    **_each(["aten.transpose.int", "aten.t.default"], _transpose),
    "aten.select.int": _select,
    "aten.narrow.default": _narrow,
    **_each(["aten.split.Tensor", "aten.split_with_sizes.default"], _split),
    "aten.unbind.int": _unbind,
    "aten.repeat.default": _repeat,
    "aten.diagonal.default": _diagonal,
    "aten.as_strided.default": _as_strided,
    "aten.unfold.default": _unfold,
}
"""Aten ops that are formulas of layout and gather ops."""
