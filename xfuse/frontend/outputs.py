"""
What each output of an exported program is in eager PyTorch: a view of an argument of
`@forward` (a user input, parameter, buffer or constant), a view of another output, a view of
a hidden output, or fresh memory with eager's sizes and strides (docs/contracts.md, "Outputs
and aliasing").

Read from the FX graph: an output's chain of view ops (`OpOverload.is_view`, and `getitem` of a
view op's list) back to its base. An op that only may alias (`to`, `reshape`, `contiguous`) is
a step of the chain only where its traced value shares its input's storage. The runtime
(`xfuse.runtime.outputs`) replays the chain with torch on the real base, so that a view has
eager's sizes, strides and storage offset.

Two or more outputs that view one intermediate the program does not return (`h = x * 2;
return h[0], h.t()`) share h's memory in eager: h becomes a hidden output of `@forward` (after
the returned ones) and each of them a view of it; the caller never sees h itself.

A view through sizes of the call (`x.view(x.shape[0], 4, 4)`: a size of the trace, an FX node,
in its arguments) holds each such size as a `SizeArg` where the program has size symbols
(`with_size_args`), and is replayed at each call's sizes (`replay`'s `sizes`).
"""

from __future__ import annotations

import dataclasses
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.multiprocessing.reductions import StorageWeakRef

from xfuse.dialects import graph
from xfuse.dialects.graph.layout import row_major_strides
from xfuse.frontend.eager_rules import size_hint
from xfuse.frontend.meta_strides import Strides, eager_strides

VIEW_METHODS: dict[Any, tuple[str, tuple[Any, ...]]] = {
    torch.ops.aten.view.default: ("view", ()),
    torch.ops.aten.permute.default: ("permute", ()),
    torch.ops.aten.expand.default: ("expand", ()),
    torch.ops.aten.t.default: ("t", ()),
    torch.ops.aten.transpose.int: ("transpose", ()),
    torch.ops.aten.unsqueeze.default: ("unsqueeze", ()),
    torch.ops.aten.squeeze.dim: ("squeeze", ()),
    torch.ops.aten.select.int: ("select", ()),
    torch.ops.aten.alias.default: ("__getitem__", (...,)),
}
"""View overloads -> the `Tensor` method that calls that overload, and the arguments it takes
before the overload's own positional ones (`x[...]` is `aten.alias`): the method parses them in
C++; the `OpOverload` boxes each through the dispatcher's generic entry, a few microseconds
more a call on the CPU."""


@dataclass(frozen=True)
class ViewReplay:
    """One view op to replay on a tensor: `op(base, *args, **kwargs)`, then `[item]` when the
    op returns a list (split, unbind). An op of `VIEW_METHODS` called with no keywords is
    its method's call, `base.view(*args)`."""

    op: Any  # an aten OpOverload
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    item: int | None = None
    method: str | None = field(init=False, compare=False, repr=False)
    """The `Tensor` method it calls (`VIEW_METHODS`), or None: the op itself."""
    method_args: tuple[Any, ...] = field(init=False, compare=False, repr=False)
    """The method's positional arguments: `VIEW_METHODS`' leading ones, then `args`."""
    sized: bool = field(init=False, compare=False, repr=False)
    """Whether an argument is a size of the call (`SizeArg`): replayed `at_sizes`."""

    def __post_init__(self) -> None:
        found = None if self.kwargs else VIEW_METHODS.get(self.op)
        method, leading = found if found is not None else (None, ())
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "method_args", (*leading, *self.args))
        leaves = pytree.tree_leaves((self.args, self.kwargs))
        object.__setattr__(self, "sized", any(isinstance(a, SizeArg) for a in leaves))

    def at_sizes(self, sizes: dict[str, int]) -> ViewReplay:
        """The view with each `SizeArg` evaluated at `sizes` (symbol -> size)."""

        def evaluate(a: Any) -> Any:
            return a.expr.evaluate(sizes) if isinstance(a, SizeArg) else a

        args, kwargs = pytree.tree_map(evaluate, (self.args, self.kwargs))
        return ViewReplay(self.op, args, kwargs, self.item)

    def __call__(self, base: torch.Tensor) -> torch.Tensor:
        if self.method is not None:
            result = getattr(base, self.method)(*self.method_args)
        else:
            result = self.op(base, *self.args, **dict(self.kwargs))
        return result if self.item is None else result[self.item]


@dataclass(frozen=True)
class SizeArg:
    """A view's argument that is a size of the call: a polynomial of the program's input size
    symbols (`x.view(x.shape[0], 4, 4)` holds `SizeArg(s0)`), evaluated at each call."""

    expr: graph.SizeExpr


def replay(chain: Sequence[ViewReplay], base: torch.Tensor) -> torch.Tensor:
    """`base` viewed through each view of `chain` in turn (an output's views replayed on the
    memory eager shares); a chain through sizes of the call is first `chain_at_sizes`'."""
    for view in chain:
        base = view(base)
    return base


def chain_at_sizes(chain: tuple[ViewReplay, ...], sizes: dict[str, int]) -> tuple[ViewReplay, ...]:
    """`chain` with each view through sizes of the call (`ViewReplay.sized`) at `sizes`; the
    chain itself where none is."""
    if not any(view.sized for view in chain):
        return chain
    return tuple(view.at_sizes(sizes) if view.sized else view for view in chain)


def with_size_args(rule: OutputRule, size_of: Callable[[Any], graph.SizeExpr | None]) -> OutputRule:
    """`rule` with each FX node among its views' arguments (a size of the trace) as a `SizeArg`
    of its polynomial (`size_of` of its traced value; None: no such polynomial, the node is
    kept, and the dynamic runtime refuses the output)."""

    def as_size(a: Any) -> Any:
        if not isinstance(a, torch.fx.Node):
            return a
        value = a.meta.get("val")
        if type(value) is int:
            return value
        expr = size_of(value) if isinstance(value, torch.SymInt) else None
        return a if expr is None else SizeArg(expr)

    chain = []
    for view in rule.chain:
        args, kwargs = pytree.tree_map(as_size, (view.args, view.kwargs))
        chain.append(ViewReplay(view.op, args, kwargs, view.item))
    return dataclasses.replace(rule, chain=tuple(chain))


@dataclass(frozen=True)
class OutputRule:
    """How output i relates to memory eager would share. `base` is "arg" (a view of `@forward`'s
    argument `index`), "output" (a view of `@forward`'s result `index`: another output or a
    hidden one), or "fresh" (its own memory, with eager's `stride`); `chain` is the views to
    replay on the base, in order."""

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


def _shares_storage(node: torch.fx.Node, source: torch.fx.Node) -> bool:
    """Whether the traced values of `node` and `source` share storage (True when either has no
    traced tensor value: the op's schema alone then says it is a view). An op whose schema only
    allows aliasing copies where it must (`to` another dtype, `reshape` of a transpose)."""
    value, base = node.meta.get("val"), source.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(base, torch.Tensor):
        return True
    try:
        return StorageWeakRef(value.untyped_storage()) == StorageWeakRef(base.untyped_storage())
    except (NotImplementedError, RuntimeError):  # a value without storage: trust the schema
        return True


def _replay_step(node: torch.fx.Node) -> tuple[torch.fx.Node, ViewReplay] | None:
    """The node's input and the view it applies, or None when it is not a view."""
    if node.op == "call_function" and node.target is operator.getitem:
        source, item = node.args
        if isinstance(source, torch.fx.Node) and isinstance(item, int) and _is_view_node(source):
            inner = _replay_step_of_view(source)
            base, view = inner
            if not _shares_storage(node, base):
                return None
            return base, ViewReplay(view.op, view.args, view.kwargs, item)
        return None
    if not _is_view_node(node):
        return None
    step = _replay_step_of_view(node)
    return step if _shares_storage(node, step[0]) else None


def _replay_step_of_view(node: torch.fx.Node) -> tuple[torch.fx.Node, ViewReplay]:
    """The input of a view node (`_is_view_node`) and the view it applies."""
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    kwargs = tuple(sorted(node.kwargs.items()))
    return source, ViewReplay(node.target, tuple(node.args[1:]), kwargs)


def view_chain(node: torch.fx.Node) -> tuple[torch.fx.Node, tuple[ViewReplay, ...]]:
    """The base `node` is a view of (itself when it is no view) and the views from it, without
    the `aten.alias` steps that change nothing (`without_aliases`)."""
    chain: list[ViewReplay] = []
    while (step := _replay_step(node)) is not None:
        node, view = step
        chain.append(view)
    return node, without_aliases(tuple(reversed(chain)))


def without_aliases(chain: tuple[ViewReplay, ...]) -> tuple[ViewReplay, ...]:
    """`chain` without its `aten.alias` steps, but one where the chain is aliases alone: an
    alias is a new tensor with its input's sizes, strides, storage offset and memory, which
    every other view of the chain makes anew anyway."""
    alias = torch.ops.aten.alias.default
    kept = tuple(view for view in chain if view.op is not alias)
    return kept if kept or not chain else chain[:1]


@dataclass(frozen=True)
class OutputRules:
    """The rules of an exported program's outputs: one per returned tensor, then one per
    hidden output (`hidden`: the intermediates that `@forward` returns after them, for
    returned views to share, as in eager)."""

    rules: list[OutputRule]
    hidden: list[torch.fx.Node]


def output_rules(
    returned: Sequence[torch.fx.Node],
    arg_of: dict[torch.fx.Node, int],
    traced: Sequence[tuple[int, ...] | None] | None = None,
    traced_bases: Sequence[BaseLayout | None] | None = None,
) -> OutputRules:
    """The rule of each returned node, and the hidden outputs; `arg_of` maps placeholders to
    `@forward` arguments. `traced` holds eager's strides of each returned node where the
    program was traced before it was decomposed (`returned_strides`): a fresh output takes
    those; `traced_bases` the shape and strides of the base each returned view views there
    (`base_strides`): a hidden output of that shape takes those strides where its base's
    decomposition laid it out otherwise (a functional `copy` into a gapped buffer becomes a
    dense `clone`)."""
    corrected = eager_strides(returned[0].graph) if returned else {}
    if traced is not None:
        corrected |= {n: s for n, s in zip(returned, traced, strict=True) if s is not None}
    bases = [_viewable(node, view_chain(node), corrected) for node in returned]
    for (base, chain), traced_base in zip(bases, traced_bases or (), strict=False):
        if not chain or base in corrected or not _static(base):
            continue
        strides = traced_base_strides(tuple(base.meta["val"].shape), chain, traced_base)
        if strides is not None:
            corrected[base] = strides
    owner: dict[torch.fx.Node, int] = {}
    for i, (node, (base, chain)) in enumerate(zip(returned, bases, strict=True)):
        if not chain and base is node and base not in arg_of:
            owner.setdefault(base, i)
    # An intermediate that two or more outputs view and none is: a hidden output they share.
    viewed = Counter(
        base for base, chain in bases if chain and base not in arg_of and base not in owner
    )
    hidden = [base for base, n in viewed.items() if n > 1]
    for j, base in enumerate(hidden):
        owner[base] = len(returned) + j
    rules: list[OutputRule] = []
    for i, (node, (base, chain)) in enumerate(zip(returned, bases, strict=True)):
        if base in arg_of:
            rules.append(OutputRule("arg", arg_of[base], chain))
        elif owner.get(base, i) != i:
            rules.append(OutputRule("output", owner[base], chain))
        else:
            rules.append(OutputRule("fresh", i, stride=_stride(node, corrected)))
    rules += [
        OutputRule("fresh", len(returned) + j, stride=_stride(b, corrected))
        for j, b in enumerate(hidden)
    ]
    return OutputRules(rules, hidden)


def _viewable(
    node: torch.fx.Node, found: tuple[torch.fx.Node, tuple[ViewReplay, ...]], corrected: Strides
) -> tuple[torch.fx.Node, tuple[ViewReplay, ...]]:
    """`found` (`node`'s base and view chain), or `node` itself with no views where the chain
    cannot view its base as eager lays the base out: a base whose eager strides differ from
    the trace's (`corrected`: a decomposition lost a transposed layout) that the chain's
    `view` cannot take (eager's `reshape` of it copies: the output is fresh memory)."""
    base, chain = found
    strides = corrected.get(base)
    value = base.meta.get("val")
    if not chain or strides is None or not isinstance(value, torch.Tensor):
        return found
    meta = torch.empty_strided(tuple(value.shape), strides, dtype=value.dtype, device="meta")
    try:
        replay(chain, meta)
    except Exception as e:  # noqa: BLE001 - only torch's refusal of the view says "copies"
        return (node, ()) if "view size is not compatible" in str(e) else found
    return found


def _stride(node: torch.fx.Node, corrected: Strides) -> tuple[int, ...]:
    """Eager's strides of a fresh output: its traced value's, or those `corrected` has for it
    (`meta_strides.eager_strides`). An op that is no view never returns memory that
    overlaps itself in eager (it clones an overlapping input contiguous), but some of torch's
    meta functions keep an expanded input's stride of 0 (torch 2.11's `slice_scatter`,
    `select_scatter`, `diagonal_scatter`): there the traced strides are not eager's, and the
    output is contiguous."""
    value = node.meta["val"]
    stride = corrected.get(node, tuple(value.stride()))
    if _replay_step(node) is None and overlaps(tuple(value.shape), stride):
        return row_major_strides(tuple(value.shape))
    return stride


def returned_strides(returned: Sequence[torch.fx.Node]) -> list[tuple[int, ...] | None]:
    """Eager's strides of each returned node of a program before it is decomposed (None for
    one of symbolic sizes or no tensor). Decompositions lose layouts that torch's own meta
    functions keep: an in-place op on a `slice_scatter` result (eager's
    `clone_preserve_strides` of a gapped view, strides `(1088, 64)`) becomes a functional op
    whose result is dense."""
    graph = next((n.graph for n in returned if isinstance(n, torch.fx.Node)), None)
    corrected = eager_strides(graph) if graph is not None else {}
    found: list[tuple[int, ...] | None] = []
    for node in returned:
        value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        static = isinstance(value, torch.Tensor) and all(
            isinstance(d, int) for d in (*value.shape, *value.stride())
        )
        found.append(_stride(node, corrected) if static else None)
    return found


BaseLayout = tuple[tuple[int, ...], tuple[int, ...], tuple[ViewReplay, ...]]
"""A view's base's shape and strides, at the trace's sizes, and the views from it."""


def base_strides(returned: Sequence[torch.fx.Node]) -> list[BaseLayout | None]:
    """For each returned node that is a view, the shape and strides of its base at the trace's
    sizes (their hints where symbolic) and its views, as traced before the program is
    decomposed; None for a node that is no view or whose base has no such strides. Decompositions may lay an
    intermediate out otherwise than eager (a functional `copy` into a gapped buffer becomes a
    dense `clone`), which its views would then not replay as eager's."""
    graph = next((n.graph for n in returned if isinstance(n, torch.fx.Node)), None)
    corrected = eager_strides(graph) if graph is not None else {}
    found: list[BaseLayout | None] = []
    for node in returned:
        base, chain = view_chain(node) if isinstance(node, torch.fx.Node) else (None, ())
        value = base.meta.get("val") if base is not None else None
        layout = None
        if chain and isinstance(value, torch.Tensor):
            sizes = [size_hint(s) for s in value.shape]
            strides = [size_hint(s) for s in corrected.get(base, value.stride())]
            if None not in sizes and None not in strides:
                layout = (tuple(cast(list[int], sizes)), tuple(cast(list[int], strides)), chain)
        found.append(layout)
    return found


def traced_base_strides(
    shape: tuple[int | None, ...], chain: tuple[ViewReplay, ...], layout: BaseLayout | None
) -> tuple[int, ...] | None:
    """The strides `layout` (`base_strides`) traced for a base of `shape` (at the trace's
    sizes) that `chain` views; None where it is unknown or another base's (another shape or
    other views: decomposing reached another base)."""
    if layout is None:
        return None
    traced_shape, strides, traced_chain = layout
    return strides if shape == traced_shape and chain == traced_chain else None


def _static(node: torch.fx.Node) -> bool:
    """Whether `node`'s traced value has static sizes and strides."""
    value = node.meta.get("val")
    return isinstance(value, torch.Tensor) and all(
        isinstance(d, int) for d in (*value.shape, *value.stride())
    )


def overlaps(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether two indices of a tensor of `shape` and `stride` may reach one element of memory:
    each dim's step must lie beyond what the dims of smaller steps reach (a layout this cannot
    tell apart counts as overlapping)."""
    if 0 in shape:
        return False
    reach = 0  # the farthest offset the dims seen so far reach
    for size, step in sorted(
        ((n, abs(s)) for n, s in zip(shape, stride, strict=True) if n > 1), key=lambda d: d[1]
    ):
        if step <= reach:
            return True
        reach += step * (size - 1)
    return False
