"""
The data model of fusion decisions: structured records, and their text and JSON forms.

The fusion passes collect a `FusionDecision` for every candidate pair they examine
(`pass_instance.decisions` after `apply`): which two ops, fused or not, the named reason
(`xfuse.passes.fusion.legality.REASONS`), the rule and, for `fuse-scored`, the score. A pair examined
again keeps its latest answer. `format_report` lays them out as an aligned table,
`report_json` as JSON. (The `fusion-report` pass, which lists a module's groups, is in
`fusion_report.py`.)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field

from xdsl.ir import Operation

from xfuse.dialects.fusion import GroupOp
from xfuse.passes.fusion.legality import FUSED

# The rules by which the fusion passes join nodes: a decision's `rule`, and after the pass's
# name a group's (`fuse-scored:producer-consumer`).
PRODUCER_CONSUMER = "producer-consumer"
MULTI_OUTPUT = "multi-output"
RECOMPUTE = "recompute"
SIBLING = "sibling"
HORIZONTAL = "horizontal"


def group_rule(pass_name: str, rule: str) -> str:
    """The `rule` attribute of a group that pass `pass_name` formed by `rule`."""
    return f"{pass_name}:{rule}"


@dataclass(frozen=True, order=True)
class Score:
    """Inductor's ordering of candidate pairs: the kind of fusion first, then the bytes of
    memory traffic it saves, then closeness in the graph (nearer is better)."""

    priority: int
    bytes_saved: int
    distance: int

    def key(self) -> tuple[int, int, int]:
        return (self.priority, self.bytes_saved, -self.distance)

    def __str__(self) -> str:
        return f"p{self.priority} {self.bytes_saved}B d{self.distance}"


@dataclass(frozen=True)
class FusionDecision:
    """One examined pair: `producer` and `consumer` name ops as the input IR does
    (`%3 graph.exp`); for siblings they are the two readers of the shared tensor."""

    producer: str
    consumer: str
    fused: bool
    reason: str
    rule: str
    pass_name: str
    score: Score | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["score"] = asdict(self.score) if self.score is not None else None
        return out


@dataclass
class DecisionLog:
    """Decisions of one pass run, one per pair of ops, latest answer kept, first-seen order.
    `label` names an op as the input IR does."""

    pass_name: str
    label: Callable[[Operation], str]
    _by_pair: dict[tuple[Operation, Operation], _Entry] = field(default_factory=dict)

    def record(
        self,
        producer: Operation,
        consumer: Operation,
        reason: str,
        rule: str,
        score: Score | None = None,
        detail: str = "",
    ) -> None:
        # Names are made when the decisions are read: most pairs are never looked at.
        self._by_pair[(producer, consumer)] = _Entry(reason, rule, score, detail)

    def settle(self) -> None:
        """A pair refused early may still end up in one group through later merges (a
        producer and a consumer joined by way of the op between them): say so."""
        for (producer, consumer), e in self._by_pair.items():
            block = producer.parent
            if e.reason == FUSED or block is None or block is not consumer.parent:
                continue
            if isinstance(block.parent_op(), GroupOp):
                e.detail = f"joined by other merges ({e.reason} at first)"
                e.reason = FUSED

    @property
    def decisions(self) -> list[FusionDecision]:
        """One decision per pair of ops; pairs with the same names (an op and its copies)
        keep the latest answer."""
        named: dict[tuple[str, str], FusionDecision] = {}
        # An op is in several pairs: name it once. Keyed by `id` (the ops are alive, held by
        # the pairs): an op's `__hash__` is a Python call.
        labels: dict[int, str] = {}
        for (producer, consumer), e in self._by_pair.items():
            names = (self._name(producer, labels), self._name(consumer, labels))
            named.pop(names, None)
            named[names] = FusionDecision(
                *names, e.reason == FUSED, e.reason, e.rule, self.pass_name, e.score, e.detail
            )
        return list(named.values())

    def _name(self, op: Operation, labels: dict[int, str]) -> str:
        text = labels.get(id(op))
        if text is None:
            text = labels[id(op)] = self.label(op)
        return text


@dataclass
class _Entry:
    reason: str
    rule: str
    score: Score | None
    detail: str


COLUMNS = ("pass", "producer", "consumer", "decision", "reason", "rule", "score", "detail")


def _row(d: FusionDecision) -> tuple[str, ...]:
    return (
        d.pass_name,
        d.producer,
        d.consumer,
        "fused" if d.fused else "kept apart",
        d.reason,
        d.rule,
        str(d.score) if d.score is not None else "-",
        d.detail or "-",
    )


def aligned_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in (header, *rows)
    ]


def format_report(decisions: Iterable[FusionDecision]) -> str:
    """An aligned table, one line per examined pair, and a summary line by reason."""
    decisions = list(decisions)
    lines = aligned_table(COLUMNS, [_row(d) for d in decisions])
    refused = Counter(d.reason for d in decisions if not d.fused)
    fused = len(decisions) - sum(refused.values())
    summary = ", ".join(f"{reason}: {n}" for reason, n in refused.most_common())
    lines.append(
        f"{len(decisions)} pairs examined: {fused} fused, {sum(refused.values())} kept apart"
        + (f" ({summary})" if summary else "")
    )
    return "\n".join(lines)


def report_json(decisions: Iterable[FusionDecision]) -> str:
    return json.dumps([d.to_dict() for d in decisions], indent=2)
