"""The fuzz pools draw in the order of `draw_order.DRAW_ORDER`, not in the order the graph
dialect lists its ops: moving an op class between modules changes no generated program."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from xfuse.dialects import graph
from xfuse.dialects.facts import FuzzPool
from xfuse.testing import random_graph
from xfuse.testing.fuzz import generator
from xfuse.testing.fuzz.draw_order import DRAW_ORDER

POOLS: tuple[FuzzPool, ...] = ("unary", "binary", "compare", "reduction")


def _pools_of_ops() -> dict[str, str]:
    return {
        op.name: f.pool
        for op in graph.Graph.operations
        if (f := graph.op_facts(op).fuzz) is not None and f.pool is not None
    }


def test_the_table_has_every_pool() -> None:
    assert set(DRAW_ORDER) == set(POOLS)


def test_each_table_entry_is_an_op_of_its_pool_listed_once() -> None:
    pools = _pools_of_ops()
    listed = Counter(name for names in DRAW_ORDER.values() for name in names)
    assert [n for n, count in listed.items() if count > 1] == []
    wrong = [
        (pool, name)
        for pool, names in DRAW_ORDER.items()
        for name in names
        if pools.get(name) != pool
    ]
    assert wrong == [], "entries that are no op of their pool"


def test_every_fuzzable_op_is_in_exactly_one_pool_entry() -> None:
    """Each op with a pool is drawn once, by its own pool; an op the table does not list yet (a
    new one) comes after the listed ones."""
    pools = _pools_of_ops()
    drawn = Counter((pool, f.spelling) for pool in POOLS for f in generator.pool(pool))
    spellings = {
        (f.pool, f.spelling): op.name
        for op in graph.Graph.operations
        if (f := graph.op_facts(op).fuzz) is not None and f.pool is not None
    }
    assert set(drawn) == set(spellings) and set(drawn.values()) == {1}
    assert len(spellings) == len(pools)


@pytest.mark.parametrize("pool", POOLS)
def test_a_pool_is_drawn_in_table_order_whatever_the_dialect_order(pool: FuzzPool) -> None:
    ops = list(graph.Graph.operations)
    drawn = generator.pool(pool)
    spellings = [graph.op_facts(op).fuzz for op in ops]
    by_name = {op.name: f for op, f in zip(ops, spellings, strict=True)}
    assert drawn == [by_name[name] for name in DRAW_ORDER[pool]]
    for seed in range(5):
        shuffled = list(ops)
        random.Random(seed).shuffle(shuffled)
        assert generator.pool(pool, shuffled) == drawn


def test_random_graph_draws_in_table_order() -> None:
    for family in (random_graph.UNARY, random_graph.BINARY, random_graph.REDUCE):
        pool = graph.op_facts(family[0]).fuzz
        assert pool is not None and pool.pool is not None
        order = DRAW_ORDER[pool.pool]
        assert [op.name for op in family] == [n for n in order if n in {o.name for o in family}]
