"""
The aten → graph conversions, as a table from `str(OpOverload)` to a converter.

A converter gets the lowering state, the FX node and its arguments bound by schema name; it
emits graph ops and returns the node's value(s), or None to leave the node to `graph.torch_call`.
Each converter produces exactly the type in `node.meta["val"]`: torch's dtype promotion is read
from there and operands are cast to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import torch.fx
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    IntegerType,
    TensorType,
    f32,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects import graph
from xfuse.frontend.attention import ATTENTION_CONVERTERS, SDPA
from xfuse.frontend.builder import (
    ImportBuilder,
    Value,
    bind,
    meta_tensor,
    node_error,
    out_type,
    promoted_dtype,
    result_types,
    used_outputs,
)
from xfuse.frontend.convolution import CONVOLUTION
from xfuse.ir.dtypes import opmath_type, to_torch

Args = dict[str, Any]
Converter = Callable[[ImportBuilder, torch.fx.Node, Args], Value]

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def _rank(value: SSAValue) -> int:
    return len(graph.shape_of(value))


def _norm_dims(dim: Any, rank: int) -> list[int]:
    """A torch `dim` argument (None, int or list; [] or None = all) as sorted dims >= 0."""
    if rank == 0:
        return []
    if dim is None or (isinstance(dim, list | tuple) and not dim):
        return list(range(rank))
    dims = [dim] if isinstance(dim, int) else list(dim)  # pyright: ignore[reportUnknownArgumentType]
    return sorted({d % rank for d in dims})


def _is_number(x: Any) -> bool:
    return isinstance(x, bool | int | float)


# ---------------------------------------------------------------------------------------------
# Elementwise
# ---------------------------------------------------------------------------------------------


def _unary(op_cls: type[graph.UnaryOp]) -> Converter:
    """A unary op on the operand cast to the result dtype (a test, whose result is bool, on
    the operand as it is). Bool operands stay eager."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if issubclass(op_cls, graph.UnaryPredicateOp):
            dtype = graph.dtype_of(lw.tensor(a["self"]))
            dtype = i64 if dtype == i1 else dtype  # isnan/isinf/signbit of a bool: as an int
        if (op_cls.FLOAT_ONLY and not graph.is_float(dtype)) or dtype == i1:
            return None
        return lw.emit(op_cls(lw.operand(a["self"], dtype)))

    return convert


def _binary(op_cls: type[graph.BinaryOp]) -> Converter:
    """add/sub/mul/div/pow/maximum/minimum: operands cast to the result dtype; `alpha` scales
    rhs. The rhs is `other`, or `exponent` in pow's schemas."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        other = "other" if "other" in a else "exponent"
        if op_cls.FLOAT_ONLY and not graph.is_float(dtype):
            return None
        compute = _opmath(lw, op_cls, dtype, a["self"], a[other])
        lhs, rhs = lw.operand(a["self"], compute), lw.operand(a[other], compute)
        alpha = a.get("alpha")
        if alpha is not None and alpha != 1:
            rhs = lw.emit(graph.MulOp(rhs, lw.constant(alpha, compute)))
        return lw.cast(lw.emit(op_cls(lhs, rhs)), dtype)

    return convert


def _opmath(
    lw: ImportBuilder, op_cls: type[graph.BinaryOp], dtype: Attribute, *operands: Any
) -> Attribute:
    """The dtype to compute an f16/bf16 binary op in. Eager's mul and div keep a Python float
    or a wider (f32/f64) 0-d tensor operand unrounded: they compute in f32 and round once;
    its add and sub round that operand to the op's dtype first. xfuse does the same."""
    if not isinstance(dtype, Float16Type | BFloat16Type) or op_cls not in (
        graph.MulOp,
        graph.DivOp,
    ):
        return dtype
    for x in operands:
        if isinstance(x, float) and float(torch.tensor(x, dtype=to_torch(dtype))) != x:
            return f32  # (a float the dtype holds exactly gives the same result either way)
        if isinstance(x, torch.fx.Node) and graph.dtype_of(lw.tensor(x)) in (f32, f64):
            return f32
    return dtype


def _rsub(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """other - alpha * self."""
    dtype = out_type(node).element_type
    lhs, rhs = lw.operand(a["other"], dtype), lw.operand(a["self"], dtype)
    if a.get("alpha", 1) != 1:
        rhs = lw.emit(graph.MulOp(rhs, lw.constant(a["alpha"], dtype)))
    return lw.emit(graph.SubOp(lhs, rhs))


def _div_mode(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """div with rounding_mode: graph.div truncates integers, so only integer trunc maps, and
    only by a number other than 0 and -1: a kernel's integer division by zero (or of the
    smallest integer by -1) traps and kills the process, where eager raises (a torch_call)."""
    dtype = out_type(node).element_type
    mode = a.get("rounding_mode")
    if mode is None:
        return _binary(graph.DivOp)(lw, node, a)
    if mode == "floor" or graph.is_float(dtype):
        return _rounded_division(lw, node, a)
    if mode == "trunc" and _int_division_is_safe(a["other"]):
        return lw.emit(graph.DivOp(lw.operand(a["self"], dtype), lw.operand(a["other"], dtype)))
    return None


def _pow_scalar(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """pow.Scalar: number ** tensor."""
    dtype = out_type(node).element_type
    if not graph.is_float(dtype):
        return None
    return lw.emit(graph.PowOp(lw.operand(a["self"], dtype), lw.operand(a["exponent"], dtype)))


def _comparison(op_cls: type[graph.ComparisonOp]) -> Converter:
    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = promoted_dtype(a["self"], a["other"])
        return lw.emit(op_cls(lw.operand(a["self"], dtype), lw.operand(a["other"], dtype)))

    return convert


def _where(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    cond = lw.operand(a["condition"], i1)
    return lw.emit(graph.WhereOp(cond, lw.operand(a["self"], dtype), lw.operand(a["other"], dtype)))


def _clamp(low: str | None, high: str | None) -> Converter:
    """clamp/clamp_min/clamp_max/hardtanh as maximum with the low bound, minimum with the high."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        y = lw.operand(a["self"], dtype)
        if low is not None and a.get(low) is not None:
            y = lw.emit(graph.MaximumOp(y, lw.operand(a[low], dtype)))
        if high is not None and a.get(high) is not None:
            y = lw.emit(graph.MinimumOp(y, lw.operand(a[high], dtype)))
        return y

    return convert


def _leaky_relu(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    x = lw.operand(a["self"], dtype)
    positive = lw.emit(graph.GtOp(x, lw.constant(0, dtype)))
    scaled = lw.emit(graph.MulOp(x, lw.constant(a["negative_slope"], dtype)))
    return lw.emit(graph.WhereOp(positive, x, scaled))


def _scaled(lw: ImportBuilder, x: SSAValue, factor: float) -> SSAValue:
    if factor == 1:
        return x
    return lw.emit(graph.MulOp(x, lw.constant(factor, graph.dtype_of(x))))


def _elu(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """elu (and selu, celu): x > 0 ? x * scale : expm1(x * input_scale) * alpha * scale,
    computed in f32 for f16/bf16 as eager's kernel does."""
    dtype = out_type(node).element_type
    if not graph.is_float(dtype):
        return None
    alpha, scale, input_scale = (float(a.get(k, 1)) for k in ("alpha", "scale", "input_scale"))
    compute = opmath_type(dtype)
    x = lw.operand(a["self"], compute)
    negative = lw.emit(graph.Expm1Op(_scaled(lw, x, input_scale)))
    negative = _scaled(lw, negative, alpha * scale)
    positive = lw.emit(graph.GtOp(x, lw.constant(0, compute)))
    return lw.cast(lw.emit(graph.WhereOp(positive, _scaled(lw, x, scale), negative)), dtype)


def _round_decimals(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """round(x * 10^d) / 10^d, or round(x / 10^-d) * 10^-d for d < 0, as eager's kernel for
    the device computes it: in f32 for f16/bf16 on the CPU, but in the input's own type on
    CUDA (where 1e4 * 100 overflows f16 to inf: eager's CUDA kernel gives inf too)."""
    dtype = out_type(node).element_type
    if not graph.is_float(dtype):
        return None
    decimals = int(a.get("decimals", 0))
    val = node.meta.get("val")
    on_cuda = isinstance(val, torch.Tensor) and val.device.type == "cuda"
    compute = dtype if on_cuda else opmath_type(dtype)
    x = lw.operand(a["self"], compute)
    if decimals == 0:
        return lw.cast(lw.emit(graph.RoundOp(x)), dtype)
    power = lw.constant(10.0 ** abs(decimals), compute)
    scale, unscale = (graph.MulOp, graph.DivOp) if decimals > 0 else (graph.DivOp, graph.MulOp)
    rounded = lw.emit(graph.RoundOp(lw.emit(scale(x, power))))
    return lw.cast(lw.emit(unscale(rounded, power)), dtype)


def _cast(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return lw.cast(lw.tensor(a["self"]), out_type(node).element_type)


def _to_device(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`Tensor.to(device, dtype)` onto the device the tensor is on (Llama's rotary tables): a
    cast, or nothing; a move to another device stays a torch call."""
    source, result = a["self"].meta.get("val"), node.meta.get("val")
    if not isinstance(source, torch.Tensor) or not isinstance(result, torch.Tensor):
        return None
    if source.device != result.device:
        return None
    return _cast(lw, node, a)


def _conv2d(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`conv2d` of a batch as the extern `aten.convolution` call that torch's decomposition
    makes of it (so that a program needs no decomposition for it); an unbatched one stays a
    torch call of itself."""
    sizes = [_window_arg(a[name], 2) for name in ("stride", "padding", "dilation")]
    if len(out_type(node).get_shape()) != 4 or None in sizes:
        return None
    args = [a["input"], a["weight"], a["bias"], *sizes, False, [0, 0], a["groups"]]
    (out,) = lw.torch_call(CONVOLUTION, args, {}, [out_type(node)], node)
    return out


NEW_TENSOR_COMPOSITES = frozenset(
    {"aten.batch_norm.default", "aten.conv2d.default", "aten.linear.default"}
)
"""Composite ops (CompositeImplicitAutograd) whose eager result is always new memory. A
composite's schema does not promise that: eval-mode `dropout` returns its input itself."""

MAY_RETURN_INPUT = frozenset(
    {
        "aten.dropout.default",
        "aten.alpha_dropout.default",
        "aten.feature_dropout.default",
        "aten.feature_alpha_dropout.default",
        "aten.contiguous.default",
        "aten.flatten.using_ints",
        "aten.type_as.default",
        "aten.to.dtype",
        "aten.to.device",
        "aten.to.dtype_layout",
        "aten.to.other",
    }
)
"""Composite ops whose eager result can be their input itself (dropout in eval mode, a
`contiguous` or `to` that changes nothing), which their schemas do not say."""


def _adds_to_unseen_tensor(node: torch.fx.Node) -> bool:
    """Whether `self.add_(other)` is eager's `self + other` (ResNet's residual `+=`): self is
    new memory, the result of an op that makes a new tensor (an aten op whose schema says it
    does not alias, not a composite but those of `NEW_TENSOR_COMPOSITES`), that no node but
    this one reads or views; and the sum has self's dtype (no rounding to it). torch.export
    gives in-place ops as traced; any other is left to the decomposition, which functionalises
    it (copies back into inputs and buffers)."""
    a = bind(node)
    source, other = a["self"], a["other"]
    if not isinstance(source, torch.fx.Node) or set(source.users) != {node}:
        return False
    op = source.target
    if source.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    if any(r.alias_info is not None for r in op._schema.returns):
        return False
    composite = torch._C._dispatch_has_kernel_for_dispatch_key(
        op.name(), "CompositeImplicitAutograd"
    )
    if composite and str(op) not in NEW_TENSOR_COMPOSITES:
        return False
    val = source.meta.get("val")
    other_val = other.meta.get("val") if isinstance(other, torch.fx.Node) else other
    if not isinstance(val, torch.Tensor) or not isinstance(other_val, torch.Tensor | int | float):
        return False
    return torch.result_type(meta_tensor(source), meta_tensor(other)) == val.dtype


def _add_in_place(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`add_` where `_adds_to_unseen_tensor`: the `add` that torch's functionalisation makes of
    it. Any other is refused (a torch call would write into memory the program shares)."""
    if not _adds_to_unseen_tensor(node):
        raise node_error(node, "an in-place add on memory other nodes see is imported decomposed")
    return CONVERTERS["aten.add.Tensor"](lw, node, a)


def _identity(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return lw.tensor(a["self"] if "self" in a else a["input"])


def _dropout(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    if a["train"] and a["p"] != 0:
        return None
    return lw.tensor(a["input"])


def _constant(value_arg: str | None, fixed: float = 0) -> Converter:
    """full/zeros/ones/scalar_tensor and their _like/new_ forms: a splat of the result type."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        value = a[value_arg] if value_arg is not None else fixed
        if not _is_number(value):
            return None
        t = out_type(node)
        return lw.constant(value, t.element_type, t.get_shape())

    return convert


# ---------------------------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------------------------


def _reshape(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return lw.reshape(lw.tensor(a["self"]), out_type(node).get_shape())


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


def _slice_dim(
    lw: ImportBuilder, x: SSAValue, dim: int, start: int, end: int, step: int = 1
) -> SSAValue:
    """x[..., start:end:step, ...] along `dim`, with torch's clamping of start and end."""
    shape = graph.shape_of(x)
    size = shape[dim]
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, start), size)
    if (start, end, step) == (0, size, 1):
        return x
    starts, limits, strides = [0] * len(shape), list(shape), [1] * len(shape)
    starts[dim], limits[dim], strides[dim] = start, end, step
    return lw.emit(graph.SliceOp(x, starts, limits, strides))


def _slice(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    if _rank(x) == 0 or not all(_is_number(a[k]) or a[k] is None for k in ("start", "end")):
        return None
    size = graph.shape_of(x)[a["dim"] % _rank(x)]
    start = 0 if a["start"] is None else a["start"]
    end = size if a["end"] is None else a["end"]
    return _slice_dim(lw, x, a["dim"] % _rank(x), start, end, a["step"])


def _select(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    dim = a["dim"] % _rank(x)
    index = a["index"] % graph.shape_of(x)[dim]
    sliced = _slice_dim(lw, x, dim, index, index + 1)
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
    return lw.emit(graph.ConcatOp(inputs, a["dim"] % rank))


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


# ---------------------------------------------------------------------------------------------
# Composite ops kept whole (`decompose` splits them later)
# ---------------------------------------------------------------------------------------------


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
# Matrix products
# ---------------------------------------------------------------------------------------------


def _matmul_values(
    lw: ImportBuilder, lhs: SSAValue, rhs: SSAValue, shape: Sequence[int]
) -> SSAValue:
    """torch.matmul: 1-D operands become a row / a column, then the result is reshaped."""
    if _rank(lhs) == 1:
        lhs = lw.reshape(lhs, (1, graph.shape_of(lhs)[0]))
    if _rank(rhs) == 1:
        rhs = lw.reshape(rhs, (graph.shape_of(rhs)[0], 1))
    return lw.reshape(lw.emit(graph.MatmulOp(lhs, rhs)), shape)


def _matmul(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    t = out_type(node)
    lhs, rhs = lw.operand(a["self"], t.element_type), lw.operand(a[_second(a)], t.element_type)
    return _matmul_values(lw, lhs, rhs, t.get_shape())


def _second(a: Args) -> str:
    return "mat2" if "mat2" in a else "other"


def _addmm(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """beta * input + alpha * (mat1 @ mat2)."""
    t = out_type(node)
    dtype = t.element_type
    y = _matmul_values(
        lw, lw.operand(a["mat1"], dtype), lw.operand(a["mat2"], dtype), t.get_shape()
    )
    if a["alpha"] != 1:
        y = lw.emit(graph.MulOp(y, lw.constant(a["alpha"], dtype)))
    if a["beta"] == 0:
        return y
    bias = lw.operand(a["self"], dtype)
    if a["beta"] != 1:
        bias = lw.emit(graph.MulOp(bias, lw.constant(a["beta"], dtype)))
    return lw.emit(graph.AddOp(y, bias))


def _linear(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    x, w = lw.operand(a["input"], dtype), lw.operand(a["weight"], dtype)
    if _rank(x) == 0 or _rank(w) != 2:
        return None
    b = lw.operand(a["bias"], dtype) if a["bias"] is not None else None
    return lw.emit(graph.LinearOp(x, w, b))


# ---------------------------------------------------------------------------------------------
# Logical and bitwise ops, division with rounding, any/all, var_mean, vector norms (issue 15:
# elem)
# ---------------------------------------------------------------------------------------------


def _int_division_is_safe(divisor: Any) -> bool:
    """Whether an integer division (or remainder) by `divisor` may run in a kernel: only by a
    number other than 0 and -1. A kernel's integer division by zero (or of the smallest
    integer by -1) traps and kills the process, where eager raises ZeroDivisionError: any
    other divisor leaves the node to torch (a `graph.torch_call`)."""
    return isinstance(divisor, int) and divisor not in (0, -1)


def _division(op_cls: type[graph.BinaryOp], divisor_arg: str = "other") -> Converter:
    """fmod / remainder / floor_divide: floats always; integers by a safe number only."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        dtype = out_type(node).element_type
        if dtype == i1 or (not graph.is_float(dtype) and not _int_division_is_safe(a[divisor_arg])):
            return None
        return lw.emit(op_cls(lw.operand(a["self"], dtype), lw.operand(a[divisor_arg], dtype)))

    return convert


def _rounded_division(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """div(rounding_mode="floor") is floor_divide; float "trunc" is trunc of the true division
    rounded to the dtype (eager's f16/bf16 kernels round the quotient before truncating)."""
    if a["rounding_mode"] == "floor":
        return _division(graph.FloorDivideOp)(lw, node, a)
    quotient = _binary(graph.DivOp)(lw, node, a)
    assert isinstance(quotient, SSAValue)
    return lw.emit(graph.TruncOp(quotient))


def _bitwise_not(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    dtype = out_type(node).element_type
    if graph.is_float(dtype):
        return None
    return lw.emit(graph.BitwiseNotOp(lw.operand(a["self"], dtype)))


def _logical_not(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """not (x != 0), on the operand as a bool (NaN is true)."""
    if out_type(node).element_type != i1:
        return None
    return lw.emit(graph.BitwiseNotOp(lw.operand(a["self"], i1)))


def _logical(op_cls: type[graph.IntegerBinaryOp]) -> Converter:
    """logical_and/or/xor: the bitwise op on both operands as bools."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        if out_type(node).element_type != i1:
            return None
        return lw.emit(op_cls(lw.operand(a["self"], i1), lw.operand(a["other"], i1)))

    return convert


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


ELEM_OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.ArgMaxOp: _arg_reduce(graph.ArgMaxOp),
    graph.ArgMinOp: _arg_reduce(graph.ArgMinOp),
    graph.BitwiseNotOp: _bitwise_not,
    graph.FmodOp: _division(graph.FmodOp),
    graph.RemainderOp: _division(graph.RemainderOp),
    graph.FloorDivideOp: _division(graph.FloorDivideOp),
}

ELEM_CONVERTERS: dict[str, Converter] = {
    "aten.logical_not.default": _logical_not,
    "aten.logical_and.default": _logical(graph.BitwiseAndOp),
    "aten.logical_or.default": _logical(graph.BitwiseOrOp),
    "aten.logical_xor.default": _logical(graph.BitwiseXorOp),
    **dict.fromkeys(
        ("aten.any.default", "aten.any.dim", "aten.any.dims"), _any_all(graph.ReduceMaxOp)
    ),
    **dict.fromkeys(
        ("aten.all.default", "aten.all.dim", "aten.all.dims"), _any_all(graph.ReduceMinOp)
    ),
    **dict.fromkeys(("aten.var_mean.correction", "aten.var_mean.dim"), _var_mean),
    "aten.linalg_vector_norm.default": _vector_norm,
}


# ---------------------------------------------------------------------------------------------
# Index arithmetic (task `index`): arange, flip, roll, repeat, diagonal
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
    `start + step * i` in eager's accumulation type and round once."""
    t = out_type(node)
    dtype, (n,) = t.element_type, t.get_shape()
    start, step = a.get("start", 0), a.get("step", 1)
    if not (_is_number(start) and _is_number(step)) or dtype == i1:
        return None
    if not graph.is_float(dtype):
        if int(step) == 0:
            return None
        return lw.emit(graph.IotaOp(t, 0, int(start), int(step)))
    compute = _arange_compute_type(dtype, node)
    index = lw.cast(lw.emit(graph.IotaOp(TensorType(i64, [n]))), compute)
    scaled = lw.emit(graph.MulOp(index, lw.constant(step, compute)))
    return lw.cast(lw.emit(graph.AddOp(lw.constant(start, compute), scaled)), dtype)


def _flip(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x = lw.tensor(a["self"])
    dims = [d for d in _norm_dims(a["dims"], _rank(x)) if graph.shape_of(x)[d] > 1]
    if not a["dims"] or not dims:
        return x
    return lw.emit(graph.FlipOp(x, dims))


def _roll(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """roll as a `graph.roll` over the dims whose shift moves something; with no dims, of the
    flattened tensor, reshaped back."""
    x = lw.tensor(a["self"])
    shifts, dims = list(a["shifts"]), list(a.get("dims") or [])
    if not all(isinstance(v, int) for v in (*shifts, *dims)):
        return None
    shape = graph.shape_of(x)
    if not dims:
        if len(shifts) != 1:
            return None
        flat = lw.reshape(x, [graph.numel(shape)])
        return lw.reshape(_roll_dims(lw, flat, shifts, [0]), shape)
    if len(shifts) != len(dims):
        return None
    return _roll_dims(lw, x, shifts, [d % _rank(x) for d in dims])


def _roll_dims(
    lw: ImportBuilder, x: SSAValue, shifts: Sequence[int], dims: Sequence[int]
) -> SSAValue:
    """One shift per dim (torch adds repeated dims' shifts up), reduced modulo its size."""
    total: dict[int, int] = {}
    for shift, dim in zip(shifts, dims, strict=True):
        total[dim] = total.get(dim, 0) + shift
    shape = graph.shape_of(x)
    moved = {d: s % shape[d] for d, s in total.items() if shape[d] > 1 and s % shape[d]}
    if not moved:
        return x
    return lw.emit(graph.RollOp(x, list(moved.values()), list(moved)))


def _repeat(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """repeat (and tile): the input broadcast along a new dim before each repeated dim, then
    reshaped to the result: index arithmetic, no copy."""
    x, repeats = lw.tensor(a["self"]), list(a["repeats"])
    if not all(isinstance(r, int) for r in repeats) or len(repeats) < _rank(x):
        return None
    x = lw.reshape(x, (1,) * (len(repeats) - _rank(x)) + graph.shape_of(x))
    spread: list[int] = []
    dims: list[int] = []
    for r, d in zip(repeats, graph.shape_of(x), strict=True):
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
    if d1 == d2:
        return None
    shape = graph.shape_of(x)
    rest = [d for d in range(rank) if d not in (d1, d2)]
    n, m = shape[d1], shape[d2]
    x = _permute_dims(lw, x, [*rest, d1, d2])
    x = lw.reshape(x, [shape[d] for d in rest] + [n * m])
    length = out_type(node).get_shape()[-1]
    start = offset if offset >= 0 else -offset * m
    if length == 0:
        start = limit = 0
    else:
        limit = start + (length - 1) * (m + 1) + 1
    starts, limits = [0] * len(rest) + [start], [shape[d] for d in rest] + [limit]
    return lw.emit(graph.SliceOp(x, starts, limits, [1] * len(rest) + [m + 1]))


# Padding and pooling (pool task)
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
    lw: ImportBuilder, node: torch.fx.Node, x: SSAValue, pad: Sequence[int], mode: str, fill: float
) -> Value:
    t = out_type(node)
    pads = _pads_of(pad, _rank(x))
    if pads is None or 0 in t.get_shape()[1:]:
        return None  # (an empty inner dim: lower-to-loops's strides cannot express it)
    if graph.numel(graph.shape_of(x)) == 0 < graph.numel(t.get_shape()):  # all padding
        return lw.constant(fill, t.element_type, t.get_shape()) if mode == "constant" else None
    low, high = pads
    if not any(low) and not any(high):
        return x
    op = graph.PadOp(x, low, high, mode, fill)
    try:
        op.verify()
    except VerifyException:
        return None  # out of torch's range (eager raises): left to torch
    return lw.emit(op)


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


PAD_MODES = ("constant", "reflect", "replicate")
"""`pad`'s modes that map (to `constant_pad_nd` and the `{reflection,replication}_pad{n}d` ops
eager calls); a circular one is decomposed (`CONVERTED_WHEN`)."""


def _pad(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`F.pad` as the op eager and torch's decomposition call: `constant_pad_nd` with the fill
    (none: 0.0), or the `PAD_MODES` op of the mode on the same pad list."""
    if a["mode"] == "constant":
        value = 0.0 if a["value"] is None else a["value"]
        return _constant_pad(lw, node, {"self": a["self"], "pad": a["pad"], "value": value})
    if a["mode"] not in PAD_MODES:
        return None  # (decomposed: CONVERTED_WHEN)
    return _mode_pad(a["mode"])(lw, node, {"self": a["self"], "padding": a["pad"]})


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


def _avg_pool(n: int) -> Converter:
    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x = lw.tensor(a["self"])
        if not graph.is_float(graph.dtype_of(x)):
            return None
        kernel, stride = _kernel_stride(a, n)
        window = (kernel, stride, _window_arg(a.get("padding", 0), n), [1] * n)
        divisor = a.get("divisor_override")
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
        val = node.meta.get("val")
        val = val[0] if isinstance(val, list | tuple) else val
        on_cpu = isinstance(val, torch.Tensor) and val.device.type == "cpu"
        if kind == "avg" and n == 3 and on_cpu and isinstance(graph.dtype_of(x), _HALF):
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
        return CONVERTERS["aten.mean.dim"](lw, node, mean)
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
# The table
# ---------------------------------------------------------------------------------------------


def _each(names: Sequence[str], converter: Converter) -> dict[str, Converter]:
    return dict.fromkeys(names, converter)


def _family_converter(op: type[Operation]) -> Converter | None:
    """The converter of an op's family: its aten overloads map one to one to it."""
    if issubclass(op, graph.UnaryOp):
        return _unary(op)
    if issubclass(op, graph.ComparisonOp):
        return _comparison(op)
    if issubclass(op, graph.BinaryOp):
        return _binary(op)
    if issubclass(op, graph.ReduceOp):
        return _reduce(op)
    return None


# The converters of ops outside those families, for the overloads in their `aten` facts.
OWN_CONVERTERS: dict[type[Operation], Converter] = {
    graph.CastOp: _cast,
    graph.WhereOp: _where,
    graph.BroadcastInDimOp: _expand,
    graph.ReshapeOp: _reshape,
    graph.PermuteOp: _permute,
    graph.SliceOp: _slice,
    graph.ConcatOp: _cat,
    graph.MatmulOp: _matmul,
    graph.LinearOp: _linear,
    graph.SoftmaxOp: _softmax(graph.SoftmaxOp),
    graph.LogSoftmaxOp: _softmax(graph.LogSoftmaxOp),
    graph.LayerNormOp: _layer_norm,
    graph.RMSNormOp: _rms_norm,
    graph.GeluOp: _gelu,
    graph.VarOp: _var,
    **ELEM_OWN_CONVERTERS,
    # task `index`
    graph.IotaOp: _arange,
    graph.FlipOp: _flip,
    graph.RollOp: _roll,
    # pool task: padding and pooling
    graph.PadOp: _pool_converter,
    graph.PoolOp: _pool_converter,
}


# --- gather (task: indexing with computed indices) -------------------------------------------
# embedding, index_select, gather and advanced indexing are `graph.gather` between reshapes
# and broadcasts (index arithmetic in a kernel: nothing is copied).


def _index_tensor(value: SSAValue) -> bool:
    return str(graph.dtype_of(value)) in graph.INDEX_DTYPES


def _column(lw: ImportBuilder, indices: SSAValue, rank: int, dim: int) -> SSAValue:
    """The indices flattened into dim `dim` of a rank-`rank` tensor (size 1 elsewhere)."""
    n = graph.numel(graph.shape_of(indices))
    return lw.reshape(indices, [n if k == dim else 1 for k in range(rank)])


def _expand_to(lw: ImportBuilder, x: SSAValue, shape: Sequence[int]) -> SSAValue:
    """`x` broadcast to `shape` as torch broadcasts (aligned on the right)."""
    if graph.shape_of(x) == tuple(shape):
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
    rows = _gather_dim(lw, weight, _column(lw, indices, 2, 0), 0)
    return lw.reshape(rows, out_type(node).get_shape())


def _index_select(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    x, indices = lw.tensor(a["self"]), lw.tensor(a["index"])
    if not _index_tensor(indices):
        return None
    rank = max(_rank(x), 1)  # a 0-d input is read as [1]
    dim = a["dim"] % rank
    rows = _gather_dim(
        lw, lw.reshape(x, [1]) if not _rank(x) else x, _column(lw, indices, rank, dim), dim
    )
    return lw.reshape(rows, out_type(node).get_shape())


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
    table = graph.shape_of(x)
    rank = len(table) - k + 1
    columns = [_column(lw, _expand_to(lw, t, shape), rank, first) for t in tensors]
    out = [*table[:first], graph.numel(shape), *table[first + k :]]
    value = lw.emit(graph.GatherOp(x, columns, first, out, wrap=True))
    return lw.reshape(value, out_type(node).get_shape())


_INDEXING: dict[str, Converter] = {
    "aten.embedding.default": _embedding,
    "aten.index_select.default": _index_select,
    "aten.gather.default": _torch_gather,
    "aten.index.Tensor": _advanced_index,
}


def _indexing(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return _INDEXING[str(node.target)](lw, node, a)


OWN_CONVERTERS[graph.GatherOp] = _indexing


# --- task `scan`: cumsum, cumprod, logcumsumexp, cummax, cummin --------------------------------


def _scan_along(lw: ImportBuilder, x: SSAValue, dim: int, kind: str) -> SSAValue:
    """A graph.scan of `x` along `dim`; a 0-d tensor scans as one element, as eager."""
    if _rank(x) == 0:
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


OWN_CONVERTERS[graph.ScanOp] = _scan


# --- scatter task: scatters with affine indices ----------------------------------------------
# slice_scatter, select_scatter and diagonal_scatter write `src` into a strided region of
# `self`: `where(region, src spread into place, self)`, where both the region (a splat of
# True) and `src` are padded into place, stride > 1 spreading each element with stride - 1
# padding after it (a reshape). In the loop nest that is index arithmetic with a select, exact
# and fusable like an elementwise op; nothing is copied. `copy` (functionalised `x[...] = y`)
# is `src` cast and broadcast to `self`.


def _spread(lw: ImportBuilder, x: SSAValue, dim: int, start: int, step: int, size: int) -> SSAValue:
    """`x` along `dim` of length `size`: element k at `start + k * step`, zero (False)
    elsewhere."""
    shape = list(graph.shape_of(x))
    rank, m = len(shape), shape[dim]
    if step > 1:  # [.., m, ..] -> [.., m, step, ..] (padded after) -> [.., m * step, ..]
        x = lw.reshape(x, [*shape[: dim + 1], 1, *shape[dim + 1 :]])
        after = [0] * (rank + 1)
        after[dim + 1] = step - 1
        x = lw.emit(graph.PadOp(x, [0] * (rank + 1), after))
        shape[dim] = m * step
        x = lw.reshape(x, shape)
    low, high = [0] * rank, [0] * rank
    low[dim], high[dim] = start, size - start - shape[dim]  # (negative: crops the spread tail)
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
    if graph.shape_of(src) != tuple(m if k == dim else d for k, d in enumerate(shape)):
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
    src = lw.reshape(lw.tensor(a["src"]), [1 if k == dim else d for k, d in enumerate(shape)])
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
    length = graph.shape_of(src)[-1]
    if length == 0 or graph.numel(shape) == 0:
        return x if graph.shape_of(src)[:-1] == tuple(shape[d] for d in rest) else None
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


# --- scatter task: scatters with computed indices --------------------------------------------
# scatter, scatter_add, scatter_reduce and index_put (and index_add, index_copy and
# index_fill, kept whole for their own index checks) are a search, not a store: every output
# element compares its position with the K source positions that may write it (the index's
# length along the scattered dim, or the broadcast index tensors' element count) and combines
# the matches in source order, unrolled over K (up to SEARCH_LIMIT) as elementwise selects:
# no indirect store, so no race and no atomics; duplicates combine in eager's own order (the
# last match wins without accumulation: eager's CPU result). Each index passes through a
# `graph.gather` of an iota: out of range raises like eager (IndexError on the CPU, a trap on
# CUDA), and negative indices wrap where torch wraps them (index_put, index_fill).

SEARCH_LIMIT = 16
"""The most source positions one output element searches (unrolled); larger scatters stay
eager (the search reads K indices per output element: an indirect store would read each
once)."""

SCATTER_REDUCTIONS = ("copy", "sum", "prod", "mean", "amax", "amin")


def _positions(lw: ImportBuilder, index: SSAValue, n: int, wrap: bool) -> SSAValue:
    """`index` as i64 positions in [0, n), checked (and wrapped if `wrap`) as `graph.gather`
    checks its indices."""
    shape = graph.shape_of(index)
    count = graph.numel(shape)
    flat = lw.reshape(index, [count])
    table = lw.emit(graph.IotaOp(TensorType(i64, [n])))
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
    (include_self) or from its identity where anything matches."""
    shape = graph.shape_of(x)
    rank, t = len(shape), graph.dtype_of(x)
    count = graph.shape_of(keys[0][0])[-1]
    src = lw.cast(src, t)
    here = {d: lw.emit(graph.IotaOp(TensorType(i64, shape), d)) for _, d in keys}

    def at(v: SSAValue, k: int) -> SSAValue:
        """Source position k of `v` (or its only one), broadcast to x's shape."""
        k = k if graph.shape_of(v)[-1] > 1 else 0
        picked = _slice_dim(lw, v, rank, k, k + 1)
        return _expand_to(lw, lw.reshape(picked, graph.shape_of(picked)[:-1]), shape)

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
    puts it), or one boolean mask (a select: no search)."""
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
    b = graph.broadcast_shapes(*(graph.shape_of(v) for v in tensors.values()))
    if b is None:
        return None
    count, dims = graph.numel(b), sorted(tensors)
    if count > SEARCH_LIMIT or any(shape[d] == 0 for d in dims):
        return None
    if not _rounds_like_eager(t, "sum" if accumulate else "copy", count):
        return None
    if count == 0 or graph.numel(shape) == 0:
        return x
    keys: list[tuple[SSAValue, int]] = []
    for d in dims:
        flat = lw.reshape(_expand_to(lw, tensors[d], b), [count])
        positions = lw.reshape(_positions(lw, flat, shape[d], wrap=True), [1] * rank + [count])
        keys.append((positions, d))
    rest = [k for k in range(rank) if k not in dims]
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    lead = dims[0] if adjacent else 0  # where B sits among the values' dims
    target = [*(shape[k] for k in rest[:lead]), *b, *(shape[k] for k in rest[lead:])]
    if graph.broadcast_shapes(graph.shape_of(values), target) != tuple(target):
        return None
    v = lw.reshape(
        _expand_to(lw, values, target), [*target[:lead], count, *target[lead + len(b) :]]
    )
    v = _permute_dims(lw, v, [*(k for k in range(len(rest) + 1) if k != lead), lead])
    v = lw.reshape(v, [*(1 if k in dims else shape[k] for k in range(rank)), count])
    return _scatter_search(lw, x, keys, v, "sum" if accumulate else "copy")


def _index_along(reduce: str) -> Converter:
    """index_add (`alpha` scales the source), index_copy and index_fill, kept whole: index_add
    and index_copy reject negative indices, unlike index_put, which they decompose into, and
    index_fill (which wraps them) decomposes into index_copy."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        x, index = lw.tensor(a["self"]), lw.tensor(a["index"])
        shape = graph.shape_of(x)
        rank, t = len(shape), graph.dtype_of(x)
        if rank == 0 or not _index_tensor(index) or (reduce == "sum" and t == i1):
            return None
        dim, count = a["dim"] % rank, graph.numel(graph.shape_of(index))
        sized = [*(1 if k == dim else n for k, n in enumerate(shape)), count]
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
            if graph.shape_of(src) != tuple(count if k == dim else n for k, n in enumerate(shape)):
                return None
        if count == 0 or graph.numel(shape) == 0:
            return x
        if count > SEARCH_LIMIT or not _rounds_like_eager(t, reduce, count):
            return None
        positions = _positions(lw, index, shape[dim], wrap=reduce == "fill")
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
    "aten.index_add.default",
    "aten.index_copy.default",
    "aten.index_fill.int_Scalar",
    "aten.index_fill.int_Tensor",
)


# task `ind90` (issue 15, what Inductor lowers): as_strided and unfold as a gather from the
# flattened input at computed offsets (`offset + sum_k i_k * stride_k`); prims' cast.


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
        return None
    return _strided_gather(lw, node, lw.tensor(a["self"]), a["size"], a["stride"], offset)


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


def _convert_element_type(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """prims.convert_element_type (some of torch's decompositions leave it): a cast."""
    return lw.cast(lw.tensor(a["a"]), out_type(node).element_type)


INDUCTOR_CONVERTERS: dict[str, Converter] = {
    "aten.as_strided.default": _as_strided,
    "aten.unfold.default": _unfold,
    "prims.convert_element_type.default": _convert_element_type,
}


def op_converters(ops: Iterable[type[Operation]]) -> dict[str, Converter]:
    """`str(OpOverload)` -> converter for every overload one of `ops` declares in its `aten`
    fact (`xfuse.dialects.facts`)."""
    table: dict[str, Converter] = {}
    for op in ops:
        overloads = graph.op_facts(op).aten
        if not overloads:
            continue
        convert = OWN_CONVERTERS.get(op) or _family_converter(op)
        if convert is None:
            raise ValueError(f"'{op.name}' declares aten overloads but has no converter")
        table.update(dict.fromkeys(overloads, convert))
    return table


# The ops' own overloads, then the aten ops that are formulas of graph ops.
CONVERTERS: dict[str, Converter] = {
    **op_converters(graph.Graph.operations),
    "aten.rsub.Tensor": _rsub,
    "aten.rsub.Scalar": _rsub,
    "aten.div.Tensor_mode": _div_mode,
    "aten.div.Scalar_mode": _div_mode,
    "aten.pow.Scalar": _pow_scalar,
    **_each(["aten.clamp.default", "aten.clamp.Tensor"], _clamp("min", "max")),
    **_each(["aten.clamp_min.default", "aten.clamp_min.Tensor"], _clamp("min", None)),
    **_each(["aten.clamp_max.default", "aten.clamp_max.Tensor"], _clamp(None, "max")),
    "aten.hardtanh.default": _clamp("min_val", "max_val"),
    "aten.leaky_relu.default": _leaky_relu,
    "aten.elu.default": _elu,
    "aten.round.decimals": _round_decimals,
    **_each(
        [
            "aten.clone.default",
            "aten.contiguous.default",
            "aten.alias.default",
            "aten.detach.default",
            "aten.lift_fresh_copy.default",
            "aten.lift_fresh.default",
        ],
        _identity,
    ),
    "aten.dropout.default": _dropout,
    "aten.to.device": _to_device,
    "aten.conv2d.default": _conv2d,
    # composites and an in-place op that torch.export gives as traced (CONVERTED_WHEN)
    "aten.batch_norm.default": _batch_norm_eval,
    "aten.pad.default": _pad,
    "aten.max_pool2d.default": _max_pool(2),
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "aten.add_.Tensor": _add_in_place,
    "aten.scalar_tensor.default": _constant("s"),
    **_each(
        ["aten.full.default", "aten.full_like.default", "aten.new_full.default"],
        _constant("fill_value"),
    ),
    **_each(
        ["aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default"],
        _constant(None, 0),
    ),
    **_each(
        ["aten.ones.default", "aten.ones_like.default", "aten.new_ones.default"], _constant(None, 1)
    ),
    **_each(["aten.transpose.int", "aten.t.default"], _transpose),
    "aten.select.int": _select,
    "aten.narrow.default": _narrow,
    **_each(["aten.split.Tensor", "aten.split_with_sizes.default"], _split),
    "aten.unbind.int": _unbind,
    "aten._native_batch_norm_legit_no_training.default": _batch_norm_eval,
    "aten.addmm.default": _addmm,
    **ATTENTION_CONVERTERS,
    **ELEM_CONVERTERS,
    # task `index`
    "aten.repeat.default": _repeat,
    "aten.diagonal.default": _diagonal,
    **SCATTER_CONVERTERS,  # scatter task
    **INDUCTOR_CONVERTERS,  # task `ind90`
}

# Nodes without a value that only check what export already guarantees.
SKIPPED: frozenset[str] = frozenset(
    {
        "aten._assert_tensor_metadata.default",
        "aten._assert_scalar.default",
        "aten.sym_constrain_range_for_size.default",
    }
)

# Composite ops whose decompositions the importer keeps out of `run_decompositions`: they
# arrive whole and become the graph composite ops above.
KEPT_COMPOSITES: tuple[str, ...] = (
    "aten.linear.default",
    "aten.softmax.int",
    "aten.log_softmax.int",
    "aten.layer_norm.default",
    "aten.rms_norm.default",
    "aten.silu.default",
    "aten.gelu.default",
    "aten.var.dim",
    "aten.var.correction",
    "aten.var.default",
    "aten.hardtanh.default",
    SDPA,  # an extern: torch picks the fused kernel for the device (xfuse/frontend/attention.py)
    "aten.roll.default",  # task `index`: a graph.roll, not index_select
    *POOL_KEPT_COMPOSITES,  # pool task
    *SCATTER_KEPT_COMPOSITES,  # scatter task: their own index checks
)

# Ops of the table that a program is imported with, as torch.export gives them, only where the
# check holds of their node; a program with a node that fails it is decomposed first, as one
# with an unmapped op is (`importer.needs_decomposition`).
CONVERTED_WHEN: dict[str, Callable[[torch.fx.Node], bool]] = {
    "aten.batch_norm.default": lambda node: not bind(node)["training"],
    "aten.pad.default": lambda node: bind(node)["mode"] in PAD_MODES,
    "aten.add_.Tensor": _adds_to_unseen_tensor,
}
