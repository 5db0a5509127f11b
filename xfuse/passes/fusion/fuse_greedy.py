"""
`fuse-greedy`: producer-consumer fusion after ONNX Runtime's lazy-tensor fuser and
TorchScript's graph fuser.

The body of every function is scanned in reverse topological order; each consumer tries to
absorb its producers, latest first (`try_fuse`): a lone op becomes a singleton group, a
producer op moves into the group, a producer group merges with it. After each success the
grown group tries again, since its new producers may now fuse. A cheap elementwise producer
read by several nodes is either kept as an extra output of one group (multi-output) or copied
into every reader (recompute), whichever saves more bytes. Consumers reading the same tensor
over the same iteration space are then merged (siblings). The whole repeats until nothing
changes, because one fusion can unlock another.

Every examined pair is recorded (`FuseGreedyPass.decisions`), with the named reason of
`xfuse.passes.fusion.legality` when it was refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec

from xfuse.passes.fusion.decisions import (
    MULTI_OUTPUT,
    PRODUCER_CONSUMER,
    RECOMPUTE,
    SIBLING,
    FusionDecision,
    group_rule,
)
from xfuse.passes.fusion.fuser import Fuser
from xfuse.passes.fusion.graph import (
    FusionGraph,
    Node,
    directly_connected,
    fuse_each_function,
    tensor_bytes,
)
from xfuse.passes.fusion.legality import (
    FUSED,
    Predicate,
    Verdict,
    check_merge,
    check_recompute,
    is_candidate_node,
    sibling_candidates,
)
from xfuse.passes.options import LIMIT_OR_ALL, POSITIVE, option

PASS = "fuse-greedy"


@dataclass
class GreedyFuser(Fuser):
    """One run of the greedy algorithm over one function body."""

    pass_name = PASS

    arg_limit: int
    predicate: Predicate | None

    def run(self) -> list[FusionDecision]:
        changed = True
        while changed:
            changed = self.fuse_vertically()
            changed = self.fuse_siblings() or changed
        return self.finish()

    # --- producer into consumer --------------------------------------------------------------

    def fuse_vertically(self) -> bool:
        changed = False
        for node in reversed(self.g.nodes()):
            while self.g.contains(node):
                merged = self.try_producers(node)
                if merged is None:
                    break
                node, changed = merged, True
        return changed

    def try_producers(self, consumer: Node) -> Node | None:
        """Fuse the first producer that may fuse into `consumer`; the new group, or None."""
        if not is_candidate_node(consumer):
            return None
        for producer in self.g.producers(consumer):
            if not is_candidate_node(producer):
                continue
            merged = self.try_fuse(consumer, producer)
            if merged is not None:
                return merged
        return None

    def try_fuse(self, consumer: Node, producer: Node) -> Node | None:
        g = self.g
        labels = g.pair_ops(producer, consumer)
        verdict = check_merge(
            g, producer, consumer, arg_limit=self.arg_limit, predicate=self.predicate
        )
        if not verdict.ok:
            self.log.record(*labels, verdict.reason, PRODUCER_CONSUMER, detail=verdict.detail)
            return None
        if not self.may_fuse():
            return None
        plan = g.recompute_plan(producer)
        if (
            plan is not None
            and plan.prefers_recompute
            and self.can_recompute(producer, plan.readers)
        ):
            detail = (
                f"copied into {len(plan.readers)} readers, saves {plan.recompute_saving}B "
                f"vs {plan.multi_output_saving}B as an extra output"
            )
            op = producer.representative()
            for reader in plan.readers:
                inner = g.reader_in(reader, op.results[0])
                self.log.record(op, inner, FUSED, RECOMPUTE, detail=detail)
            groups = g.recompute(
                producer, plan.readers, group_rule(PASS, RECOMPUTE), plan.recompute_saving
            )
            return groups[plan.readers.index(consumer)]
        rule = PRODUCER_CONSUMER if plan is None or len(plan.readers) < 2 else MULTI_OUTPUT
        saved = g.merge_saving(producer, consumer)
        group = g.merge(producer, consumer, group_rule(PASS, rule), verdict.moved, saved)
        self.log.record(*labels, FUSED, rule, detail=f"saves {saved}B")
        return group

    def can_recompute(self, producer: Node, readers: tuple[Node, ...]) -> bool:
        return all(
            check_recompute(
                self.g, producer, r, arg_limit=self.arg_limit, predicate=self.predicate
            ).ok
            for r in readers
        )

    # --- siblings ----------------------------------------------------------------------------

    def fuse_siblings(self) -> bool:
        g, changed = self.g, False
        values: list[tuple[SSAValue, Node | None]] = [(arg, None) for arg in g.block.args]
        values += [(r, node) for node in g.nodes() for r in node.outputs]
        for value, owner in values:
            if owner is not None and not owner.alive:
                continue  # merged since the scan began: its outputs are looked at next time
            for bucket in sibling_candidates(g, value):
                changed = self.merge_bucket(value, bucket) or changed
        return changed

    def merge_bucket(self, value: SSAValue, bucket: list[Node]) -> bool:
        g, changed = self.g, False
        current = bucket[0]
        for node in bucket[1:]:
            if not (g.contains(current) and g.contains(node)) or directly_connected(
                g, current, node
            ):
                current = node
                continue
            labels = (g.reader_in(current, value), g.reader_in(node, value))
            verdict: Verdict = check_merge(
                g, current, node, arg_limit=self.arg_limit, predicate=self.predicate, sibling=True
            )
            if not verdict.ok:
                self.log.record(*labels, verdict.reason, SIBLING, detail=verdict.detail)
                current = node
                continue
            if not self.may_fuse():
                current = node
                continue
            saved = tensor_bytes(value)
            current = g.merge(current, node, group_rule(PASS, SIBLING), verdict.moved, saved)
            self.log.record(
                *labels, FUSED, SIBLING, detail=f"share {g.label(value)}, saves {saved}B"
            )
            changed = True
        return changed


@dataclass(frozen=True)
class FuseGreedyPass(ModulePass):
    """Greedy producer-consumer fusion into `fusion.group`s.

    Options: `arg-limit` (a group takes at most this many inputs plus outputs), `max-fusions`
    (apply only the first N fusions, -1 for all: bisects a miscompilation). From Python,
    `fusable` decides which ops may join a group (not a textual option). After `apply`,
    `decisions` holds one `FusionDecision` per examined pair.
    """

    name = PASS

    arg_limit: int = option(128, POSITIVE)
    max_fusions: int = option(-1, LIMIT_OR_ALL)
    fusable: Callable[[Operation], bool] | None = field(default=None, compare=False)
    decisions: list[FusionDecision] = field(
        default_factory=list, init=False, compare=False, repr=False
    )

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        def fuse(g: FusionGraph) -> list[FusionDecision]:
            return GreedyFuser(g, self.arg_limit, self.fusable, max_fusions=self.max_fusions).run()

        self.decisions[:] = fuse_each_function(op, fuse)

    def spec(self, *, include_default: bool = False) -> ArgSpec:
        # `fusable` is a Python callable: it has no textual form.
        spec = super().spec(include_default=include_default)
        return ArgSpec(spec.name, {k: v for k, v in spec.parameters.items() if k != "fusable"})
