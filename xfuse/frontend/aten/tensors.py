"""Converters of ops that make or pass on a tensor: identities (clone, contiguous, detach,
dropout in eval mode), constants (full, zeros, ones), device moves, and the in-place add
that torch.export gives as traced."""

from __future__ import annotations

import torch.fx

from xfuse.dialects import graph
from xfuse.frontend.aten.common import Args, Converter, _each, _is_number
from xfuse.frontend.aten.elementwise import _binary, _cast
from xfuse.frontend.builder import ImportBuilder, Value, bind, meta_tensor, node_error, out_type
from xfuse.frontend.eager_rules import is_scalar_node

NEW_TENSOR_COMPOSITES = frozenset(
    {"aten.batch_norm.default", "aten.conv2d.default", "aten.conv2d.padding", "aten.linear.default"}
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
    return _binary(graph.AddOp)(lw, node, a)


def _identity(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    return lw.tensor(a["self"] if "self" in a else a["input"])


def _dropout(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    if a["train"] and a["p"] != 0:
        return None
    return lw.tensor(a["input"])


def _constant(value_arg: str | None, fixed: float = 0) -> Converter:
    """full/zeros/ones/scalar_tensor and their _like/new_ forms: a splat of the result type;
    of symbolic sizes, a 0-d constant broadcast to them (`graph.constant` is static). A value
    that is a number of the call (`scalar_tensor(s0)`: a mean's backward divides by its count;
    a float of sizes) is its value (`ImportBuilder.operand`), cast and broadcast likewise."""

    def convert(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
        value = a[value_arg] if value_arg is not None else fixed
        t = out_type(node)
        if is_scalar_node(value):
            scalar = lw.operand(value, t.element_type)
            if not t.get_shape():
                return scalar
            return lw.emit(graph.BroadcastInDimOp(scalar, graph.dims_of(t), []))
        if not _is_number(value):
            return None
        if graph.is_symbolic(t):
            scalar = lw.constant(value, t.element_type)
            return lw.emit(graph.BroadcastInDimOp(scalar, graph.dims_of(t), []))
        return lw.constant(value, t.element_type, t.get_shape())

    return convert


def _to_device(lw: ImportBuilder, node: torch.fx.Node, a: Args) -> Value:
    """`Tensor.to(device, dtype)` onto the device the tensor is on (Llama's rotary tables): a
    cast, or nothing; a move to another device stays a torch call."""
    source, result = a["self"].meta.get("val"), node.meta.get("val")
    if not isinstance(source, torch.Tensor) or not isinstance(result, torch.Tensor):
        return None
    if source.device != result.device:
        return None
    return _cast(lw, node, a)


# ---------------------------------------------------------------------------------------------
# The family's rows of the table
# ---------------------------------------------------------------------------------------------


FORMULAS: dict[str, Converter] = {
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
}
"""Aten ops that pass on their input or make a constant tensor (`add_` only where
`CONVERTED_WHEN` holds)."""
