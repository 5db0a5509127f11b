"""The order each fuzz pool draws its ops in: an explicit table, so that where an op class is
defined changes no generated program (`generator.pool`, `random_graph`).

A new op is drawn after the ops listed here (ops missing from the table come last, by name);
appending its name to its pool keeps that order when more ops follow."""

from __future__ import annotations

from xfuse.dialects.facts import FuzzPool

DRAW_ORDER: dict[FuzzPool, tuple[str, ...]] = {
    "unary": (
        "graph.neg",
        "graph.abs",
        "graph.relu",
        "graph.exp",
        "graph.log",
        "graph.sqrt",
        "graph.rsqrt",
        "graph.tanh",
        "graph.sigmoid",
        "graph.erf",
        "graph.sin",
        "graph.cos",
        "graph.reciprocal",
        "graph.floor",
        "graph.ceil",
        "graph.round",
        "graph.trunc",
        "graph.log1p",
        "graph.expm1",
        "graph.log2",
        "graph.log10",
        "graph.exp2",
        "graph.asin",
        "graph.acos",
        "graph.atan",
        "graph.tan",
        "graph.sinh",
        "graph.cosh",
        "graph.asinh",
        "graph.acosh",
        "graph.atanh",
        "graph.sign",
        "graph.isnan",
        "graph.isinf",
        "graph.signbit",
        "graph.silu",
        "graph.gelu",
        "graph.erfc",
    ),
    "binary": (
        "graph.add",
        "graph.sub",
        "graph.mul",
        "graph.div",
        "graph.maximum",
        "graph.minimum",
        "graph.pow",
        "graph.atan2",
        "graph.copysign",
        "graph.fmax",
        "graph.fmin",
        "graph.hypot",
        "graph.fmod",
        "graph.remainder",
        "graph.floor_divide",
    ),
    "compare": (
        "graph.lt",
        "graph.le",
        "graph.gt",
        "graph.ge",
        "graph.eq",
        "graph.ne",
    ),
    "reduction": (
        "graph.reduce_sum",
        "graph.reduce_mean",
        "graph.reduce_max",
        "graph.reduce_min",
        "graph.reduce_prod",
        "graph.var",
    ),
}
"""Per pool, its ops' names in the order the pool draws them."""


def draw_rank(pool: FuzzPool, op_name: str) -> tuple[int, str]:
    """Where an op of `pool` is drawn: its place in `DRAW_ORDER`, or after every listed op
    (ordered by name) when it is not listed."""
    order = DRAW_ORDER[pool]
    return (order.index(op_name), "") if op_name in order else (len(order), op_name)
