"""`evaluate_compact`: ops computed from sizes alone, each value held with the dims it is the
same along at size 1; expanded to its shape, every value is the graph interpreter's, bit for
bit, and an index out of range on a broadcast dim raises as the interpreter raises it."""

from __future__ import annotations

import pytest
import torch
from xdsl.dialects import func

from xfuse.dialects import graph
from xfuse.errors import IndexOutOfRangeError
from xfuse.interpreters.compact import evaluate_compact
from xfuse.interpreters.graph import find_function, interpret
from xfuse.ir.context import parse

B, L = "#graph.syms<s0>", "#graph.syms<s1>"
BL, LB = "#graph.syms<s0, s1>", "#graph.syms<s1, s0>"

PROGRAM = f"""
func.func @forward(%x: tensor<?x?xf32, {BL}>) -> (tensor<?x?xi64, {BL}>, tensor<?x?xi64, {BL}>, tensor<?x?xi64, {BL}>, tensor<?x1xi64, {B}>, tensor<?x1x?xi64, {BL}>, tensor<?x?xi1, {BL}>, tensor<?x?xi64, {BL}>, tensor<?x?xi64, {LB}>) attributes {{graph.sizes = #graph.sizes<s0 = input(0, 0) hint 3 range [2, 64], s1 = input(0, 1) hint 5 range [2, 64]>}} {{
  %r = graph.iota dim = 0 start = 0 step = 1 : tensor<?xi64, {L}>
  %r1 = graph.reshape %r : tensor<?xi64, {L}> -> tensor<1x?xi64, {L}>
  %rb = graph.broadcast_in_dim %r1 dims = [0, 1] : tensor<1x?xi64, {L}> -> tensor<?x?xi64, {BL}>
  %down = graph.scan %rb dim = 0 kind = "sum" : tensor<?x?xi64, {BL}> -> tensor<?x?xi64, {BL}>
  %bi = graph.iota dim = 0 start = 0 step = 1 : tensor<?x1xi64, {B}>
  %g = graph.gather %rb[%bi] dim = 0 : tensor<?x?xi64, {BL}>, tensor<?x1xi64, {B}> -> tensor<?x?xi64, {BL}>
  %sl = graph.slice %rb start = [0, 1] limit = [-1, 2] stride = [1, 1] : tensor<?x?xi64, {BL}> -> tensor<?x1xi64, {B}>
  %w = graph.reshape %g : tensor<?x?xi64, {BL}> -> tensor<?x1x?xi64, {BL}>
  %le = graph.le %g, %sl : tensor<?x?xi64, {BL}>, tensor<?x1xi64, {B}> -> tensor<?x?xi1, {BL}>
  %gb = graph.gather %down[%bi] dim = 0 : tensor<?x?xi64, {BL}>, tensor<?x1xi64, {B}> -> tensor<?x?xi64, {BL}>
  %p = graph.permute %rb perm = [1, 0] : tensor<?x?xi64, {BL}> -> tensor<?x?xi64, {LB}>
  func.return %rb, %down, %g, %sl, %w, %le, %gb, %p : tensor<?x?xi64, {BL}>, tensor<?x?xi64, {BL}>, tensor<?x?xi64, {BL}>, tensor<?x1xi64, {B}>, tensor<?x1x?xi64, {BL}>, tensor<?x?xi1, {BL}>, tensor<?x?xi64, {BL}>, tensor<?x?xi64, {LB}>
}}"""

HELD = [
    (1, "L"),  # broadcast over the batch
    ("B", "L"),  # a scan along the broadcast dim: held whole
    (1, "L"),  # a gather of the broadcast dim at the batch's iota
    (1, 1),  # a slice of it
    (1, 1, "L"),  # a reshape that adds a dim of size 1
    (1, "L"),  # an elementwise op of operands held compact
    ("B", "L"),  # a gather along a dim held whole
    ("L", "B"),  # an op without a rule: held whole
]
"""The shape each result of `PROGRAM` is held at, in batch `B` and length `L`."""


def ops_and_results(text: str) -> tuple[list[graph.Operation], list[graph.SSAValue]]:
    f = find_function(parse(text))
    *ops, ret = f.body.block.ops
    assert isinstance(ret, func.ReturnOp)
    return ops, list(ret.operands)


@pytest.mark.parametrize(("batch", "length"), [(3, 5), (2, 9), (8, 2)])
def test_each_value_expands_to_the_interpreters(batch: int, length: int) -> None:
    ops, results = ops_and_results(PROGRAM)
    whole = interpret(parse(PROGRAM), [torch.zeros(batch, length)])
    sizes = {"s0": batch, "s1": length}
    at = {"B": batch, "L": length, 1: 1}
    for value, expected, held in zip(results, whole, HELD, strict=True):
        compact = evaluate_compact(ops, value, sizes)
        assert tuple(compact.shape) == tuple(at[d] for d in held)
        assert torch.equal(compact.expand(expected.shape), expected)


GATHER_PAST_THE_BATCH = f"""
func.func @forward(%x: tensor<?x?xf32, {BL}>) -> tensor<?x?xi64, {BL}> attributes {{graph.sizes = #graph.sizes<s0 = input(0, 0) hint 3 range [2, 64], s1 = input(0, 1) hint 5 range [2, 64]>}} {{
  %r = graph.iota dim = 0 start = 0 step = 1 : tensor<?xi64, {L}>
  %r1 = graph.reshape %r : tensor<?xi64, {L}> -> tensor<1x?xi64, {L}>
  %rb = graph.broadcast_in_dim %r1 dims = [0, 1] : tensor<1x?xi64, {L}> -> tensor<?x?xi64, {BL}>
  %bi = graph.iota dim = 0 start = 1 step = 1 : tensor<?x1xi64, {B}>
  %g = graph.gather %rb[%bi] dim = 0 : tensor<?x?xi64, {BL}>, tensor<?x1xi64, {B}> -> tensor<?x?xi64, {BL}>
  func.return %g : tensor<?x?xi64, {BL}>
}}"""


def test_an_index_past_a_broadcast_dim_raises_as_the_interpreter_does() -> None:
    """The batch's iota from 1 reads row B of a table of B rows, all the same: out of range."""
    ops, [value] = ops_and_results(GATHER_PAST_THE_BATCH)
    message = "index 4 is out of bounds for a dim of size 4"
    with pytest.raises(IndexOutOfRangeError, match=message):
        interpret(parse(GATHER_PAST_THE_BATCH), [torch.zeros(4, 6)])
    with pytest.raises(IndexOutOfRangeError, match=message):
        evaluate_compact(ops, value, {"s0": 4, "s1": 6})
