"""Converters of reductions (sum, mean, max, min, prod, var, any/all, var_mean, vector norms,
argmax/argmin) and scans (cumsum, cumprod, logcumsumexp, cummax, cummin)."""

from __future__ import annotations

import torch.fx
from xdsl.dialects.builtin import i1
from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _is_number, _norm_dims, _rank
from xfuse.frontend.builder import ImportBuilder, Value, out_type, result_types, used_outputs
from xfuse.ir.dtypes import opmath_type

# ---------------------------------------------------------------------------------------------
# Reductions
# ---------------------------------------------------------------------------------------------


def _reduce(op_cls: type[graph.ReduceOp], dim_arg: str | None = "dim") -> Converter:
    """sum/mean/amax/amin/prod/max/min: the input is cast to the result dtype first (int sum
    promotes to i64, `dtype=` is honoured)."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if op_cls.FLOAT_ONLY and not graph.is_float(dtype):
            return None
        x = lw.operand(a["self"], dtype)
        dims = _norm_dims(a.get(dim_arg) if dim_arg else None, _rank(x))
        return lw.emit(op_cls(x, dims, bool(a.get("keepdim", False))))

    return convert


def _correction(a: Args) -> float:
    """var's and var_mean's Bessel correction: `correction` (default 1) or `unbiased`."""
    if "correction" in a:
        return 1 if a["correction"] is None else a["correction"]
    return 1 if a.get("unbiased", True) else 0


def _var(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """var.dim (unbiased), var.correction (correction) and var.default."""
    dtype = out_type(node).element_type
    correction = _correction(a)
    if not graph.is_float(dtype) or float(correction) != int(correction):
        return None
    x = lw.operand(a["self"], dtype)
    dims = _norm_dims(a.get("dim"), _rank(x))
    return lw.emit(graph.VarOp(x, dims, int(correction), bool(a.get("keepdim", False))))


def _any_all(op_cls: type[graph.ReduceMaxOp] | type[graph.ReduceMinOp]) -> Converter:
    """any / all: a bool max / min of the operand as bools. `dim=[]` reduces nothing (any.dims),
    no dim reduces every dim."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        if out_type(node).element_type != i1:
            return None
        x = lw.operand(a["self"], i1)
        if graph.numel(graph.shape_of(x)) == 0:  # OR's / AND's identity: a max/min of nothing
            return lw.constant(op_cls is graph.ReduceMinOp, i1, out_type(node).get_shape())
        dim = a.get("dim")
        dims = [] if isinstance(dim, list | tuple) and not dim else _norm_dims(dim, _rank(x))
        return lw.emit(op_cls(x, dims, bool(a.get("keepdim", False))))

    return convert


def _var_mean(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """var_mean: graph.var and graph.reduce_mean of the same input and dims."""
    dtype = result_types(node)[0].element_type
    correction = _correction(a)
    if not graph.is_float(dtype) or float(correction) != int(correction):
        return None
    x = lw.operand(a["self"], dtype)
    dims, keepdim = _norm_dims(a.get("dim"), _rank(x)), bool(a.get("keepdim", False))
    var = lw.emit(graph.VarOp(x, dims, int(correction), keepdim))
    return [var, lw.emit(graph.ReduceMeanOp(x, dims, keepdim))]


def _vector_norm(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """linalg_vector_norm: max |x| (ord inf), min |x| (-inf), the count of non-zeros (0),
    sum |x| (1), sqrt(sum x^2) (2), else sum(|x|^p)^(1/p); over `dim` (none or []: all),
    computed in f32 for f16/bf16 (after the cast to `dtype=`)."""
    dtype = out_type(node).element_type
    ord_ = a["ord"]
    if not graph.is_float(dtype) or not _is_number(ord_):
        return None
    p = float(ord_)
    compute = opmath_type(dtype)
    x = lw.cast(lw.operand(a["self"], dtype), compute)
    dims, keepdim = _norm_dims(a["dim"], _rank(x)), bool(a["keepdim"])
    magnitude = lw.emit(graph.AbsOp(x))
    if p == float("inf"):
        norm = lw.emit(graph.ReduceMaxOp(magnitude, dims, keepdim))
    elif p == float("-inf"):
        norm = lw.emit(graph.ReduceMinOp(magnitude, dims, keepdim))
    elif p == 0:
        nonzero = lw.cast(lw.emit(graph.NeOp(x, lw.constant(0, compute))), compute)
        norm = lw.emit(graph.ReduceSumOp(nonzero, dims, keepdim))
    elif p == 1:
        norm = lw.emit(graph.ReduceSumOp(magnitude, dims, keepdim))
    elif p == 2:
        squares = lw.emit(graph.MulOp(x, x))
        norm = lw.emit(graph.SqrtOp(lw.emit(graph.ReduceSumOp(squares, dims, keepdim))))
    else:
        powers = lw.emit(graph.PowOp(magnitude, lw.constant(p, compute)))
        total = lw.emit(graph.ReduceSumOp(powers, dims, keepdim))
        norm = lw.emit(graph.PowOp(total, lw.constant(1.0 / p, compute)))
    return lw.cast(norm, dtype)


def _arg_reduce(op_cls: type[graph.ArgReduceOp]) -> Converter:
    """argmax / argmin along `dim`, or of the flattened input (dim=None), reshaped to eager's
    shape."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x = lw.tensor(a["self"])
        if graph.dtype_of(x) == i1 or 0 in graph.shape_of(x):
            return None
        dim, keepdim = a.get("dim"), bool(a.get("keepdim", False))
        if dim is None or _rank(x) == 0:
            x, dim, keepdim = lw.reshape(x, (graph.numel(graph.shape_of(x)),)), 0, False
        return lw.reshape(lw.emit(op_cls(x, dim, keepdim)), out_type(node).get_shape())

    return convert


# ---------------------------------------------------------------------------------------------
# Scans
# ---------------------------------------------------------------------------------------------


def _scan_along(lw: ImportBuilder, x: SSAValue, dim: int, kind: str) -> SSAValue:
    """A graph.scan of `x` along `dim`. Of a 0-d tensor eager's values are the tensor itself
    (a `cumsum` of -0.0 is -0.0, where a one-element row's sum from 0 is +0.0), its indices
    a scan of one element (0)."""
    if _rank(x) == 0:
        if kind not in graph.SCAN_ARG_KINDS:
            return x
        return lw.reshape(lw.emit(graph.ScanOp(lw.reshape(x, (1,)), 0, kind)), ())
    return lw.emit(graph.ScanOp(x, dim, kind))


def _cumulative(kind: str) -> Converter:
    """cumsum / cumprod / logcumsumexp: the operand cast to the result dtype first, as eager
    does (integers and bool give i64, `dtype=` is honoured), then scanned (f16/bf16 in f32)."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if (kind == "logsumexp" and not graph.is_float(dtype)) or dtype == i1:
            return None  # eager raises (logcumsumexp of integers, `dtype=torch.bool`)
        return _scan_along(lw, lw.operand(a["self"], dtype), a["dim"], kind)

    return convert


def _cum_extreme(kind: str) -> Converter:
    """cummax / cummin: a scan of the values and one of the indices, each where it is read
    (the two read one input)."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x = lw.tensor(a["self"])
        used = used_outputs(node) or {0}
        kinds = (kind, f"arg{kind}")
        return [_scan_along(lw, x, a["dim"], k) if i in used else None for i, k in enumerate(kinds)]

    return convert


SCAN_CONVERTERS: dict[str, Converter] = {
    "aten.cumsum.default": _cumulative("sum"),
    "aten.cumprod.default": _cumulative("prod"),
    "aten.logcumsumexp.default": _cumulative("logsumexp"),
    "aten.cummax.default": _cum_extreme("max"),
    "aten.cummin.default": _cum_extreme("min"),
}


def _scan(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """graph.scan's converter: the row of `SCAN_CONVERTERS` for the node."""
    return SCAN_CONVERTERS[str(node.target)](lw, node, a)


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------

OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.VarOp: _var,
    graph.ArgMaxOp: _arg_reduce(graph.ArgMaxOp),
    graph.ArgMinOp: _arg_reduce(graph.ArgMinOp),
    graph.ScanOp: _scan,
}

FORMULAS: dict[str, Converter] = {
    **dict.fromkeys(
        ("aten.any.default", "aten.any.dim", "aten.any.dims"), _any_all(graph.ReduceMaxOp)
    ),
    **dict.fromkeys(
        ("aten.all.default", "aten.all.dim", "aten.all.dims"), _any_all(graph.ReduceMinOp)
    ),
    **dict.fromkeys(("aten.var_mean.correction", "aten.var_mean.dim"), _var_mean),
    "aten.linalg_vector_norm.default": _vector_norm,
}
"""Aten ops that are formulas of reductions."""
