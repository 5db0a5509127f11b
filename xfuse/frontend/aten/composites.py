"""Converters of composite ops kept whole (softmax, layer and RMS norm, GELU; `decompose`
splits them later) and eval-mode batch norm as a formula of elementwise ops."""

from __future__ import annotations

import torch.fx
from xdsl.dialects.builtin import f32, f64
from xdsl.ir import Attribute, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _rank
from xfuse.frontend.builder import (
    ImportBuilder,
    Value,
    node_error,
    out_type,
    result_types,
    used_outputs,
)


def _softmax(op_cls: type[graph.SoftmaxOp] | type[graph.LogSoftmaxOp]) -> Converter:
    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if not graph.is_float(dtype):
            return None
        return lw.emit(op_cls(lw.operand(a["self"], dtype), a["dim"]))

    return convert


def _layer_norm(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    if used_outputs(node) - {0}:
        return None  # native_layer_norm's mean and rstd are read: leave it to torch.
    dtype = result_types(node)[0].element_type
    compute, (w, b) = _norm_parameters(lw, dtype, a["weight"], a["bias"])
    x = lw.operand(a["input"], compute)
    y = lw.emit(graph.LayerNormOp(x, len(a["normalized_shape"]), float(a["eps"]), w, b))
    y = lw.cast(y, dtype)
    if isinstance(node.meta["val"], tuple):
        return [y, None, None]
    return y


def _batch_norm_eval(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """Eval-mode batch norm as (x - mean) * rsqrt(var + eps) * weight + bias, the per-channel
    vectors reshaped to broadcast along dim 1: elementwise ops that fuse with their neighbours.
    `_native_batch_norm_legit_no_training` (three results, the first read), or `batch_norm`
    with `training` False, which eager and torch's decomposition compute as that. A training
    one (batch statistics, running ones updated) is refused: `CONVERTED_WHEN` has the program
    decomposed instead, as ever."""
    if a.get("training"):
        raise node_error(node, "batch_norm in training mode is imported decomposed")
    dtype = result_types(node)[0].element_type
    x = lw.tensor(a["input"])
    if used_outputs(node) - {0} or not graph.is_float(dtype) or _rank(x) < 2:
        return None
    x = lw.cast(x, dtype)
    channel = (graph.shape_of(x)[1],) + (1,) * (_rank(x) - 2)

    def per_channel(name: str) -> SSAValue:
        return lw.reshape(lw.operand(a[name], dtype), channel)

    var_eps = lw.emit(graph.AddOp(per_channel("running_var"), lw.constant(a["eps"], dtype)))
    centred = lw.emit(graph.SubOp(x, per_channel("running_mean")))
    y = lw.emit(graph.MulOp(centred, lw.emit(graph.RsqrtOp(var_eps))))
    if a["weight"] is not None:
        y = lw.emit(graph.MulOp(y, per_channel("weight")))
    if a["bias"] is not None:
        y = lw.emit(graph.AddOp(y, per_channel("bias")))
    return [y, None, None] if isinstance(node.meta.get("val"), list | tuple) else y


def _rms_norm(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    compute, (w,) = _norm_parameters(lw, dtype, a["weight"])
    x = lw.operand(a["input"], compute)
    eps = a["eps"] if a["eps"] is not None else torch.finfo(node.meta["val"].dtype).eps
    y = lw.emit(graph.RMSNormOp(x, len(a["normalized_shape"]), float(eps), w))
    return lw.cast(y, dtype)


def _norm_parameters(
    lw: ImportBuilder, dtype: Attribute, *params: torch.fx.Node | None
) -> tuple[Attribute, list[SSAValue | None]]:
    """The type a norm of a `dtype` input runs in, and its weight / bias tensors in it. A
    parameter of another dtype than the input's (f32 on f16) is used unrounded, as in eager:
    the norm runs in the wider type (f32, f64 if any is), and its result is cast once (fuzz
    seeds 135 and 147: rounding the parameters to f16 first was one ulp off)."""
    values = [lw.tensor(p) if p is not None else None for p in params]
    types = {dtype, *(graph.dtype_of(v) for v in values if v is not None)}
    compute = dtype if len(types) == 1 else f64 if f64 in types else f32
    return compute, [lw.cast(v, compute) if v is not None else None for v in values]


def _gelu(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return lw.emit(graph.GeluOp(lw.tensor(a["self"]), a["approximate"]))


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.SoftmaxOp: _softmax(graph.SoftmaxOp),
    graph.LogSoftmaxOp: _softmax(graph.LogSoftmaxOp),
    graph.LayerNormOp: _layer_norm,
    graph.RMSNormOp: _rms_norm,
    graph.GeluOp: _gelu,
}

FORMULAS: dict[str, Converter] = {
    "aten.batch_norm.default": _batch_norm_eval,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm_eval,
}
"""Eval-mode batch norm (`batch_norm` only where `CONVERTED_WHEN` holds), a formula of
elementwise ops."""
