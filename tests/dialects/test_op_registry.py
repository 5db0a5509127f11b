"""Every graph op declares each of its facts (`xfuse.dialects.facts`) or says why it has none,
and the tables the levels above read are generated from those declarations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pytest
import torch
from xdsl.dialects import arith, math
from xdsl.dialects.builtin import FloatAttr, IntegerAttr, IntegerType, f32, i1, i32
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.irdl import IRDLOperation

from xfuse.dialects import graph
from xfuse.dialects.facts import FACT_NAMES, ScalarRule
from xfuse.frontend.aten import CONVERTERS
from xfuse.interpreters.graph import OP_IMPLS, torch_function
from xfuse.interpreters.loops import SCALAR_IMPLS
from xfuse.passes.llvm.convert_math_to_llvm import (
    FLOAT_INTRINSICS,
    INT_INTRINSICS_WITH_POISON_FLAG,
    LIBM_FUNCTIONS,
)
from xfuse.passes.llvm.expand_math import EXPANSIONS
from xfuse.passes.llvm.lower_to_nvvm import LIBDEVICE_FLOAT
from xfuse.passes.lowering.scalar_ops import SCALAR_RULES
from xfuse.testing import random_graph
from xfuse.testing.fuzz import generator

OPS = list(graph.Graph.operations)
# (a composite op such as silu inherits its base's Elementwise trait: `decompose` splits it)
ELEMENTWISE = [
    op for op in OPS if op.has_trait(graph.Elementwise) and not op.has_trait(graph.Composite)
]


def _id(op: type[Operation]) -> str:
    return op.name


@pytest.mark.parametrize("op", OPS, ids=_id)
@pytest.mark.parametrize("fact", FACT_NAMES)
def test_every_op_declares_each_fact_or_says_why_not(op: type[Operation], fact: str) -> None:
    facts = graph.op_facts(op)
    if fact == "torch":  # the interpreter may have the op's own implementation instead
        assert op.name in OP_IMPLS, f"{op.name}: no `torch` fact and no own implementation"
    elif fact == "scalar" and op not in ELEMENTWISE:
        assert facts.scalar is None, f"{op.name} is not elementwise but has a scalar rule"
    else:
        assert facts.has(fact), f"{op.name} declares no `{fact}` fact and no reason in `without`"
    for name, reason in facts.without.items():
        assert name in FACT_NAMES and reason.strip(), f"{op.name}: without[{name!r}]"


@pytest.mark.parametrize("op", OPS, ids=_id)
def test_every_op_has_a_kind_and_a_verifier(op: type[Operation]) -> None:
    assert any(op.has_trait(kind) for kind in graph.KIND_TRAITS), op.name
    assert op.verify_ is not IRDLOperation.verify_, f"{op.name} has no verifier"
    assert op.__doc__ and "`" in op.__doc__, f"{op.name}: a docstring with an IR example"


@pytest.mark.parametrize("op", OPS, ids=_id)
def test_the_tables_come_from_the_facts(op: type[Operation]) -> None:
    facts = graph.op_facts(op)
    assert op.name in OP_IMPLS
    if facts.torch is not None:
        assert callable(torch_function(facts.torch))
    for overload in facts.aten:
        assert overload in CONVERTERS, overload
        name, _, variant = overload.removeprefix("aten.").rpartition(".")
        assert hasattr(getattr(torch.ops.aten, name), variant), f"no aten overload {overload}"
    if facts.scalar is not None:
        assert SCALAR_RULES[op.name] is facts.scalar


class _Recorder:
    """A ScalarBuilder that keeps the ops a scalar rule emits."""

    def __init__(self) -> None:
        self.ops: list[Operation] = []

    def insert(self, op: Operation) -> SSAValue:
        self.ops.append(op)
        return op.results[0]

    def constant(self, value: float | int, type: Attribute) -> SSAValue:
        if type == f32:
            return self.insert(arith.ConstantOp(FloatAttr(float(value), f32)))
        return self.insert(arith.ConstantOp(IntegerAttr(int(value), cast(IntegerType, type))))


def emitted_ops(rule: ScalarRule) -> list[tuple[Operation, Attribute]]:
    """The ops each of a rule's functions emits on two operands of its element type."""
    out: list[tuple[Operation, Attribute]] = []
    for fn, t in ((rule.float_fn, f32), (rule.int_fn, i32), (rule.bool_fn, i1)):
        if fn is None:
            continue
        b = _Recorder()
        args: Sequence[SSAValue] = Block(arg_types=[t, t]).args
        fn(b, args, t)
        out += [(op, t) for op in b.ops]
    return out


@pytest.mark.parametrize("op", [op for op in ELEMENTWISE if op.name in SCALAR_RULES], ids=_id)
def test_each_scalar_op_has_a_cpu_and_a_cuda_lowering_and_runs_in_the_loop_interpreter(
    op: type[Operation],
) -> None:
    """The CPU intrinsic / libm name and the CUDA libdevice name are facts of the `math` op a
    rule emits (shared by every graph op that uses it): each must be known."""
    for emitted, t in emitted_ops(SCALAR_RULES[op.name]):
        kind = type(emitted)
        assert emitted.name in SCALAR_IMPLS, f"{op.name}: loop interpreter lacks {emitted.name}"
        if not emitted.name.startswith("math."):
            continue
        cpu = (
            FLOAT_INTRINSICS,
            INT_INTRINSICS_WITH_POISON_FLAG,
            LIBM_FUNCTIONS,
            EXPANSIONS,
            {math.RsqrtOp},  # convert-math-to-llvm writes it as 1 / llvm.sqrt
        )
        assert any(kind in table for table in cpu), f"{op.name}: no CPU lowering of {kind}"
        cuda = LIBDEVICE_FLOAT if t == f32 else INT_INTRINSICS_WITH_POISON_FLAG
        assert kind in cuda, f"{op.name}: no CUDA name for {emitted.name} on {t}"


@pytest.mark.parametrize("op", OPS, ids=_id)
def test_every_fuzz_fact_reaches_a_generator(op: type[Operation]) -> None:
    f = graph.op_facts(op).fuzz
    if f is None:
        return
    if f.by is not None:
        assert callable(getattr(generator.Generator, f.by, None)), f"{op.name}: no fuzz.{f.by}"
        if f.draw is not None:  # one of the method's kinds, drawn by the fact
            assert generator.FACT_KINDS[f.by][f.kind] is f.draw, op.name
        return
    pools = {
        "unary": generator.UNARY,
        "binary": generator.BINARY,
        "compare": generator.COMPARISONS,
        "reduction": generator.REDUCTIONS,
    }
    assert f.pool is not None and f.spelling in pools[f.pool], op.name
    if f.random_graph:
        assert op in (*random_graph.UNARY, *random_graph.BINARY, *random_graph.REDUCE)
