"""
`fuse-scored`: fusion by score, after Inductor's scheduler.

Each round enumerates candidate pairs from the tensors nodes share: a producer and its reader
(vertical), a cheap producer and all its readers (recompute), two readers of one tensor over
the same iteration space (siblings). Only nodes at most `window` positions apart are paired, so
a round costs O(window * n), not O(n^2). Every candidate goes through the gates of
`xfuse.passes.fusion.legality`; the legal ones are scored by (kind of fusion, bytes of memory traffic
saved, closeness) and applied greedily from the best, skipping pairs whose nodes this round
already consumed (the gates that depend on the rest of the graph are checked again first).
Rounds repeat until one merges nothing or `max-rounds` have run.

Then (`horizontal`) groups, and reductions left alone, that share no tensor but run over the
same space, at most `window` positions apart, merge pairwise when the gates allow it (no path
between them): BERT's query, key and value heads (three bias adds and transposes after three
GEMMs) become one kernel, and so do a split norm's final sums of its two sets of partials.
Each such merge saves a launch; it runs last so that the merges that save memory traffic
choose first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass

from xfuse.dialects.op_kinds import Kind
from xfuse.passes.fusion.decisions import (
    HORIZONTAL,
    MULTI_OUTPUT,
    PRODUCER_CONSUMER,
    RECOMPUTE,
    SIBLING,
    FusionDecision,
    Score,
    group_rule,
)
from xfuse.passes.fusion.fuser import Fuser
from xfuse.passes.fusion.graph import (
    FusionGraph,
    Node,
    RecomputePlan,
    by_position,
    directly_connected,
    fuse_each_function,
)
from xfuse.passes.fusion.legality import (
    FUSED,
    MAX_ROUNDS,
    OUTPUT_RECOMPUTE_BUDGET,
    WINDOW,
    Verdict,
    check_order,
    check_output_recompute,
    check_pair,
    check_recompute,
    fusability,
    is_candidate_node,
    is_cheap_cone,
    sibling_candidates,
)
from xfuse.passes.options import LIMIT_OR_ALL, NON_NEGATIVE, POSITIVE, option

PASS = "fuse-scored"

# The first component of a score: vertical fusion removes a tensor from memory altogether,
# multi-output and recompute remove reads, siblings share one input.
PRIORITY = {PRODUCER_CONSUMER: 3, MULTI_OUTPUT: 2, RECOMPUTE: 2, SIBLING: 1, HORIZONTAL: 0}


@dataclass(slots=True)
class Candidate:
    """A legal pair (or, for `recompute`, a producer and all its readers) with its score.

    The score is kept as its sort key (`Score.key()`) and made a `Score` only for the
    candidates a decision names: a round builds many candidates, and a frozen dataclass is
    slow to build."""

    first: Node
    second: Node
    rule: str
    key: tuple[int, int, int]
    labels: tuple[Operation, Operation]
    readers: tuple[Node, ...] = ()

    @property
    def score(self) -> Score:
        priority, saved, closeness = self.key
        return Score(priority, saved, -closeness)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return (self.first, self.second, *self.readers)

    def touches(self, nodes: set[Node]) -> bool:
        """Whether one of the candidate's nodes is in `nodes`."""
        if self.first in nodes or self.second in nodes:
            return True
        return any(n in nodes for n in self.readers)


_BY_KEY = attrgetter("key")


@dataclass
class ScoredFuser(Fuser):
    """One run of the scored algorithm over one function body."""

    pass_name = PASS

    window: int
    max_rounds: int
    arg_limit: int
    max_group_size: int
    recompute_budget: float
    """`check_output_recompute`'s budget; 0 computes no output again."""
    # Gates that depend only on the two nodes, remembered across rounds; a merge forgets the
    # entries of the nodes it touched (`forget_gates`), since a group merged into keeps its
    # identity but not its space.
    _pair_gates: dict[tuple[Node, Node, bool], tuple[Verdict, int]] = field(
        init=False, default_factory=dict
    )
    _gates_of: dict[Node, list[tuple[Node, Node, bool]]] = field(init=False, default_factory=dict)
    # A producer's recompute plan and whether every reader may take a copy: asked once per
    # reader, the same answer while one round's candidates are enumerated (nothing changes).
    _plans: dict[Node, tuple[RecomputePlan | None, bool]] = field(init=False, default_factory=dict)

    def run(self) -> list[FusionDecision]:
        skipped: list[Candidate] | None = []
        for _ in range(self.max_rounds):
            self.g.renumber()
            skipped = self.apply(self.candidates())
            if skipped is None:
                break
        for c in skipped or ():
            self.log.record(*c.labels, MAX_ROUNDS, c.rule, c.score, "rounds ran out")
        if self.max_rounds:
            if self.recompute_budget > 0:
                self.recompute_cheap_outputs()
            self.horizontal()
        decisions = self.finish()
        # Only the decisions are read from now on (see `FusionGraph._release`).
        self._pair_gates.clear()
        self._gates_of.clear()
        self._plans.clear()
        return decisions

    # --- enumeration -------------------------------------------------------------------------

    def gate(self, first: Node, second: Node, *, sibling: bool = False) -> tuple[Verdict, int]:
        """The pair gates (cycles and mutation are checked when the pair is applied) and the
        bytes the merge would save."""
        key = (first, second, sibling)
        known = self._pair_gates.get(key)
        if known is None:
            verdict = check_pair(
                self.g,
                first,
                second,
                arg_limit=self.arg_limit,
                max_group_size=self.max_group_size,
                sibling=sibling,
            )
            saved = self.g.merge_saving(first, second) if verdict.ok else 0
            known = self._pair_gates[key] = (verdict, saved)
            self._gates_of.setdefault(first, []).append(key)
            self._gates_of.setdefault(second, []).append(key)
        return known

    def forget_gates(self, changed: set[Node]) -> None:
        """Drop the memoized gates of pairs touching nodes a merge changed: a group merged into
        keeps its identity but not its space, size or inputs."""
        for node in changed:
            for key in self._gates_of.pop(node, ()):
                self._pair_gates.pop(key, None)

    def candidates(self) -> list[Candidate]:
        """This round's legal candidates: the vertical ones, then the best of the siblings
        found for each pair (two readers can share several tensors)."""
        g = self.g
        self._plans.clear()
        # A producer and one of its readers are one pair, met once: no two vertical
        # candidates, and no sibling one (siblings never read one another), share a pair.
        found: list[Candidate] = []
        nodes = g.nodes()
        for node in nodes:
            if not is_candidate_node(node):
                continue
            for reader in g.successors(node):
                c = self.vertical(node, reader)
                if c is not None:
                    found.append(c)
        best: dict[tuple[Node, Node], Candidate] = {}
        shared: list[tuple[SSAValue, tuple[Node, ...]]] = [
            (arg, g.readers_of(arg)) for arg in g.block.args
        ]
        shared += [pair for n in nodes for pair in zip(n.outputs, g.output_readers(n), strict=True)]
        for value, readers in shared:
            for bucket in sibling_candidates(g, value, readers):
                for a, b in zip(bucket, bucket[1:], strict=False):
                    c = self.sibling(value, a, b)
                    if c is None:
                        continue
                    known = best.get((a, b))
                    if known is None or c.key > known.key:
                        best[a, b] = c
        found.extend(best.values())
        return found

    def vertical(self, producer: Node, reader: Node) -> Candidate | None:
        g = self.g
        if not is_candidate_node(reader):
            return None
        labels = g.pair_ops(producer, reader)
        distance = int(reader.pos - producer.pos)
        if distance > self.window:
            self.log.record(
                *labels, WINDOW, PRODUCER_CONSUMER, detail=f"{distance} > {self.window}"
            )
            return None
        verdict, saved = self.gate(producer, reader)
        if not verdict.ok:
            self.log.record(*labels, verdict.reason, PRODUCER_CONSUMER, detail=verdict.detail)
            return None
        plan, recompute = self.plan(producer)
        if recompute:
            assert plan is not None
            far = max(int(r.pos - producer.pos) for r in plan.readers)
            key = (PRIORITY[RECOMPUTE], plan.recompute_saving, -far)
            return Candidate(producer, reader, RECOMPUTE, key, labels, plan.readers)
        rule = MULTI_OUTPUT if plan is not None else PRODUCER_CONSUMER
        return Candidate(producer, reader, rule, (PRIORITY[rule], saved, -distance), labels)

    def plan(self, producer: Node) -> tuple[RecomputePlan | None, bool]:
        """The producer's recompute plan, and whether to recompute (memoized per round)."""
        known = self._plans.get(producer)
        if known is None:
            plan = self.g.recompute_plan(producer)
            recompute = (
                plan is not None and plan.prefers_recompute and self.can_recompute(producer, plan)
            )
            known = self._plans[producer] = (plan, recompute)
        return known

    def can_recompute(self, producer: Node, plan: RecomputePlan) -> bool:
        return all(
            int(r.pos - producer.pos) <= self.window
            and check_recompute(self.g, producer, r, arg_limit=self.arg_limit).ok
            for r in plan.readers
        )

    def sibling(self, value: SSAValue, a: Node, b: Node) -> Candidate | None:
        g = self.g
        if directly_connected(g, a, b):
            return None  # a vertical candidate already
        labels = (g.reader_in(a, value), g.reader_in(b, value))
        distance = int(b.pos - a.pos)
        if distance > self.window:
            self.log.record(*labels, WINDOW, SIBLING, detail=f"{distance} > {self.window}")
            return None
        verdict, saved = self.gate(a, b, sibling=True)
        if not verdict.ok:
            self.log.record(*labels, verdict.reason, SIBLING, detail=verdict.detail)
            return None
        return Candidate(a, b, SIBLING, (PRIORITY[SIBLING], saved, -distance), labels)

    # --- outputs computed again where they are read -----------------------------------------

    def recompute_cheap_outputs(self) -> None:
        """A group's output that cheap ops compute from the group's inputs (a bias add and GELU
        before a reduction that also reads it) is computed again in its readers, as Inductor
        inlines pointwise buffers into every reader, where that saves memory traffic: the
        group no longer writes it and the readers do not read it back."""
        g = self.g
        changed = True
        while changed:
            changed = False
            g.renumber()
            for node in g.nodes():
                if node.alive and node.is_group and len(node.outputs) > 1:
                    changed = self.recompute_output(node) or changed

    def recompute_output(self, group: Node) -> bool:
        """Compute again, in its readers, the first output of `group` that they may compute;
        whether one was."""
        g = self.g
        for value, readers in zip(group.outputs, g.output_readers(group), strict=True):
            # Only outputs that cheap ops compute and that fusable nodes alone read (a library
            # call or the function's return needs the value written) are candidates.
            if not readers or not all(fusability(r).ok for r in readers):
                continue
            cone = g.output_cone(group, value)
            if not is_cheap_cone(cone):
                continue
            saved = g.output_recompute_saving(value, cone, readers)
            if saved <= 0:
                continue
            owner = value.owner
            assert isinstance(owner, Operation)
            labels = [(owner, g.reader_in(r, value)) for r in readers]
            verdicts = [
                check_output_recompute(
                    g,
                    group,
                    value,
                    cone,
                    r,
                    arg_limit=self.arg_limit,
                    max_group_size=self.max_group_size,
                    budget=self.recompute_budget,
                )
                for r in readers
            ]
            score = Score(PRIORITY[RECOMPUTE], saved, 0)
            refused = next((v for v in verdicts if not v.ok), None)
            if refused is not None:
                for pair in labels:
                    self.log.record(*pair, refused.reason, RECOMPUTE, score, refused.detail)
                continue
            if not self.may_fuse():
                return False
            for pair in labels:
                self.log.record(*pair, FUSED, RECOMPUTE, score, "computed again in every reader")
            made = g.recompute_output(
                group, value, cone, readers, group_rule(PASS, RECOMPUTE), saved
            )
            self.forget_gates({group, *readers, *made})
            return True
        return False

    # --- horizontal fusion: fewer kernels ---------------------------------------------------

    def horizontal(self) -> None:
        """Merge groups (and lone reductions, each a kernel of its own) over the same space that
        share no tensor, each with the nearest later one (at most `window` positions on) that
        the gates allow, until none merges."""
        g = self.g
        merged = True
        while merged:
            merged = False
            g.renumber()
            groups = [n for n in g.nodes() if n.is_group or n.kind == Kind.REDUCTION]
            taken: set[Node] = set()
            for i, a in enumerate(groups):
                if a in taken:
                    continue
                for b in groups[i + 1 :]:
                    if b.pos - a.pos > self.window:
                        break
                    if b not in taken and self.merge_horizontal(a, b):
                        taken.update((a, b))
                        merged = True
                        break

    def merge_horizontal(self, a: Node, b: Node) -> bool:
        g = self.g
        # An earlier merge this sweep may have moved nodes below the group it made: order the
        # pair by position now (`check_order` and `merge` take the earlier node first).
        a, b = sorted((a, b), key=by_position)
        if g.space(a) != g.space(b) or directly_connected(g, a, b):
            return False
        verdict, saved = self.gate(a, b, sibling=True)
        if verdict.ok:
            verdict = check_order(g, a, b)
        if not verdict.ok or not self.may_fuse():
            return False
        score = Score(PRIORITY[HORIZONTAL], saved, int(b.pos - a.pos))
        labels = (a.representative(), b.representative())
        group = g.merge(a, b, group_rule(PASS, HORIZONTAL), verdict.moved, saved)
        self.log.record(*labels, FUSED, HORIZONTAL, score)
        self.forget_gates({a, b, group})
        return True

    # --- application -------------------------------------------------------------------------

    def apply(self, candidates: list[Candidate]) -> list[Candidate] | None:
        """Apply the best candidates first; the ones skipped (None when nothing merged)."""
        consumed: set[Node] = set()
        skipped: list[Candidate] = []
        merged = 0
        for c in sorted(candidates, key=_BY_KEY, reverse=True):
            if c.touches(consumed):
                skipped.append(c)
                continue
            made = self.apply_one(c)
            if made:
                consumed.update(c.nodes, made)
                self.forget_gates({*c.nodes, *made})
                merged += 1
        return skipped if merged else None

    def apply_one(self, c: Candidate) -> list[Node]:
        g, rule, score = self.g, group_rule(PASS, c.rule), c.score
        if c.rule == RECOMPUTE:
            for r in c.readers:  # positions moved since enumeration: check again
                verdict = check_recompute(g, c.first, r, arg_limit=self.arg_limit)
                if not verdict.ok:
                    self.log.record(*c.labels, verdict.reason, c.rule, score, verdict.detail)
                    return []
            if not self.may_fuse():
                return []
            op = c.first.representative()
            for r in c.readers:
                reader = g.reader_in(r, op.results[0])
                self.log.record(op, reader, FUSED, c.rule, score, "copied into every reader")
            return list(g.recompute(c.first, c.readers, rule, score.bytes_saved))
        first, second = sorted((c.first, c.second), key=by_position)
        verdict = check_order(g, first, second)
        if not verdict.ok:
            self.log.record(*c.labels, verdict.reason, c.rule, score, verdict.detail)
            return []
        if not self.may_fuse():
            return []
        group = g.merge(first, second, rule, verdict.moved, score.bytes_saved)
        self.log.record(*c.labels, FUSED, c.rule, score)
        return [group]


@dataclass(frozen=True)
class FuseScoredPass(ModulePass):
    """Scored fusion into `fusion.group`s.

    Options: `window` (pair only nodes this close in the block), `max-rounds`, `arg-limit`
    (inputs plus outputs of a group), `max-group-size` (ops in a group), `recompute-outputs`
    (compute a group's output that cheap ops give again in its readers, within the target's
    `OUTPUT_RECOMPUTE_BUDGET`: `ScoredFuser.recompute_cheap_outputs`), `max-fusions` (apply
    only the first N fusions, -1 for all: bisects a miscompilation). After `apply`,
    `decisions` holds one `FusionDecision` per examined pair.
    """

    name = PASS

    window: int = option(64, POSITIVE)
    max_rounds: int = option(16, NON_NEGATIVE)
    arg_limit: int = option(128, POSITIVE)
    max_group_size: int = option(512, POSITIVE)
    recompute_outputs: bool = True
    max_fusions: int = option(-1, LIMIT_OR_ALL)
    target: str = "cpu"
    """What the kernels are for, "cpu" or "cuda" (`xfuse.compile` sets its device's): how much
    computing an output again may cost (`OUTPUT_RECOMPUTE_BUDGET`)."""

    TARGET_FROM_DEVICE: ClassVar[bool] = True
    """`xfuse.pipeline.for_target` sets `target` to the compile's device."""

    decisions: list[FusionDecision] = field(
        default_factory=list, init=False, compare=False, repr=False
    )

    def __post_init__(self) -> None:
        if self.target not in OUTPUT_RECOMPUTE_BUDGET:
            raise ValueError(
                f"option 'target' must be one of {', '.join(OUTPUT_RECOMPUTE_BUDGET)}, "
                f"found '{self.target}'"
            )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def fuse(g: FusionGraph) -> list[FusionDecision]:
            fuser = ScoredFuser(
                g,
                self.window,
                self.max_rounds,
                self.arg_limit,
                self.max_group_size,
                OUTPUT_RECOMPUTE_BUDGET[self.target] if self.recompute_outputs else 0.0,
                max_fusions=self.max_fusions,
            )
            return fuser.run()

        self.decisions[:] = fuse_each_function(op, fuse)
