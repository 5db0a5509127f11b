"""
Eager's argument rules: an op whose eager kernel refuses its arguments' dtypes (`mm` of f32 and
f64, `conv2d` of int64, `index_select` with a float index, `where` with a float condition...)
raises at import, with eager's own error type and first line, where torch.export's fake tensors
let the program through.

The rules are eager's, not a copy: each op of `PROBED` has a trigger, a cheap test of its
arguments' dtypes that holds wherever eager might refuse them; when it holds, the real aten op
runs eagerly on zero tensors laid out as the node's arguments (shapes, strides, dtypes and
device), and what it raises is
re-raised as an `EagerArgumentError` that is also the Python type eager raised. Meta kernels
cannot stand in for the probe: most of them check no dtypes (that is why export accepts these
programs). A call with other dtypes than the example's is imported again
(`xfuse.runtime.executor`), so it meets the same check.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch
import torch.fx
from torch.export import ExportedProgram

from xfuse.errors import (
    EagerArgumentError,
    EagerIndexError,
    EagerNotImplementedError,
    EagerRuntimeError,
    EagerTypeError,
    EagerValueError,
    SymbolicSizeError,
)

ERROR_TYPES: tuple[tuple[type[BaseException], type[EagerArgumentError]], ...] = (
    (IndexError, EagerIndexError),
    (NotImplementedError, EagerNotImplementedError),
    (TypeError, EagerTypeError),
    (ValueError, EagerValueError),
    (RuntimeError, EagerRuntimeError),
)
"""Eager's error type -> the `EagerArgumentError` that is one too, most specific first; any
other type becomes an `EagerRuntimeError`."""


def eager_error(error: BaseException) -> EagerArgumentError:
    """`error` as the `EagerArgumentError` of its type, with its first line."""
    lines = str(error).strip().splitlines()
    message = lines[0] if lines else type(error).__name__
    cls = next((ours for theirs, ours in ERROR_TYPES if isinstance(error, theirs)), None)
    return (cls or EagerRuntimeError)(message)


# ---------------------------------------------------------------------------------------------
# The triggers: when eager might refuse an op's argument dtypes
# ---------------------------------------------------------------------------------------------

Dtypes = dict[str, list[torch.dtype]]
"""The dtypes of a node's tensor arguments, by schema argument name (a list argument's all)."""
Trigger = Callable[[Dtypes], bool]

INDEX_ARGUMENTS = ("index", "indices")


def _all(dtypes: Dtypes) -> list[torch.dtype]:
    return [d for ds in dtypes.values() for d in ds]


def mixed_or_not_float(dtypes: Dtypes) -> bool:
    """Kernels that take one floating dtype for all their tensors (matmul, conv, norms)."""
    found = set(_all(dtypes))
    return len(found) > 1 or any(not d.is_floating_point for d in found)


def mixed(dtypes: Dtypes) -> bool:
    """Ops that take several dtypes and promote them, or refuse some mixes (cat, stack)."""
    return len(set(_all(dtypes))) > 1


def index_not_long(dtypes: Dtypes) -> bool:
    """Index ops: an index of another dtype than int64 (eager takes int32 for some ops only,
    byte and bool masks for others)."""
    return any(d != torch.int64 for name in INDEX_ARGUMENTS for d in dtypes.get(name, []))


def condition_not_bool(dtypes: Dtypes) -> bool:
    return any(d != torch.bool for d in dtypes.get("condition", []))


def some_float(dtypes: Dtypes) -> bool:
    """Integer-only kernels (bitwise ops)."""
    return any(d.is_floating_point for d in _all(dtypes))


def some_bool(dtypes: Dtypes) -> bool:
    """Ops eager refuses on bools (subtraction, negation)."""
    return torch.bool in _all(dtypes)


def _ops(names: Iterable[str], trigger: Trigger) -> dict[str, Trigger]:
    return dict.fromkeys(names, trigger)


MATMULS = (
    "aten.mm.default",
    "aten.bmm.default",
    "aten.addmm.default",
    "aten.baddbmm.default",
    "aten.addbmm.default",
    "aten.addmv.default",
    "aten.mv.default",
    "aten.dot.default",
    "aten.matmul.default",
    "aten.linear.default",
    "aten.einsum.default",
)
CONVOLUTIONS = (
    "aten.convolution.default",
    "aten.conv1d.default",
    "aten.conv2d.default",
    "aten.conv3d.default",
    "aten.conv1d.padding",
    "aten.conv2d.padding",
    "aten.conv3d.padding",
    "aten.conv_transpose1d.default",
    "aten.conv_transpose2d.input",
    "aten.conv_transpose3d.input",
)
NORMS = (
    "aten.layer_norm.default",
    "aten.native_layer_norm.default",
    "aten.rms_norm.default",
    "aten.group_norm.default",
    "aten.native_group_norm.default",
    "aten.batch_norm.default",
    "aten._native_batch_norm_legit_no_training.default",
    "aten._native_batch_norm_legit.default",
    "aten._native_batch_norm_legit_functional.default",
    "aten.native_batch_norm.default",
    "aten.instance_norm.default",
)
FLOAT_KERNELS = (
    "aten.scaled_dot_product_attention.default",
    "aten._scaled_dot_product_flash_attention_for_cpu.default",
    "aten._softmax.default",
    "aten.softmax.int",
    "aten._log_softmax.default",
    "aten.log_softmax.int",
)
JOINS = ("aten.cat.default", "aten.stack.default", "aten.hstack.default", "aten.vstack.default")
INDEXING = (
    "aten.index.Tensor",
    "aten.index_put.default",
    "aten.index_put_.default",
    "aten.index_select.default",
    "aten.index_add.default",
    "aten.index_copy.default",
    "aten.index_fill.int_Scalar",
    "aten.index_fill.int_Tensor",
    "aten.gather.default",
    "aten.scatter.src",
    "aten.scatter.value",
    "aten.scatter.reduce",
    "aten.scatter_add.default",
    "aten.scatter_reduce.two",
    "aten.take_along_dim.default",
    "aten.embedding.default",
    "aten.embedding_bag.default",
    "aten._embedding_bag.default",
)
CONDITIONS = ("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther")
BITWISE = (
    "aten.bitwise_and.Tensor",
    "aten.bitwise_or.Tensor",
    "aten.bitwise_xor.Tensor",
    "aten.bitwise_not.default",
    "aten.bitwise_and.Scalar",
    "aten.bitwise_or.Scalar",
    "aten.bitwise_xor.Scalar",
    "aten.__and__.Tensor",
    "aten.__or__.Tensor",
    "aten.__xor__.Tensor",
    "aten.bitwise_left_shift.Tensor",
    "aten.bitwise_right_shift.Tensor",
    "aten.__lshift__.Tensor",
    "aten.__rshift__.Tensor",
)

NOT_ON_BOOLS = (
    "aten.sub.Tensor",
    "aten.sub.Scalar",
    "aten.sub_.Tensor",
    "aten.rsub.Tensor",
    "aten.rsub.Scalar",
    "aten.neg.default",
    "aten.neg_.default",
)

PROBED: dict[str, Trigger] = {
    **_ops(MATMULS, mixed_or_not_float),
    **_ops(CONVOLUTIONS, mixed_or_not_float),
    **_ops(NORMS, mixed_or_not_float),
    **_ops(FLOAT_KERNELS, mixed_or_not_float),
    **_ops(JOINS, mixed),
    **_ops(INDEXING, index_not_long),
    **_ops(CONDITIONS, condition_not_bool),
    **_ops(BITWISE, some_float),
    **_ops(NOT_ON_BOOLS, some_bool),
}
"""Each op (`str(OpOverload)`) whose eager kernel refuses some argument dtypes that torch.export
accepts, with the trigger under which the import runs it eagerly (`probe`) to learn whether."""


# ---------------------------------------------------------------------------------------------
# The check
# ---------------------------------------------------------------------------------------------


SHAPE_PROBED = frozenset(
    {
        "aten::slice_scatter",
        "aten::select_scatter",
        "aten::diagonal_scatter",
        "aten::as_strided_scatter",
        "aten::index_add",
        "aten::index_copy",
        "aten::index_put",
    }
)
"""Ops whose meta functions do not check their source's shape against what it fills, where
eager's kernels do (a `diagonal_scatter` of 4 elements into a diagonal of 5 raises in eager;
torch.export lets it through). The importer checks a live one's shapes itself; a dead one
(no output depends on its result, `live_nodes`) is gone after torch's decompositions, so it
is probed first."""


def live_nodes(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes some output of `graph` depends on (a functional graph: a node no output
    depends on has no effect)."""
    live: set[torch.fx.Node] = set()
    todo = [n for n in graph.nodes if n.op == "output"]
    while todo:
        node = todo.pop()
        if node not in live:
            live.add(node)
            todo.extend(node.all_input_nodes)
    return live


INDEX_CHECKED = frozenset(
    {
        "aten::index",
        "aten::gather",
        "aten::index_select",
        "aten::embedding",
        "aten::index_put",
        "aten::scatter",
        "aten::scatter_add",
        "aten::scatter_reduce",
        "aten::index_add",
        "aten::index_copy",
        "aten::index_fill",
    }
)
"""Ops that raise where a value of an index tensor is out of range, which xfuse's kernels check
as they read it. A dead one (no output depends on it) has no kernel to check it."""

UNREAD_KEPT = INDEX_CHECKED | SHAPE_PROBED
"""Ops eager refuses at some calls by their index tensors' values or their operands' shapes:
a dead one is imported as torch's call (`unread_checks`), which checks them at every call."""


def unread_checks(graph: torch.fx.Graph) -> frozenset[torch.fx.Node]:
    """The nodes of `UNREAD_KEPT` no output of `graph` depends on and that take no size of the
    call as an argument (a torch call's arguments are constants): eager runs them, and raises
    where an index is out of range or a source does not fit."""
    live = live_nodes(graph)
    return frozenset(
        n
        for n in graph.nodes
        if n.op == "call_function"
        and n not in live
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target._schema.name in UNREAD_KEPT
        and not _takes_sizes(n)
    )


def _takes_sizes(node: torch.fx.Node) -> bool:
    """Whether an argument of `node` is a size of the call (a SymInt)."""
    return any(is_size_node(a) for a in node.all_input_nodes)


def check_eager_rules(program: ExportedProgram, symbolic: bool = False) -> None:
    """Raise eager's error (as an `EagerArgumentError`) for the first node of `program` whose
    arguments eager refuses. A dead op of `SHAPE_PROBED` is probed too. It is imported as
    torch's call (`unread_checks`), which checks its shapes at every call; one that takes a
    size of the call cannot be, and a `symbolic` program (probed at its size hints) with one is
    refused (`SymbolicSizeError`): a program compiled per shape probes it."""
    live = live_nodes(program.graph)
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        trigger = PROBED.get(str(node.target))
        if trigger is not None and trigger(argument_dtypes(node)):
            probe(node)
        if node not in live and node.target._schema.name in SHAPE_PROBED:
            probe(node)
            if symbolic and _takes_sizes(node):
                raise SymbolicSizeError(
                    f"a dead {node.target._schema.name} (no output depends on it), whose "
                    "shapes eager checks at every size"
                )


def argument_dtypes(node: torch.fx.Node) -> Dtypes:
    """The dtypes of the node's tensor arguments, by schema name."""
    schema = node.target._schema  # type: ignore[union-attr]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]
    found: Dtypes = {}
    for i, argument in enumerate(schema.arguments):  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        name = str(argument.name)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        value = node.args[i] if i < len(node.args) else node.kwargs.get(name)
        values = value if isinstance(value, list | tuple) else [value]
        vals = [v.meta.get("val") for v in values if isinstance(v, torch.fx.Node)]  # pyright: ignore[reportUnknownVariableType]
        dtypes = [v.dtype for v in vals if isinstance(v, torch.Tensor)]
        if dtypes:
            found[name] = dtypes
    return found


def probe(node: torch.fx.Node) -> None:
    """Run the node's op eagerly on zero tensors laid out as its arguments (`stand_in`; its
    other arguments as they are); re-raise what eager raises. A node on a device this
    process cannot run is not probed."""
    stand_ins: dict[torch.fx.Node, Any] = {}
    for arg in node.all_input_nodes:
        val = arg.meta.get("val")
        if isinstance(val, torch.SymInt):  # a symbolic size argument: at its example's size
            size = size_hint(val)
            if size is None:
                return
            stand_ins[arg] = size
            continue
        if not isinstance(val, torch.Tensor):
            continue
        made = stand_in(val) if runnable_here(val.device) else None
        if made is None:
            return
        stand_ins[arg] = made
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: stand_ins.get(n, n))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            node.target(*args, **kwargs)  # type: ignore[operator]  # pyright: ignore[reportCallIssue]
    except Exception as e:  # noqa: BLE001 - every error eager raises is the user's error
        raise eager_error(e) from e


def eager_call_error(
    fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]
) -> EagerArgumentError | None:
    """What eager raises when it runs `fn(*args, **kwargs)` (without grad), as the
    `EagerArgumentError` of its type; None where eager runs it. For calls whose tensors lie
    on several devices, whose agreement eager's kernels check as they run."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - every error eager raises is the user's error
        return eager_error(e)
    return None


def is_size_node(x: Any) -> bool:
    """Whether `x` is an FX node whose value is a size of the call (a SymInt: `h - 7`)."""
    return isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.SymInt)


def is_scalar_node(x: Any) -> bool:
    """Whether `x` is an FX node whose value is a number of the call: a size (a SymInt) or a
    float computed from sizes (a SymFloat: `sym_float(s0) * 1.0`)."""
    return isinstance(x, torch.fx.Node) and isinstance(
        x.meta.get("val"), torch.SymInt | torch.SymFloat
    )


def size_hint(size: int | torch.SymInt) -> int | None:
    """A size as an int: a symbolic one at its example's value (its hint), read without the
    guard that `int()` would record (which would specialise the exported program to that
    size); None for a symbol without a hint."""
    if isinstance(size, torch.SymInt):
        hint = size.node.hint
        return None if hint is None else int(hint)
    return int(size)


def stand_in(val: torch.Tensor) -> torch.Tensor | None:
    """Zeros laid out as `val` is: its shape, dtype, device and strides, since eager's kernels
    choose their path by layout too (a linear of a contiguous 3-D input with a bias is one
    `addmm`, which refuses an int bias; with an expanded bias it is a matmul and a promoting
    add). Symbolic sizes are taken at their examples' values, without guarding on them; None
    where one has no such value."""
    hinted = [size_hint(d) for d in (*val.shape, *val.stride())]
    if any(h is None for h in hinted):
        return None
    shape = tuple(cast("list[int]", hinted[: val.dim()]))
    strides = tuple(cast("list[int]", hinted[val.dim() :]))
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) if all(shape) else 0
    memory = torch.zeros(span, dtype=val.dtype, device=val.device)
    return memory.as_strided(shape, strides)


def runnable_here(device: torch.device) -> bool:
    """Whether eager kernels can run on `device` in this process (not meta, no absent GPU)."""
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        return torch.cuda.is_available()
    return False
