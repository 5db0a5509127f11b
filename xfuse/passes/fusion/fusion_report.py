"""
The `fusion-report` pass: lists the groups of a module from the attributes the fusion passes
leave on them (`rule`, `kind`, `fusion.score`) as `//` comment lines.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.passes import ModulePass

from xfuse.dialects.fusion import GroupOp
from xfuse.passes.fusion.decisions import aligned_table


@dataclass(frozen=True)
class GroupSummary:
    """What the IR says about one group."""

    function: str
    index: int
    kind: str
    rule: str
    score: int
    ops: int
    inputs: int
    outputs: int


def group_summaries(module: ModuleOp) -> list[GroupSummary]:
    out: list[GroupSummary] = []
    for f in module.walk():
        if not isinstance(f, func.FuncOp) or not f.body.blocks:
            continue
        groups = [op for op in f.body.block.ops if isinstance(op, GroupOp)]
        for i, g in enumerate(groups):
            score = g.attributes.get("fusion.score")
            out.append(
                GroupSummary(
                    f.sym_name.data,
                    i,
                    g.kind.data,
                    g.rule.data,
                    score.value.data if isinstance(score, IntegerAttr) else 0,
                    sum(1 for _ in g.block.ops) - 1,
                    len(g.inputs),
                    len(g.outputs),
                )
            )
    return out


def format_groups(summaries: Sequence[GroupSummary]) -> str:
    header = ("function", "group", "kind", "rule", "bytes saved", "ops", "inputs", "outputs")
    rows = [
        (
            f"@{s.function}",
            str(s.index),
            s.kind,
            s.rule,
            str(s.score),
            str(s.ops),
            str(s.inputs),
            str(s.outputs),
        )
        for s in summaries
    ]
    return "\n".join([*aligned_table(header, rows), f"{len(summaries)} groups"])


@dataclass(frozen=True)
class FusionReportPass(ModulePass):
    """Prints the groups of the module (from their attributes) as `//` comment lines, so that
    the output stays valid IR; changes nothing."""

    name = "fusion-report"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        text = format_groups(group_summaries(op))
        print("\n".join("// " + line for line in text.splitlines()), file=sys.stdout)
