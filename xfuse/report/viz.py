"""
Seeing what the compiler did: a fused module as a summary table, as JSON, and as a picture.

    summary = summarize(module, decisions)        # groups, kernels, bytes moved, rejections
    print(format_summary(summary))                # the aligned table of `--fusion-report`
    text = program_dot(module, decisions, index)  # Graphviz DOT: groups as coloured clusters
    render_dot(text, "fused.svg")                 # .svg/.png/.pdf through Graphviz's `dot`

Memory traffic is estimated from the IR: unfused, every graph op reads its tensor operands and
writes its results; fused, a group reads only its inputs and writes only its outputs (the
tensors between its ops stay in registers). Scalar constants are copied into kernels and never
count. Fusion decisions name ops as the IR a fusion pass read (`%3 graph.exp`); an `OpIndex`,
run as a pipeline observer, remembers which op each name meant so that rejected pairs can be
drawn between the ops they were about.
"""

from __future__ import annotations

import shutil
import subprocess
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Attribute, Block, BlockArgument, Operation, OpResult, SSAValue
from xdsl.passes import ModulePass

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp, YieldOp
from xfuse.errors import GraphvizMissingWarning, RenderError
from xfuse.passes.fusion.decisions import FusionDecision, aligned_table
from xfuse.passes.fusion.graph import ssa_labels, tensor_bytes
from xfuse.passes.fusion.op_facts import is_inlinable_constant

# ---------------------------------------------------------------------------------------------
# Which op a decision's name meant
# ---------------------------------------------------------------------------------------------


def function_bodies(module: ModuleOp) -> list[func.FuncOp]:
    return [f for f in module.walk() if isinstance(f, func.FuncOp) and f.body.blocks]


def index_ops(module: ModuleOp) -> dict[str, Operation]:
    """Ops by the name a fusion decision gives them (`%3 graph.exp`): the label of the op's
    first result as the printer numbers it. Top-level ops win over ops inside regions."""
    index: dict[str, Operation] = {}
    nested: dict[str, Operation] = {}
    for f in function_bodies(module):
        block = f.body.block
        for value, label in ssa_labels(block).items():
            owner = value.owner
            if isinstance(owner, Block) or cast(OpResult, value).index != 0:
                continue
            target = index if owner.parent is block else nested
            target.setdefault(f"{label} {owner.name}", owner)
    return {**nested, **index}


def collect_decisions(passes: Iterable[ModulePass]) -> list[FusionDecision]:
    """The decision records of the fusion passes among `passes` (`decisions` on the pass
    instances, after they ran), in pipeline order."""
    records: list[FusionDecision] = []
    for module_pass in passes:
        found = getattr(module_pass, "decisions", None)
        if isinstance(found, list):
            records += [d for d in found if isinstance(d, FusionDecision)]  # pyright: ignore[reportUnknownVariableType]
    return records


@dataclass
class OpIndex:
    """The ops each fusion pass was deciding about, by name. Use `observe` as a pipeline's
    observer: before every pass that records decisions it indexes the module."""

    by_pass: dict[str, dict[str, Operation]] = field(default_factory=dict)

    def observe(
        self, previous: ModulePass | None, module: ModuleOp, following: ModulePass | None
    ) -> None:
        if following is not None and hasattr(following, "decisions"):
            self.by_pass[following.name] = index_ops(module)

    def resolve(self, pass_name: str, label: str) -> Operation | None:
        return self.by_pass.get(pass_name, {}).get(label)


# ---------------------------------------------------------------------------------------------
# The summary: groups, kernels, bytes, rejections
# ---------------------------------------------------------------------------------------------


def is_graph_op(op: Operation) -> bool:
    return op.name.startswith("graph.") and not isinstance(op, graph.ConstantOp)


def traffic_bytes(values: Iterable[SSAValue]) -> int:
    return sum(
        tensor_bytes(v)
        for v in values
        if isinstance(v.type, TensorType) and not is_inlinable_constant(v)
    )


def op_traffic(op: Operation) -> int:
    """Bytes an op moves when it runs on its own: its tensor operands read, its results written."""
    return traffic_bytes(op.operands) + traffic_bytes(op.results)


def short_name(op: Operation) -> str:
    name = op.name.removeprefix("graph.")
    if isinstance(op, graph.TorchCallOp):
        return f"torch_call {op.target.data}"  # pyright: ignore[reportAttributeAccessIssue]
    return name


def inner_ops(group: GroupOp) -> list[Operation]:
    return [op for op in group.block.ops if not isinstance(op, YieldOp)]


@dataclass(frozen=True)
class GroupTraffic:
    """One group: what it holds, and the bytes its ops move apart and together."""

    function: str
    index: int
    kind: str
    rule: str
    ops: list[str]
    inputs: int
    outputs: int
    bytes_unfused: int
    bytes_fused: int
    kernels: list[str] = field(default_factory=list[str])

    @property
    def bytes_saved(self) -> int:
        return self.bytes_unfused - self.bytes_fused


@dataclass(frozen=True)
class Rejection:
    """How often fusion refused pairs for one reason, with the first such pair."""

    reason: str
    pairs: int
    example: str


@dataclass(frozen=True)
class FusionSummary:
    """The numbers `--fusion-report` and `xfuse.explain` print. `kernels` is exact when the
    program was compiled, else the count lower-to-loops would make (`kernels_estimated`)."""

    ops: int
    groups: list[GroupTraffic]
    lone_ops: int
    lone_bytes: int
    kernels: int
    kernels_estimated: bool
    examined: int
    fused_pairs: int
    rejections: list[Rejection]
    fallbacks: list[str] = field(default_factory=list[str])

    @property
    def bytes_unfused(self) -> int:
        return self.lone_bytes + sum(g.bytes_unfused for g in self.groups)

    @property
    def bytes_fused(self) -> int:
        return self.lone_bytes + sum(g.bytes_fused for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for g, data in zip(self.groups, out["groups"], strict=True):
            data["bytes_saved"] = g.bytes_saved
        out["bytes_unfused"] = self.bytes_unfused
        out["bytes_fused"] = self.bytes_fused
        return out


def group_traffic(function: str, index: int, group: GroupOp) -> GroupTraffic:
    ops = [op for op in inner_ops(group) if is_graph_op(op)]
    return GroupTraffic(
        function=function,
        index=index,
        kind=group.kind.data,
        rule=group.rule.data,
        ops=[short_name(op) for op in ops],
        inputs=len(group.inputs),
        outputs=len(group.outputs),
        bytes_unfused=sum(op_traffic(op) for op in ops),
        bytes_fused=traffic_bytes(group.inputs) + traffic_bytes(group.results),
    )


def becomes_kernel(op: Operation) -> bool:
    """A lone graph op lower-to-loops makes a kernel of (docs/contracts.md): not extern."""
    return is_graph_op(op) and graph.op_kind(op) != "extern"


def rejections(decisions: Sequence[FusionDecision]) -> list[Rejection]:
    refused = [d for d in decisions if not d.fused]
    counts = Counter(d.reason for d in refused)
    first = {d.reason: d for d in reversed(refused)}
    return [
        Rejection(reason, n, f"{first[reason].producer} -> {first[reason].consumer}")
        for reason, n in counts.most_common()
    ]


def summarize(
    module: ModuleOp,
    decisions: Sequence[FusionDecision] = (),
    *,
    ops: int | None = None,
    group_kernels: Mapping[int, list[str]] | None = None,
    kernels: int | None = None,
    fallbacks: Sequence[str] = (),
) -> FusionSummary:
    """The summary of a fused module. A compiled program gives `ops` (before fusion), the
    kernels of each group (by group index) and the kernel count; without them they come from
    the IR."""
    groups: list[GroupTraffic] = []
    lone: list[Operation] = []
    for f in function_bodies(module):
        for op in f.body.block.ops:
            if isinstance(op, GroupOp):
                groups.append(group_traffic(f.sym_name.data, len(groups), op))
            elif is_graph_op(op):
                lone.append(op)
    if group_kernels is not None:
        groups = [
            GroupTraffic(**{**asdict(g), "kernels": list(group_kernels.get(g.index, []))})
            for g in groups
        ]
    leaf_ops = sum(len(g.ops) for g in groups) + len(lone)
    estimate = len(groups) + sum(1 for op in lone if becomes_kernel(op))
    return FusionSummary(
        ops=leaf_ops if ops is None else ops,
        groups=groups,
        lone_ops=len(lone),
        lone_bytes=sum(op_traffic(op) for op in lone),
        kernels=estimate if kernels is None else kernels,
        kernels_estimated=kernels is None,
        examined=len(decisions),
        fused_pairs=sum(1 for d in decisions if d.fused),
        rejections=rejections(decisions),
        fallbacks=list(fallbacks),
    )


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def op_counts(names: Sequence[str]) -> str:
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in Counter(names).most_common())


def percent(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "0%"


SUMMARY_COLUMNS = (
    "unit",
    "kind",
    "rule",
    "ops",
    "in/out",
    "kernels",
    "bytes unfused",
    "bytes fused",
    "saved",
    "op names",
)


def kernels_cell(g: GroupTraffic, estimated: bool) -> str:
    if estimated:
        return "1"
    return ", ".join(f"@{k}" for k in g.kernels) or "eager"


def group_row(g: GroupTraffic, multi_function: bool, estimated: bool) -> tuple[str, ...]:
    where = f"@{g.function} " if multi_function else ""
    return (
        f"{where}group {g.index}",
        g.kind,
        g.rule,
        str(len(g.ops)),
        f"{g.inputs}/{g.outputs}",
        kernels_cell(g, estimated),
        human_bytes(g.bytes_unfused),
        human_bytes(g.bytes_fused),
        f"{human_bytes(g.bytes_saved)} ({percent(g.bytes_saved, g.bytes_unfused)})",
        op_counts(g.ops),
    )


def summary_rows(s: FusionSummary) -> list[tuple[str, ...]]:
    multi = len({g.function for g in s.groups}) > 1
    rows = [group_row(g, multi, s.kernels_estimated) for g in s.groups]
    in_groups = len(s.groups) if s.kernels_estimated else sum(len(g.kernels) for g in s.groups)
    lone_bytes = human_bytes(s.lone_bytes)
    rows.append(
        ("lone ops", "-", "-", str(s.lone_ops), "-", str(s.kernels - in_groups))
        + (lone_bytes, lone_bytes, "0 B", "")
    )
    saved = s.bytes_unfused - s.bytes_fused
    rows.append(
        ("total", "", "", str(sum(len(g.ops) for g in s.groups) + s.lone_ops), "")
        + (str(s.kernels), human_bytes(s.bytes_unfused), human_bytes(s.bytes_fused))
        + (f"{human_bytes(saved)} ({percent(saved, s.bytes_unfused)})", "")
    )
    return rows


def rejection_lines(s: FusionSummary) -> list[str]:
    if s.examined == 0:
        return ["no fusion decisions recorded (no fusion pass ran in this pipeline)"]
    refused = s.examined - s.fused_pairs
    lines = [f"{s.examined} candidate pairs examined: {s.fused_pairs} fused, {refused} rejected"]
    if s.rejections:
        rows = [(r.reason, str(r.pairs), r.example) for r in s.rejections]
        lines += aligned_table(("rejected because", "pairs", "first pair"), rows)
    return lines


def format_summary(s: FusionSummary) -> str:
    """The fusion report: one headline, a row per group, the traffic and the rejections."""
    estimated = " (estimated from the IR)" if s.kernels_estimated else ""
    saved = s.bytes_unfused - s.bytes_fused
    lines = [
        f"{s.ops} ops -> {len(s.groups)} groups -> {s.kernels} kernels{estimated}"
        + (f" ({len(s.fallbacks)} fallbacks)" if s.fallbacks else ""),
        *aligned_table(SUMMARY_COLUMNS, summary_rows(s)),
        f"memory traffic: {human_bytes(s.bytes_unfused)} read+written without fusion, "
        f"{human_bytes(s.bytes_fused)} with fusion (saves {human_bytes(saved)}, "
        f"{percent(saved, s.bytes_unfused)})",
        *rejection_lines(s),
    ]
    lines += [f"fallback: {f}" for f in s.fallbacks]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# DOT
# ---------------------------------------------------------------------------------------------

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
        extern = graph.op_kind(op) == "extern"
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


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------

RENDER_FORMATS = ("svg", "png", "pdf")
DOT_SUFFIXES = (".dot", ".gv")


def render_dot(text: str, path: str | Path) -> Path:
    """Write `text` (DOT) to `path`: as is for `.dot`/`.gv`, else rendered by Graphviz in the
    format the suffix names (svg, png, pdf). Without Graphviz, writes `<path>.dot` and warns
    once with a hint. Returns the path written."""
    path = Path(path)
    if path.suffix in DOT_SUFFIXES:
        path.write_text(text)
        return path
    fmt = path.suffix.removeprefix(".").lower()
    if fmt not in RENDER_FORMATS:
        raise RenderError(f"cannot render to '{path}': use a .svg, .png, .pdf or .dot file name")
    dot = shutil.which("dot")
    if dot is None:
        fallback = path.with_suffix(".dot")
        fallback.write_text(text)
        warnings.warn(
            f"Graphviz `dot` not found: wrote the DOT text to {fallback} instead of {path} "
            "(install Graphviz, e.g. `apt-get install graphviz`, to render pictures)",
            GraphvizMissingWarning,
            stacklevel=2,
        )
        return fallback
    done = subprocess.run(
        [dot, f"-T{fmt}", "-o", str(path)], input=text, text=True, capture_output=True
    )
    if done.returncode != 0:
        first = (done.stderr.strip().splitlines() or ["no message"])[0]
        raise RenderError(f"Graphviz could not render {path}: {first}")
    return path
