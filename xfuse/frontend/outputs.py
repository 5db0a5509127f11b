"""
What each output of an exported program is in eager PyTorch: a view of an argument of
`@forward` (a user input, parameter, buffer or constant), a view of another output, or fresh
memory with eager's sizes and strides (docs/contracts.md, "Outputs and aliasing").

Read from the FX graph: an output's chain of view ops (`OpOverload.is_view`, and `getitem` of a
view op's list) back to its base. The runtime (`xfuse.runtime.outputs`) replays the chain with
torch on the real base, so that a view has eager's sizes, strides and storage offset.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx


@dataclass(frozen=True)
class ViewReplay:
    """One view op to replay on a tensor: `op(base, *args, **kwargs)`, then `[item]` when the
    op returns a list (split, unbind)."""

    op: Any  # an aten OpOverload
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    item: int | None = None

    def __call__(self, base: torch.Tensor) -> torch.Tensor:
        result = self.op(base, *self.args, **dict(self.kwargs))
        return result if self.item is None else result[self.item]


@dataclass(frozen=True)
class OutputRule:
    """How output i relates to memory eager would share. `base` is "arg" (a view of `@forward`'s
    argument `index`), "output" (a view of output `index`), or "fresh" (its own memory, with
    eager's `stride`); `chain` is the views to replay on the base, in order."""

    base: str
    index: int
    chain: tuple[ViewReplay, ...] = ()
    stride: tuple[int, ...] = ()


def _has_node(values: Sequence[Any]) -> bool:
    return any(isinstance(v, torch.fx.Node) for v in values)


def _is_view_node(node: torch.fx.Node) -> bool:
    target = node.target
    return (
        node.op == "call_function"
        and isinstance(target, torch._ops.OpOverload)
        and target.is_view
        and bool(node.args)
        and isinstance(node.args[0], torch.fx.Node)
        and not _has_node(node.args[1:])
        and not _has_node(list(node.kwargs.values()))
    )


def _replay_step(node: torch.fx.Node) -> tuple[torch.fx.Node, ViewReplay] | None:
    """The node's input and the view it applies, or None when it is not a view."""
    if node.op == "call_function" and node.target is operator.getitem:
        source, item = node.args
        if isinstance(source, torch.fx.Node) and isinstance(item, int) and _is_view_node(source):
            inner = _replay_step(source)
            assert inner is not None
            base, view = inner
            return base, ViewReplay(view.op, view.args, view.kwargs, item)
        return None
    if not _is_view_node(node):
        return None
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    kwargs = tuple(sorted(node.kwargs.items()))
    return source, ViewReplay(node.target, tuple(node.args[1:]), kwargs)


def view_chain(node: torch.fx.Node) -> tuple[torch.fx.Node, tuple[ViewReplay, ...]]:
    """The base `node` is a view of (itself when it is no view) and the views from it."""
    chain: list[ViewReplay] = []
    while (step := _replay_step(node)) is not None:
        node, view = step
        chain.append(view)
    return node, tuple(reversed(chain))


def output_rules(
    returned: Sequence[torch.fx.Node], arg_of: dict[torch.fx.Node, int]
) -> list[OutputRule]:
    """The rule of each returned node; `arg_of` maps placeholders to `@forward` arguments."""
    bases = [view_chain(node) for node in returned]
    owner: dict[torch.fx.Node, int] = {}
    for i, (node, (base, chain)) in enumerate(zip(returned, bases, strict=True)):
        if not chain and base is node and base not in arg_of:
            owner.setdefault(base, i)
    rules: list[OutputRule] = []
    for i, (node, (base, chain)) in enumerate(zip(returned, bases, strict=True)):
        if base in arg_of:
            rules.append(OutputRule("arg", arg_of[base], chain))
        elif owner.get(base, i) != i:
            rules.append(OutputRule("output", owner[base], chain))
        else:
            rules.append(OutputRule("fresh", i, stride=tuple(node.meta["val"].stride())))
    return rules
