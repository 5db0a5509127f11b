"""
Which op a fusion decision's name meant. Decisions name ops as the IR a fusion pass read
(`%3 graph.exp`); an `OpIndex`, run as a pipeline observer, remembers which op each name meant,
so that refused pairs can be drawn between the ops they were about.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import cast

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, OpResult
from xdsl.passes import ModulePass

from xfuse.ir.functions import function_bodies
from xfuse.passes.fusion.decisions import FusionDecision
from xfuse.passes.fusion.graph import ssa_labels


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
