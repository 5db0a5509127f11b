"""
The reference interpreter: runs `graph` IR (and `fusion.group`s) with eager torch.

This is the oracle every pass is tested against: interpret(P(G)) == interpret(G). It favours
being obviously right over being fast: each op is one torch call, written as a table.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

import torch
from xdsl.dialects import func
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, IntegerAttr, ModuleOp, StringAttr
from xdsl.ir import Block, Operation, SSAValue

from xfuse.dialects import fusion, graph
from xfuse.dialects.torch_args import (
    Operand,
    decode_args,
    direct_arguments,
    direct_torch_op,
    operand_filler,
    prepare_args,
    resolve_torch_op,
    tensor_ref,
)
from xfuse.errors import IndexOutOfRangeError, InterpretError, XfuseError
from xfuse.ir import dtypes
from xfuse.ir.dense import compact_splat, element_bytes, is_splat
from xfuse.ir.names import SIZES_ATTR

Tensor = torch.Tensor
_T = TypeVar("_T")

SIZES: contextvars.ContextVar[Mapping[str, int] | None] = contextvars.ContextVar(
    "xfuse_interpreter_sizes", default=None
)
"""The sizes of the symbols of the function `interpret` runs (docs/dynamic-shapes.md)."""


def concrete_shape(value: SSAValue) -> tuple[int, ...]:
    """A value's shape with each size symbol at its size in the running call."""
    return concrete_dims(graph.dims_of(value))


def concrete_dims(dims: Sequence[int | str]) -> tuple[int, ...]:
    """`concrete_shape` of a value whose dims (`graph.dims_of`) were read before."""
    if all(isinstance(d, int) for d in dims):
        return cast(tuple[int, ...], tuple(dims))
    return graph.dims_at(dims, call_sizes(d for d in dims if isinstance(d, str)))


def call_sizes(symbols: Iterable[str]) -> Mapping[str, int]:
    """The running call's sizes (`SIZES`), each of `symbols` checked to have one."""
    sizes = SIZES.get() or {}
    missing = sorted(set(symbols) - set(sizes))
    if missing:
        raise InterpretError(
            f"size symbol '{missing[0]}' has no size: run its function through interpret"
        )
    return sizes


def bind_sizes(f: func.FuncOp, inputs: Sequence[Tensor]) -> dict[str, int] | None:
    """The size of every symbol of `f`'s `graph.sizes` table in a call of `inputs` (None for
    a function without one): read from the inputs, checked against each other and the
    symbols' ranges and the table's relations and conditions, derived symbols computed (each 2
    or more)."""
    table = f.attributes.get(SIZES_ATTR)
    if not isinstance(table, graph.SizesAttr):
        return None
    found: dict[str, int] = {}
    for i, (value, t) in enumerate(zip(f.body.block.args, inputs, strict=True)):
        for d, (dim, n) in enumerate(zip(graph.dims_of(value), t.shape, strict=False)):
            if isinstance(dim, str) and found.setdefault(dim, n) != n:
                raise InterpretError(
                    f"size symbol '{dim}' is {found[dim]} in one argument and {n} in "
                    f"argument {i} (dim {d}) of @{f.sym_name.data}"
                )
    for s in table.inputs():
        size = found.get(s.name)
        if size is None:
            arg, dim = s.source or (0, 0)
            raise InterpretError(f"size symbol '{s.name}' of input({arg}, {dim}) has no size")
        if size < s.low or (s.high is not None and size > s.high):
            high = "inf" if s.high is None else s.high
            raise InterpretError(
                f"size symbol '{s.name}' is {size}, outside its range [{s.low}, {high}] "
                "(sizes 0 and 1 are specialised: a program for them is static)"
            )
    sizes = table.evaluate({s.name: found[s.name] for s in table.inputs()})
    problem = table.relation_problem(sizes) or table.condition_problem(sizes)
    if problem is not None:
        raise InterpretError(f"@{f.sym_name.data}: {problem}")
    small = table.too_small(sizes)
    if small is not None:
        assert small.expr is not None
        raise InterpretError(
            f"size symbol '{small.name}' = {small.definition} is {sizes[small.name]}: a "
            f"symbol's size is {graph.MIN_SIZE} or more (sizes 0 and 1 are specialised: a "
            "program for them is static)"
        )
    return sizes


def _unary(fn: Callable[[Tensor], Tensor]) -> Callable[[Operation, list[Tensor]], Tensor]:
    return lambda op, xs: fn(xs[0])


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Callable[[Operation, list[Tensor]], Tensor]:
    return lambda op, xs: fn(xs[0], xs[1])


def _div(a: Tensor, b: Tensor) -> Tensor:
    if a.dtype.is_floating_point:
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


Prepared = Callable[[list[Tensor]], Tensor]
"""One op's torch code with the op's attributes read: operand tensors -> result tensor."""

Preparer = Callable[[Operation], Prepared]
"""Reads an op's attributes once (`prepare_op`); its table row runs it per call."""


def _impl_of(prepare: Preparer) -> Impl:
    """The interpreter row of a preparer: attributes read at every call."""
    return lambda op, xs: prepare(op)(xs)


def _prepare_cast(op: Operation) -> Prepared:
    dtype = dtypes.to_torch(graph.dtype_of(op.results[0]))
    return lambda xs: xs[0].to(dtype)


def _prepare_reshape(op: Operation) -> Prepared:
    if graph.is_symbolic(op.results[0]):
        dims = graph.dims_of(op.results[0])
        return lambda xs: xs[0].reshape(concrete_dims(dims)).contiguous()
    shape = graph.shape_of(op.results[0])
    return lambda xs: xs[0].reshape(shape).contiguous()


def _prepare_matmul(op: Operation) -> Prepared:
    """`torch.matmul`; a product of two matrices or batches of them is its `direct_call`
    (`torch.mm`, `torch.bmm`)."""
    if direct_call(op) is not None:
        return _prepare_direct(op)
    return lambda xs: torch.matmul(xs[0], xs[1])


def _prepare_direct(op: Operation) -> Prepared:
    """The op's `direct_call` as a function of its operands."""
    call = direct_call(op)
    assert call is not None
    fn, args, kwargs = call
    fill = operand_filler(args)
    return lambda xs: fn(*fill(xs), **kwargs)


def _prepare_constant(op: Operation) -> Prepared:
    """A fresh tensor per run (callers may write it) on torch's default device of the moment
    (the runtime runs a fallen-back group under its inputs' device), copied from one kept per
    device: a device-to-device copy, which a CUDA graph can capture."""
    assert isinstance(op, graph.ConstantOp)
    value = constant_tensor(op.value)
    on_device: dict[torch.device, Tensor] = {value.device: value}

    def run(xs: Sequence[Tensor]) -> Tensor:
        device = torch.get_default_device()
        kept = on_device.get(device)
        if kept is None:
            kept = on_device[device] = value.to(device)
        return kept.clone()

    return run


def _reduce(fn: Callable[[Tensor, tuple[int, ...], bool], Tensor]) -> Preparer:
    def prepare(op: Operation) -> Prepared:
        assert isinstance(op, graph.ReduceOp)
        dims, keep = op.reduce_dims, op.keeps_dims
        if not dims:
            return lambda xs: xs[0].clone()
        return lambda xs: fn(xs[0], dims, keep).to(xs[0].dtype)

    return prepare


def _reduce_prod(x: Tensor, dims: tuple[int, ...], keep: bool) -> Tensor:
    for d in sorted(dims, reverse=True):
        x = torch.prod(x, dim=d, keepdim=keep)
    return x


def _prepare_broadcast_in_dim(op: Operation) -> Prepared:
    assert isinstance(op, graph.BroadcastInDimOp)
    dims, dim_map = graph.dims_of(op.result), op.dim_map

    def run(xs: list[Tensor]) -> Tensor:
        out_shape = concrete_dims(dims)
        view = [1] * len(out_shape)
        for i, d in enumerate(dim_map):
            view[d] = xs[0].shape[i]
        return xs[0].reshape(view).expand(out_shape).contiguous()

    return run


def _prepare_slice(op: Operation) -> Prepared:
    assert isinstance(op, graph.SliceOp)
    index = op.index
    return lambda xs: xs[0][index].contiguous()


def _prepare_permute(op: Operation) -> Prepared:
    assert isinstance(op, graph.PermuteOp)
    order = op.permutation
    return lambda xs: xs[0].permute(order).contiguous()


def _prepare_concat(op: Operation) -> Prepared:
    assert isinstance(op, graph.ConcatOp)
    axis = op.axis
    return lambda xs: torch.cat(xs, dim=axis)


def constant_tensor(attr: DenseIntOrFPElementsAttr) -> Tensor:  # pyright: ignore[reportMissingTypeArgument]
    t = graph.tensor_type(attr.type)
    dtype = dtypes.to_torch(t.element_type)
    values = compact_splat(attr).get_values()
    shape = tuple(t.get_shape())
    if len(values) == 1:
        # Graph constants are real: no (re, im) tuples among the values.
        return torch.full(shape, cast(float, values[0]), dtype=dtype)
    return torch.tensor(list(values), dtype=dtype).reshape(shape)


def _dim(op: Operation) -> int:
    """The `dim` property of a softmax-like op (an i64 IntegerAttr)."""
    return cast(IntegerAttr, op.properties["dim"]).value.data


def _prepare_softmax(fn: Callable[..., Tensor]) -> Preparer:
    """softmax / log_softmax along the op's `dim`."""

    def prepare(op: Operation) -> Prepared:
        dim = _dim(op)
        return lambda xs: fn(xs[0], dim=dim)

    return prepare


def _prepare_layer_norm(op: Operation) -> Prepared:
    assert isinstance(op, graph.LayerNormOp)
    rank, eps = op.normalized_rank, op.epsilon
    has_weight, has_bias = op.weight is not None, op.bias is not None

    def run(xs: list[Tensor]) -> Tensor:
        shape = xs[0].shape[len(xs[0].shape) - rank :]
        w = xs[1] if has_weight else None
        b = xs[-1] if has_bias else None
        return torch.nn.functional.layer_norm(xs[0], shape, w, b, eps)

    return run


def _prepare_rms_norm(op: Operation) -> Prepared:
    assert isinstance(op, graph.RMSNormOp)
    rank, eps, has_weight = op.normalized_rank, op.epsilon, op.weight is not None

    def run(xs: list[Tensor]) -> Tensor:
        shape = xs[0].shape[len(xs[0].shape) - rank :]
        w = xs[1] if has_weight else None
        return torch.nn.functional.rms_norm(xs[0], shape, w, eps)

    return run


def _prepare_gelu(op: Operation) -> Prepared:
    assert isinstance(op, graph.GeluOp)
    approximate = op.approximate.data
    return lambda xs: torch.nn.functional.gelu(xs[0], approximate=approximate)


def _prepare_var(op: Operation) -> Prepared:
    assert isinstance(op, graph.VarOp)
    dims, correction, keep = op.reduce_dims, op.correction.value.data, op.keeps_dims
    return lambda xs: torch.var(xs[0], dim=dims, correction=correction, keepdim=keep)


def _prepare_arg_reduce(fn: Callable[..., Tensor]) -> Preparer:
    """argmax / argmin along the op's one dim."""

    def prepare(op: Operation) -> Prepared:
        assert isinstance(op, graph.ArgReduceOp)
        dim, keep = op.reduce_dims[0], op.keeps_dims
        return lambda xs: fn(xs[0], dim=dim, keepdim=keep)

    return prepare


def _torch_call(op: Operation, xs: list[Tensor]) -> Tensor | tuple[Tensor, ...]:
    assert isinstance(op, graph.TorchCallOp)
    fn = resolve_torch_op(op.target.data)
    args, kwargs = decode_args(op.args, op.kwargs, xs)
    return picked_results(op, fn(*args, **kwargs))


def picked_results(op: graph.TorchCallOp, out: Any) -> Tensor | tuple[Tensor, ...]:
    """A torch call's results: the items of the operator's tuple at the op's `picks`, else
    its tensors (`tensor_results`), each in its memory order where the op has `orders`
    (`in_memory_order`)."""
    return results_picker(op)(out)


def results_picker(op: graph.TorchCallOp) -> Callable[[Any], Tensor | tuple[Tensor, ...]]:
    """`picked_results(op, ...)` with the op's `picks` and `orders` read once: the operator's
    result -> the op's results."""
    picked, orders = op.picked, op.memory_orders

    def pick(out: Any) -> Tensor | tuple[Tensor, ...]:
        results = tensor_results(out) if picked is None else tuple(out[i] for i in picked)
        if orders is None:
            return results
        if isinstance(results, Tensor):
            return in_memory_order(results, orders[0])
        return tuple(in_memory_order(t, o) for t, o in zip(results, orders, strict=True))

    return pick


def in_memory_order(result: Tensor, order: tuple[int, ...] | None) -> Tensor:
    """Torch's result seen with its dims in memory order (`graph.TorchCallOp`'s `orders`): a
    view, contiguous where torch laid it out as traced, so that kernels read it in place.
    Where this torch (version, backend) lays it out otherwise, the view is correct all the
    same: a kernel makes its inputs contiguous (`KernelStep`), an extern reads any strides."""
    return result if order is None else result.permute(order)


def tensor_results(out: Any) -> Tensor | tuple[Tensor, ...]:
    """A torch operator's result(s) as a `graph.torch_call`'s: a tuple of its tensors, with
    the results that are no tensor dropped (None where `convolution_backward`'s `output_mask`
    asks for no input gradient, the ints a CUDA attention kernel reports; the importer gives
    such a result no SSA value)."""
    if isinstance(out, list | tuple):
        return tuple(t for t in out if isinstance(t, Tensor))
    return out


# --- index arithmetic: arange, flip, roll -------------------------------------------------


def _iota(op: Operation, xs: list[Tensor]) -> Tensor:
    """torch.arange (in i64, as eager's integer arange computes) along `dim`, broadcast."""
    assert isinstance(op, graph.IotaOp)
    return iota_values(op).expand(concrete_shape(op.result)).contiguous()


def _size_value(op: Operation, xs: list[Tensor]) -> Tensor:
    """The size polynomial at the running call's sizes, as a 0-d int64 tensor."""
    assert isinstance(op, graph.SizeValueOp)
    return torch.tensor(op.expr.evaluate(call_sizes(op.expr.symbols)), dtype=torch.int64)


def iota_values(op: graph.IotaOp) -> Tensor:
    """The iota's values along its dim, every other dim at size 1 (what `_iota` broadcasts)."""
    shape, dim = concrete_shape(op.result), op.axis
    start, step = op.counting
    n = shape[dim]
    values = torch.arange(start, start + n * step, step, dtype=torch.int64)
    view = [1] * len(shape)
    view[dim] = n
    return values.to(dtypes.to_torch(graph.dtype_of(op.result))).reshape(view)


def _prepare_flip(op: Operation) -> Prepared:
    assert isinstance(op, graph.FlipOp)
    flipped = op.flipped
    return lambda xs: torch.flip(xs[0], flipped)


Impl = Callable[[Operation, list[Tensor]], Tensor | tuple[Tensor, ...]]


def torch_function(path: str) -> Callable[..., Tensor]:
    """A dotted torch name (`"torch.nn.functional.silu"`) as the function it names."""
    head, *rest = path.split(".")
    if head != "torch":
        raise InterpretError(f"'{path}' does not name a torch function")
    fn: Any = torch
    for part in rest:
        fn = getattr(fn, part)
    return cast(Callable[..., Tensor], fn)


def _call(fn: Callable[..., Tensor]) -> Impl:
    """The op's torch function applied to its operands."""
    return lambda op, xs: fn(*xs)


def _reduce_with(fn: Callable[..., Tensor]) -> Preparer:
    """A reduction's torch function, called as `fn(x, dim=dims, keepdim=keep)`."""
    return _reduce(lambda x, d, k: fn(x, dim=d, keepdim=k))


def _family_impl(op: type[Operation]) -> Impl | None:
    """The implementation an op's `torch` fact gives (`xfuse.dialects.facts`), called with
    the op's `torch_args` after its operands where it has them."""
    prepare = _family_preparer(op)
    if prepare is not None:
        return _impl_of(prepare)
    path = graph.op_facts(op).torch
    return None if path is None else _call(torch_function(path))


def _family_preparer(op: type[Operation]) -> Preparer | None:
    """The preparer of an op whose `torch` fact reads attributes (a reduction's dims, the
    op's `torch_args`); None for one that reads none or has no `torch` fact."""
    facts = graph.op_facts(op)
    if facts.torch is None:
        return None
    fn = torch_function(facts.torch)
    if issubclass(op, graph.ReduceOp):
        return _reduce_with(fn)
    return None if facts.torch_args is None else _with_args(fn, facts.torch_args)


def _with_args(fn: Callable[..., Tensor], torch_args: Callable[[Any], tuple[Any, ...]]) -> Preparer:
    """`fn(*operands, *torch_args(op))`, the op's `torch_args` read once."""

    def prepare(op: Operation) -> Prepared:
        extra = torch_args(op)
        return lambda xs: fn(*xs, *extra)

    return prepare


# Own torch code that reads the op's attributes once (for `prepare_op`); also interpreter rows.
OWN_PREPARERS: dict[str, Preparer] = {
    "graph.cast": _prepare_cast,
    "graph.reduce_prod": _reduce(_reduce_prod),
    "graph.reshape": _prepare_reshape,
    "graph.constant": _prepare_constant,
    "graph.matmul": _prepare_matmul,
    "graph.linear": _prepare_direct,
    "graph.broadcast_in_dim": _prepare_broadcast_in_dim,
    "graph.permute": _prepare_permute,
    "graph.slice": _prepare_slice,
    "graph.concat": _prepare_concat,
    "graph.softmax": _prepare_softmax(torch.softmax),
    "graph.log_softmax": _prepare_softmax(torch.log_softmax),
    "graph.layer_norm": _prepare_layer_norm,
    "graph.rms_norm": _prepare_rms_norm,
    "graph.gelu": _prepare_gelu,
    "graph.var": _prepare_var,
    "graph.flip": _prepare_flip,
    "graph.argmax": _prepare_arg_reduce(torch.argmax),
    "graph.argmin": _prepare_arg_reduce(torch.argmin),
}

# The ops that declare no `torch` fact: each is its own torch code.
# --- padding and pooling --------------------------------------------------------------


def _prepare_pad(op: Operation) -> Prepared:
    """graph.pad: constant through F.pad (any rank, negative pads); reflect and replicate by
    indexing each padded dim with torch's mirrored or clamped positions."""
    assert isinstance(op, graph.PadOp)
    (low, high), mode, fill = op.pads, op.mode.data, op.fill
    if mode == "constant":
        opened, dims = op.open_dims, graph.dims_of(op.result)

        def constant(xs: list[Tensor]) -> Tensor:
            value = fill if xs[0].dtype.is_floating_point else int(fill)
            out, n = concrete_dims(dims), xs[0].shape
            ends = [out[d] - n[d] - low[d] if d in opened else high[d] for d in range(len(low))]
            pad = [p for d in reversed(range(len(low))) for p in (low[d], ends[d])]
            return torch.nn.functional.pad(xs[0], pad, value=value).contiguous()

        return constant
    return lambda xs: _index_pad(xs[0], low, high, mode)


def _index_pad(x: Tensor, low: Sequence[int], high: Sequence[int], mode: str) -> Tensor:
    """`x` padded by `low` and `high` in `mode` "reflect" or "replicate"."""
    for d, (lo, hi) in enumerate(zip(low, high, strict=True)):
        n = x.shape[d]
        index = torch.arange(-lo, n + hi)
        if mode == "reflect":
            index = (n - 1) - ((n - 1) - index.abs()).abs()
        else:
            index = index.clamp(0, n - 1)
        x = x.index_select(d, index)
    return x.contiguous()


def _pool(op: Operation, xs: list[Tensor]) -> Tensor:
    """graph.pool as torch's max_pool / avg_pool of the window dims, leading dims flattened
    (an unbatched call); ceil_mode when the result is longer than the floor formula."""
    assert isinstance(op, graph.PoolOp)
    kernel, stride, padding, dilation = op.window
    n, x = len(kernel), xs[0]
    out = graph.shape_of(op.result)
    ceil = out[-n:] != graph.pool_shape(x.shape[-n:], kernel, stride, padding, dilation, False)
    flat = x.reshape(-1, *x.shape[-n:])
    F = torch.nn.functional
    if op.adaptive is not None:
        sizes, argmax = out[-n:], op.kind.data == "argmax"
        if op.kind.data == "avg":
            avg = cast(
                Callable[..., Tensor],
                (F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d)[n - 1],
            )
            return avg(flat, sizes).reshape(out).contiguous()
        adaptive_max = cast(
            Callable[..., Any],
            (F.adaptive_max_pool1d, F.adaptive_max_pool2d, F.adaptive_max_pool3d)[n - 1],
        )
        y = adaptive_max(flat, sizes, return_indices=argmax)
        return (y[1] if argmax else y).reshape(out).contiguous()
    if op.kind.data in ("max", "argmax"):
        max_pool = cast(Callable[..., Tensor], (F.max_pool1d, F.max_pool2d, F.max_pool3d)[n - 1])
        argmax = op.kind.data == "argmax"
        y = max_pool(flat, kernel, stride, padding, dilation, ceil_mode=ceil, return_indices=argmax)
        y = y[1] if argmax else y
    else:
        if n == 1:  # avg_pool1d takes no divisor: as a 2-d pool over a unit dim
            flat = flat.unsqueeze(-2)
            kernel, stride, padding = (1, *kernel), (1, *stride), (0, *padding)
        avg_pool = cast(Callable[..., Tensor], F.avg_pool3d if n == 3 else F.avg_pool2d)
        y = avg_pool(
            flat,
            kernel,
            stride,
            padding,
            ceil_mode=ceil,
            count_include_pad=op.count_include_pad is not None,
            divisor_override=op.divisor_value,
        )
    return y.reshape(out).contiguous()


def _prepare_patches(op: Operation) -> Prepared:
    """graph.patches: the zero-padded input's windows (`Tensor.unfold` along H, then W),
    `[C, OH, OW, KH, KW]`, laid out as `[OH, OW, C, KH, KW]`."""
    assert isinstance(op, graph.PatchesOp)
    (kh, kw), (sh, sw), (ph, pw) = op.window

    def run(xs: list[Tensor]) -> Tensor:
        padded = torch.nn.functional.pad(xs[0], [pw, pw, ph, ph])
        windows = padded.unfold(1, kh, sh).unfold(2, kw, sw)
        return windows.permute(1, 2, 0, 3, 4).contiguous()

    return run


OWN_PREPARERS["graph.pad"] = _prepare_pad
OWN_PREPARERS["graph.patches"] = _prepare_patches
POOL_IMPLS: dict[str, Impl] = {
    "graph.pad": _impl_of(_prepare_pad),
    "graph.pool": _pool,
    "graph.patches": _impl_of(_prepare_patches),
}


OWN_IMPLS: dict[str, Impl] = {
    **{name: _impl_of(prepare) for name, prepare in OWN_PREPARERS.items()},
    "graph.div": _binary(_div),
    "graph.torch_call": _torch_call,
    "graph.iota": _iota,
    "graph.size_value": _size_value,
    **POOL_IMPLS,
}


# --- gather: indexing with computed indices -------------------------------------------------


def check_indices(indices: Tensor, size: int, wrap: bool) -> Tensor:
    """`indices` as int64 in `[0, size)` (negative ones counted from the end with `wrap`);
    raises `IndexOutOfRangeError` like eager for any other."""
    low = -size if wrap else 0
    if indices.numel() and bool(((indices < low) | (indices >= size)).any()):
        bad = indices[(indices < low) | (indices >= size)].flatten()[0].item()
        raise IndexOutOfRangeError(
            f"index out of range in self: index {bad} is out of bounds for a dim of size {size}"
        )
    indices = indices.long()
    return torch.where(indices < 0, indices + size, indices) if wrap else indices


def _gather(op: Operation, xs: list[Tensor]) -> Tensor:
    assert isinstance(op, graph.GatherOp)
    return gathered(op, xs[0], xs[1:], concrete_shape(op.result))


def gathered(
    op: graph.GatherOp, table: Tensor, indices: Sequence[Tensor], out: Sequence[int]
) -> Tensor:
    """The gather's result read from `table` at `indices` (each index checked against the
    table's dim), of shape `out` (the result's, or one whose dims of size 1 it broadcasts)."""
    dim = op.axis
    index: list[Tensor] = []
    for m, size in enumerate(out):
        if m == dim:
            index += [
                check_indices(t, table.shape[dim + j], op.wraps).expand(out)
                for j, t in enumerate(indices)
            ]
            continue
        view = [size if n == m else 1 for n in range(len(out))]
        position = torch.arange(size, device=table.device).reshape(view)
        index.append((position * 0 if table.shape[op.table_dim(m)] == 1 else position).expand(out))
    return table[tuple(index)].contiguous()


OWN_IMPLS["graph.gather"] = _gather


# --- scans: cumsum, cumprod, logcumsumexp, cummax, cummin --------------------------------

_SCANS: dict[str, Callable[[Tensor, int], Tensor]] = {
    "sum": lambda x, d: torch.cumsum(x, d, dtype=x.dtype),
    "prod": lambda x, d: torch.cumprod(x, d, dtype=x.dtype),
    "logsumexp": torch.logcumsumexp,
    "max": lambda x, d: torch.cummax(x, d).values,
    "min": lambda x, d: torch.cummin(x, d).values,
    "argmax": lambda x, d: torch.cummax(x, d).indices,
    "argmin": lambda x, d: torch.cummin(x, d).indices,
}
"""Eager's scan for each kind of `graph.scan` (sum and prod keep the operand's dtype)."""


def _prepare_scan(op: Operation) -> Prepared:
    assert isinstance(op, graph.ScanOp)
    scan, axis = _SCANS[op.combines], op.axis
    return lambda xs: scan(xs[0], axis)


OWN_PREPARERS["graph.scan"] = _prepare_scan
OWN_IMPLS["graph.scan"] = _impl_of(_prepare_scan)


def op_impls(ops: Iterable[type[Operation]]) -> dict[str, Impl]:
    """The interpreter's rows for `ops`: their own implementation or their `torch` fact's."""
    impls: dict[str, Impl] = {}
    for op in ops:
        impl = OWN_IMPLS.get(op.name) or _family_impl(op)
        if impl is not None:
            impls[op.name] = impl
    return impls


# One entry per graph op: (op, operand tensors) -> result tensor(s).
OP_IMPLS: dict[str, Impl] = op_impls(graph.Graph.operations)

PREPARERS: dict[str, Preparer] = {
    **{op.name: p for op in graph.Graph.operations if (p := _family_preparer(op)) is not None},
    **OWN_PREPARERS,
}
"""The ops whose attributes `prepare_op` reads once (the others read them per call)."""


def run_op(op: Operation, args: list[Tensor]) -> list[Tensor]:
    """Run one graph op (or a fusion.group) on tensors; returns its results."""
    if isinstance(op, fusion.GroupOp):
        return run_block(op.block, args)
    impl = OP_IMPLS.get(op.name)
    if impl is None:
        raise InterpretError(f"the interpreter does not know op '{op.name}'")
    return _results(op, impl(op, args))


def _results(op: Operation, out: Tensor | tuple[Tensor, ...]) -> list[Tensor]:
    """An implementation's result(s) as the op's result list, checked against its IR."""
    return _counted(op.name, len(op.results), out)


def _counted(name: str, n_results: int, out: Tensor | tuple[Tensor, ...]) -> list[Tensor]:
    """`_results` of an op named `name` with `n_results` results, read from its IR before."""
    results = list(out) if isinstance(out, tuple) else [out]
    if len(results) != n_results:
        raise InterpretError(
            f"'{name}' produced {len(results)} results, its IR declares {n_results}"
        )
    return results


PreparedOp = Callable[[list[Tensor]], list[Tensor]]
"""`run_op` of one op, with the op's attributes read once: operand tensors -> result tensors."""


def prepare_op(op: Operation) -> PreparedOp:
    """`run_op(op, ...)` as a function of the operands alone, for running an op many times: a
    torch call's arguments are decoded and its operator resolved here, a block is planned.
    What cannot be prepared (an unknown op or operator) runs through `run_op`, which raises
    its error when called, as it always did."""
    try:
        if isinstance(op, fusion.GroupOp):
            return prepare_block(op.block)
        if isinstance(op, graph.TorchCallOp):
            return _prepare_torch_call(op)
    except XfuseError:
        return lambda xs: run_op(op, xs)
    impl = OP_IMPLS.get(op.name)
    if impl is None:
        return lambda xs: run_op(op, xs)
    if len(op.results) != 1:
        return lambda xs: _results(op, impl(op, xs))
    preparer = PREPARERS.get(op.name)
    if preparer is not None:
        prepared = preparer(op)
        return lambda xs: [prepared(xs)]

    def run_one(xs: list[Tensor]) -> list[Tensor]:
        out = impl(op, xs)
        return [out] if isinstance(out, Tensor) else _results(op, out)

    return run_one


DirectCall = tuple[Callable[..., Any], list[Any], dict[str, Any]]
"""One torch call of an op's operands: the function, its positional arguments (an `Operand`
where an operand goes) and its keyword arguments."""


def direct_call(op: Operation) -> DirectCall | None:
    """The op as one torch call that returns its tensor results, for a caller that writes
    the call out itself (the runner: `s7 = ext7(s5, c3, a7_2, ...)`): a `graph.torch_call`
    whose operands are whole positional arguments and whose operator returns one tensor, or
    a tuple of as many tensors as the op has results (`native_dropout`: `s7, s8 = ext7(...)`),
    each as it is (no `picks`, no `orders`; not `zeros_base`'s), a product of two matrices (`torch.mm`: what `torch.matmul` calls for
    them, without its dispatch on ranks, about half a microsecond less a call on the CPU) or of
    two batches of as many matrices (`torch.bmm`, which `torch.matmul` calls for them after an
    `expand`, a `reshape` and before an `_unsafe_view` that change nothing), or a `graph.linear`.
    None for any other op (`prepare_op` runs it; `_prepare_direct` prepares these too)."""
    if isinstance(op, graph.MatmulOp):
        lhs, rhs = graph.shape_of(op.lhs), graph.shape_of(op.rhs)
        if len(lhs) == len(rhs) == 2:
            return torch.mm, [Operand(0), Operand(1)], {}
        if len(lhs) == len(rhs) == 3 and lhs[0] == rhs[0] >= 0:  # a static batch, as many
            return torch.bmm, [Operand(0), Operand(1)], {}
        return None
    if isinstance(op, graph.LinearOp):
        bias = [Operand(2)] if len(op.operands) > 2 else [None]
        return torch.nn.functional.linear, [Operand(0), Operand(1), *bias], {}
    if not isinstance(op, graph.TorchCallOp) or op.orders is not None or op.picks is not None:
        return None
    if zeros_base(op):
        return None
    try:
        schema = getattr(resolve_torch_op(op.target.data), "_schema", None)
        found = direct_arguments(op.args, op.kwargs)
        fn = direct_torch_op(op.target.data)
    except XfuseError:
        return None
    returns = [] if schema is None else schema.returns
    if found is None or len(returns) != len(op.results) or not returns:
        return None
    if any(str(r.type) != "Tensor" for r in returns):
        return None
    return fn, *found


IN_PLACE_ON_ZEROS: dict[str, str] = {
    "aten.index_put.default": "aten.index_put_.default",
    "aten.index_add.default": "aten.index_add_.default",
    "aten.scatter_add.default": "aten.scatter_add_.default",
}
"""Torch calls whose result is a copy of their first operand with the others written into it
-> the operator that writes into the first operand itself."""


def zeros_base(op: graph.TorchCallOp) -> bool:
    """Whether the call is one of `IN_PLACE_ON_ZEROS` on a constant of zeros (+0.0, every byte
    zero) as its `self`: then it runs as the in-place operator on fresh zeros (what eager's
    backward of `x[i]` does: zeros, then `index_put_`), not as a copy of the constant
    that the functional operator writes into (the same values, without reading the constant)."""
    args = op.args.data
    if op.target.data not in IN_PLACE_ON_ZEROS or op.orders is not None or op.picks is not None:
        return False
    if not args or tensor_ref(args[0]) != 0 or len(op.results) != 1:
        return False
    base = op.operands[0].owner
    if not isinstance(base, graph.ConstantOp) or not is_splat(base.value):
        return False
    return not any(element_bytes(base.value))


def _prepare_on_zeros(op: graph.TorchCallOp) -> PreparedOp:
    """`zeros_base`'s call: the in-place operator on zeros like the constant (its sizes, dtype
    and device, contiguous), which is the result."""
    fn = direct_torch_op(IN_PLACE_ON_ZEROS[op.target.data])
    fill = prepare_args(op.args, op.kwargs)

    def call(xs: list[Tensor]) -> list[Tensor]:
        zeros = torch.zeros_like(xs[0], memory_format=torch.contiguous_format)
        args, kwargs = fill([zeros, *xs[1:]])
        fn(*args, **kwargs)
        return [zeros]

    return call


ALIGNED_BIAS: dict[str, tuple[int, str]] = {
    "aten._scaled_dot_product_efficient_attention.default": (3, "attn_bias"),
    "aten._scaled_dot_product_efficient_attention_backward.default": (4, "attn_bias"),
    "aten._efficient_attention_forward.default": (3, "bias"),
    "aten._efficient_attention_backward.default": (4, "bias"),
}
"""Memory-efficient attention's ops -> the position and name of their bias, whose kernel reads
it at strides of whole 16-byte vectors (`BIAS_ALIGNMENT` elements covers every dtype)."""

BIAS_ALIGNMENT = 16
"""The elements eager's attention pads a mask's rows to (`pad_bias` in torch's SDPA)."""


def aligned_bias(t: Any) -> Any:
    """An attention bias `t` as it is where its rows are contiguous and every other stride a
    multiple of `BIAS_ALIGNMENT`, else its values in zeros whose rows are padded to one (what
    eager's attention does with its mask): a program's mask is contiguous at its sizes (a
    kernel's output), where eager's trace kept a padded view."""
    if not isinstance(t, Tensor) or t.dim() < 2:
        return t
    strides = t.stride()
    if strides[-1] == 1 and all(s % BIAS_ALIGNMENT == 0 for s in strides[:-1]):
        return t
    n = t.shape[-1]
    padded = t.new_zeros((*t.shape[:-1], n + (-n) % BIAS_ALIGNMENT))[..., :n]
    padded.copy_(t)
    return padded


def _with_aligned_bias(
    args: list[Any], kwargs: dict[str, Any], position: int, name: str
) -> tuple[list[Any], dict[str, Any]]:
    """A call's arguments with its bias (at `position`, or keyword `name`) `aligned_bias`."""
    if len(args) > position:
        args = [*args[:position], aligned_bias(args[position]), *args[position + 1 :]]
    elif name in kwargs:
        kwargs = {**kwargs, name: aligned_bias(kwargs[name])}
    return args, kwargs


def _prepare_torch_call(op: graph.TorchCallOp) -> PreparedOp:
    """The torch call with everything it reads of the op (operator, arguments, picks, orders,
    result count) read here: a call runs no IR (a `zeros_base` call: `_prepare_on_zeros`); a
    memory-efficient attention's bias aligned (`ALIGNED_BIAS`)."""
    if zeros_base(op):
        return _prepare_on_zeros(op)
    fn = direct_torch_op(op.target.data)
    fill = prepare_args(op.args, op.kwargs)
    bias = ALIGNED_BIAS.get(op.target.data)
    if bias is not None:
        plain = fill

        def aligned(xs: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
            args, kwargs = plain(xs)
            return _with_aligned_bias(list(args), kwargs, *bias)

        fill = aligned

    pick = results_picker(op)
    name, n_results = op.name, len(op.results)
    # A permuted result (`orders`) goes through `pick`.
    one_as_it_is = n_results == 1 and op.orders is None

    def call(xs: list[Tensor]) -> list[Tensor]:
        args, kwargs = fill(xs)
        out = fn(*args, **kwargs)
        if one_as_it_is and isinstance(out, Tensor):
            return [out]
        return _counted(name, n_results, pick(out))

    return call


def prepare_block(block: Block) -> PreparedOp:
    """`run_block(block, ...)` with its ops prepared and its values in numbered slots.
    (Constants are made anew by every run, as `run_block` makes them: results may alias
    them, and a caller may write its results.)"""
    slot: dict[SSAValue, int] = {v: i for i, v in enumerate(block.args)}
    plan: list[tuple[PreparedOp, tuple[int, ...], tuple[int, ...]]] = []
    returned: tuple[int, ...] | None = None
    for op in block.ops:
        ins = tuple(slot[v] for v in op.operands)
        if isinstance(op, func.ReturnOp | fusion.YieldOp):
            returned = ins
            break
        outs = tuple(slot.setdefault(r, len(slot)) for r in op.results)
        plan.append((prepare_op(op), ins, outs))
    if returned is None:
        raise InterpretError("block has no terminator")
    n_slots, n_args, ret = len(slot), len(block.args), returned

    def run(args: list[Tensor]) -> list[Tensor]:
        if len(args) != n_args:
            raise InterpretError(f"the block takes {n_args} arguments, got {len(args)}")
        env: list[Any] = [*args, *([None] * (n_slots - n_args))]
        for call, ins, outs in plan:
            for s, t in zip(outs, call([env[i] for i in ins]), strict=True):
                env[s] = t
        return [env[i] for i in ret]

    return run


def run_block(block: Block, args: Sequence[Tensor]) -> list[Tensor]:
    """Run a block whose terminator (func.return or fusion.yield) returns its results."""
    env: dict[SSAValue, Tensor] = dict(zip(block.args, args, strict=True))
    for op in block.ops:
        operands = [env[v] for v in op.operands]
        if isinstance(op, func.ReturnOp | fusion.YieldOp):
            return operands
        for r, t in zip(op.results, run_op(op, operands), strict=True):
            env[r] = t
    raise InterpretError("block has no terminator")


def find_function(module: ModuleOp | func.FuncOp, name: str | None = None) -> func.FuncOp:
    if isinstance(module, func.FuncOp):
        return module
    funcs = [op for op in module.ops if isinstance(op, func.FuncOp) and op.body.blocks]
    if name is not None:
        funcs = [f for f in funcs if f.sym_name.data == name]
    if not funcs:
        raise InterpretError(f"no function {'@' + name if name else ''} to run in the module")
    return funcs[0]


def interpret(
    program: ModuleOp | func.FuncOp,
    inputs: Sequence[Tensor],
    *,
    function: str | None = None,
) -> list[Tensor]:
    """Run a function of `graph` ops on `inputs` (one per function argument, in order)."""
    f = find_function(program, function)
    block = f.body.block
    if len(inputs) != len(block.args):
        raise InterpretError(
            f"@{f.sym_name.data} takes {len(block.args)} arguments, got {len(inputs)}"
        )
    sizes = bind_sizes(f, inputs)
    for i, (arg, t) in enumerate(zip(block.args, inputs, strict=True)):
        want = graph.tensor_type(arg.type)
        shape = tuple(want.get_shape()) if sizes is None else _sized(arg, sizes)
        if tuple(t.shape) != shape or t.dtype != dtypes.to_torch(want.element_type):
            raise InterpretError(
                f"argument {i} of @{f.sym_name.data} expects {want}, got a tensor of shape "
                f"{list(t.shape)} and dtype {t.dtype}"
            )
    if sizes is None:
        return run_block(block, inputs)
    token = SIZES.set(sizes)
    try:
        return run_block(block, inputs)
    finally:
        SIZES.reset(token)


def _sized(value: SSAValue, sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(d if isinstance(d, int) else sizes.get(d, -1) for d in graph.dims_of(value))


def bind_arguments(
    f: func.FuncOp, inputs: Sequence[_T], params: Mapping[str, Tensor]
) -> list[_T | Tensor]:
    """Arguments in order: user inputs positionally, parameters and buffers by their names
    (the `graph.param` argument attribute the importer sets). The inputs may stand for
    tensors (the importer's binder plans with input positions)."""
    out: list[_T | Tensor] = []
    user = iter(inputs)
    arg_attrs = f.arg_attrs.data if f.arg_attrs is not None else [None] * len(f.body.block.args)
    for i, attrs in enumerate(arg_attrs):
        name = attrs.data.get("graph.param") if attrs is not None else None
        if name is not None:
            key = cast(StringAttr, name).data  # the importer sets graph.param as a string
            if key not in params:
                raise InterpretError(f"no value for parameter '{key}' (argument {i})")
            out.append(params[key])
        else:
            try:
                out.append(next(user))
            except StopIteration:
                raise InterpretError("too few inputs for the function's arguments") from None
    if next(user, None) is not None:
        raise InterpretError("too many inputs for the function's arguments")
    return out
