"""
The state of one import: the block of `@forward` being built, the SSA value of each FX node,
and the small helpers every aten conversion uses (casts, scalar constants, reshapes).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
from xdsl.dialects.builtin import TensorType
from xdsl.ir import Attribute, Block, Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.effects import computed_by_xfuse
from xfuse.dialects.torch_args import encode_args
from xfuse.errors import UnsupportedArgument, UnsupportedProgram
from xfuse.ir import dtypes

Value = SSAValue | list[SSAValue | None] | None


def node_error(node: torch.fx.Node, reason: str) -> UnsupportedProgram:
    target = getattr(node, "target", "?")
    return UnsupportedProgram(f"cannot import node '{node.name}' ({target}): {reason}")


def tensor_type_of_val(val: Any, node: torch.fx.Node) -> TensorType[Attribute]:
    """The graph tensor type of a node's fake value (`node.meta["val"]`)."""
    if not isinstance(val, torch.Tensor):
        raise node_error(node, f"produces a {type(val).__name__}, not a tensor")
    if val.layout != torch.strided:
        raise node_error(node, f"produces a {val.layout} tensor; only dense tensors are supported")
    if val.is_complex():
        raise node_error(node, f"produces a tensor of complex dtype {val.dtype}")
    if not all(isinstance(d, int) for d in val.shape):
        raise node_error(node, f"has a symbolic shape {list(val.shape)}; shapes must be static")
    try:
        element_type = dtypes.from_torch(val.dtype)
    except dtypes.UnsupportedDtype as e:
        raise node_error(node, str(e)) from None
    return TensorType(element_type, list(val.shape))


def result_types(node: torch.fx.Node) -> list[TensorType[Attribute]]:
    """The tensor types of all outputs of a node (one for a tensor, several for a tuple)."""
    val = node.meta.get("val")
    if isinstance(val, list | tuple):
        return [tensor_type_of_val(v, node) for v in val]
    return [tensor_type_of_val(val, node)]


def out_type(node: torch.fx.Node) -> TensorType[Attribute]:
    """The tensor type of a single-output node."""
    return tensor_type_of_val(node.meta.get("val"), node)


def used_outputs(node: torch.fx.Node) -> set[int]:
    """Indices of a multi-output node's results that some node reads (through getitem)."""
    return {
        # getitem's index is an int; torch.fx types node arguments as any Argument.
        int(user.args[1])  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]
        for user in node.users
        if user.target is operator.getitem and user.users
    }


def bind(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    # The target is an aten OpOverload; torch.fx types it as a callable or a string.
    schema = node.target._schema  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        if i < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
        else:
            bound[arg.name] = None
    return bound


def meta_tensor(x: Any) -> Any:
    """A meta tensor with a node's dtype and rank (for torch's promotion rules), or x itself."""
    if isinstance(x, torch.fx.Node):
        val = x.meta["val"]
        return torch.empty(tuple(val.shape), dtype=val.dtype, device="meta")
    return x


def promoted_dtype(*args: Any) -> Attribute:
    """The element type torch computes `args` (nodes and Python scalars) in."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, dtype = elementwise_dtypes(
        *(meta_tensor(a) for a in args if a is not None),
        type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT,
    )
    return dtypes.from_torch(dtype)


@dataclass
class ImportBuilder:
    """The block being built and the values of the FX nodes converted so far."""

    block: Block
    values: dict[torch.fx.Node, Value] = field(default_factory=dict[torch.fx.Node, Value])

    def emit(self, op: Operation) -> SSAValue:
        self.block.add_op(op)
        return op.results[0]

    def tensor(self, node: Any) -> SSAValue:
        """The SSA value of a tensor-producing FX node."""
        if not isinstance(node, torch.fx.Node):
            raise UnsupportedProgram(f"expected a tensor, found {node!r}")
        value = self.values.get(node)
        if not isinstance(value, SSAValue):
            raise node_error(node, "its value is not a single tensor")
        return value

    def cast(self, value: SSAValue, dtype: Attribute) -> SSAValue:
        if graph.dtype_of(value) == dtype:
            return value
        return self.emit(graph.CastOp(value, dtype))

    def constant(
        self, value: float | int | bool, dtype: Attribute, shape: Sequence[int] = ()
    ) -> SSAValue:
        return self.emit(graph.ConstantOp.scalar(value, dtype, shape))

    def operand(self, x: Any, dtype: Attribute) -> SSAValue:
        """A tensor node cast to `dtype`, or a Python scalar as a 0-d constant of `dtype`."""
        if isinstance(x, torch.fx.Node):
            return self.cast(self.tensor(x), dtype)
        if isinstance(x, bool | int | float):
            return self.constant(x, dtype)
        raise UnsupportedProgram(f"expected a tensor or a number, found {x!r}")

    def torch_call(
        self,
        target: str,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        types: Sequence[TensorType[Attribute]],
        node: torch.fx.Node,
        picks: Sequence[int] | None = None,
    ) -> list[SSAValue]:
        """A `graph.torch_call` of `target` on FX-level arguments (nodes are its operands);
        `picks`: the positions of the operator's tuple result that are its results."""
        tensors: list[torch.fx.Node] = []

        def tensor_index(value: Any) -> int | None:
            if not isinstance(value, torch.fx.Node):
                return None
            if value not in tensors:
                tensors.append(value)
            return tensors.index(value)

        try:
            encoded_args, encoded_kwargs = encode_args(args, kwargs, tensor_index)
        except UnsupportedArgument as e:
            raise node_error(node, str(e)) from None
        op = graph.TorchCallOp(
            target, [self.tensor(t) for t in tensors], types, encoded_args, encoded_kwargs, picks
        )
        self.block.add_op(op)
        return list(op.results)

    def reshape(self, value: SSAValue, shape: Sequence[int]) -> SSAValue:
        if graph.shape_of(value) == tuple(shape):
            return value
        return self.emit(graph.ReshapeOp(value, shape))


def fold_empty_results(block: Block) -> None:
    """Every pure graph op whose results hold no element becomes a constant of its type, and
    the ops only it read go: such an op's loop nest has no iteration, but a value lowering
    hoists out of the empty loops (the row of a broadcast of an empty tensor) would still read
    an empty buffer (a null pointer on the CPU). Views the caller sees are replayed on the real
    base by the runtime, so an empty view stays a view. Externs stay, even dead: torch's code
    may raise on its inputs whatever the result's size (a singular matrix solved for no
    right-hand side), and eager's errors are kept."""
    dead: list[Operation] = []
    for op in list(block.ops):
        if computed_by_xfuse(op) and not isinstance(op, graph.ConstantOp) and op.results:
            if all(_is_empty(r) for r in op.results):
                for r in op.results:
                    const = graph.ConstantOp.scalar(0, graph.dtype_of(r), graph.shape_of(r))
                    block.insert_op_before(const, op)
                    r.replace_all_uses_with(const.results[0])
                dead.append(op)
    while dead:
        op = dead.pop()
        if op.parent is None or any(r.uses for r in op.results):
            continue
        owners = {v.owner for v in op.operands if isinstance(v.owner, Operation)}
        block.erase_op(op)
        dead.extend(o for o in owners if computed_by_xfuse(o))


def _is_empty(value: SSAValue) -> bool:
    return isinstance(value.type, TensorType) and graph.numel(graph.shape_of(value)) == 0
