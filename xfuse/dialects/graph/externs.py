"""Extern ops (matrix products and `torch_call`, which run in torch) and constants."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, cast

from xdsl.dialects.builtin import (
    I64,
    ArrayAttr,
    BytesAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    IntegerAttr,
    IntegerType,
    StringAttr,
    TensorType,
)
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.irdl.operations import AttrSizedOperandSegments
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import ConstantLike, Pure
from xdsl.utils.exceptions import VerifyException

from xfuse.dialects.facts import Fuzz, OpFacts
from xfuse.dialects.graph.base import (
    FLOAT_TYPES,
    Dim,
    Elementwise,
    Extern,
    _check_result_shape,
    _check_same_dtype,
    _check_shape_rule,
    _check_tensor,
    _i64_array,
    _ints,
    broadcast_shapes,
    dims_of,
    dtype_of,
    fmt_shape,
    numel,
    tensor_of,
)
from xfuse.dialects.torch_args import tensor_ref
from xfuse.ir.dense import compact_splat

# ---------------------------------------------------------------------------------------------
# Extern ops
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class MatmulOp(IRDLOperation):
    """torch.matmul of operands of rank >= 2, batch dims broadcast.
    `%y = graph.matmul %a, %b : tensor<8x16xf32>, tensor<16x4xf32> -> tensor<8x4xf32>`"""

    name = "graph.matmul"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.matmul",
        aten=("aten.mm.default", "aten.bmm.default", "aten.matmul.default"),
        fuzz=Fuzz.drawn_by("matmul"),
        reads_transposed=True,
    )
    lhs = operand_def(TensorType)
    rhs = operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Extern())
    assembly_format = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)"
    SYMBOLIC_SIZES: ClassVar[bool] = True

    def __init__(self, lhs: SSAValue | Operation, rhs: SSAValue | Operation):
        lhs, rhs = SSAValue.get(lhs), SSAValue.get(rhs)
        shape = matmul_shape(dims_of(lhs), dims_of(rhs))
        if shape is None:
            raise ValueError("graph.matmul: operand shapes do not match")
        super().__init__(operands=[lhs, rhs], result_types=[tensor_of(dtype_of(lhs), shape)])

    def verify_(self) -> None:
        lt = _check_tensor(self.lhs, "lhs")
        rt = _check_tensor(self.rhs, "rhs")
        _check_tensor(self.result, "result")
        _check_same_dtype([self.lhs, self.rhs, self.result], "operands and result")
        if lt.get_shape().__len__() < 2 or len(rt.get_shape()) < 2:
            raise VerifyException(
                f"expected operands of rank >= 2, found ranks {len(lt.get_shape())} "
                f"and {len(rt.get_shape())}"
            )
        _check_shape_rule(self, matmul_shape, [self.lhs, self.rhs], "do not match for matmul")


def matmul_shape(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...] | None:
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    if batch is None:
        return None
    return (*batch, a[-2], b[-1])


@irdl_op_definition
class LinearOp(IRDLOperation):
    """torch.nn.functional.linear: x @ weight^T (+ bias); `decompose` splits it into matmul + add.
    `%y = graph.linear %x, %w bias(%b : tensor<4xf32>) : tensor<8x16xf32>, tensor<4x16xf32> -> tensor<8x4xf32>`"""

    name = "graph.linear"
    FACTS: ClassVar[OpFacts] = OpFacts(
        aten=("aten.linear.default",),
        fuzz=Fuzz.drawn_by("matmul"),
    )
    input = operand_def(TensorType)
    weight = operand_def(TensorType)
    bias = opt_operand_def(TensorType)
    result = result_def(TensorType)
    traits = traits_def(Pure(), Extern())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    SYMBOLIC_SIZES: ClassVar[bool] = True
    assembly_format = (
        "$input `,` $weight (`bias` `(` $bias^ `:` type($bias) `)`)? attr-dict `:` "
        "type($input) `,` type($weight) `->` type($result)"
    )

    def __init__(
        self,
        input: SSAValue | Operation,
        weight: SSAValue | Operation,
        bias: SSAValue | Operation | None = None,
    ):
        input, weight = SSAValue.get(input), SSAValue.get(weight)
        shape = (*dims_of(input)[:-1], dims_of(weight)[0])
        super().__init__(
            operands=[input, weight, [SSAValue.get(bias)] if bias is not None else []],
            result_types=[tensor_of(dtype_of(input), shape)],
        )

    def verify_(self) -> None:
        xt = _check_tensor(self.input, "input")
        wt = _check_tensor(self.weight, "weight")
        _check_tensor(self.result, "result")
        values = [self.input, self.weight, self.result]
        if self.bias is not None:
            bt = _check_tensor(self.bias, "bias")
            values.append(self.bias)
            if dims_of(bt) not in ((dims_of(wt)[0],), ()):
                raise VerifyException(
                    f"expected bias of shape [{dims_of(wt)[0]}], found {fmt_shape(dims_of(bt))}"
                )
        _check_same_dtype(values, "operands and result")
        xs, ws = dims_of(xt), dims_of(wt)
        if len(xs) < 1 or len(ws) != 2 or xs[-1] != ws[1]:
            raise VerifyException(
                f"expected input [..., K] and weight [N, K], found {fmt_shape(xs)} and {fmt_shape(ws)}"
            )
        _check_result_shape(self, (*xs[:-1], ws[0]))


@irdl_op_definition
class TorchCallOp(IRDLOperation):
    """An opaque torch operator, run eagerly: the way any op xfuse does not know still compiles.
    `target` names the operator in `torch.ops` (`aten.cumsum.default`); `args` and `kwargs` hold
    its other arguments as attributes (xfuse/dialects/torch_args.py): `"%t0"` is operand 0,
    `"dtype:float32"` a dtype, ints, floats, bools, strings and lists as builtin attributes.
    `%y = graph.torch_call "aten.cumsum.default"(%x) args = ["%t0", 1] kwargs = {} : (tensor<4x8xf32>) -> tensor<4x8xf32>`
    Where the operator returns a tuple of which only some items are the op's results (others
    None or ints, as CUDA's attention kernels report), `picks` holds their positions:
    `... kwargs = {} picks = [0 : i64, 1 : i64, 6 : i64, 7 : i64] : ...`.
    Where torch lays a result out as a dense permutation of a row-major tensor (attention's
    output, [B, H, T, D] in [B, T, H, D] memory), `orders` holds, per result, torch's dims in
    memory order, outermost first (an empty array: the result as torch returns it): the op's
    result is torch's permuted so, `out.permute(order)`, whose type is that memory-order shape
    and which is contiguous where torch lays it out as traced; the importer reads it back to
    the logical shape with a `graph.permute` (fusion then reads the memory in place):
    `... kwargs = {} orders = [array<i64: 0, 2, 1, 3>] : (...) -> tensor<1x16x4x8xf32>`."""

    name = "graph.torch_call"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_by("unsupported"),
        without={"aten": "the importer's fallback for every aten op without a converter"},
    )
    target = prop_def(StringAttr)
    inputs = var_operand_def(TensorType)
    outputs = var_result_def(TensorType)
    args = prop_def(ArrayAttr)
    kwargs = prop_def(DictionaryAttr)
    picks = opt_prop_def(ArrayAttr[IntegerAttr])
    orders = opt_prop_def(ArrayAttr[DenseArrayBase[I64]])
    traits = traits_def(Extern())
    SYMBOLIC_SIZES: ClassVar[bool] = True
    assembly_format = (
        "$target `(` $inputs `)` `args` `=` $args `kwargs` `=` $kwargs "
        "(`picks` `=` $picks^)? (`orders` `=` $orders^)? attr-dict "
        "`:` functional-type($inputs, $outputs)"
    )

    def __init__(
        self,
        target: str,
        inputs: Sequence[SSAValue | Operation],
        result_types: Sequence[Attribute],
        args: ArrayAttr[Attribute] | None = None,
        kwargs: DictionaryAttr | None = None,
        picks: Sequence[int] | None = None,
        orders: Sequence[Sequence[int] | None] | None = None,
    ):
        properties: dict[str, Attribute] = {
            "target": StringAttr(target),
            "args": args if args is not None else ArrayAttr([]),
            "kwargs": kwargs if kwargs is not None else DictionaryAttr({}),
        }
        if picks is not None:
            properties["picks"] = ArrayAttr([IntegerAttr(i, 64) for i in picks])
        if orders is not None and any(orders):
            properties["orders"] = ArrayAttr([_i64_array(order or ()) for order in orders])
        super().__init__(
            operands=[[SSAValue.get(v) for v in inputs]],
            result_types=[list(result_types)],
            properties=properties,
        )

    @property
    def picked(self) -> tuple[int, ...] | None:
        """The positions of the operator's tuple result that are the op's results (None: its
        tensors, in order)."""
        return None if self.picks is None else tuple(a.value.data for a in self.picks.data)

    @property
    def memory_orders(self) -> tuple[tuple[int, ...] | None, ...] | None:
        """Per result, torch's dims in memory order (`out.permute(order)` is the result; None:
        torch's result as it is); None where no result is permuted."""
        if self.orders is None:
            return None
        return tuple(_ints(order) or None for order in self.orders.data)

    def verify_(self) -> None:
        for i, v in enumerate(self.inputs):
            _check_tensor(v, f"operand {i}")
        for i, v in enumerate(self.outputs):
            _check_tensor(v, f"result {i}")
        if self.picks is not None and len(self.picks.data) != len(self.outputs):
            raise VerifyException(
                f"picks names {len(self.picks.data)} positions for {len(self.outputs)} results"
            )
        self._verify_orders()
        if not self.target.data:
            raise VerifyException("expected a non-empty target")
        used = _tensor_refs(self.args) | _tensor_refs(self.kwargs)
        bad = sorted(i for i in used if i >= len(self.inputs))
        if bad:
            raise VerifyException(
                f"expected tensor references below {len(self.inputs)}, found %t{bad[0]}"
            )

    def _verify_orders(self) -> None:
        orders = self.memory_orders
        if orders is None:
            return
        if len(orders) != len(self.outputs):
            raise VerifyException(
                f"orders names {len(orders)} orders for {len(self.outputs)} results"
            )
        for i, (order, v) in enumerate(zip(orders, self.outputs, strict=True)):
            if order is not None and sorted(order) != list(range(len(dims_of(v)))):
                raise VerifyException(
                    f"expected result {i}'s order to be a permutation of [0, {len(dims_of(v))}), "
                    f"found {list(order)}"
                )


def _tensor_refs(attr: Attribute) -> set[int]:
    """Operand indices named by `"%tN"` strings anywhere inside an attribute."""
    index = tensor_ref(attr)
    if index is not None:
        return {index}
    if isinstance(attr, ArrayAttr):
        return set().union(*(_tensor_refs(a) for a in attr.data))
    if isinstance(attr, DictionaryAttr):
        return set().union(*(_tensor_refs(a) for a in attr.data.values()))
    return set()


# ---------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------


@irdl_op_definition
class ConstantOp(IRDLOperation):
    """A dense tensor constant. `%c = graph.constant dense<2.0> : tensor<f32>`"""

    name = "graph.constant"
    FACTS: ClassVar[OpFacts] = OpFacts(
        fuzz=Fuzz.drawn_by("binary"),
        without={
            "aten": "made by the importer's constant rows (full, zeros, ones, scalar_tensor)",
            "scalar": "lower-to-loops reads its elements (a splat becomes one arith.constant)",
        },
    )
    value = prop_def(DenseIntOrFPElementsAttr)
    result = result_def(TensorType)
    traits = traits_def(Pure(), ConstantLike(), Elementwise())

    @classmethod
    def parse(cls, parser: Parser) -> ConstantOp:
        pos = parser.pos
        value = parser.parse_attribute()
        if not isinstance(value, DenseIntOrFPElementsAttr):
            parser.raise_error("expected a dense tensor attribute", pos, parser.pos)
        attrs = parser.parse_optional_attr_dict()
        op = cls(compact_splat(value))
        op.attributes.update(attrs)
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_attribute(self.value)
        printer.print_op_attributes(self.attributes)

    def __init__(self, value: DenseIntOrFPElementsAttr):  # pyright: ignore[reportMissingTypeArgument]
        super().__init__(properties={"value": value}, result_types=[value.type])

    @staticmethod
    def scalar(
        value: float | int | bool, dtype: Attribute, shape: Sequence[int] = ()
    ) -> ConstantOp:
        """A constant of `shape` whose elements are all `value`, its bytes one element's."""
        one: DenseIntOrFPElementsAttr  # pyright: ignore[reportMissingTypeArgument]
        whole: TensorType[Any]
        if isinstance(dtype, FLOAT_TYPES):  # is_float(dtype), narrowed for the checker
            one = DenseIntOrFPElementsAttr.from_list(TensorType(dtype, ()), [float(value)])
            whole = TensorType(dtype, shape)
        else:  # every other graph element type is a signless integer (i1, i32, i64)
            int_type = cast(IntegerType, dtype)
            one = DenseIntOrFPElementsAttr.from_list(TensorType(int_type, ()), [int(value)])
            whole = TensorType(int_type, shape)
        data = one.data if numel(shape) else BytesAttr(b"")  # no elements: no bytes
        return ConstantOp(DenseIntOrFPElementsAttr(whole, data))

    def verify_(self) -> None:
        _check_tensor(self.result, "result")
        if self.value.type != self.result.type:
            raise VerifyException(
                f"expected result type {self.value.type}, found {self.result.type}"
            )


EXTERN_OPS: tuple[type[IRDLOperation], ...] = (
    MatmulOp,
    LinearOp,
    TorchCallOp,
    ConstantOp,
)
"""The extern ops and constants, in the `Graph` dialect's op list."""
