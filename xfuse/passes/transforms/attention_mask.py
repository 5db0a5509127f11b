"""
`attention-mask`: attention whose boolean mask is a constant of the program runs as eager runs
it: a mask that hides nothing is no mask, a causal one is `is_causal=True`.

Run eagerly, transformers gives `scaled_dot_product_attention` no mask where none is needed
(`attn_mask=None`, or `is_causal=True` for a causal one). Traced by torch.export, it builds the
mask from `iota`s and compares instead, and the program would call attention with it: torch
then turns the boolean mask into an additive one on every call (two `where` kernels on the
CPU, much of a small model's attention call), and on CUDA it leaves the flash
kernel that eager ran for the memory-efficient one. Here the mask's ops, which read no value
of the call, are computed at compile time (`evaluate_compact`: the reference interpreter's
values, with the dims a value is the same along, such as a broadcast batch, held at size 1),
and a mask that is all true, or is `tril(ones(L, S))` over every batch and head,
is dropped. The values are the same: a true entry adds 0 to its score, a false one makes it
-inf, as `is_causal` does to the upper triangle (tests check it bit for bit).

With size symbols (a symbolic program's `@forward`), a mask computed from sizes alone (iotas
over symbolic dims, compares) is rewritten only with the option `symbolic`: the mask is
computed at the size hints (the example's sizes) and, where it is causal or hides nothing there,
attention runs without it and the pass records a `MaskGuard` in `guards` (the mask's ops
cloned, its kind, the attention weights' dims). Whatever runs the function must check each
guard at each call's sizes (`MaskGuard.holds`: the mask computed at those sizes has the same
kind) and not run the rewritten function where one fails: `SymbolicProgram.bind` refuses such
a call (`MaskGuardError`). Without the option, a mask or attention with symbolic dims is kept.

    %m = graph.le %rows, %cols : ... -> tensor<1x1x16x16xi1>     (a causal mask)
    %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v, %m) args = ["%t0", "%t1", "%t2", "%t3"] kwargs = {scale = 0.25 : f64} : ...
      ->
    %o = graph.torch_call "aten.scaled_dot_product_attention.default"(%q, %k, %v) args = ["%t0", "%t1", "%t2", none] kwargs = {is_causal = true, scale = 0.25 : f64} : ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
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
from xfuse.dialects.torch_args import decode_arg, renumbered, tensor_ref
from xfuse.errors import SymbolicSizeError
from xfuse.frontend.attention import SDPA
from xfuse.interpreters.compact import constant_ops, evaluate_compact, prepare_compact

if TYPE_CHECKING:
    import torch

SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal")
"""The leading parameters of `aten.scaled_dot_product_attention`, in order."""


MAX_CHECKED_SIZES = 1024
"""The sizes a `MaskGuard` keeps its verdict for; all are dropped past that."""


@dataclass
class MaskGuard:
    """Attention in a function with size symbols runs without its mask, which was `kind`
    ("causal" or "none", `mask_kind`) at the size hints: `ops` (the mask's ops, cloned out
    of the function, in order; `mask` the last one's result) computed at a call's sizes must
    be that kind for the attention weights' dims `weights` (`holds`)."""

    ops: tuple[Operation, ...]
    mask: SSAValue
    weights: tuple[graph.Dim, ...]
    kind: str
    symbols: tuple[str, ...]
    """The size symbols the mask's shapes and `weights` name (what its messages show)."""
    checked: dict[tuple[int, ...], bool] = field(default_factory=dict[tuple[int, ...], bool])
    """`holds`' verdict by the sizes it was given (every symbol's, in their order)."""
    compute: Callable[[Mapping[str, int]], torch.Tensor] = field(
        init=False, repr=False, compare=False
    )
    """The mask at given sizes, held compact (`prepare_compact`: the ops read once)."""

    def __post_init__(self) -> None:
        self.compute = prepare_compact(self.ops, self.mask)

    def holds(self, sizes: Mapping[str, int], device: torch.device | None = None) -> bool:
        """Whether the mask computed at `sizes` (every symbol's size, always in the same
        order: a `graph.sizes` table's) is `kind`: computed once per sizes, on `device` (the
        program's: a GPU computes a large mask in a fraction of the CPU's time), else on the
        CPU."""
        import torch

        key = tuple(sizes.values())
        verdict = self.checked.get(key)
        if verdict is None:
            weights = graph.dims_at(self.weights, sizes)
            shape = graph.dims_at(graph.dims_of(self.mask), sizes)
            target = torch.device("cpu" if device is None else device)
            try:
                # torch's device context sees every torch call: only where it changes something
                with nullcontext() if target == torch.get_default_device() else target:
                    kind = mask_kind(self.compute(sizes), weights, shape)
            except Exception:  # noqa: BLE001 - a mask that cannot be computed is not the kind
                verdict = False
            else:
                verdict = kind == self.kind
            if len(self.checked) >= MAX_CHECKED_SIZES:
                self.checked.clear()
            self.checked[key] = verdict
        return verdict

    def describe(self) -> str:
        """The guard as one line (an explanation's guards)."""
        what = "causal (tril)" if self.kind == "causal" else "all true"
        runs = "is_causal=True" if self.kind == "causal" else "no mask"
        return (
            f"attention's mask, computed from sizes alone ({len(self.ops)} ops over "
            f"{', '.join(self.symbols)}), is {what} at the call's sizes: it runs as {runs} "
            "(the mask computed on the program's device once per call sizes; a call where it "
            "is not runs a static program compiled for its shape)"
        )


class MaskGuardError(SymbolicSizeError):
    """A call at sizes where a mask that a symbolic program dropped (`MaskGuard`) is not of the
    kind it was at the size hints."""


def check_guards(
    guards: list[MaskGuard], sizes: Mapping[str, int], device: torch.device | None = None
) -> None:
    """Raise `MaskGuardError` where a guard does not hold at `sizes` (masks computed on
    `device`, else on the CPU)."""
    for guard in guards:
        if not guard.holds(sizes, device):
            shown = ", ".join(f"{s} = {sizes[s]}" for s in guard.symbols)
            raise MaskGuardError(
                f"attention's mask is not {guard.kind} at {shown}, where the symbolic program "
                f"runs it as {'is_causal=True' if guard.kind == 'causal' else 'no mask'}"
            )


def mask_kind(
    mask: torch.Tensor, weights: tuple[int, ...], shape: tuple[int, ...] | None = None
) -> str | None:
    """ "none" for a boolean mask that hides nothing, "causal" for `tril(ones(L, S))` seen over
    every batch and head (the mask `is_causal=True` applies), else None; `weights` is the shape
    of the attention weights, `[..., L, S]`, which the mask must not enlarge by broadcasting
    (it would then shape the result, and could not go). `shape` is the mask's where `mask`
    holds it compact (`evaluate_compact`: `mask.expand(shape)` is the mask)."""
    import torch

    if mask.dtype != torch.bool:
        return None
    shape = tuple(mask.shape) if shape is None else shape
    try:
        if torch.broadcast_shapes(shape, weights) != weights:
            return None
    except RuntimeError:  # not broadcastable to the weights: torch refuses the call itself
        return None
    if 0 in shape:  # an empty mask hides nothing, whatever a compact one holds
        mask = mask.expand(shape)
    length, source_length = weights[-2:]
    if bool(mask.all()):
        return "none"
    if tuple(shape[-2:]) != (length, source_length):
        return None
    causal = torch.ones(length, source_length, dtype=torch.bool).tril()
    return "causal" if bool((mask == causal).all()) else None


class ConstantMaskIntoCausalOrNone(RewritePattern):
    """Attention with a constant boolean mask that hides nothing -> without it; with a causal
    one -> `is_causal=True` (the mask's ops are erased once nothing else reads them). With
    `guards` (a list), also a mask or attention of symbolic shapes, judged at the size hints,
    its `MaskGuard` appended to `guards`; without, those are kept."""

    def __init__(self, guards: list[MaskGuard] | None = None) -> None:
        self.guards = guards
        self.guarded: set[tuple[SSAValue, tuple[graph.Dim, ...], str]] = set()
        """The masks, weights' dims and kinds of the guards appended (one guard for a mask
        that several attention calls of the same shapes read)."""

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
        table = graph.size_table(op)
        order = constant_ops(op.inputs[position], table)
        if order is None:
            return
        dims = (*graph.dims_of(op.inputs[query])[:-1], graph.dims_of(op.inputs[key])[-2])
        symbolic = any(isinstance(d, str) for d in dims) or any(
            graph.is_symbolic(r) for o in order for r in o.results
        )
        if symbolic and (self.guards is None or table is None):
            return
        hints = table.hints if symbolic and table is not None else {}
        weights = tuple(d if isinstance(d, int) else hints[d] for d in dims)
        mask = op.inputs[position]
        shape = graph.dims_at(graph.dims_of(mask), hints)
        kind = mask_kind(evaluate_compact(order, mask, hints), weights, shape)
        if kind is None:
            return
        if symbolic and self.guards is not None:
            guarded = (op.inputs[position], dims, kind)
            if guarded not in self.guarded:
                self.guarded.add(guarded)
                self.guards.append(mask_guard(order, op.inputs[position], dims, kind))
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


def mask_guard(
    order: list[Operation], mask: SSAValue, weights: tuple[graph.Dim, ...], kind: str
) -> MaskGuard:
    """The guard of a mask of symbolic shapes computed by the ops `order`, `kind` at the
    size hints for attention weights of dims `weights`: the ops cloned out of their function."""
    mapping: dict[SSAValue, SSAValue] = {}
    clones = tuple(o.clone(value_mapper=mapping) for o in order)
    symbols: list[str] = []
    for d in [*(d for o in order for r in o.results for d in graph.dims_of(r)), *weights]:
        if isinstance(d, str) and d not in symbols:
            symbols.append(d)
    return MaskGuard(clones, mapping[mask], weights, kind, tuple(symbols))


@dataclass(frozen=True)
class AttentionMaskPass(ModulePass):
    """Attention drops a constant boolean mask that hides nothing, and runs a constant causal
    one as `is_causal=True`, as eager's call had them.

    Options: `symbolic` (also a mask computed from size symbols alone, or attention of
    symbolic shapes, judged at the size hints: each such rewrite appends a `MaskGuard` to
    `guards`, which whatever runs the function must check at each call's sizes)."""

    name = "attention-mask"

    symbolic: bool = False
    guards: list[MaskGuard] = field(
        default_factory=list[MaskGuard], init=False, compare=False, repr=False
    )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        self.guards.clear()
        pattern = ConstantMaskIntoCausalOrNone(self.guards if self.symbolic else None)
        PatternRewriteWalker(GreedyRewritePatternApplier([pattern])).rewrite_module(op)
