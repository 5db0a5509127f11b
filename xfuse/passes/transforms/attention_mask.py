"""
`attention-mask`: attention whose boolean mask is a constant of the program runs as eager runs
it: a mask that hides nothing is no mask, a causal one is `is_causal=True`.

Run eagerly, transformers gives `scaled_dot_product_attention` no mask where none is needed
(`attn_mask=None`, or `is_causal=True` for a causal one). Traced by torch.export, it builds the
mask from `iota`s and compares instead, and the program would call attention with it: torch
then turns the boolean mask into an additive one on every call (two `where` kernels on the
CPU, much of a small model's attention call), and on CUDA it leaves the flash
kernel that eager ran for the memory-efficient one. Here the mask's ops, which read no value
of the call, are computed at compile time (the graph interpreter, as `ProgramCompiler` folds
such groups), and a mask that is all true, or is `tril(ones(L, S))` over every batch and head,
is dropped. The values are the same: a true entry adds 0 to its score, a false one makes it
-inf, as `is_causal` does to the upper triangle (tests check it bit for bit).

    %m = graph.le %rows, %cols : ... -> tensor<1x1x16x16xi1>     (a causal mask)
    %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {scale = 0.25 : f64} : ...
      ->
    %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2", none] kwargs = {is_causal = true, scale = 0.25 : f64} : ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    IntegerAttr,
    ModuleOp,
    NoneAttr,
    i1,
)
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from xfuse.dialects import graph
from xfuse.dialects.effects import computed_by_xfuse
from xfuse.dialects.torch_args import decode_arg, renumbered, tensor_ref
from xfuse.frontend.attention import SDPA
from xfuse.interpreters.graph import run_op

if TYPE_CHECKING:
    import torch

MAX_MASK_OPS = 64
MAX_MASK_ELEMENTS = 1 << 22
"""A mask is computed at compile time only from at most this many ops, none with a result of
more elements."""

SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
"""The leading parameters of `aten.scaled_dot_product_attention`, in order."""


def constant_value(value: SSAValue) -> torch.Tensor | None:
    """`value` computed now, when it depends on no argument of its function and only on ops
    that xfuse computes itself (`computed_by_xfuse`: no extern, no effect); else None."""
    order: list[Operation] = []
    seen: set[Operation] = set()

    def visit(v: SSAValue) -> bool:
        op = v.owner
        if not isinstance(op, Operation) or not computed_by_xfuse(op):
            return False
        if op in seen:
            return True
        seen.add(op)
        if len(seen) > MAX_MASK_OPS or any(
            graph.numel(graph.shape_of(r)) > MAX_MASK_ELEMENTS for r in op.results
        ):
            return False
        if not all(visit(o) for o in op.operands):
            return False
        order.append(op)
        return True

    if not visit(value):
        return None
    values: dict[SSAValue, torch.Tensor] = {}
    for op in order:
        values.update(zip(op.results, run_op(op, [values[o] for o in op.operands]), strict=True))
    return values[value]


def mask_kind(mask: torch.Tensor, weights: tuple[int, ...]) -> str | None:
    """ "none" for a boolean mask that hides nothing, "causal" for `tril(ones(L, S))` seen over
    every batch and head (the mask `is_causal=True` applies), else None; `weights` is the shape
    of the attention weights, `[..., L, S]`, which the mask must not enlarge by broadcasting
    (it would then shape the result, and could not go)."""
    import torch

    if mask.dtype != torch.bool:
        return None
    try:
        if torch.broadcast_shapes(mask.shape, weights) != weights:
            return None
    except RuntimeError:  # not broadcastable to the weights: torch refuses the call itself
        return None
    length, source_length = weights[-2:]
    if bool(mask.all()):
        return "none"
    if tuple(mask.shape[-2:]) != (length, source_length):
        return None
    causal = torch.ones(length, source_length, dtype=torch.bool).tril()
    return "causal" if bool((mask == causal).all()) else None


class ConstantMaskIntoCausalOrNone(RewritePattern):
    """Attention with a constant boolean mask that hides nothing -> without it; with a causal
    one -> `is_causal=True` (the mask's ops are erased once nothing else reads them)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: graph.TorchCallOp, rewriter: PatternRewriter) -> None:
        if op.target.data != SDPA or len(op.outputs) != 1:
            return
        args, kwargs = list(op.args.data), dict(op.kwargs.data)
        named = {n: a for n, a in zip(SDPA_PARAMETERS, args, strict=False)} | kwargs
        position = tensor_ref(named.get("attn_mask", NoneAttr()))
        if position is None or decode_arg(named.get("is_causal", IntegerAttr(0, i1)), []):
            return
        references = [tensor_ref(a) for a in [*args, *kwargs.values()]]
        if references.count(position) != 1:
            return
        query, key = (tensor_ref(named.get(n, NoneAttr())) for n in ("query", "key"))
        if query is None or key is None:
            return
        mask = constant_value(op.inputs[position])
        query_shape = graph.shape_of(op.inputs[query])
        weights = (*query_shape[:-1], graph.shape_of(op.inputs[key])[-2])
        kind = None if mask is None else mask_kind(mask, weights)
        if kind is None:
            return
        inputs = [v for i, v in enumerate(op.inputs) if i != position]
        new_index = {i: i - (i > position) for i in range(len(op.inputs)) if i != position}
        args = [NoneAttr() if tensor_ref(a) == position else a for a in args]
        kwargs = {k: NoneAttr() if tensor_ref(a) == position else a for k, a in kwargs.items()}
        if kind == "causal":
            if len(args) > SDPA_PARAMETERS.index("is_causal"):
                args[SDPA_PARAMETERS.index("is_causal")] = IntegerAttr(1, i1)
            else:
                kwargs["is_causal"] = IntegerAttr(1, i1)
        new = graph.TorchCallOp(
            op.target.data,
            inputs,
            [op.outputs[0].type],
            ArrayAttr([renumbered(a, new_index.__getitem__) for a in args]),
            DictionaryAttr({k: renumbered(a, new_index.__getitem__) for k, a in kwargs.items()}),
            orders=op.memory_orders,
        )
        rewriter.replace(op, new)


@dataclass(frozen=True)
class AttentionMaskPass(ModulePass):
    """Attention drops a constant boolean mask that hides nothing, and runs a constant causal
    one as `is_causal=True`, as eager's call had them."""

    name = "attention-mask"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(
            GreedyRewritePatternApplier([ConstantMaskIntoCausalOrNone()])
        ).rewrite_module(op)
