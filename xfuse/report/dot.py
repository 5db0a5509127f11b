"""
A fused module as a Graphviz DOT picture: an op per node, fusion groups as clusters coloured
by kind, refused pairs as dashed red edges named by the reason.

    text = program_dot(module, decisions, index)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.dialects.op_kinds import Kind, kind_of
from xfuse.ir.functions import function_bodies
from xfuse.passes.fusion.decisions import FusionDecision
from xfuse.passes.fusion.graph import ssa_labels
from xfuse.passes.fusion.op_facts import is_inlinable_constant
from xfuse.report.counts import inner_ops
from xfuse.report.op_index import OpIndex
from xfuse.report.summary import group_traffic, human_bytes, short_name

KIND_COLOURS = {
    "elementwise": "#cfe2ff",
    "broadcast": "#d1f2eb",
    "injective": "#fff3cd",
    "reduction": "#f8d7da",
}
"""Fill colours of group clusters by the group's kind."""

EXTERN_COLOUR = "#d9d9d9"
OTHER_COLOUR = "#e8e8f0"
REJECTED_COLOUR = "#c0392b"


def quote(text: str) -> str:
    """A DOT string literal; newlines become centred line breaks."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def attrs(**values: str) -> str:
    return "[" + ", ".join(f"{k}={quote(v)}" for k, v in values.items()) + "]"


def type_label(t: Attribute) -> str:
    """`2x8xf32` for `tensor<2x8xf32>`; a 0-d tensor is its dtype."""
    if isinstance(t, TensorType):
        shape = "x".join(str(d) for d in t.get_shape())
        return f"{shape}x{t.element_type}" if shape else str(t.element_type)
    return str(t)


@dataclass
class DotWriter:
    """Builds the DOT text of one module; node ids are `n<i>` in the order ops are met."""

    show_params: bool
    lines: list[str] = field(default_factory=list[str])
    ids: dict[object, str] = field(default_factory=dict)
    labels: dict[SSAValue, str] = field(default_factory=dict)

    def node_id(self, key: object) -> str:
        if key not in self.ids:
            self.ids[key] = f"n{len(self.ids)}"
        return self.ids[key]

    def source(self, value: SSAValue) -> Operation | SSAValue | None:
        """What an edge for `value` starts at: a drawn op or function argument, or None."""
        owner = value.owner
        if isinstance(owner, Block):
            group = owner.parent_op()
            if isinstance(group, GroupOp):
                return self.source(group.inputs[cast(BlockArgument, value).index])
            return value if self.show_params or not is_param(value) else None
        if isinstance(owner, GroupOp):
            return self.source(owner.yield_op.values[cast(OpResult, value).index])
        if is_inlinable_constant(value):
            return None
        return owner

    def function(self, f: func.FuncOp, indent: str) -> None:
        block = f.body.block
        self.labels = ssa_labels(block)
        for arg in block.args:
            if self.show_params or not is_param(arg):
                self.emit_arg(f, arg, indent)
        for op in block.ops:
            if isinstance(op, GroupOp):
                self.group(f, op, indent)
            elif isinstance(op, func.ReturnOp):
                self.line(indent, f"{self.node_id(op)} {attrs(label='output', shape='oval')};")
                self.edges(op, indent)
            elif not is_inlinable_constant_op(op):
                self.op_node(op, indent)
                self.edges(op, indent)

    def emit_arg(self, f: func.FuncOp, arg: SSAValue, indent: str) -> None:
        name = arg_name(f, arg) or self.labels.get(arg, "%?")
        label = f"{name}\n{type_label(arg.type)}"
        style = "dashed" if is_param(arg) else "solid"
        self.line(indent, f"{self.node_id(arg)} {attrs(label=label, shape='oval', style=style)};")

    def op_node(self, op: Operation, indent: str) -> None:
        extern = kind_of(op) == Kind.EXTERN
        label = f"{self.value_label(op)} {short_name(op)}"
        fill = EXTERN_COLOUR if extern else OTHER_COLOUR
        shape = "box3d" if extern else "box"
        self.line(
            indent,
            f"{self.node_id(op)} {attrs(label=label, shape=shape, style='filled', fillcolor=fill)};",
        )

    def value_label(self, op: Operation) -> str:
        return self.labels.get(op.results[0], "%?") if op.results else ""

    def group(self, f: func.FuncOp, group: GroupOp, indent: str) -> None:
        index = sum(1 for key in self.ids if isinstance(key, GroupOp))
        traffic = group_traffic(f.sym_name.data, index, group)
        self.node_id(group)
        colour = KIND_COLOURS.get(traffic.kind, OTHER_COLOUR)
        label = (
            f"group {index}: {traffic.kind}\n{traffic.rule}\n{len(traffic.ops)} ops, "
            f"saves {human_bytes(traffic.bytes_saved)} "
            f"({human_bytes(traffic.bytes_unfused)} -> {human_bytes(traffic.bytes_fused)})"
        )
        self.line(indent, f"subgraph cluster_{self.node_id(group)} {{")
        inner = indent + "  "
        self.line(inner, f"label={quote(label)}; style=filled; fillcolor={quote(colour)};")
        for op in inner_ops(group):
            if not is_inlinable_constant_op(op):
                self.op_node(op, inner)
        self.line(indent, "}")
        for op in inner_ops(group):
            if not is_inlinable_constant_op(op):
                self.edges(op, indent)

    def edges(self, op: Operation, indent: str) -> None:
        for value in op.operands:
            start = self.source(value)
            if start is None:
                continue
            label = type_label(value.type)
            self.line(indent, f"{self.node_id(start)} -> {self.node_id(op)} {attrs(label=label)};")

    def rejected(self, pairs: Iterable[tuple[Operation, Operation, str]], indent: str) -> None:
        seen: set[tuple[str, str, str]] = set()
        for producer, consumer, reason in pairs:
            if producer not in self.ids or consumer not in self.ids:
                continue  # erased since, or not drawn
            key = (self.ids[producer], self.ids[consumer], reason)
            if key in seen:
                continue
            seen.add(key)
            style = attrs(
                label=reason,
                style="dashed",
                color=REJECTED_COLOUR,
                fontcolor=REJECTED_COLOUR,
                constraint="false",
            )
            self.line(indent, f"{key[0]} -> {key[1]} {style};")

    def line(self, indent: str, text: str) -> None:
        self.lines.append(indent + text)


def is_param(value: SSAValue) -> bool:
    owner = value.owner
    if not isinstance(owner, Block):
        return False
    f = owner.parent_op()
    return isinstance(f, func.FuncOp) and "graph.param" in arg_attrs(f, value)


def arg_attrs(f: func.FuncOp, arg: SSAValue) -> dict[str, Attribute]:
    if f.arg_attrs is None:
        return {}
    attrs_of_arg = f.arg_attrs.data[cast(BlockArgument, arg).index]  # arg is one of f's
    return dict(attrs_of_arg.data)


def arg_name(f: func.FuncOp, arg: SSAValue) -> str | None:
    for key in ("graph.input", "graph.param"):
        found = arg_attrs(f, arg).get(key)
        data = getattr(found, "data", None)
        if isinstance(data, str):
            return data
    return None


def is_inlinable_constant_op(op: Operation) -> bool:
    return isinstance(op, graph.ConstantOp) and is_inlinable_constant(op.results[0])


def rejected_pairs(
    decisions: Iterable[FusionDecision], index: OpIndex | None
) -> list[tuple[Operation, Operation, str]]:
    """The refused pairs whose two ops the index still knows."""
    if index is None:
        return []
    out: list[tuple[Operation, Operation, str]] = []
    for d in decisions:
        if d.fused:
            continue
        producer = index.resolve(d.pass_name, d.producer)
        consumer = index.resolve(d.pass_name, d.consumer)
        if producer is not None and consumer is not None and producer is not consumer:
            out.append((producer, consumer, d.reason))
    return out


def program_dot(
    module: ModuleOp,
    decisions: Iterable[FusionDecision] = (),
    index: OpIndex | None = None,
    *,
    show_params: bool = False,
    title: str = "xfuse",
) -> str:
    """The module as a Graphviz digraph: an op per node, fusion groups as clusters coloured by
    kind (with the bytes they save), data edges labelled with tensor types, and the pairs the
    fusion passes refused (resolved through `index`) as dashed red edges named by the reason.
    Parameters are left out unless `show_params`."""
    writer = DotWriter(show_params)
    functions = function_bodies(module)
    for f in functions:
        if len(functions) > 1:
            writer.line("  ", f"subgraph cluster_func_{f.sym_name.data} {{")
            writer.line("    ", f"label={quote('@' + f.sym_name.data)};")
            writer.function(f, "    ")
            writer.line("  ", "}")
        else:
            writer.function(f, "  ")
    writer.rejected(rejected_pairs(decisions, index), "  ")
    header = [
        f"digraph {quote(title)} {{",
        "  rankdir=TB;",
        '  node [fontname="Helvetica", fontsize=10];',
        '  edge [fontname="Helvetica", fontsize=8];',
        '  graph [fontname="Helvetica", fontsize=10, labeljust="l"];',
    ]
    return "\n".join([*header, *writer.lines, "}"]) + "\n"
