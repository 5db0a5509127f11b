"""
The arguments of `graph.torch_call` as builtin attributes, and back.

Tensors are operand references `"%tN"`; torch dtypes, devices, layouts and memory formats are
`"dtype:float32"`, `"device:cpu"`, `"layout:strided"`, `"memory_format:contiguous_format"`; a
plain string that would read as one of these is escaped as `"str:..."`. Numbers, bools, None
and (nested) lists map to IntegerAttr, FloatAttr, `true`/`false`, `#none` and ArrayAttr.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any, Protocol, cast

from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FloatAttr,
    IntegerAttr,
    NoneAttr,
    NoneType,
    StringAttr,
    f64,
    i1,
    i64,
)
from xdsl.ir import Attribute

from xfuse.errors import InterpretError, UnsupportedArgument

_PREFIXES = ("dtype:", "device:", "layout:", "memory_format:", "str:")


def tensor_ref(attr: Attribute) -> int | None:
    """The operand index an argument names (`"%t2"` -> 2), or None for any other argument."""
    if isinstance(attr, StringAttr) and attr.data.startswith("%t") and attr.data[2:].isdigit():
        return int(attr.data[2:])
    return None


def renumbered(attr: Attribute, new_index: Callable[[int], int]) -> Attribute:
    """`attr` with each tensor reference `%tK` (also inside lists) renamed `%t{new_index(K)}`:
    an argument list after operands were dropped from the call."""
    index = tensor_ref(attr)
    if index is not None:
        return StringAttr(f"%t{new_index(index)}")
    if isinstance(attr, ArrayAttr):
        return ArrayAttr([renumbered(a, new_index) for a in attr.data])
    return attr


def _is_special(s: str) -> bool:
    return s.startswith(_PREFIXES) or tensor_ref(StringAttr(s)) is not None


def encode_arg(value: Any, tensor_index: Callable[[Any], int | None]) -> Attribute:
    """One torch argument as an attribute; `tensor_index` names the operand of a tensor value."""
    import torch

    index = tensor_index(value)
    if index is not None:
        return StringAttr(f"%t{index}")
    if value is None:
        return NoneAttr()
    if isinstance(value, bool):
        return IntegerAttr(int(value), i1)
    if isinstance(value, int):
        return IntegerAttr(value, i64)
    if isinstance(value, float):
        return FloatAttr(value, f64)
    if isinstance(value, str):
        return StringAttr("str:" + value if _is_special(value) else value)
    if isinstance(value, torch.dtype):
        return StringAttr("dtype:" + str(value).removeprefix("torch."))
    if isinstance(value, torch.device):
        return StringAttr("device:" + str(value))
    if isinstance(value, torch.layout):
        return StringAttr("layout:" + str(value).removeprefix("torch."))
    if isinstance(value, torch.memory_format):
        return StringAttr("memory_format:" + str(value).removeprefix("torch."))
    if isinstance(value, list | tuple):
        return ArrayAttr([encode_arg(v, tensor_index) for v in value])  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
    raise UnsupportedArgument(f"cannot encode argument {value!r} of type {type(value).__name__}")


def encode_args(
    args: Sequence[Any], kwargs: dict[str, Any], tensor_index: Callable[[Any], int | None]
) -> tuple[ArrayAttr[Attribute], DictionaryAttr]:
    return (
        ArrayAttr([encode_arg(a, tensor_index) for a in args]),
        DictionaryAttr({k: encode_arg(v, tensor_index) for k, v in kwargs.items()}),
    )


class Operands(Protocol):
    """The operand values of a call, by index (a list; placeholders when decoding ahead)."""

    def __getitem__(self, index: int, /) -> Any: ...


def decode_arg(attr: Attribute, tensors: Operands) -> Any:
    """The torch value of an encoded argument, with `tensors` the call's operand values."""
    import torch

    if isinstance(attr, NoneAttr | NoneType):  # `none` prints NoneAttr and parses as NoneType
        return None
    if isinstance(attr, IntegerAttr):
        value = attr.value.data  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        return bool(value) if attr.type == i1 else int(value)  # pyright: ignore[reportUnknownArgumentType]
    if isinstance(attr, FloatAttr):
        return float(attr.value.data)  # pyright: ignore[reportUnknownArgumentType, reportUnknownMemberType]
    if isinstance(attr, ArrayAttr):
        return [decode_arg(a, tensors) for a in attr.data]  # pyright: ignore[reportUnknownVariableType]
    index = tensor_ref(attr)
    if index is not None:
        return tensors[index]
    if isinstance(attr, StringAttr):
        s = attr.data
        kind, _, name = s.partition(":")
        if kind == "str":
            return name
        if kind in ("dtype", "layout", "memory_format"):
            return getattr(torch, name)
        if kind == "device":
            return torch.device(name)
        return s
    raise UnsupportedArgument(f"cannot decode argument attribute {attr}")


def decode_args(
    args: ArrayAttr[Attribute], kwargs: DictionaryAttr, tensors: Sequence[Any]
) -> tuple[list[Any], dict[str, Any]]:
    return (
        [decode_arg(a, tensors) for a in args.data],
        {k: decode_arg(v, tensors) for k, v in kwargs.data.items()},
    )


def resolve_torch_op(target: str) -> Callable[..., Any]:
    """`aten.cumsum.default` -> torch.ops.aten.cumsum.default, with a clear error."""
    import torch  # here, not at the top: IR-only users (xfuse-opt) do not load torch

    obj: Any = torch.ops
    try:
        for part in target.split("."):
            obj = getattr(obj, part)
    except (AttributeError, RuntimeError) as e:
        raise InterpretError(f"unknown torch operator '{target}'") from e
    if not callable(obj):
        raise InterpretError(f"torch operator '{target}' is not callable")
    return obj


def direct_torch_op(target: str) -> Callable[..., Any]:
    """`resolve_torch_op(target)` for calling many times: the operator's generated Python
    binding (`torch.convolution` for `aten.convolution.default`), which parses its arguments in
    C++ as eager's calls do, where that binding can reach no other overload (the operator's
    others are `out=` variants, which it picks only given `out`); else the `OpOverload`, whose
    call boxes every argument through the dispatcher's generic entry (several µs more for
    a convolution)."""
    import torch

    op = resolve_torch_op(target)
    namespace, name, overload = (target.split(".") + ["", ""])[:3]
    packet = getattr(op, "overloadpacket", None)
    if namespace != "aten" or packet is None:
        return op
    others = [o for o in packet.overloads() if o != overload]
    if any(o != "out" and not o.endswith("_out") for o in others):
        return op
    for bindings in (torch._C._VariableFunctions, torch._C._nn):
        binding = getattr(bindings, name, None)
        if binding is not None:
            return cast(Callable[..., Any], binding)
    return op


@cache
def target_may_mutate(target: str) -> bool:
    """Whether the torch operator `target` may write one of its arguments (its schema says
    so); unknown operators may."""
    try:
        schema = getattr(resolve_torch_op(target), "_schema", None)
    except InterpretError:
        return True  # unknown: assume the worst
    if schema is None:
        return True
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


@cache
def target_draws_random(target: str) -> bool:
    """Whether the torch operator `target` draws from torch's RNG (its tags say
    `nondeterministic_seeded`: dropout, bernoulli, rand); unknown operators may."""
    import torch

    try:
        tags = getattr(resolve_torch_op(target), "tags", None)
    except InterpretError:
        return True  # unknown: assume the worst
    return tags is None or torch.Tag.nondeterministic_seeded in tags


class Operand:
    """Stands for the call's `index`-th operand in arguments decoded ahead of the call."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Operands:
    """A sequence whose items are `Operand` placeholders (for `decode_arg` ahead of a call)."""

    def __getitem__(self, index: int) -> Operand:
        return Operand(index)


Filler = Callable[[Sequence[Any]], Any]
"""The value of an argument that holds operands, given the call's operand values."""


def _filler(value: Any) -> Filler | None:
    """How to build `value` (decoded with placeholders) from the operands; None: a constant."""
    if isinstance(value, Operand):
        index = value.index
        return lambda tensors: tensors[index]
    if isinstance(value, list):
        items: list[Any] = value  # pyright: ignore[reportUnknownVariableType]
        parts = [_filler(v) for v in items]
        if all(p is None for p in parts):
            return None
        pairs = list(zip(parts, items, strict=True))
        return lambda tensors: [v if p is None else p(tensors) for p, v in pairs]
    return None


PreparedArgs = Callable[[Sequence[Any]], tuple[list[Any], dict[str, Any]]]


def direct_arguments(
    args: ArrayAttr[Attribute], kwargs: DictionaryAttr
) -> tuple[list[Any], dict[str, Any]] | None:
    """The call's arguments decoded ahead, an `Operand` wherever an operand is a whole
    positional argument, when that is the only place operands go (none inside a list or a
    keyword): a call its caller can write out as `fn(s3, c4, [1, 1], ...)`; None otherwise."""
    decoded = _decoded(args, kwargs)
    return decoded if _is_direct(*decoded) else None


def _decoded(
    args: ArrayAttr[Attribute], kwargs: DictionaryAttr
) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments and keywords decoded, with an `Operand` for each operand."""
    placeholders = _Operands()
    fixed_args = [decode_arg(a, placeholders) for a in args.data]
    fixed_kwargs = {k: decode_arg(v, placeholders) for k, v in kwargs.data.items()}
    return fixed_args, fixed_kwargs


def _is_direct(fixed_args: list[Any], fixed_kwargs: dict[str, Any]) -> bool:
    """Whether operands go only in whole positional arguments (see `direct_arguments`)."""
    if any(_filler(v) is not None for v in fixed_kwargs.values()):
        return False
    return all(_filler(a) is None or isinstance(a, Operand) for a in fixed_args)


def operand_filler(template: list[Any]) -> Callable[[Sequence[Any]], list[Any]]:
    """A function of the operand values: `template` (direct arguments, `direct_arguments`)
    with each `Operand` replaced by its operand."""
    slots = [(i, a.index) for i, a in enumerate(template) if isinstance(a, Operand)]

    def fill(values: Sequence[Any]) -> list[Any]:
        out = template.copy()
        for i, j in slots:
            out[i] = values[j]
        return out

    return fill


def prepare_args(args: ArrayAttr[Attribute], kwargs: DictionaryAttr) -> PreparedArgs:
    """`decode_args` done once: a function of the operand values that only puts them in place
    (the constants decoded ahead, shared by every call: torch ops do not change their
    non-tensor arguments)."""
    fixed_args, fixed_kwargs = _decoded(args, kwargs)
    if _is_direct(fixed_args, fixed_kwargs):
        positional = operand_filler(fixed_args)
        return lambda tensors: (positional(tensors), fixed_kwargs)

    arg_fills = [(i, f) for i, a in enumerate(fixed_args) if (f := _filler(a)) is not None]
    kwarg_fills = [(k, f) for k, v in fixed_kwargs.items() if (f := _filler(v)) is not None]

    def fill(tensors: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]:
        out = fixed_args.copy()
        for i, f in arg_fills:
            out[i] = f(tensors)
        kw = fixed_kwargs.copy()
        for k, f in kwarg_fills:
            kw[k] = f(tensors)
        return out, kw

    return fill
