"""
An interpreter for loop IR (docs/contracts.md, "loop IR"): runs a module after `lower-to-loops`
(an `@forward` whose `fusion.launch`es call kernel funcs) on torch tensors, so that lowering is
tested against `xfuse.interpret`.

Kernels run element by element in Python (numpy scalars carry each float type's rounding; bf16
values are f32 values rounded to bf16; integers are Python ints wrapped to their width), so keep
shapes small. Output buffers start filled with a sentinel (NaN, -7777777, true) so that an
element a kernel fails to write shows up. Anything in `@forward` that is not a launch runs
through `xfuse.interpreters.graph.run_op`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    SymbolRefAttr,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.traits import SymbolTable

from xfuse.dialects import fusion, graph
from xfuse.errors import IndexOutOfRangeError, InterpretError
from xfuse.interpreters.graph import find_function, run_op
from xfuse.ir import dtypes
from xfuse.ir.dtypes import bf16_round
from xfuse.ir.names import ERROR_FLAG_ATTR, TIES_KEEP_FIRST_ATTR

Tensor = torch.Tensor
Env = dict[SSAValue, Any]

# ---------------------------------------------------------------------------------------------
# Scalars
# ---------------------------------------------------------------------------------------------


def round_float(t: Attribute, x: Any) -> Any:
    """`x` as a value of float type `t`."""
    if isinstance(t, Float32Type):
        return np.float32(x)
    if isinstance(t, Float64Type):
        return np.float64(x)
    if isinstance(t, Float16Type):
        return np.float16(x)
    if isinstance(t, BFloat16Type):
        return np.float32(bf16_round(float(np.float32(x))))  # via f32, as truncf to f32 then bf16
    raise InterpretError(f"not a float type: {t}")


def width(t: Attribute) -> int | None:
    """Bit width of an integer type; None for index (unbounded here)."""
    if isinstance(t, IndexType):
        return None
    assert isinstance(t, IntegerType)
    return t.width.data


def wrap(t: Attribute, v: int) -> int:
    """Canonical integer: two's complement signed value, except i1 which is 0 or 1."""
    w = width(t)
    if w is None:
        return v
    if w == 1:
        return v & 1
    v &= (1 << w) - 1
    return v - (1 << w) if v >> (w - 1) else v


def signed(t: Attribute, v: int) -> int:
    return -v if width(t) == 1 else v


def unsigned(t: Attribute, v: int) -> int:
    """`v` read as unsigned; an index as the 64 bits it is on every target (a negative index
    compares above any size: `arith.cmpi uge` is how a gather finds one)."""
    w = width(t)
    return v & ((1 << (64 if w is None else w)) - 1)


def _div_trunc(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _extremum(larger: bool) -> Callable[[Operation, list[Any]], Any]:
    """`arith.maximumf` (`larger`) or `arith.minimumf`: NaN from either side; where zeros of
    both signs tie, IEEE's +0.0 (maximum) or -0.0 (minimum), or the first operand where the op
    carries `xfuse.ties_keep_first` (as the CPU lowering's `TiesKeepFirst` makes it)."""

    def run(op: Operation, xs: list[Any]) -> Any:
        a, b = xs
        if np.isnan(a) or np.isnan(b):
            value = a if np.isnan(a) else b
        elif a != b:
            value = max(a, b) if larger else min(a, b)
        elif TIES_KEEP_FIRST_ATTR in op.attributes:
            value = a
        else:
            value = a if (math.copysign(1.0, a) > 0) == larger else b
        return round_float(_result_type(op), value)

    return run


def _fptosi(t: Attribute, x: Any) -> int:
    if not np.isfinite(x):  # x86's cvttss2si: the "integer indefinite" value
        return wrap(t, 1 << ((width(t) or 64) - 1))
    return wrap(t, int(x))


_CMPF: dict[str, Callable[[Any, Any], bool]] = {
    "false": lambda a, b: False,
    "oeq": lambda a, b: a == b,
    "ogt": lambda a, b: a > b,
    "oge": lambda a, b: a >= b,
    "olt": lambda a, b: a < b,
    "ole": lambda a, b: a <= b,
    "one": lambda a, b: a < b or a > b,
    "ord": lambda a, b: not (np.isnan(a) or np.isnan(b)),
    "ueq": lambda a, b: not (a < b or a > b),
    "ugt": lambda a, b: not (a <= b),
    "uge": lambda a, b: not (a < b),
    "ult": lambda a, b: not (a >= b),
    "ule": lambda a, b: not (a > b),
    "une": lambda a, b: not (a == b),
    "uno": lambda a, b: bool(np.isnan(a) or np.isnan(b)),
    "true": lambda a, b: True,
}

_CMPI: dict[str, tuple[bool, Callable[[int, int], bool]]] = {
    "eq": (True, lambda a, b: a == b),
    "ne": (True, lambda a, b: a != b),
    "slt": (True, lambda a, b: a < b),
    "sle": (True, lambda a, b: a <= b),
    "sgt": (True, lambda a, b: a > b),
    "sge": (True, lambda a, b: a >= b),
    "ult": (False, lambda a, b: a < b),
    "ule": (False, lambda a, b: a <= b),
    "ugt": (False, lambda a, b: a > b),
    "uge": (False, lambda a, b: a >= b),
}


def _result_type(op: Operation) -> Attribute:
    return op.results[0].type


def _float_binary(fn: Callable[[Any, Any], Any]) -> Callable[[Operation, list[Any]], Any]:
    return lambda op, xs: round_float(_result_type(op), fn(xs[0], xs[1]))


def _float_math(fn: Callable[[np.float64], Any]) -> Callable[[Operation, list[Any]], Any]:
    """Math functions are evaluated in f64 and rounded once to the result type."""
    return lambda op, xs: round_float(_result_type(op), fn(np.float64(xs[0])))


def _int_binary(
    fn: Callable[[int, int], int], view: Callable[[Attribute, int], int] = signed
) -> Callable[[Operation, list[Any]], int]:
    def run(op: Operation, xs: list[Any]) -> int:
        t = _result_type(op)
        return wrap(t, fn(view(t, xs[0]), view(t, xs[1])))

    return run


def _cmpi(op: Operation, xs: list[Any]) -> int:
    assert isinstance(op, arith.CmpiOp)
    name = arith.CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]
    is_signed, fn = _CMPI[name]
    t = op.lhs.type
    view = signed if is_signed else unsigned
    return int(fn(view(t, xs[0]), view(t, xs[1])))


def _cmpf(op: Operation, xs: list[Any]) -> int:
    assert isinstance(op, arith.CmpfOp)
    name = arith.CMPF_COMPARISON_OPERATIONS[op.predicate.value.data]
    return int(_CMPF[name](xs[0], xs[1]))


def _constant(op: Operation, xs: list[Any]) -> Any:
    assert isinstance(op, arith.ConstantOp)
    attr = op.value
    if isinstance(attr, FloatAttr):
        return round_float(attr.type, attr.value.data)
    assert isinstance(attr, IntegerAttr)
    return wrap(attr.type, attr.value.data)


def _from_int(
    convert: Callable[[Attribute, int], Any], is_signed: bool
) -> Callable[[Operation, list[Any]], Any]:
    """A conversion of one integer operand, read as signed or unsigned, to the result type by
    `convert` (`round_float` for sitofp and uitofp, `wrap` for extsi, extui and index_cast)."""

    def run(op: Operation, xs: list[Any]) -> Any:
        src = op.operands[0].type
        return convert(_result_type(op), signed(src, xs[0]) if is_signed else unsigned(src, xs[0]))

    return run


def _rsqrt(x: np.float64) -> Any:
    return np.float64(1.0) / np.sqrt(x)


# op name -> (op, operand values) -> result value, for single-result ops without regions.
SCALAR_IMPLS: dict[str, Callable[[Operation, list[Any]], Any]] = {
    "arith.constant": _constant,
    "arith.addi": _int_binary(lambda a, b: a + b),
    "arith.subi": _int_binary(lambda a, b: a - b),
    "arith.muli": _int_binary(lambda a, b: a * b),
    "arith.divsi": _int_binary(_div_trunc),
    "arith.remsi": _int_binary(lambda a, b: a - b * _div_trunc(a, b)),
    "arith.divui": _int_binary(lambda a, b: a // b, unsigned),
    "arith.remui": _int_binary(lambda a, b: a % b, unsigned),
    "arith.maxsi": _int_binary(max),
    "arith.minsi": _int_binary(min),
    "arith.andi": _int_binary(lambda a, b: a & b, unsigned),
    "arith.ori": _int_binary(lambda a, b: a | b, unsigned),
    "arith.xori": _int_binary(lambda a, b: a ^ b, unsigned),
    "arith.addf": _float_binary(lambda a, b: a + b),
    "arith.subf": _float_binary(lambda a, b: a - b),
    "arith.mulf": _float_binary(lambda a, b: a * b),
    "arith.divf": _float_binary(lambda a, b: a / b),
    "arith.maximumf": _extremum(larger=True),
    "arith.minimumf": _extremum(larger=False),
    "arith.negf": lambda op, xs: round_float(_result_type(op), -xs[0]),
    "arith.cmpi": _cmpi,
    "arith.cmpf": _cmpf,
    "arith.select": lambda op, xs: xs[1] if xs[0] else xs[2],
    "arith.extf": lambda op, xs: round_float(_result_type(op), xs[0]),
    "arith.truncf": lambda op, xs: round_float(_result_type(op), xs[0]),
    "arith.sitofp": _from_int(round_float, True),
    "arith.uitofp": _from_int(round_float, False),
    "arith.fptosi": lambda op, xs: _fptosi(_result_type(op), xs[0]),
    "arith.extsi": _from_int(wrap, True),
    "arith.extui": _from_int(wrap, False),
    "arith.trunci": lambda op, xs: wrap(_result_type(op), xs[0]),
    "arith.index_cast": _from_int(wrap, True),
    "math.absf": lambda op, xs: round_float(_result_type(op), abs(xs[0])),
    "math.absi": lambda op, xs: wrap(_result_type(op), abs(xs[0])),
    "math.exp": _float_math(np.exp),
    "math.log": _float_math(np.log),
    "math.sqrt": _float_math(np.sqrt),
    "math.rsqrt": _float_math(_rsqrt),
    "math.tanh": _float_math(np.tanh),
    "math.erf": _float_math(lambda x: math.erf(float(x))),
    "math.sin": _float_math(np.sin),
    "math.cos": _float_math(np.cos),
    "math.floor": _float_math(np.floor),
    "math.ceil": _float_math(np.ceil),
    "math.roundeven": _float_math(np.rint),
    "math.trunc": _float_math(np.trunc),
    "math.log1p": _float_math(np.log1p),
    "math.expm1": _float_math(np.expm1),
    "math.log2": _float_math(np.log2),
    "math.log10": _float_math(np.log10),
    "math.exp2": _float_math(np.exp2),
    "math.asin": _float_math(np.arcsin),
    "math.acos": _float_math(np.arccos),
    "math.atan": _float_math(np.arctan),
    "math.tan": _float_math(np.tan),
    "math.sinh": _float_math(np.sinh),
    "math.cosh": _float_math(np.cosh),
    "math.asinh": _float_math(np.arcsinh),
    "math.acosh": _float_math(np.arccosh),
    "math.atanh": _float_math(np.arctanh),
    "math.atan2": _float_binary(lambda a, b: np.arctan2(np.float64(a), np.float64(b))),
    "math.copysign": _float_binary(lambda a, b: np.copysign(np.float64(a), np.float64(b))),
    "arith.maxnumf": _float_binary(lambda a, b: np.fmax(np.float64(a), np.float64(b))),
    "arith.minnumf": _float_binary(lambda a, b: np.fmin(np.float64(a), np.float64(b))),
    "math.powf": lambda op, xs: round_float(
        _result_type(op), np.power(np.float64(xs[0]), np.float64(xs[1]))
    ),
    # fmod, erfc (xfuse.dialects.mlir_ops), floor division
    "arith.remf": _float_binary(lambda a, b: np.fmod(np.float64(a), np.float64(b))),
    "math.erfc": _float_math(lambda x: math.erfc(float(x))),
    "arith.floordivsi": _int_binary(lambda a, b: a // b),
}

_TERMINATORS = (scf.YieldOp, scf.ReduceOp, func.ReturnOp)

# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


class KernelRun:
    """One call of a kernel func on numpy buffers (one per argument, of the memref's shape)."""

    def __init__(self, kernel: func.FuncOp, buffers: Sequence[np.ndarray]):
        self.kernel = kernel
        self.buffers = buffers

    def run(self) -> None:
        env: Env = dict(zip(self.kernel.body.block.args, self.buffers, strict=True))
        with np.errstate(all="ignore"):
            self.block(self.kernel.body.block, env)

    def block(self, block: Block, env: Env) -> list[Any]:
        """Run `block` (its arguments already bound); returns its terminator's operands."""
        for op in block.ops:
            if isinstance(op, _TERMINATORS):
                return [env[v] for v in op.operands]
            self.op(op, env)
        raise InterpretError("block without terminator in a kernel")

    def op(self, op: Operation, env: Env) -> None:
        impl = SCALAR_IMPLS.get(op.name)
        if impl is not None:
            env[op.results[0]] = impl(op, [env[v] for v in op.operands])
        elif isinstance(op, memref.LoadOp):
            env[op.res] = self.load(env[op.memref], [env[i] for i in op.indices], op.res.type)
        elif isinstance(op, memref.StoreOp):
            self.store(env[op.memref], [env[i] for i in op.indices], env[op.value])
        elif isinstance(op, scf.ParallelOp):
            self.parallel(op, env)
        elif isinstance(op, scf.ForOp):
            self.for_loop(op, env)
        elif isinstance(op, scf.IfOp):
            region = op.true_region if env[op.cond] else op.false_region
            values = self.block(region.block, env) if region.blocks else []
            env.update(zip(op.results, values, strict=True))
        else:
            raise InterpretError(f"the loop interpreter does not know op '{op.name}'")

    def parallel(self, op: scf.ParallelOp, env: Env) -> None:
        ranges = [
            range(env[lb], env[ub], env[st])
            for lb, ub, st in zip(op.lowerBound, op.upperBound, op.step, strict=True)
        ]
        body = op.body.block
        for ivs in itertools.product(*ranges):
            env.update(zip(body.args, ivs, strict=True))
            self.block(body, env)

    def for_loop(self, op: scf.ForOp, env: Env) -> None:
        body = op.body.block
        carried = [env[v] for v in op.iter_args]
        for i in range(env[op.lb], env[op.ub], env[op.step]):
            env[body.args[0]] = i
            env.update(zip(body.args[1:], carried, strict=True))
            carried = self.block(body, env)
        env.update(zip(op.results, carried, strict=True))

    @staticmethod
    def _check(array: np.ndarray, index: list[int]) -> tuple[int, ...]:
        if len(index) != array.ndim or any(
            not 0 <= i < d for i, d in zip(index, array.shape, strict=True)
        ):
            raise InterpretError(f"index {index} out of bounds of a buffer of shape {array.shape}")
        return tuple(index)

    def load(self, array: np.ndarray, index: list[int], t: Attribute) -> Any:
        value = array[self._check(array, index)]
        if isinstance(t, IntegerType):
            return wrap(t, int(value))
        return round_float(t, value)

    def store(self, array: np.ndarray, index: list[int], value: Any) -> None:
        array[self._check(array, index)] = value


_NUMPY_STORAGE: dict[str, Any] = {
    "f32": np.float32,
    "f64": np.float64,
    "f16": np.float16,
    "bf16": np.float32,
    "i8": np.int8,
    "i32": np.int32,
    "i64": np.int64,
}


def to_buffer(t: Tensor, memref_type: Attribute) -> np.ndarray:
    """A numpy copy of `t` in the kernel's storage for `memref_type` (bool as i8, bf16 as f32)."""
    assert isinstance(memref_type, MemRefType)
    storage = _NUMPY_STORAGE[str(memref_type.element_type)]
    data = t.detach().to("cpu")
    if data.dtype in (torch.bfloat16, torch.bool):
        data = data.to(torch.float32 if data.dtype == torch.bfloat16 else torch.int8)
    array = data.contiguous().numpy().astype(storage).reshape(memref_type.get_shape())
    return array.copy()


def from_buffer(array: np.ndarray, like: Tensor) -> Tensor:
    out = torch.from_numpy(array.copy()).reshape(like.shape)
    if like.dtype == torch.bool:
        return out != 0
    return out.to(like.dtype)


def stored_args(kernel: func.FuncOp) -> set[int]:
    """Argument numbers of the buffers the kernel writes."""
    args: list[SSAValue] = list(kernel.body.block.args)
    return {
        args.index(op.memref)
        for op in kernel.walk()
        if isinstance(op, memref.StoreOp) and op.memref in args
    }


def run_kernel(kernel: func.FuncOp, tensors: Sequence[Tensor]) -> None:
    """Run a kernel on tensors (inputs then outputs); writes its outputs in place."""
    types = kernel.function_type.inputs.data
    if len(types) != len(tensors):
        raise InterpretError(
            f"@{kernel.sym_name.data} takes {len(types)} buffers, got {len(tensors)}"
        )
    buffers = [to_buffer(t, ty) for t, ty in zip(tensors, types, strict=True)]
    KernelRun(kernel, buffers).run()
    for i in stored_args(kernel):
        tensors[i].copy_(from_buffer(buffers[i], tensors[i]))


def sentinel_tensor(t: Attribute) -> Tensor:
    """An output buffer before a kernel writes it: NaN, -7777777 or true everywhere."""
    dtype = dtypes.to_torch(graph.dtype_of(t))
    fill: float | int | bool = (
        True if dtype == torch.bool else float("nan") if dtype.is_floating_point else -7777777
    )
    return torch.full(graph.shape_of(t), fill, dtype=dtype)


def launch(module: ModuleOp, op: fusion.LaunchOp, inputs: Sequence[Tensor]) -> list[Tensor]:
    name = op.callee.root_reference.data
    kernel = SymbolTable.lookup_symbol(module, SymbolRefAttr(name))
    if not isinstance(kernel, func.FuncOp):
        raise InterpretError(f"fusion.launch: no kernel func @{name} in the module")
    outputs = [sentinel_tensor(r.type) for r in op.outputs]
    if ERROR_FLAG_ATTR not in kernel.attributes:
        run_kernel(kernel, [*inputs, *outputs])
        return outputs
    flag = torch.zeros(1, dtype=torch.int8)  # the kernel sets it on a bad index
    run_kernel(kernel, [*inputs, *outputs, flag])
    if flag.item():
        raise IndexOutOfRangeError.in_kernel(f"kernel @{name}")
    return outputs


def run_lowered(
    module: ModuleOp, inputs: Sequence[Tensor], *, function: str = "forward"
) -> list[Tensor]:
    """Run `@function` of a lowered module: launches through the kernels, other ops eagerly."""
    f = find_function(module, function)
    block = f.body.block
    if len(inputs) != len(block.args):
        raise InterpretError(f"@{function} takes {len(block.args)} arguments, got {len(inputs)}")
    env: dict[SSAValue, Tensor] = dict(zip(block.args, inputs, strict=True))
    for op in block.ops:
        args = [env[v] for v in op.operands]
        if isinstance(op, func.ReturnOp):
            return args
        results = launch(module, op, args) if isinstance(op, fusion.LaunchOp) else run_op(op, args)
        env.update(zip(op.results, results, strict=True))
    raise InterpretError(f"@{function} has no func.return")
