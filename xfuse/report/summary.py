"""
The summary of a fused module: groups, kernels, bytes moved with and without fusion, and why
pairs were refused, as a table (`--fusion-report`, `print(xfuse.explain(...))`) and JSON.

    summary = summarize(module, decisions)
    print(format_summary(summary))

Memory traffic is estimated from the IR: unfused, every graph op reads its tensor operands and
writes its results; fused, a group reads only its inputs and writes only its outputs (the
tensors between its ops stay in registers). Scalar constants are copied into kernels and never
count. A group that did not run as its kernel (it fell back to eager, or ran op by op) is
credited nothing: its fused bytes are its unfused ones. The parts of the program that do not
run as fused kernels (`torch_call`s, other extern ops, groups that fell back or ran op by op)
are counted apart (`FusionSummary.not_fused`), so that the report shows how much of the traffic
still runs eagerly. The headline's ops, groups and kernels are those `xfuse.report.counts`
defines.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from xdsl.dialects.builtin import ModuleOp, TensorType
from xdsl.ir import Operation, SSAValue

from xfuse.dialects import graph
from xfuse.dialects.fusion import GroupOp
from xfuse.dialects.op_kinds import Kind, kind_of
from xfuse.ir.functions import function_bodies
from xfuse.passes.fusion.decisions import FusionDecision, aligned_table
from xfuse.passes.fusion.graph import tensor_bytes
from xfuse.passes.fusion.op_facts import is_inlinable_constant
from xfuse.report.counts import (
    group_ops,
    groups_of,
    headline,
    is_graph_op,
    kernel_estimate,
    op_count,
)
from xfuse.runtime.compiler import CONSTANT, EAGER, FUSED, OP_BY_OP, folds

TORCH_CALL, EXTERN = "torch_call", "extern"
NOT_FUSED_PARTS = (TORCH_CALL, EXTERN, EAGER, OP_BY_OP)
"""The parts of a program that do not run as fused kernels, as `FusionSummary.not_fused` names
them: torch_calls, other extern ops (matmul, linear, ...), groups run eagerly (fell back), and
groups run op by op."""


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
    status: str = FUSED
    """How the group runs (`GroupInfo.status`): fused, op by op or eager."""

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
    not_fused: dict[str, int] = field(default_factory=dict[str, int])
    """Bytes read+written by the parts that do not run as fused kernels, by part
    (`NOT_FUSED_PARTS`); part of `bytes_fused`, the traffic of the program as it runs."""
    op_by_op: list[str] = field(default_factory=list[str])
    """Groups compiled op by op because their lowering refused them, with why."""

    @property
    def bytes_unfused(self) -> int:
        return self.lone_bytes + sum(g.bytes_unfused for g in self.groups)

    @property
    def bytes_fused(self) -> int:
        return self.lone_bytes + sum(g.bytes_fused for g in self.groups)

    @property
    def bytes_not_fused(self) -> int:
        """The part of `bytes_fused` moved outside fused kernels (eagerly, or op by op)."""
        return sum(self.not_fused.values())

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for g, data in zip(self.groups, out["groups"], strict=True):
            data["bytes_saved"] = g.bytes_saved
        out["bytes_unfused"] = self.bytes_unfused
        out["bytes_fused"] = self.bytes_fused
        out["bytes_not_fused"] = self.bytes_not_fused
        return out


def group_traffic(function: str, index: int, group: GroupOp) -> GroupTraffic:
    ops = group_ops(group)
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


def not_fused_part(op: Operation) -> str | None:
    """The part of `NOT_FUSED_PARTS` a lone op belongs to, if any (a lone graph op of another
    kind is a kernel of its own, or a view)."""
    if isinstance(op, graph.TorchCallOp):
        return TORCH_CALL
    return EXTERN if is_graph_op(op) and kind_of(op) == Kind.EXTERN else None


def with_status(g: GroupTraffic, kernels: list[str], status: str) -> GroupTraffic:
    """`g` as it ran: a group that did not run as its kernel moves what its ops move, one
    computed at compile time nothing."""
    fused = 0 if status == CONSTANT else g.bytes_fused if status == FUSED else g.bytes_unfused
    return GroupTraffic(**{**asdict(g), "kernels": kernels, "status": status, "bytes_fused": fused})


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
    group_kernels: Mapping[int, list[str]] | None = None,
    kernels: int | None = None,
    fallbacks: Sequence[str] = (),
    group_status: Mapping[int, str] | None = None,
    op_by_op: Sequence[str] = (),
) -> FusionSummary:
    """The summary of a fused module, its counts as `xfuse.report.counts` defines them. A
    compiled program gives the kernels of each group (by group index), how each group runs
    (`GroupInfo.status`) and the kernel count; without them they come from the IR (every group
    fused, but those the runtime computes at compile time)."""
    groups: list[GroupTraffic] = []
    lone: list[Operation] = []
    for f in function_bodies(module):
        for op in f.body.block.ops:
            if isinstance(op, GroupOp):
                groups.append(group_traffic(f.sym_name.data, len(groups), op))
            elif is_graph_op(op):
                lone.append(op)
    if group_kernels is None and group_status is None:
        folded = [folds(op) for op in groups_of(module)]
        groups = [
            with_status(g, [], CONSTANT) if f else g for g, f in zip(groups, folded, strict=True)
        ]
    else:
        kernels_of, status_of = group_kernels or {}, group_status or {}
        groups = [
            with_status(g, list(kernels_of.get(g.index, [])), status_of.get(g.index, FUSED))
            for g in groups
        ]
    not_fused = dict.fromkeys(NOT_FUSED_PARTS, 0)
    for op in lone:
        part = not_fused_part(op)
        if part is not None:
            not_fused[part] += op_traffic(op)
    for g in groups:
        if g.status not in (FUSED, CONSTANT):
            not_fused[g.status] += g.bytes_fused
    return FusionSummary(
        ops=op_count(module),
        groups=groups,
        lone_ops=len(lone),
        lone_bytes=sum(op_traffic(op) for op in lone),
        kernels=kernel_estimate(module) if kernels is None else kernels,
        kernels_estimated=kernels is None,
        examined=len(decisions),
        fused_pairs=sum(1 for d in decisions if d.fused),
        rejections=rejections(decisions),
        fallbacks=list(fallbacks),
        not_fused=not_fused,
        op_by_op=list(op_by_op),
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
    if estimated and g.status != CONSTANT:
        return "1"
    kernels = ", ".join(f"@{k}" for k in g.kernels)
    if g.status == OP_BY_OP:
        return f"op by op: {kernels}" if kernels else OP_BY_OP
    if g.status == CONSTANT:
        return "none: computed at compile time"
    return kernels or EAGER


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
    in_groups = (
        sum(g.status != CONSTANT for g in s.groups)
        if s.kernels_estimated
        else sum(len(g.kernels) for g in s.groups)
    )
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
    saved = s.bytes_unfused - s.bytes_fused
    lines = [
        headline(
            s.ops,
            len(s.groups),
            s.kernels,
            estimated=s.kernels_estimated,
            fallbacks=len(s.fallbacks),
        ),
        *aligned_table(SUMMARY_COLUMNS, summary_rows(s)),
        f"memory traffic: {human_bytes(s.bytes_unfused)} read+written without fusion, "
        f"{human_bytes(s.bytes_fused)} with fusion (saves {human_bytes(saved)}, "
        f"{percent(saved, s.bytes_unfused)})",
        not_fused_line(s),
        *rejection_lines(s),
    ]
    lines += [f"fallback: {f}" for f in s.fallbacks]
    lines += [f"op by op: {f}" for f in s.op_by_op]
    return "\n".join(lines)


def not_fused_line(s: FusionSummary) -> str:
    """How much of the traffic with fusion is not in fused kernels, by part."""
    parts = ", ".join(f"{part} {human_bytes(n)}" for part, n in s.not_fused.items() if n)
    return (
        f"not in fused kernels: {human_bytes(s.bytes_not_fused)} of the "
        f"{human_bytes(s.bytes_fused)} with fusion ({percent(s.bytes_not_fused, s.bytes_fused)})"
        + (f": {parts}" if parts else "")
    )
