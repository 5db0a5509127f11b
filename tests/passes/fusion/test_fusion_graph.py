"""FusionGraph: what it remembers between merges stays what it would find afresh."""

from __future__ import annotations

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from xfuse.ir.context import make_context
from xfuse.passes.fusion.fuse_greedy import FuseGreedyPass
from xfuse.passes.fusion.fuse_scored import FuseScoredPass
from xfuse.passes.fusion.graph import FusionGraph, Node
from xfuse.testing import random_program


@pytest.fixture
def checked_readers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Check every remembered answer of `output_readers` and `readers_of` against a fresh
    walk over the uses; the list counts the checks."""
    checks: list[int] = [0]
    output_readers, readers_of = FusionGraph.output_readers, FusionGraph.readers_of

    def checked_output_readers(g: FusionGraph, node: Node) -> tuple[tuple[Node, ...], ...]:
        found = output_readers(g, node)
        assert node.alive
        assert found == tuple(g._find_readers(v, node) for v in node.outputs)
        checks[0] += 1
        return found

    def checked_readers_of(g: FusionGraph, value: SSAValue) -> tuple[Node, ...]:
        found = readers_of(g, value)
        assert found == g._find_readers(value, g.node_of(value.owner))
        checks[0] += 1
        return found

    monkeypatch.setattr(FusionGraph, "output_readers", checked_output_readers)
    monkeypatch.setattr(FusionGraph, "readers_of", checked_readers_of)
    return checks


@pytest.mark.parametrize("seed", range(24))
def test_remembered_readers_follow_the_merges(seed: int, checked_readers: list[int]) -> None:
    program = random_program(seed, 40, mutation=seed % 3 == 0)
    for passes in (
        [FuseScoredPass()],
        [FuseScoredPass(window=3, max_group_size=4)],
        [FuseGreedyPass()],
        # Groups in the input, opened by the second pass.
        [FuseGreedyPass(max_fusions=5), FuseScoredPass()],
    ):
        module: ModuleOp = program.module.clone()
        for p in passes:
            p.apply(make_context(), module)
        module.verify()
    assert checked_readers[0] > 0
