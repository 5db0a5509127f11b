"""Converters of window ops: constant, reflect and replicate padding, and max, average and
adaptive pooling."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, cast

import torch.fx
from xdsl.dialects.builtin import BFloat16Type, Float16Type, IntegerType, TensorType, i1
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects import graph
from xfuse.dialects.graph import PAD_MODES
from xfuse.frontend.aten.common import Args, Converter, _is_number, _rank
from xfuse.frontend.aten.reductions import _reduce
from xfuse.frontend.builder import (
    ImportBuilder,
    Value,
    decided_size,
    out_type,
    result_types,
    used_outputs,
)

# ---------------------------------------------------------------------------------------------
# Padding
# ---------------------------------------------------------------------------------------------


def _pad_value(value: Any, dtype: Attribute) -> float | None:
    """constant_pad_nd's fill as the op's f64 `value`: None where f64 cannot hold it exactly
    (an i64 beyond 2^53) or it is no number (left to torch)."""
    if not _is_number(value):
        return None
    if dtype == i1:
        return float(bool(value))  # torch: any non-zero fill is True
    fill = float(value)
    if graph.is_float(dtype):
        return fill
    width = cast(IntegerType, dtype).width.data
    if fill != fill or int(value) != fill or not -(2 ** (width - 1)) <= fill < 2 ** (width - 1):
        return None
    return fill


def _pads_of(pad: Sequence[int], rank: int) -> tuple[list[int], list[int]] | None:
    """torch's pad list (last dim first, (before, after) pairs) as per-dim low and high."""
    if len(pad) % 2 or len(pad) // 2 > rank:
        return None
    low, high = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):
        low[rank - 1 - i], high[rank - 1 - i] = int(pad[2 * i]), int(pad[2 * i + 1])
    return low, high


def _emit_pad(
    lw: ImportBuilder, node: torch.fx.Node, x: SSAValue, pad: Sequence[Any], mode: str, fill: float
) -> Value:
    t = out_type(node)
    pad = [decided_size(p) for p in pad]
    if not all(isinstance(p, int) for p in pad):
        return _emit_open_pad(lw, t, x, pad, mode, fill)
    pads = _pads_of(pad, _rank(x))
    if pads is None or 0 in t.get_shape()[1:]:
        return None  # (an empty inner dim: lower-to-loops's strides cannot express it)
    if graph.numel(graph.shape_of(x)) == 0 < graph.numel(t.get_shape()):  # all padding
        return lw.constant(fill, t.element_type, t.get_shape()) if mode == "constant" else None
    low, high = pads
    if not any(low) and not any(high):
        return x
    padded = zip(graph.dims_of(x), low, high, strict=True)
    if mode != "constant" and any(isinstance(d, str) and (lo or hi) for d, lo, hi in padded):
        return None  # (a symbolic dim reflected or replicated: torch's call)
    op = graph.PadOp(x, low, high, mode, fill, dims=graph.dims_of(t))
    if all(isinstance(d, int) for d in graph.dims_of(x)):
        try:
            op.verify()
        except VerifyException:
            return None  # out of torch's range (eager raises): left to torch
    return lw.emit(op)  # (symbolic: verified with the table in place, `verify_symbolic`)


def _emit_open_pad(
    lw: ImportBuilder,
    t: TensorType[Attribute],
    x: SSAValue,
    pad: Sequence[Any],
    mode: str,
    fill: float,
) -> Value:
    """Constant padding at the end of dims by sizes of the call (a window's padding up to a
    multiple of its size, `(7 - w % 7) % 7`): each such dim padded up to the result's dim
    (`graph.PadOp`'s `open_high`; `t`, the node's type). A size of the call before a dim, or
    in another mode, is refused (ValueError: the symbolic import's one-line refusal)."""
    rank = _rank(x)
    if len(pad) % 2 or len(pad) // 2 > rank:
        return None
    if mode != "constant":
        raise ValueError(f"a {mode} padding by a size of the call")
    low, high, opened = [0] * rank, [0] * rank, []
    for i in range(len(pad) // 2):
        d, before, after = rank - 1 - i, pad[2 * i], pad[2 * i + 1]
        if not isinstance(before, int):
            raise ValueError(f"a padding before dim {d} by a size of the call")
        low[d] = before
        if isinstance(after, int):
            high[d] = after
        else:
            opened.append(d)
    return lw.emit(graph.PadOp(x, low, high, mode, fill, dims=graph.dims_of(t), open_high=opened))


def _constant_pad(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    fill = _pad_value(a.get("value", 0), graph.dtype_of(x))
    if fill is None:
        return None
    return _emit_pad(lw, node, x, a["pad"], "constant", fill)


def _mode_pad(mode: str) -> Converter:
    """reflection_pad{1,2,3}d / replication_pad{1,2,3}d: `padding` of the trailing dims."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        return _emit_pad(lw, node, lw.tensor(a["self"]), a["padding"], mode, 0.0)

    return convert


def _pad(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`F.pad` as the op eager and torch's decomposition call: `constant_pad_nd` with the fill
    (none: 0.0), or the `PAD_MODES` op of the mode on the same pad list."""
    if a["mode"] == "constant":
        value = 0.0 if a["value"] is None else a["value"]
        return _constant_pad(lw, node, {"self": a["self"], "pad": a["pad"], "value": value})
    if a["mode"] not in PAD_MODES:
        return None  # (decomposed: CONVERTED_WHEN)
    return _mode_pad(a["mode"])(lw, node, {"self": a["self"], "padding": a["pad"]})


# ---------------------------------------------------------------------------------------------
# Pooling
# ---------------------------------------------------------------------------------------------


def _window_arg(value: Any, n: int, default: int | None = None) -> list[int] | None:
    """A pooling argument (an int or a list of 1 or n ints; [] = `default`) as n ints."""
    if isinstance(value, int):
        value = [value]
    values = list(value) if isinstance(value, list | tuple) else []  # pyright: ignore[reportUnknownArgumentType]
    if not values and default is not None:
        return [default] * n
    if len(values) == 1:
        values = values * n
    if len(values) != n or not all(isinstance(v, int) for v in values):
        return None
    return [int(v) for v in values]


def _kernel_stride(a: Args, n: int) -> tuple[list[int] | None, list[int] | None]:
    """kernel_size and stride (an empty stride is the kernel's)."""
    kernel = _window_arg(a["kernel_size"], n)
    stride = _window_arg(a.get("stride", []), n, 0)
    return kernel, kernel if stride == [0] * n else stride


def _emit_pool(
    lw: ImportBuilder,
    node: torch.fx.Node,
    x: SSAValue,
    kind: str,
    window: Sequence[Sequence[int] | None],
    **options: Any,
) -> SSAValue | None:
    """A graph.pool of `window` (kernel, stride, padding, dilation), or None where the op
    would not verify (eager raises) or its result is not the node's."""
    if any(w is None for w in window) or graph.dtype_of(x) == i1:
        return None
    kernel, stride, padding, dilation = (cast(Sequence[int], w) for w in window)
    n = len(kernel)
    types = result_types(node)
    shape = tuple(types[1 if kind == "argmax" else 0].get_shape())
    if _rank(x) not in (n + 1, n + 2) or 0 in shape[1:]:
        return None
    op = graph.PoolOp(x, kind, kernel, stride, padding, dilation, **options)
    try:
        op.verify()
    except VerifyException:
        return None
    if graph.shape_of(op.result) != shape:
        return None
    return lw.emit(op)


def _max_and_argmax(
    lw: ImportBuilder,
    node: torch.fx.Node,
    x: SSAValue,
    window: Sequence[Sequence[int] | None],
    **options: Any,
) -> Value:
    """The values and indices a max pool node's readers use: a graph.pool of kind max and
    one of kind argmax (two ops reading one input: they fuse into one kernel)."""
    used = used_outputs(node) or {0}
    pools = [
        _emit_pool(lw, node, x, kind, window, **options) if i in used else None
        for i, kind in enumerate(("max", "argmax"))
    ]
    if any(pools[i] is None for i in used):
        return None
    return pools if isinstance(node.meta.get("val"), list | tuple) else pools[0]


def _max_pool(n: int) -> Converter:
    """max_pool{2,3}d_with_indices, and max_pool2d (its values only: what eager and torch's
    decomposition compute it as)."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        kernel, stride = _kernel_stride(a, n)
        padding, dilation = (
            _window_arg(a.get("padding", 0), n),
            _window_arg(a.get("dilation", 1), n),
        )
        window = (kernel, stride, padding, dilation)
        x = lw.tensor(a["self"])
        return _max_and_argmax(lw, node, x, window, ceil_mode=bool(a.get("ceil_mode", False)))

    return convert


def _covers_the_plane(
    spatial: Sequence[int],
    sizes: Sequence[int],
    kernel: Sequence[int] | None,
    padding: Sequence[int] | None,
) -> bool:
    """Whether an average pool's one window is the whole input plane: one output per dim, no
    padding, a kernel no shorter than the input (EfficientNet's `AvgPool2d(1280,
    ceil_mode=True)` over 7x7), so that the window clipped to the input is all of it."""
    if kernel is None or padding is None or any(padding):
        return False
    return all(o == 1 for o in sizes) and all(k >= i for k, i in zip(kernel, spatial, strict=True))


def _avg_pool(n: int) -> Converter:
    """avg_pool{2,3}d: `mean` over the trailing dims where its one window is the whole plane
    and the divisor its size (vectorized as a reduction, where a window loop is not), else a
    graph.pool."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x = lw.tensor(a["self"])
        if not graph.is_float(graph.dtype_of(x)):
            return None
        kernel, stride = _kernel_stride(a, n)
        padding = _window_arg(a.get("padding", 0), n)
        window = (kernel, stride, padding, [1] * n)
        divisor = a.get("divisor_override")
        spatial = graph.shape_of(x)[_rank(x) - n :]
        sizes = tuple(result_types(node)[0].get_shape())[-n:]
        if (
            _rank(x) in (n + 1, n + 2)
            and 0 not in spatial
            and _covers_the_plane(spatial, sizes, kernel, padding)
            and divisor in (None, math.prod(spatial))
            and not (n == 3 and _on_cpu(node) and isinstance(graph.dtype_of(x), _HALF))
        ):
            dims = list(range(_rank(x) - n, _rank(x)))
            return lw.emit(graph.ReduceMeanOp(x, dims, True))
        return _emit_pool(
            lw,
            node,
            x,
            "avg",
            window,
            ceil_mode=bool(a.get("ceil_mode", False)),
            count_include_pad=bool(a.get("count_include_pad", True)),
            divisor=int(divisor) if divisor is not None else None,
        )

    return convert


def _on_cpu(node: torch.fx.Node) -> bool:
    """Whether `node`'s (first) result is on the CPU."""
    val = node.meta.get("val")
    val = val[0] if isinstance(val, list | tuple) else val
    return isinstance(val, torch.Tensor) and val.device.type == "cpu"


def _adaptive_pool(kind: str, n: int) -> Converter:
    """_adaptive_avg_pool / adaptive_max_pool: a reduction for a whole plane, a pool of
    kernel = stride = input / output size where that divides evenly, else an adaptive pool
    (windows of varying size)."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x = lw.tensor(a["self"])
        if kind == "avg" and not graph.is_float(graph.dtype_of(x)):
            return None
        spatial = graph.shape_of(x)[_rank(x) - n :]
        sizes = tuple(result_types(node)[0].get_shape())[-n:]  # (None in output_size: kept)
        if _rank(x) not in (n + 1, n + 2) or 0 in spatial or 0 in sizes:
            return None
        uneven = any(i % o for i, o in zip(spatial, sizes, strict=True))
        kernel = [i // o for i, o in zip(spatial, sizes, strict=True)]
        options = {"adaptive": sizes} if uneven else {}
        if kind == "avg" and n == 3 and _on_cpu(node) and isinstance(graph.dtype_of(x), _HALF):
            return None  # eager's CPU kernel sums f16/bf16 in their own precision
        window = (kernel, kernel, [0] * n, [1] * n)
        whole = all(o == 1 for o in sizes) and graph.dtype_of(x) != i1
        dims = list(range(_rank(x) - n, _rank(x)))
        if kind == "avg":
            return (
                lw.emit(graph.ReduceMeanOp(x, dims, True))
                if whole
                else _emit_pool(lw, node, x, kind, window, **options)
            )
        if whole and used_outputs(node) <= {0}:
            return [lw.emit(graph.ReduceMaxOp(x, dims, keepdim=True)), None]
        return _max_and_argmax(lw, node, x, window, **options)

    return convert


def _adaptive_avg_pool2d(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`adaptive_avg_pool2d` as eager and torch's decomposition compute it: a 1x1 output is
    `mean` over the last two dims, any other `_adaptive_avg_pool2d`."""
    if list(a["output_size"]) == [1, 1]:
        mean = {"self": a["self"], "dim": [-1, -2], "keepdim": True, "dtype": None}
        return _reduce(graph.ReduceMeanOp)(lw, node, mean)
    return _adaptive_pool("avg", 2)(lw, node, a)


_HALF = (Float16Type, BFloat16Type)


POOL_CONVERTERS: dict[str, Converter] = {
    "aten.constant_pad_nd.default": _constant_pad,
    **{f"aten.reflection_pad{n}d.default": _mode_pad("reflect") for n in (1, 2, 3)},
    **{f"aten.replication_pad{n}d.default": _mode_pad("replicate") for n in (1, 2, 3)},
    **{f"aten.max_pool{n}d_with_indices.default": _max_pool(n) for n in (2, 3)},
    **{f"aten.avg_pool{n}d.default": _avg_pool(n) for n in (2, 3)},
    **{f"aten._adaptive_avg_pool{n}d.default": _adaptive_pool("avg", n) for n in (2, 3)},
    **{f"aten.adaptive_max_pool{n}d.default": _adaptive_pool("max", n) for n in (2, 3)},
}


def _pool_converter(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """graph.pad's and graph.pool's converter: the row of `POOL_CONVERTERS` for the node."""
    return POOL_CONVERTERS[str(node.target)](lw, node, a)


# Composite aten ops kept whole (their core decompositions index with computed tensors).
POOL_KEPT_COMPOSITES: tuple[str, ...] = tuple(
    f"aten.{mode}_pad{n}d.default" for mode in ("reflection", "replication") for n in (1, 2, 3)
)


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.PadOp: _pool_converter,
    graph.PoolOp: _pool_converter,
}

FORMULAS: dict[str, Converter] = {
    "aten.pad.default": _pad,
    "aten.max_pool2d.default": _max_pool(2),
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
}
"""Composite aten ops that torch.export gives whole, as pads and pools (`pad` only where
`CONVERTED_WHEN` holds)."""
