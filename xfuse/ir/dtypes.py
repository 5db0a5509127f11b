"""The one mapping between torch dtypes and the element types of `graph` tensors."""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    TensorType,
    bf16,
    f16,
    f32,
    f64,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute

from xfuse.errors import UnsupportedDtype

if TYPE_CHECKING:
    import torch

_NAMES: tuple[tuple[Attribute, str], ...] = (
    (f32, "float32"),
    (f16, "float16"),
    (bf16, "bfloat16"),
    (f64, "float64"),
    (i32, "int32"),
    (i64, "int64"),
    (i1, "bool"),
)


def opmath_type(element_type: Attribute) -> Attribute:
    """The type torch computes a formula of `element_type` in (its "opmath" type): f32 for
    f16 and bf16, rounded once at the end; every other type itself."""
    return f32 if isinstance(element_type, Float16Type | BFloat16Type) else element_type


def to_torch(element_type: Attribute) -> torch.dtype:
    import torch

    for attr, name in _NAMES:
        if attr == element_type:
            return getattr(torch, name)
    raise UnsupportedDtype(f"no torch dtype for element type {element_type}")


def from_torch(dtype: torch.dtype) -> Attribute:
    name = str(dtype).removeprefix("torch.")
    for attr, n in _NAMES:
        if n == name:
            return attr
    raise UnsupportedDtype(
        f"dtype {dtype} is not supported (supported: f32, f16, bf16, f64, i32, i64, bool)"
    )


def tensor_type_of(t: torch.Tensor) -> TensorType[Attribute]:
    return TensorType(from_torch(t.dtype), list(t.shape))


def byte_width(element_type: Attribute) -> int:
    if isinstance(element_type, Float64Type):
        return 8
    if isinstance(element_type, Float32Type):
        return 4
    if isinstance(element_type, Float16Type | BFloat16Type):
        return 2
    if isinstance(element_type, IntegerType):
        return max(1, element_type.width.data // 8)
    raise UnsupportedDtype(f"unknown element type {element_type}")


def tensor_input_problem(name: str, value: torch.Tensor) -> str | None:
    """Why a compiled program cannot take tensor `value` as input `name` ("input 0"; sparse or other
    non-strided layouts, complex dtypes), or None when it can."""
    import torch  # here: xfuse-opt and IR-only users do not load torch

    if value.layout != torch.strided:
        return f"{name} is a {value.layout} tensor; only dense (strided) tensors are supported"
    if value.is_complex():
        return f"{name} has complex dtype {value.dtype}; complex tensors are not supported"
    return None


def bf16_round(x: float) -> float:
    """`x`, an f32 value, rounded to the nearest bf16 (ties to even, as torch), as an f32
    value; NaN stays NaN. The one home of this rounding on the host (the loop interpreter,
    bf16 constants folded by `lower-to-nvvm`); plain Python, so that the compile workers, which
    import no numpy or torch, have it too."""
    if math.isnan(x):
        return x
    (bits,) = struct.unpack("<I", struct.pack("<f", x))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(struct.unpack("<f", struct.pack("<I", bits))[0])
