"""
Eager's strides where torch's trace has others. A fresh output is returned with the strides of
its traced value (`outputs.OutputRule.stride`), and some of torch's meta functions lay a result
out otherwise than eager's kernel does: `copysign` is computed by its reference as a `where`
of the second operand's sign bit, so its traced result takes the second operand's layout,
where eager's elementwise kernel takes the first's (TensorIterator, a transposed second
operand: eager `(8, 1, 8)`, traced `(1, 8, 64)`). Every op after it in the trace inherits the
difference.

`eager_strides(graph)` finds the nodes whose eager strides differ from their traced ones: an op
of `MISLAID_ELEMENTWISE` gets TensorIterator's layout of its operands
(`torch._prims_common.compute_elementwise_output_strides`, which follows it), one of
`MISLAID_CONTIGUOUS` row-major strides, one of `MISLAID_FORMATTED` (on the CPU) the memory
format its kernel picks from its input (batch norm's result is row-major or channels-last where
the trace keeps a permuted input's layout), and an op that reads a node found so is run again
on meta tensors of the corrected strides. Static shapes only: a symbolic program takes its
outputs' layouts from eager's run (`xfuse.runtime.dynamic`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch._prims_common import compute_elementwise_output_strides, suggest_memory_format

from xfuse.dialects.graph.layout import row_major_strides

_aten = torch.ops.aten

MISLAID_ELEMENTWISE = frozenset(
    {
        _aten.copysign.Tensor,
        _aten.div.Tensor_mode,
        _aten.floor_divide.default,
        _aten.heaviside.default,
        _aten.logaddexp.default,
        _aten.logaddexp2.default,
        _aten.logical_and.default,
        _aten.logical_or.default,
        _aten.logical_xor.default,
        _aten.special_xlog1py.default,
        _aten.xlogy.Tensor,
    }
)
"""Elementwise ops (TensorIterator kernels in eager) whose meta function lays its result out
otherwise: eager's layout follows the operands in order, the trace's another rule (found by
running each aten op on transposed, broadcast and mixed-dtype operands in eager and in a
fake mode; `tests/frontend/test_meta_strides.py` checks every one). `div.Tensor_mode` is
`floor_divide` after torch.export's decompositions (its floor mode is the mislaid one)."""

MISLAID_CONTIGUOUS = frozenset(
    {
        _aten.isin.Tensor_Tensor,
        _aten.isin.Tensor_Scalar,
        _aten.normal.Tensor_Tensor,
    }
)
"""Ops whose eager kernel returns a contiguous result where the trace keeps an operand's
layout."""


def dense_or_channels_last(x: torch.Tensor) -> torch.memory_format:
    """The memory format eager's batch norm kernels lay their result out in: row-major for a
    row-major input, channels-last for one dense in that order (size-1 dims in any place),
    else the format the input's strides are like (`suggest_memory_format`)."""
    if x.is_contiguous():
        return torch.contiguous_format
    for rank, fmt in ((4, torch.channels_last), (5, torch.channels_last_3d)):
        if x.dim() == rank and x.is_contiguous(memory_format=fmt):
            return fmt
    return suggest_memory_format(x)


def _one_dim_roll(node: torch.fx.Node) -> bool:
    dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dims", ())
    return isinstance(dims, (list, tuple)) and len(dims) == 1 or isinstance(dims, int)


Format = Callable[[torch.Tensor], torch.memory_format]


def _row_major(_: torch.Tensor) -> torch.memory_format:
    return torch.contiguous_format


_BATCH_NORMS = (
    _aten.batch_norm.default,
    _aten._native_batch_norm_legit_no_training.default,
    _aten._native_batch_norm_legit.default,
    _aten._native_batch_norm_legit.no_stats,
    _aten._native_batch_norm_legit_functional.default,
    _aten.native_batch_norm.default,
)
MISLAID_FORMATTED: dict[Any, tuple[Callable[[torch.fx.Node], bool], Format]] = {
    **{op: (lambda _: True, dense_or_channels_last) for op in _BATCH_NORMS},
    _aten.roll.default: (_one_dim_roll, suggest_memory_format),
    _aten.upsample_nearest1d.vec: (lambda _: True, _row_major),
    _aten.upsample_nearest1d.default: (lambda _: True, _row_major),
    _aten.max_pool1d.default: (lambda node: not node.meta["val"].requires_grad, _row_major),
}
"""Ops whose CPU kernel lays its (first) result out in a memory format it picks from its first
input, where the trace keeps the input's layout or another: each with when the rule holds
(of the node) and the format (of the input, at its eager strides). On another device the op
is probed (`_probed`): CUDA's kernels pick otherwise. (A roll of more dims
than one, or flat, is traced with eager's strides.) `max_pool1d` without grad is the CPU's own kernel;
with grad it is `max_pool2d`'s, as traced. Probed over every permutation of 3- and 4-d inputs
with size-1 dims."""

PROBED = frozenset({_aten.index.Tensor})
"""Ops whose eager layout no rule here follows (advanced indexing: TensorIterator orders the
result's dims by the source's strides and the indices', ties at size-1 dims broken otherwise
than torch's meta function): the real op runs once on uninitialised operands of the node's
shapes, strides and device (indices 0), and its result's strides are eager's."""

PROBED_OFF_CPU = frozenset(
    {
        _aten.upsample_nearest2d.vec,
        _aten.upsample_nearest2d.default,
        _aten._upsample_nearest_exact2d.vec,
        _aten.upsample_bilinear2d.vec,
        _aten.upsample_bilinear2d.default,
        _aten.upsample_bicubic2d.vec,
        _aten.upsample_nearest3d.vec,
        _aten.upsample_trilinear3d.vec,
    }
)
"""Ops probed (as `PROBED`) off the CPU only: torch's meta functions of the 2-d and 3-d
interpolations lay a CUDA result out row-major where CUDA's kernels keep a channels-last
input's layout (the CPU's trace is eager's)."""

Strides = dict[torch.fx.Node, tuple[int, ...]]


def eager_strides(graph: torch.fx.Graph) -> Strides:
    """Each node whose eager strides differ from its traced value's, and those strides."""
    found: Strides = {}
    for node in graph.nodes:
        if node.op != "call_function" or not _static(node.meta.get("val")):
            continue
        if node.target in MISLAID_ELEMENTWISE:
            strides = _elementwise(node, found)
        elif node.target in MISLAID_CONTIGUOUS:
            strides = row_major_strides(tuple(node.meta["val"].shape))
        elif (formatted := _formatted(node)) is not None:
            op, fmt = formatted
            strides = _probed(op, found) if fmt is None else _in_format(node, op, fmt, found)
        elif node.target in PROBED or (
            node.target in PROBED_OFF_CPU and node.meta["val"].device.type != "cpu"
        ):
            strides = _probed(node, found)
        elif any(arg in found for arg in node.all_input_nodes):
            strides = _rerun(node, found)
        else:
            continue
        if strides is not None and strides != tuple(node.meta["val"].stride()):
            found[node] = strides
    return found


def _formatted(node: torch.fx.Node) -> tuple[torch.fx.Node, Format | None] | None:
    """The op node of `MISLAID_FORMATTED` whose (first) result `node` is, with the format its
    CPU kernel picks, or None for the format on another device (its kernels pick otherwise:
    CUDA's training batch norm keeps its input's layout, the op is probed, `_probed`); None
    for any other node or where the CPU's rule does not hold."""
    op = node
    if node.target is operator.getitem:
        source, index = node.args[0], node.args[1]
        if index != 0 or not isinstance(source, torch.fx.Node):
            return None
        op = source
    rule = MISLAID_FORMATTED.get(op.target)
    if rule is None:
        return None
    if node.meta["val"].device.type != "cpu":
        return op, None
    return (op, rule[1]) if rule[0](op) else None


def _in_format(
    node: torch.fx.Node, op: torch.fx.Node, fmt: Format, found: Strides
) -> tuple[int, ...] | None:
    """Row-major or channels-last strides of `node`'s shape, in the format `fmt` picks from
    `op`'s first input at its eager strides."""
    source = op.args[0]
    if not isinstance(source, torch.fx.Node) or not _static(source.meta.get("val")):
        return None
    shape = tuple(node.meta["val"].shape)
    chosen = fmt(_meta(source, found))
    if chosen != torch.contiguous_format and len(shape) != source.meta["val"].dim():
        return None
    return tuple(torch.empty(shape, device="meta").contiguous(memory_format=chosen).stride())


def _probed(node: torch.fx.Node, found: Strides) -> tuple[int, ...] | None:
    """The strides of `node`'s op (of its first result) run on its device on uninitialised
    tensors laid out as its arguments' eager values (integer ones zeros: valid indices), or
    None where an argument is a boolean mask (its result's shape is its values') or the device
    is not here."""

    def real(arg: Any) -> Any:
        if not isinstance(arg, torch.fx.Node):
            return arg
        value = arg.meta.get("val")
        if not isinstance(value, torch.Tensor):
            return value
        if value.dtype == torch.bool or not _static(value):
            raise _NotProbed
        strides = found.get(arg, tuple(value.stride()))
        t = torch.empty_strided(tuple(value.shape), strides, dtype=value.dtype, device=value.device)
        return t if value.dtype.is_floating_point or value.dtype.is_complex else t.zero_()

    value = node.meta["val"]
    device = (value[0] if isinstance(value, (tuple, list)) else value).device
    if device.type == "cuda" and not torch.cuda.is_available():
        return None
    try:
        args = torch.fx.node.map_aggregate(node.args, real)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, real)
        result = node.target(*args, **kwargs)  # type: ignore[operator]
    except (_NotProbed, RuntimeError, IndexError):
        return None
    first = result[0] if isinstance(result, (tuple, list)) else result
    return tuple(first.stride()) if isinstance(first, torch.Tensor) else None


class _NotProbed(Exception):
    """An argument `_probed` cannot stand in for."""


def _static(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and not any(
        isinstance(d, torch.SymInt) for d in (*value.shape, *value.stride())
    )


def _meta(node: torch.fx.Node, found: Strides) -> torch.Tensor:
    """A meta tensor of `node`'s traced value with its eager strides (`found`'s, else the
    trace's)."""
    value = node.meta["val"]
    strides = found.get(node, tuple(value.stride()))
    return torch.empty_strided(tuple(value.shape), strides, dtype=value.dtype, device="meta")


def _elementwise(node: torch.fx.Node, found: Strides) -> tuple[int, ...] | None:
    """TensorIterator's layout of an elementwise op's tensor operands (broadcast to its
    result's shape, where a broadcast dim has stride 0 and decides nothing)."""
    shape = tuple(node.meta["val"].shape)
    operands = [
        _meta(arg, found).expand(shape)
        for arg in node.args
        if isinstance(arg, torch.fx.Node) and _static(arg.meta.get("val"))
    ]
    if not operands:
        return None
    return tuple(compute_elementwise_output_strides(*operands))


def _rerun(node: torch.fx.Node, found: Strides) -> tuple[int, ...] | None:
    """The strides of `node`'s op run on meta tensors with its inputs' eager strides; None
    where it does not run there."""

    def traced(arg: Any) -> Any:
        if isinstance(arg, torch.fx.Node) and isinstance(arg.meta.get("val"), torch.Tensor):
            return _meta(arg, found)
        return arg.meta.get("val") if isinstance(arg, torch.fx.Node) else arg

    try:
        args = torch.fx.node.map_aggregate(node.args, traced)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, traced)
        result = node.target(*args, **kwargs)  # type: ignore[operator]
    except Exception:  # noqa: BLE001 - no meta kernel, or a symbolic operand: the trace's stand
        return None
    return tuple(result.stride()) if isinstance(result, torch.Tensor) else None
