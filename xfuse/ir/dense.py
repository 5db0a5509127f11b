"""Dense constants (`DenseIntOrFPElementsAttr`) stored as xfuse keeps them: a constant whose
elements are all equal holds one element's bytes (a splat, as the printer writes it:
`dense<0.0> : tensor<8192x50304xf32>`). xDSL's parser and `from_list` store every element,
1.6 GB for the zeros of a language model's logits gradient, and decoding them one by one took
seconds."""

from __future__ import annotations

import math
from typing import Any

from xdsl.dialects.builtin import BytesAttr, DenseIntOrFPElementsAttr

from xfuse.ir.dtypes import byte_width

Dense = DenseIntOrFPElementsAttr[Any]


def element_bytes(value: Dense) -> bytes:
    """The constant's bytes, a splat's as one element's whether it is stored whole or not."""
    data = value.data.data
    size = byte_width(value.get_element_type())
    if len(data) > size and data[:size] * (len(data) // size) == data:
        return data[:size]
    return data


def compact_splat(value: Dense) -> Dense:
    """`value`, a splat stored as one element's bytes."""
    if math.prod(value.get_shape() or ()) == 0:
        return value
    data = element_bytes(value)
    if len(data) == len(value.data.data):
        return value
    return DenseIntOrFPElementsAttr(value.type, BytesAttr(data))


def is_splat(value: Dense) -> bool:
    """Whether every element of the constant is equal (an empty one is no splat)."""
    count = math.prod(value.get_shape() or ())
    return count > 0 and len(element_bytes(value)) == byte_width(value.get_element_type())


def splat_value(value: Dense) -> float | int | None:
    """The one value of a constant whose elements are all equal, else None."""
    if not is_splat(value):
        return None
    found: float | int = compact_splat(value).get_values()[0]
    return found
