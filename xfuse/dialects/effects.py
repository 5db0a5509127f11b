"""
Memory effects of ops: whether running an op may write memory that other ops read. Graph ops
and groups are pure; `graph.torch_call` writes when its target's schema says so (in-place
and `out=` ops); any op of another dialect may write. A torch call that draws from torch's
RNG (dropout) reads and advances the generator: such calls keep their order among themselves,
or each would draw the other's numbers.
"""

from __future__ import annotations

from functools import cache

from xdsl.dialects import func
from xdsl.ir import Block, Operation

from xfuse.dialects import fusion, graph
from xfuse.dialects.op_kinds import Kind, kind_of
from xfuse.dialects.torch_args import target_draws_random, target_may_mutate


@cache
def _class_may_mutate(cls: type[Operation]) -> bool | None:
    """What the class says of `may_mutate`: None for torch calls (their target decides)."""
    if issubclass(cls, graph.TorchCallOp):
        return None
    return not issubclass(cls, fusion.GroupOp | func.ReturnOp) and cls.dialect_name() != "graph"


def may_mutate(op: Operation) -> bool:
    """Whether running `op` may write memory that other ops read (an in-place torch op, or an
    op xfuse knows nothing about). Graph ops and groups are pure."""
    flag = _class_may_mutate(type(op))
    if flag is None:
        assert isinstance(op, graph.TorchCallOp)
        return target_may_mutate(op.target.data)
    return flag


def draws_random(op: Operation) -> bool:
    """Whether running `op` draws from torch's RNG: a torch call whose target is seeded-random
    (dropout, bernoulli). Two such ops must run in the order the program gives them."""
    return isinstance(op, graph.TorchCallOp) and target_draws_random(op.target.data)


def computed_by_xfuse(op: Operation) -> bool:
    """A graph op xfuse computes itself: its value depends on its operands alone, and running it
    has no effect (externs are torch's own kernels, which may raise on their inputs, read global
    state or, as `torch_call`s, write memory)."""
    return op.dialect_name() == "graph" and kind_of(op) != Kind.EXTERN


def erase_dead(block: Block, dead: list[Operation]) -> None:
    """Erase the ops of `dead` that nothing reads, then every op xfuse computes that only they
    read, and so on. Externs stay even when dead: torch's code may raise on its inputs, and
    eager's errors are kept."""
    while dead:
        op = dead.pop()
        if op.parent is None or any(r.uses for r in op.results):
            continue
        owners = {v.owner for v in op.operands if isinstance(v.owner, Operation)}
        block.erase_op(op)
        dead.extend(o for o in owners if computed_by_xfuse(o))
