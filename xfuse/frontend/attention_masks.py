"""
Attention masks that hide nothing, dropped before tracing.

Under tracing, transformers cannot look at a mask's values, so it builds one where eager passes
none: an encoder's mask with no padding is `arange(T)[None, None, :, None] >= 0` expanded to
`[B, 1, T, T]`, all True. `scaled_dot_product_attention` then picks its kernel for a mask whose
last dim has stride 0: math, where eager, with no mask, ran the memory-efficient or flash
kernel. The values agree up to rounding, but with dropout the two kernels draw different masks:
a model trained through `torch.compile` would not follow eager's steps (BERT's first loss
1.2e-4 off on the GPU). And math is the slowest kernel.

`without_constant_masks` evaluates each attention mask that is computed from constants alone
(no graph input, no module state) by ops that cannot change anything else (`PURE_MASK_OPS`),
and where it is all True (boolean) or all zero (additive) and broadcasts to the attention
weights' shape, gives the call no mask. A mask that reads an input (a padding mask), or any
op outside the set, is left as it is.

    %m = call_method[target=expand](%ge, 2, -1, 16, 16)   # ge = arange(16)[..., None] >= 0
    %o = call_function[target=scaled_dot_product_attention](%q, %k, %v, attn_mask=%m)
      ->
    %o = call_function[target=scaled_dot_product_attention](%q, %k, %v, attn_mask=None)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

SDPA_NAMES = frozenset({"scaled_dot_product_attention"})
"""How a graph names attention (dynamo's `torch._C._nn` function, the functional, aten's op)."""

MASK_POSITION = 3
"""`attn_mask`'s position among attention's arguments."""

PURE_MASK_OPS = frozenset(
    {
        # factories
        "arange", "ones", "zeros", "full", "scalar_tensor",
        # arithmetic, comparisons, logic
        "add", "sub", "mul", "floordiv", "mod", "remainder", "neg",
        "ge", "gt", "le", "lt", "eq", "ne",
        "and_", "or_", "xor", "invert", "bitwise_and", "bitwise_or", "bitwise_not",
        "logical_and", "logical_or", "logical_not", "where",
        # views, copies and casts
        "getitem", "expand", "view", "reshape", "unsqueeze", "squeeze", "slice", "select",
        "transpose", "permute", "contiguous", "clone", "alias", "to", "_to_copy", "bool",
        "float", "type_as",
    }
)  # fmt: skip
"""Ops a constant mask may be built by: each reads its arguments and writes only its result,
so evaluating them at compile time gives the values the program computes."""

MASK_ELEMENTS = 1 << 24
"""The most elements of any tensor evaluated for a mask (a larger constant mask is kept)."""


def op_name(node: torch.fx.Node) -> str | None:
    """The name of what `node` calls (a method, a torch or `operator` function, an aten op
    without its overload), None for placeholders, attributes and outputs."""
    if node.op == "call_method":
        return str(node.target)
    if node.op != "call_function":
        return None
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._opname
    return getattr(target, "__name__", None)


def _is_attention(node: torch.fx.Node) -> bool:
    return op_name(node) in SDPA_NAMES


def _mask_of(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node `node`'s attention call takes as its mask, if a node."""
    mask = node.kwargs.get("attn_mask")
    if mask is None and len(node.args) > MASK_POSITION:
        mask = node.args[MASK_POSITION]
    return mask if isinstance(mask, torch.fx.Node) else None


def _example(node: torch.fx.Node) -> Any:
    return node.meta.get("example_value", node.meta.get("val"))


def _small_and_static(node: torch.fx.Node) -> bool:
    """Whether `node`'s example value, if a tensor, has plain-int sizes and few elements."""
    value = _example(node)
    if not isinstance(value, torch.Tensor):
        return True
    sizes = tuple(value.shape)
    return all(isinstance(n, int) for n in sizes) and math.prod(sizes) <= MASK_ELEMENTS


def constant_closure(mask: torch.fx.Node) -> list[torch.fx.Node] | None:
    """The nodes `mask` is computed by, in graph order, where all are `PURE_MASK_OPS` of
    constants, small and static, and read by nothing but each other and attention calls
    (nothing else can write them); else None."""
    seen: set[torch.fx.Node] = set()
    todo = [mask]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        if op_name(node) not in PURE_MASK_OPS or not _small_and_static(node):
            return None
        seen.add(node)
        todo.extend(node.all_input_nodes)
    for node in seen:
        if any(user not in seen and not _is_attention(user) for user in node.users):
            return None
    return [node for node in mask.graph.nodes if node in seen]


def evaluated(nodes: list[torch.fx.Node]) -> Any:
    """The last of `nodes` computed on real tensors (outside any fake mode), without grad."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    values: dict[torch.fx.Node, Any] = {}

    def read(arg: Any) -> Any:
        return torch.fx.node.map_arg(arg, values.__getitem__)

    with unset_fake_temporarily(), torch.no_grad():
        for node in nodes:
            args, kwargs = read(node.args), read(node.kwargs)
            if node.op == "call_method":
                values[node] = getattr(args[0], str(node.target))(*args[1:], **kwargs)
            else:
                target: Callable[..., Any] = node.target  # type: ignore[assignment]
                values[node] = target(*args, **kwargs)
    return values[nodes[-1]]


def hides_nothing(mask: Any) -> bool:
    """Whether `mask` keeps every attention weight as it is: all True, or all zero added."""
    if not isinstance(mask, torch.Tensor):
        return False
    if mask.dtype == torch.bool:
        return bool(mask.all())
    return mask.is_floating_point() and bool((mask == 0).all())


def _known_to_hide_nothing(nodes: list[torch.fx.Node]) -> bool:
    """Whether the mask `nodes` compute hides nothing; False where computing it fails (the
    program then raises as eager would, at its call)."""
    try:
        return hides_nothing(evaluated(nodes))
    except Exception:  # noqa: BLE001 - any failure leaves the mask to the program
        return False


def _broadcasts(mask: torch.fx.Node, attention: torch.fx.Node) -> bool:
    """Whether `mask` broadcasts to `attention`'s weights, `[..., L, S]` of its query and
    key, without growing them (then the call's result is the same without it)."""
    query, key = (_example(a) if isinstance(a, torch.fx.Node) else None for a in attention.args[:2])
    value = _example(mask)
    if not (
        isinstance(query, torch.Tensor)
        and isinstance(key, torch.Tensor)
        and isinstance(value, torch.Tensor)
    ):
        return False
    weights = (*query.shape[:-1], key.shape[-2])
    try:
        return tuple(torch.broadcast_shapes(value.shape, weights)) == weights
    except RuntimeError:
        return False


def _without_mask(attention: torch.fx.Node) -> None:
    if "attn_mask" in attention.kwargs:
        attention.kwargs = {**attention.kwargs, "attn_mask": None}
    else:
        args = list(attention.args)
        args[MASK_POSITION] = None
        attention.args = tuple(args)


def without_constant_masks(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """`gm` (changed in place) with no mask on attention calls whose mask is a constant that
    hides nothing; the nodes that computed it removed where nothing else reads them."""
    found: dict[torch.fx.Node, bool] = {}
    dropped: list[torch.fx.Node] = []
    for node in gm.graph.nodes:
        mask = _mask_of(node) if _is_attention(node) else None
        if mask is None or not _broadcasts(mask, node):
            continue
        if mask not in found:
            nodes = constant_closure(mask)
            found[mask] = nodes is not None and _known_to_hide_nothing(nodes)
            dropped.extend(nodes or [])
        if found[mask]:
            _without_mask(node)
    if not any(found.values()):
        return gm
    for node in reversed(dropped):
        if not node.users and node.graph is gm.graph:
            gm.graph.erase_node(node)
    gm.recompile()
    return gm
