"""What the fusion algorithms (`fuse-greedy`, `fuse-scored`) keep over one function body: its
fusion graph, the log of their decisions and the `max-fusions` budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from xfuse.passes.fusion.decisions import DecisionLog, FusionDecision
from xfuse.passes.fusion.graph import FusionGraph


@dataclass
class Fuser:
    """One run of a fusion algorithm over one function body; `pass_name` names the pass in its
    decisions."""

    pass_name: ClassVar[str]

    g: FusionGraph
    max_fusions: int = field(default=-1, kw_only=True)
    fusions: int = field(default=0, init=False)
    log: DecisionLog = field(init=False)

    def __post_init__(self) -> None:
        self.log = DecisionLog(self.pass_name, self.g.op_label)

    def may_fuse(self) -> bool:
        """Count one more fusion against `max_fusions` (a bisection aid); False once spent."""
        if 0 <= self.max_fusions <= self.fusions:
            return False
        self.fusions += 1
        return True

    def finish(self) -> list[FusionDecision]:
        """Close the graph (its groups' final form) and the log; the decisions."""
        self.g.finish()
        self.log.settle()
        return self.log.decisions
