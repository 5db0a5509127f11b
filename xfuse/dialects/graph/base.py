"""What every graph op shares: the op-kind traits fusion reads, the element types, shape
helpers and verifier checks, the bases of the ops of one tensor operand, and `op_facts`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import ClassVar, TypeVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BFloat16Type,
    DenseArrayBase,
    Float16Type,
    Float32Type,
    Float64Type,
    IntegerType,
    Signedness,
    TensorType,
    i1,
    i64,
)
from xdsl.dialects.func import FuncOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.irdl import IRDLOperation, VarConstraint, base, operand_def, result_def
from xdsl.traits import OpTrait
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import OpFacts
from xfuse.dialects.graph.sizes import SizeExpr, SizesAttr, SymsAttr
from xfuse.ir.names import SIZES_ATTR

# ---------------------------------------------------------------------------------------------
# Op-kind traits, read by fusion (xfuse/passes/fusion/legality.py)
# ---------------------------------------------------------------------------------------------


class OpKind(OpTrait):
    """The fusion kind of an op; `kind`, the name used in reports and group attributes, is
    the kind trait's class name in lower case."""

    kind: ClassVar[str] = "opaque"

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.kind = cls.__name__.lower()

    def verify(self, op: Operation) -> None:
        """Symbolic sizes (docs/dynamic-shapes.md): an op whose class does not declare
        `SYMBOLIC_SIZES` takes no dynamic dim; the size symbols of one that does are in its
        function's `graph.sizes` table, and an input symbol's argument holds it."""
        values = [("operand", i, v) for i, v in enumerate(op.operands)]
        values += [("result", i, v) for i, v in enumerate(op.results)]
        # A dynamic dim without its size symbol is `_check_tensor`'s to report.
        symbolic = [(w, i, v) for w, i, v in values if _names_symbols(v)]
        if not symbolic:
            return
        if not getattr(type(op), "SYMBOLIC_SIZES", False):
            what, i, v = symbolic[0]
            raise VerifyException(
                f"{op.name} does not take symbolic sizes yet ({what} {i} is {v.type})"
            )
        table = size_table(op)
        if table is not None and table.problem is not None:
            raise table.problem
        for what, i, v in symbolic:
            _check_symbols(v, f"{what} {i}", table, op)


class Elementwise(OpKind):
    """Each output element depends on the input elements at the same (broadcast) index."""


class Broadcast(OpKind):
    """Replicates its input along new or size-1 dims: index arithmetic, no data movement."""


class Injective(OpKind):
    """A layout op (reshape, permute, slice, concat): each output element reads one input element."""


class Reduction(OpKind):
    """Combines the elements along some dims into one."""


class Extern(OpKind):
    """Runs through a library or an eager torch call; a fusion boundary."""


class Composite(OpKind):
    """A composite op (softmax, layer_norm, ...) that `decompose` rewrites into primitives."""


KIND_TRAITS: tuple[type[OpKind], ...] = (
    Elementwise,
    Broadcast,
    Injective,
    Reduction,
    Extern,
    Composite,
)


def op_kind(op: Operation) -> str:
    """The kind name of a graph op ("elementwise", ...), or "opaque" for any other op."""
    for trait in KIND_TRAITS:
        if op.has_trait(trait):
            return trait.kind
    return OpKind.kind


# ---------------------------------------------------------------------------------------------
# Types and shape helpers
# ---------------------------------------------------------------------------------------------


FLOAT_TYPES = (Float32Type, Float16Type, BFloat16Type, Float64Type)


DTYPE_NAMES = "f32, f16, bf16, f64, i32, i64, i1"


def is_float(t: Attribute) -> bool:
    return isinstance(t, FLOAT_TYPES)


def is_supported_element_type(t: Attribute) -> bool:
    if is_float(t):
        return True
    return (
        isinstance(t, IntegerType)
        and t.width.data in (1, 32, 64)
        and t.signedness.data == Signedness.SIGNLESS
    )


def tensor_type(value: SSAValue | Attribute) -> TensorType[Attribute]:
    t = value.type if isinstance(value, SSAValue) else value
    assert isinstance(t, TensorType)
    return t  # pyright: ignore[reportUnknownVariableType]


def shape_of(value: SSAValue | Attribute) -> tuple[int, ...]:
    """The static shape of a tensor; of one with dynamic dims, a `SymbolicShape` (`?` as
    xDSL's DYNAMIC_INDEX, the symbols kept), so that an op built with it (`ReshapeOp(x,
    shape_of(y))`) has `y`'s symbolic type."""
    t = tensor_type(value)
    shape = t.get_shape()
    if isinstance(t.encoding, SymsAttr) and any(d < 0 for d in shape):
        return SymbolicShape(dims_of(t))
    return tuple(shape)


class SymbolicShape(tuple[int, ...]):
    """`shape_of` of a tensor with dynamic dims: its ints, `?` as DYNAMIC_INDEX, and `dims`,
    with each size symbol's name. Two are equal when their dims are."""

    dims: tuple[Dim, ...]

    def __new__(cls, dims: Sequence[Dim]) -> SymbolicShape:
        shape = super().__new__(cls, (DYNAMIC_INDEX if isinstance(d, str) else d for d in dims))
        shape.dims = tuple(dims)
        return shape

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SymbolicShape):
            return self.dims == other.dims
        return tuple.__eq__(self, other)  # pyright: ignore[reportArgumentType]

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(self.dims)


def dtype_of(value: SSAValue | Attribute) -> Attribute:
    return tensor_type(value).element_type


Dim = int | str
"""A dim of a shape: a static size, or the name of a size symbol (docs/dynamic-shapes.md)."""

DimT = TypeVar("DimT", int, Dim)


def dims_at(dims: Sequence[Dim], sizes: Mapping[str, int]) -> tuple[int, ...]:
    """`dims` with each size symbol at its size in `sizes` (a call's)."""
    return tuple(d if isinstance(d, int) else sizes[d] for d in dims)


def is_symbolic(value: SSAValue | Attribute) -> bool:
    """Whether a value (or type) is a tensor with a dynamic dim."""
    t = value.type if isinstance(value, SSAValue) else value
    return isinstance(t, TensorType) and any(d < 0 for d in t.get_shape())


def _names_symbols(value: SSAValue) -> bool:
    """Whether a value's type is a tensor whose dynamic dims each name a size symbol."""
    t = value.type
    if not isinstance(t, TensorType) or not isinstance(t.encoding, SymsAttr):
        return False
    return len(t.encoding.data) == sum(1 for d in t.get_shape() if d < 0) > 0


def dims_of(value: SSAValue | Attribute) -> tuple[Dim, ...]:
    """The shape of a tensor with each dynamic dim as its size symbol's name (for a static
    tensor, `shape_of`)."""
    t = tensor_type(value)
    shape = t.get_shape()
    if all(d >= 0 for d in shape):
        return tuple(shape)
    names = iter(t.encoding.data if isinstance(t.encoding, SymsAttr) else ())
    return tuple(d if d >= 0 else next(names, "?") for d in shape)


def tensor_of(dtype: Attribute, dims: Sequence[Dim]) -> TensorType[Attribute]:
    """The tensor type of `dims` (a symbol name becomes `?` and is named in the encoding);
    a static shape is a plain tensor type."""
    if isinstance(dims, SymbolicShape):
        dims = dims.dims
    # A negative int is a dynamic dim without its symbol (see ConcatOp).
    shape = tuple(DYNAMIC_INDEX if isinstance(d, str) or d < 0 else d for d in dims)
    names = tuple(d for d in dims if isinstance(d, str))
    return _tensor_type_of(dtype, shape, names)


@lru_cache(maxsize=4096)
def _tensor_type_of(
    dtype: Attribute, shape: tuple[int, ...], names: tuple[str, ...]
) -> TensorType[Attribute]:
    """The tensor type of `shape` and `dtype`, its dynamic dims named `names`: one instance
    for each (attributes are immutable values; building and verifying one is slow)."""
    if not names:
        return TensorType(dtype, shape)
    return TensorType(dtype, shape, SymsAttr(names))


def size_table(op: Operation) -> SizesAttr | None:
    """The `graph.sizes` table of the function `op` is in, if any."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FuncOp):
        parent = parent.parent_op()
    if parent is None:
        return None
    table = parent.attributes.get(SIZES_ATTR)
    return table if isinstance(table, SizesAttr) else None


def size_dim(op: Operation, expr: SizeExpr) -> Dim:
    """`expr`, a polynomial of the size symbols of the function `op` is in, as a dim: a
    constant, the symbol whose polynomial it is, or a derived symbol added to the function's
    table (`SizesAttr.with_size`): the result dim of a rewrite that pads a symbolic dim."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FuncOp):
        parent = parent.parent_op()
    table = None if parent is None else parent.attributes.get(SIZES_ATTR)
    assert parent is not None and isinstance(table, SizesAttr), "a symbolic dim outside a table"
    extended, dim = table.with_size(expr)
    if extended is not table:
        parent.attributes[SIZES_ATTR] = extended
    return dim


def hinted_shape_of(value: SSAValue | Attribute, table: SizesAttr | None) -> tuple[int, ...]:
    """The shape with each size symbol at its hint (what byte counts and scores use); a
    static shape as it is."""
    dims = dims_of(value)
    if all(isinstance(d, int) for d in dims):
        return tuple(d for d in dims if isinstance(d, int))
    hints = table.hints if table is not None else {}
    return tuple(d if isinstance(d, int) else hints.get(d, 0) for d in dims)


def dims_numel(dims: Sequence[Dim]) -> SizeExpr:
    """The element count of a shape as a polynomial of its symbols."""
    total = SizeExpr.constant(1)
    for d in dims:
        total = total * SizeExpr.dim(d)
    return total


def _check_symbols(value: SSAValue, what: str, table: SizesAttr | None, op: Operation) -> None:
    """Check that each size symbol of `value`'s type is in `table`, and that an input
    symbol's argument holds it at its dim."""
    names = [d for d in dims_of(value) if isinstance(d, str)]
    if table is None:
        raise VerifyException(
            f"{what} names size symbols ({', '.join(names)}) but the function has no "
            f"{SIZES_ATTR} table"
        )
    for name in names:
        entry = table.by_name.get(name)
        if entry is None:
            raise VerifyException(
                f"size symbol '{name}' of {what} is not in the function's {SIZES_ATTR} table"
            )
        if entry.source is not None:
            _check_source(name, entry.source, op)


def _check_source(name: str, source: tuple[int, int], op: Operation) -> None:
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, FuncOp):
        parent = parent.parent_op()
    if parent is None or not parent.body.blocks:
        return
    block: Block = parent.body.blocks[0]
    arg, dim = source
    found = (
        dims_of(block.args[arg])
        if arg < len(block.args) and isinstance(block.args[arg].type, TensorType)
        else None
    )
    if found is None or dim >= len(found) or found[dim] != name:
        have = block.args[arg].type if arg < len(block.args) else "no such argument"
        raise VerifyException(
            f"size symbol '{name}' is read from input({arg}, {dim}), which is {have}"
        )


def fmt_shape(shape: Sequence[Dim]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def broadcast_shapes(*shapes: Sequence[DimT]) -> tuple[DimT, ...] | None:
    """Torch's broadcasting of shapes, or None when they do not broadcast. A size symbol
    (never 1) broadcasts against 1 and itself only: anything else is not provable."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[DimT] = []
    for i in range(rank):
        size: DimT = 1
        for s in shapes:
            d = s[i - rank + len(s)] if i - rank + len(s) >= 0 else 1
            if d == 1:
                continue
            if size not in (1, d):
                return None
            size = d
        out.append(size)
    return tuple(out)


def reduced_shape(shape: Sequence[DimT], dims: Sequence[int], keepdim: bool) -> tuple[DimT, ...]:
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _check_tensor(value: SSAValue, what: str) -> TensorType[Attribute]:
    t = value.type
    if not isinstance(t, TensorType):
        raise VerifyException(f"expected {what} to be a ranked tensor, found {t}")
    dynamic = sum(1 for d in t.get_shape() if d < 0)
    encoding = t.encoding
    if dynamic and not isinstance(encoding, SymsAttr):
        raise VerifyException(f"expected {what} to have a static shape, found {t}")
    if dynamic and isinstance(encoding, SymsAttr) and len(encoding.data) != dynamic:
        raise VerifyException(f"expected {what} to name one size symbol per dynamic dim, found {t}")
    if not is_supported_element_type(t.element_type):
        raise VerifyException(
            f"expected {what} element type to be one of {DTYPE_NAMES}, found {t.element_type}"
        )
    return t  # pyright: ignore[reportUnknownVariableType]


def _check_float(t: TensorType[Attribute]) -> None:
    """Check that an operand of type `t` holds floating-point elements."""
    if not is_float(t.element_type):
        raise VerifyException(f"expected a floating-point operand, found {t.element_type}")


def _check_numeric(t: TensorType[Attribute]) -> None:
    """Check that an operand of type `t` holds numbers, not bools."""
    if t.element_type == i1:
        raise VerifyException("expected a numeric operand, found i1")


def _check_counts(n: int, why: str, **values: Sequence[int]) -> None:
    """Check that each of `values` (property name -> its values) has `n` of them (`why`: "the
    operand's rank")."""
    for name, arr in values.items():
        if len(arr) != n:
            raise VerifyException(f"expected {n} {name} values ({why}), found {len(arr)}")


def _check_same_dtype(values: Sequence[SSAValue], what: str) -> None:
    dtypes = [dtype_of(v) for v in values]
    if any(d != dtypes[0] for d in dtypes):
        raise VerifyException(
            f"expected {what} to have the same element type, found "
            + ", ".join(str(d) for d in dtypes)
        )


def _check_dims(dims: Sequence[int], rank: int, what: str = "dims") -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise VerifyException(f"expected {what} in [0, {rank}), found {d}")
    if len(set(dims)) != len(dims):
        raise VerifyException(f"expected {what} to be unique, found {list(dims)}")


def _check_result_shape(op: Operation, expected: Sequence[Dim]) -> None:
    found = dims_of(op.results[0])
    if tuple(expected) != found:
        raise VerifyException(
            f"expected result shape {fmt_shape(expected)}, found {fmt_shape(found)}"
        )


def _check_shape_rule(
    op: Operation,
    rule: Callable[..., tuple[Dim, ...] | None],
    operands: Sequence[SSAValue],
    fails: str,
) -> None:
    """Check that the operands' shapes fit `rule` (which gives the result's shape, or None:
    "operand shapes [..] and [..] `fails`", "for every size of their symbols" where one has
    a size symbol) and that the result has its shape."""
    shapes = [dims_of(v) for v in operands]
    shape = rule(*shapes)
    if shape is None:
        *rest, last = (fmt_shape(s) for s in shapes)
        symbolic = any(isinstance(d, str) for s in shapes for d in s)
        suffix = " for every size of their symbols" if symbolic else ""
        raise VerifyException(f"operand shapes {', '.join(rest)} and {last} {fails}{suffix}")
    _check_result_shape(op, shape)


def _ints(attr: DenseArrayBase[IntegerType]) -> tuple[int, ...]:
    return tuple(int(x) for x in attr.get_values())


def _i64_array(values: Sequence[int]) -> DenseArrayBase:  # pyright: ignore[reportMissingTypeArgument]
    return _i64_array_of(tuple(values))


@lru_cache(maxsize=4096)
def _i64_array_of(values: tuple[int, ...]) -> DenseArrayBase:  # pyright: ignore[reportMissingTypeArgument]
    """The i64 array of `values`: one instance for each (as `_tensor_type_of`)."""
    return DenseArrayBase.from_list(i64, list(values))


# ---------------------------------------------------------------------------------------------
# Bases of the ops of one tensor operand
# ---------------------------------------------------------------------------------------------


class OneTensorOp(IRDLOperation):
    """Base of ops of one tensor operand `input` and one tensor result `result` of another
    shape (or element type)."""

    input = operand_def(TensorType)
    result = result_def(TensorType)

    def __init__(
        self,
        input: SSAValue | Operation,
        shape: Sequence[Dim],
        dtype: Attribute | None = None,
        **properties: Attribute | None,
    ):
        """The op of `input`, its result of `shape` and `dtype` (the operand's by default)."""
        input = SSAValue.get(input)
        super().__init__(
            operands=[input],
            result_types=[tensor_of(dtype_of(input) if dtype is None else dtype, shape)],
            properties=properties,
        )

    def _check_tensors(self, same_dtype: bool = True) -> TensorType[Attribute]:
        """Check that the operand and the result are graph tensors (of one element type where
        `same_dtype`); the operand's type."""
        t = _check_tensor(self.input, "operand")
        _check_tensor(self.result, "result")
        if same_dtype:
            _check_same_dtype([self.input, self.result], "operand and result")
        return t


class SameTypeOp(IRDLOperation):
    """Base of ops of one tensor operand `input` whose `result` has its type."""

    T: ClassVar = VarConstraint("T", base(TensorType))
    input = operand_def(T)
    result = result_def(T)

    def __init__(self, input: SSAValue | Operation, **properties: Attribute | None):
        input = SSAValue.get(input)
        super().__init__(operands=[input], result_types=[input.type], properties=properties)


# ---------------------------------------------------------------------------------------------
# Facts
# ---------------------------------------------------------------------------------------------


def op_facts(op: type[Operation] | Operation) -> OpFacts:
    """The facts a graph op class declares (see `xfuse.dialects.facts`); none for other ops."""
    cls = op if isinstance(op, type) else type(op)
    facts = getattr(cls, "FACTS", None)
    return facts if isinstance(facts, OpFacts) else OpFacts()
