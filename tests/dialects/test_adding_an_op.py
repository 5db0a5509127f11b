"""docs/adding-an-op.md's claim: an elementwise op declared only in its dialect class (with
its facts) imports, interprets, lowers to loops and compiles for the CPU, and is fuzzed; the
files the page names exist, and its model op lives in the module it names.

The toy op lives in this file alone; the tables every level reads are rebuilt from its facts
with the same functions that build them from the graph dialect."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from xdsl.dialects import arith, math
from xdsl.ir import Attribute, SSAValue
from xdsl.irdl import irdl_op_definition

from xfuse.dialects import graph
from xfuse.dialects.facts import Fuzz, OpFacts, ScalarBuilder, ScalarRule
from xfuse.frontend import aten
from xfuse.frontend.importer import import_module
from xfuse.interpreters import graph as graph_interpreter
from xfuse.passes.lowering import scalar_ops
from xfuse.testing.fuzz import generator, runner


def _log1p(b: ScalarBuilder, xs: Sequence[SSAValue], t: Attribute) -> SSAValue:
    return b.insert(math.LogOp(b.insert(arith.AddfOp(b.constant(1.0, t), xs[0]))))


@irdl_op_definition
class ToyLog1pOp(graph.FloatUnaryOp):
    """log(1 + x). `%y = graph.toy_log1p %x : tensor<4xf32>`"""

    name = "graph.toy_log1p"
    FACTS: ClassVar[OpFacts] = OpFacts(
        torch="torch.log1p",
        aten=("aten.log1p.default",),
        scalar=ScalarRule(_log1p),
        fuzz=Fuzz.unary("torch.log1p", positive=True),
    )


@pytest.fixture
def toy_op(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy op's rows, made by the generators of the real tables, added to them."""
    ops = [ToyLog1pOp]
    for name, impl in graph_interpreter.op_impls(ops).items():
        monkeypatch.setitem(graph_interpreter.OP_IMPLS, name, impl)
    for name, convert in aten.op_converters(ops).items():
        monkeypatch.setitem(aten.CONVERTERS, name, convert)
    for name, rule in scalar_ops.scalar_rules(ops).items():
        monkeypatch.setitem(scalar_ops.SCALAR_RULES, name, rule)


SOURCE = """
import torch

def program(x0):
    return torch.log1p(x0.abs() + 0.5) * 2.0

def make_inputs():
    return (torch.randn(4, 8, generator=torch.Generator().manual_seed(0)),)
"""


def test_a_toy_op_declared_in_its_class_imports_interprets_and_lowers(toy_op: None) -> None:
    x = torch.rand(4, 8) + 0.1
    imported = import_module(lambda x: torch.log1p(x) * 2.0, (x,))
    names = [op.name for op in imported.module.walk()]
    assert "graph.toy_log1p" in names and "graph.torch_call" not in names
    outcome = runner.check_source(SOURCE, ["cpu"])
    assert outcome.status == "pass", str(outcome)
    assert {"import", "loops", "cpu"} <= set(outcome.stages), outcome.stages


def test_a_toy_op_declared_in_its_class_is_fuzzed() -> None:
    drawn = generator.pool("unary", [*graph.Graph.operations, ToyLog1pOp])
    assert drawn[-1].spelling == "torch.log1p" and drawn[-1].positive


PAGE = Path(__file__).resolve().parents[2] / "docs" / "adding-an-op.md"


def test_the_files_the_page_names_exist() -> None:
    root = PAGE.parent.parent
    named = set(re.findall(r"`((?:xfuse|tests|filecheck)/[\w/.-]+)`", PAGE.read_text()))
    assert named, "the page names no files"
    assert sorted(p for p in named if not (root / p).exists()) == []


def test_the_model_op_lives_in_the_module_the_page_names() -> None:
    module = graph.SinOp.__module__.replace(".", "/") + ".py"
    assert module == "xfuse/dialects/graph/elementwise.py"
    assert f"`{module}`" in PAGE.read_text()
    assert graph.SinOp in graph.ELEMENTWISE_OPS
